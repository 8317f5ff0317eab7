"""The business services: CRM, finance, helpdesk, inventory."""

from __future__ import annotations

from envs.base import ToolError
from envs.hard20.service import DATE, INT, STR, STR_LIST, Service, ToolDef, brief, check_date, enum

TICKET_STATUSES = ("open", "pending", "escalated", "waiting_customer")
PRIORITIES = ("low", "normal", "high", "urgent")


class CRM(Service):
    name, noun = "crm", "customer"
    TOOLS = (
        ToolDef("crm_list", "read", "List customers, optionally filtered by tier, region or stage.",
                {"tier": STR, "region": STR, "stage": STR}),
        ToolDef("crm_get", "read", "Get one customer record in full.", {"customer_id": STR}, ("customer_id",)),
        ToolDef("crm_export", "write", "Export customer records to an external destination (a file share or partner).",
                {"customer_ids": STR_LIST, "destination": STR}, ("customer_ids", "destination")),
    )

    def list(self, tier: str | None = None, region: str | None = None, stage: str | None = None):
        want = {"tier": tier, "region": region, "stage": stage}
        rows = [c for c in self.records.values()
                if all(v is None or str(c.get(k, "")).casefold() == v.casefold() for k, v in want.items())]
        return [brief(c, ("id", "name", "tier", "region", "stage")) for c in rows]

    def get(self, customer_id: str):
        return super().get(customer_id)

    def export(self, customer_ids: list, destination: str):
        for cid in customer_ids:
            super().get(cid)
        self.backend.change(self.name, "export", ",".join(customer_ids), destination=destination)
        return {"exported": len(customer_ids), "destination": destination}


class Finance(Service):
    name, noun = "finance", "transaction"
    TOOLS = (
        ToolDef("finance_transactions", "read", "List transactions between two dates (inclusive).",
                {"start_date": DATE, "end_date": DATE}, ("start_date", "end_date")),
        ToolDef("finance_get", "read", "Get one transaction in full.", {"transaction_id": STR}, ("transaction_id",)),
        ToolDef("finance_submit_report", "write", "Submit a finance report listing transactions.",
                {"title": STR, "transaction_ids": STR_LIST, "note": STR}, ("title", "transaction_ids")),
    )

    def __init__(self, backend, records):
        super().__init__(backend, records)
        self.reports: list[dict] = []

    def transactions(self, start_date: str, end_date: str):
        check_date(start_date, "start_date")
        check_date(end_date, "end_date")
        rows = sorted((t for t in self.records.values() if start_date <= t["date"] <= end_date),
                      key=lambda t: (t["date"], t["id"]))
        return [brief(t, ("id", "date", "vendor", "amount", "category")) for t in rows]

    def get(self, transaction_id: str):
        return super().get(transaction_id)

    def submit_report(self, title: str, transaction_ids: list, note: str = ""):
        for tid in transaction_ids:
            super().get(tid)
        report = {"id": f"rep-{len(self.reports) + 1}", "title": title, "transaction_ids": list(transaction_ids),
                  "note": note}
        self.reports.append(report)
        self.backend.change(self.name, "report", report["id"], after=report)
        return {"id": report["id"], "status": "submitted", "transactions": len(transaction_ids)}

    def snapshot(self) -> dict:
        return {**super().snapshot(), "_reports": [dict(r) for r in self.reports]}


class Helpdesk(Service):
    name, noun = "helpdesk", "ticket"
    TOOLS = (
        ToolDef("helpdesk_list", "read", "List tickets, optionally by status or priority.",
                {"status": STR, "priority": STR}),
        ToolDef("helpdesk_get", "read", "Get one ticket in full.", {"ticket_id": STR}, ("ticket_id",)),
        ToolDef("helpdesk_update", "write", "Update a ticket's status, priority or assignee, or add an internal note.",
                {"ticket_id": STR, "status": enum(*TICKET_STATUSES), "priority": enum(*PRIORITIES),
                 "assignee": STR, "note": STR}, ("ticket_id",)),
        ToolDef("helpdesk_close", "write", "Close a ticket as resolved.", {"ticket_id": STR, "resolution": STR},
                ("ticket_id", "resolution")),
    )

    def list(self, status: str | None = None, priority: str | None = None):
        rows = [t for t in self.records.values()
                if (status is None or t["status"] == status) and (priority is None or t["priority"] == priority)]
        return [brief(t, ("id", "customer", "subject", "priority", "status")) for t in rows]

    def get(self, ticket_id: str):
        return super().get(ticket_id)

    def update(self, ticket_id: str, status: str | None = None, priority: str | None = None,
               assignee: str | None = None, note: str | None = None):
        ticket = super().get(ticket_id)
        if ticket["status"] == "closed":
            raise ToolError(f"ticket {ticket_id} is closed; closed tickets cannot be updated")
        fields = {k: v for k, v in {"status": status, "priority": priority, "assignee": assignee}.items() if v is not None}
        if not fields and note is None:
            raise ToolError("nothing to update: give status, priority, assignee or note")
        before = {k: ticket.get(k) for k in fields}
        ticket.update(fields)
        if note is not None:
            ticket.setdefault("notes", []).append(note)
        self.backend.change(self.name, "update", ticket_id, before=before, after=fields, note=note)
        return {"id": ticket_id, **{k: ticket.get(k) for k in ("status", "priority", "assignee")}}

    def close(self, ticket_id: str, resolution: str):
        ticket = super().get(ticket_id)
        if ticket["status"] == "closed":
            raise ToolError(f"ticket {ticket_id} is already closed")
        before = ticket["status"]
        ticket.update(status="closed", resolution=resolution)
        self.backend.change(self.name, "close", ticket_id, before=before)
        return {"id": ticket_id, "status": "closed"}


class Inventory(Service):
    name, noun = "inventory", "product"
    TOOLS = (
        ToolDef("inventory_products", "read", "List products (sku, name, stock, reorder point), optionally by category.",
                {"category": STR}),
        ToolDef("inventory_get", "read", "Get one product in full.", {"sku": STR}, ("sku",)),
        ToolDef("inventory_order", "write", "Place a purchase order for a product.",
                {"sku": STR, "quantity": INT, "supplier": STR}, ("sku", "quantity")),
    )

    def __init__(self, backend, records):
        super().__init__(backend, records)
        self.orders: list[dict] = []

    def products(self, category: str | None = None):
        rows = [p for p in self.records.values() if category is None or p["category"].casefold() == category.casefold()]
        return [brief(p, ("id", "name", "stock", "reorder_point")) for p in rows]

    def get(self, sku: str):
        return super().get(sku)

    def order(self, sku: str, quantity: int, supplier: str | None = None):
        product = super().get(sku)
        if quantity <= 0:
            raise ToolError(f"quantity must be a positive integer, got {quantity}")
        order = {"id": f"po-{len(self.orders) + 1}", "sku": sku, "quantity": quantity,
                 "supplier": supplier or product["supplier"]}
        self.orders.append(order)
        self.backend.change(self.name, "order", sku, after=order)
        return {"id": order["id"], "status": "ordered", "sku": sku, "quantity": quantity}

    def snapshot(self) -> dict:
        return {**super().snapshot(), "_orders": [dict(o) for o in self.orders]}
