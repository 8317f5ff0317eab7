"""The telecom carrier's CRM (the agent DB): customers, lines, plans, bills and devices,
the 13 agent tools, and the agent-side initialisation helpers and assertions.

Behaviour follows upstream τ²-bench's telecom CRM. "Today" is fixed at 2025-02-25
and a new draft bill gets a counter-derived id instead of upstream's random one, so
episodes are reproducible (no shipped task creates one).
"""

from __future__ import annotations

from envs.base import ToolError
from envs.tau2.toolkit import REQUIRED, Toolkit, conform, helper, tool

TODAY = "2025-02-25"
CYCLE_END = "2025-02-28"  # last day of today's month
NEXT_MONTH = ("2025-03-01", "2025-03-31", "2025-03-15")  # period start / end / due date of a new draft bill
PREVIOUS_MONTH = ("2025-01-01", "2025-01-31", "2025-01-15")  # period start / end / due date of an overdue bill

_OPT_STR, _OPT_DATE, _OPT_DATETIME = ("opt", "str"), ("opt", "date"), ("opt", "datetime")
PLAN = ("record", (("plan_id", "str", REQUIRED), ("name", "str", REQUIRED), ("data_limit_gb", "float", REQUIRED),
                   ("price_per_month", "float", REQUIRED), ("data_refueling_price_per_gb", "float", REQUIRED)))
DEVICE = ("record", (("device_id", "str", REQUIRED), ("device_type", "str", REQUIRED), ("model", "str", REQUIRED),
                     ("imei", _OPT_STR, None), ("is_esim_capable", "bool", REQUIRED), ("activated", "bool", False),
                     ("activation_date", _OPT_DATETIME, None), ("last_esim_transfer_date", _OPT_DATETIME, None)))
LINE = ("record", (("line_id", "str", REQUIRED), ("phone_number", "str", REQUIRED), ("status", "str", "Pending Activation"),
                   ("plan_id", "str", REQUIRED), ("device_id", _OPT_STR, None), ("data_used_gb", "float", 0.0),
                   ("data_refueling_gb", "float", 0.0), ("roaming_enabled", "bool", False),
                   ("contract_end_date", _OPT_DATE, None), ("last_plan_change_date", _OPT_DATE, None),
                   ("last_sim_replacement_date", _OPT_DATE, None), ("suspension_start_date", _OPT_DATE, None)))
LINE_ITEM = ("record", (("description", "str", REQUIRED), ("amount", "float", REQUIRED), ("date", "date", REQUIRED),
                        ("item_type", "str", REQUIRED)))
BILL = ("record", (("bill_id", "str", REQUIRED), ("customer_id", "str", REQUIRED), ("period_start", "date", REQUIRED),
                   ("period_end", "date", REQUIRED), ("issue_date", "date", REQUIRED), ("total_due", "float", REQUIRED),
                   ("due_date", "date", REQUIRED), ("line_items", ("list", LINE_ITEM), []), ("status", "str", "Draft")))
ADDRESS = ("record", (("street", "str", REQUIRED), ("city", "str", REQUIRED), ("state", "str", REQUIRED),
                      ("zip_code", "str", REQUIRED)))
PAYMENT_METHOD = ("record", (("method_type", "str", REQUIRED), ("account_number_last_4", "str", REQUIRED),
                             ("expiration_date", "str", REQUIRED)))
CUSTOMER = ("record", (("customer_id", "str", REQUIRED), ("full_name", "str", REQUIRED), ("date_of_birth", "str", REQUIRED),
                       ("email", "str", REQUIRED), ("phone_number", "str", REQUIRED), ("address", ADDRESS, REQUIRED),
                       ("account_status", "str", "Pending Verification"),
                       ("payment_methods", ("list", PAYMENT_METHOD), []), ("line_ids", ("list", "str"), []),
                       ("bill_ids", ("list", "str"), []), ("created_at", "datetime", "2025-01-01"),
                       ("last_extension_date", _OPT_DATE, None), ("goodwill_credit_used_this_year", "float", 0.0)))
CRM = ("record", (("plans", ("list", PLAN), []), ("customers", ("list", CUSTOMER), []), ("lines", ("list", LINE), []),
                  ("bills", ("list", BILL), []), ("devices", ("list", DEVICE), [])))

_CUSTOMER_ID = ("string", "The customer id, e.g. 'C1001'.")
_LINE_ID = ("string", "The line id, e.g. 'L1001'.")


def normalise_db(raw: dict) -> dict:
    return conform(raw, CRM, "db")


class TelecomAgentTools(Toolkit):
    TOOL_ORDER = ("get_customer_by_phone", "get_customer_by_id", "get_customer_by_name", "get_details_by_id",
                  "suspend_line", "resume_line", "get_bills_for_customer", "send_payment_request", "get_data_usage",
                  "enable_roaming", "disable_roaming", "transfer_to_human_agents", "refuel_data")

    def __init__(self, db: dict):
        super().__init__(db)
        self._new_bills = 0

    # ---- lookups (upstream's error texts) ------------------------------------------------
    def _find(self, table: str, key: str, value, label: str):
        for record in self.db[table]:
            if record[key] == value:
                return record
        raise ToolError(f"{label} with ID {value} not found")

    def customer(self, customer_id):
        return self._find("customers", "customer_id", customer_id, "Customer")

    def line(self, line_id):
        return self._find("lines", "line_id", line_id, "Line")

    def plan(self, plan_id):
        return self._find("plans", "plan_id", plan_id, "Plan")

    def bill(self, bill_id):
        return self._find("bills", "bill_id", bill_id, "Bill")

    def line_by_phone(self, phone_number):
        for line in self.db["lines"]:
            if line["phone_number"] == phone_number:
                return line
        raise ToolError(f"Line with phone number {phone_number} not found")

    def customer_by_phone(self, phone_number):
        """First customer whose own number, or one of whose lines' numbers, matches."""
        for customer in self.db["customers"]:
            if customer["phone_number"] == phone_number:
                return customer
            for line_id in customer["line_ids"]:
                if self.line(line_id)["phone_number"] == phone_number:
                    return customer
        return None

    def _target_line(self, customer_id, line_id):
        customer = self.customer(customer_id)
        if line_id not in customer["line_ids"]:
            raise ToolError(f"Line {line_id} not found for customer {customer_id}")
        return self.line(line_id)

    # ---- agent tools --------------------------------------------------------------------------
    @tool("read", "Find the customer who owns a phone number (their own number or one of their lines).",
          phone_number=("string", "The phone number, e.g. '555-123-2002'."))
    def get_customer_by_phone(self, phone_number):
        customer = self.customer_by_phone(phone_number)
        if customer is None:
            raise ToolError(f"Customer with phone number {phone_number} not found")
        return customer

    @tool("read", "Get a customer by customer id.", customer_id=_CUSTOMER_ID)
    def get_customer_by_id(self, customer_id):
        return self.customer(customer_id)

    @tool("read", "Search customers by full name and date of birth.",
          full_name=("string", "The customer's full name."), dob=("string", "Date of birth, YYYY-MM-DD."))
    def get_customer_by_name(self, full_name, dob):
        return [c for c in self.db["customers"]
                if c["full_name"].lower() == full_name.lower() and c["date_of_birth"] == dob]

    @tool("read", "Get any record by id: a line (L...), device (D...), bill (B...), customer (C...) or plan (P...).",
          id=("string", "The id, e.g. 'L1001', 'B1002', 'P1001'."))
    def get_details_by_id(self, id):
        lookups = {"L": self.line, "D": lambda i: self._find("devices", "device_id", i, "Device"),
                   "B": self.bill, "C": self.customer, "P": self.plan}
        if not isinstance(id, str) or id[:1] not in lookups:
            raise ToolError(f"Unknown ID format or type: {id}")
        return lookups[id[0]](id)

    @tool("write", "Suspend an active line.", customer_id=_CUSTOMER_ID, line_id=_LINE_ID,
          reason=("string", "Why the line is suspended."))
    def suspend_line(self, customer_id, line_id, reason):
        line = self._target_line(customer_id, line_id)
        if line["status"] != "Active":
            raise ToolError("Line must be active to suspend")
        line["status"] = "Suspended"
        line["suspension_start_date"] = TODAY
        return {"message": "Line suspended successfully. $5/month holding fee will apply.", "line": line}

    @tool("write", "Resume (reactivate) a suspended line.", customer_id=_CUSTOMER_ID, line_id=_LINE_ID)
    def resume_line(self, customer_id, line_id):
        line = self._target_line(customer_id, line_id)
        if line["status"] not in ("Suspended", "Pending Activation"):
            raise ToolError("Line must be suspended to resume")
        line["status"] = "Active"
        line["suspension_start_date"] = None
        return {"message": "Line resumed successfully", "line": line}

    @tool("read", "List a customer's bills, newest first.", customer_id=_CUSTOMER_ID,
          limit=("integer", "Maximum number of bills to return (default 12)."))
    def get_bills_for_customer(self, customer_id, limit=12):
        bills = [self.bill(b) for b in self.customer(customer_id)["bill_ids"]]
        return sorted(bills, key=lambda b: b["issue_date"], reverse=True)[:limit]

    @tool("write", "Send the customer a request to pay a bill; it appears on their phone.",
          customer_id=_CUSTOMER_ID, bill_id=("string", "The bill id, e.g. 'B1001'."))
    def send_payment_request(self, customer_id, bill_id):
        customer = self.customer(customer_id)
        if any(self.bill(b)["status"] == "Awaiting Payment" for b in customer["bill_ids"]):
            raise ToolError("A bill is already awaiting payment for this customer")
        if bill_id not in customer["bill_ids"]:
            raise ToolError(f"Bill {bill_id} not found for customer {customer_id}")
        self.bill(bill_id)["status"] = "Awaiting Payment"
        return f"Payment request sent to the customer for bill {bill_id}"

    @tool("read", "Get the current billing cycle's data usage of a line.", customer_id=_CUSTOMER_ID, line_id=_LINE_ID)
    def get_data_usage(self, customer_id, line_id):
        line = self._target_line(customer_id, line_id)
        plan = self.plan(line["plan_id"])
        # A plain dict upstream, so its numbers are rendered as strings (``toolkit.render_result``).
        return {"line_id": line_id, "data_used_gb": str(line["data_used_gb"]),
                "data_limit_gb": str(plan["data_limit_gb"]), "data_refueling_gb": str(line["data_refueling_gb"]),
                "cycle_end_date": CYCLE_END}

    @tool("write", "Allow international roaming on a line (carrier side).", customer_id=_CUSTOMER_ID, line_id=_LINE_ID)
    def enable_roaming(self, customer_id, line_id):
        line = self._target_line(customer_id, line_id)
        if line["roaming_enabled"]:
            return "Roaming was already enabled"
        line["roaming_enabled"] = True
        return "Roaming enabled successfully"

    @tool("write", "Disallow international roaming on a line (carrier side).", customer_id=_CUSTOMER_ID, line_id=_LINE_ID)
    def disable_roaming(self, customer_id, line_id):
        line = self._target_line(customer_id, line_id)
        if not line["roaming_enabled"]:
            return "Roaming was already disabled"
        line["roaming_enabled"] = False
        return "Roaming disabled successfully"

    @tool("write", "Add extra data to a line for the current cycle; the charge goes on the draft bill.",
          customer_id=_CUSTOMER_ID, line_id=_LINE_ID, gb_amount=("number", "Gigabytes to add, e.g. 2.0."))
    def refuel_data(self, customer_id, line_id, gb_amount):
        line = self._target_line(customer_id, line_id)
        if gb_amount <= 0:
            raise ToolError("Refuel amount must be positive")
        plan = self.plan(line["plan_id"])
        price = plan["data_refueling_price_per_gb"]
        charge = gb_amount * price
        line["data_refueling_gb"] = line["data_refueling_gb"] + gb_amount
        self._add_charge(customer_id, {"description": f"Data refueling: {gb_amount} GB at ${price}/GB",
                                       "amount": float(charge), "date": TODAY,
                                       "item_type": "Credit" if charge < 0 else "Charge"})
        return {"message": f"Successfully added {gb_amount} GB of data for line {line_id} for ${charge:.2f}",
                "new_data_refueling_gb": str(line["data_refueling_gb"]), "charge": str(charge)}

    def _add_charge(self, customer_id, item: dict) -> None:
        """Put a one-time charge on the customer's draft bill, creating one if needed."""
        customer = self.customer(customer_id)
        draft = next((b for b in map(self.bill, customer["bill_ids"]) if b["status"] == "Draft"), None)
        if draft is None:
            self._new_bills += 1
            start, end, due = NEXT_MONTH
            draft = {"bill_id": f"B{self._new_bills:08x}", "customer_id": customer_id, "period_start": start,
                     "period_end": end, "issue_date": start, "total_due": 0.0, "due_date": due,
                     "line_items": [], "status": "Draft"}
            self.db["bills"].append(draft)
            customer["bill_ids"].append(draft["bill_id"])
        draft["line_items"].append(item)
        draft["total_due"] = draft["total_due"] + item["amount"]

    # ---- agent-side initialisation helpers -------------------------------------------------
    @helper
    def set_data_usage(self, customer_id, line_id, data_used_gb):
        line = self._target_line(customer_id, line_id)
        line["data_used_gb"] = float(data_used_gb)
        return f"Data usage set to {data_used_gb} GB for line {line_id}"

    @helper
    def suspend_line_for_overdue_bill(self, customer_id, line_id, new_bill_id, contract_ended):
        line = self.line(line_id)
        if line["status"] != "Active":
            raise ToolError("Line must be active to suspend for unpaid bill")
        amount = self.plan(line["plan_id"])["price_per_month"]
        if amount <= 0:
            raise ToolError("Amount must be positive for overdue bill")
        customer = self.customer(customer_id)
        if any(self.bill(b)["status"] == "Overdue" for b in customer["bill_ids"]):
            raise ToolError("Customer already has an overdue bill")
        start, end, due = PREVIOUS_MONTH
        self.db["bills"].append({
            "bill_id": new_bill_id, "customer_id": customer_id, "period_start": start, "period_end": end,
            "issue_date": start, "total_due": 0.0 + amount, "due_date": due,
            "line_items": [{"description": f"Charge for line {line_id}", "amount": amount, "date": TODAY,
                            "item_type": "Charge"}],
            "status": "Overdue"})
        customer["bill_ids"].append(new_bill_id)
        line["status"] = "Suspended"
        line["suspension_start_date"] = TODAY
        if contract_ended:
            line["contract_end_date"] = end
        return f"Line {line_id} suspended for unpaid bill {new_bill_id}. Contract ended: {bool(contract_ended)}"

    # ---- agent-side assertions (the ENV_ASSERTION component) -------------------------------
    @helper
    def assert_data_refueling_amount(self, customer_id, line_id, expected_amount) -> bool:
        return abs(self._target_line(customer_id, line_id)["data_refueling_gb"] - expected_amount) < 1e-6

    @helper
    def assert_line_status(self, customer_id, line_id, expected_status) -> bool:
        return self._target_line(customer_id, line_id)["status"] == expected_status

    @helper
    def assert_overdue_bill_exists(self, customer_id, overdue_bill_id) -> bool:
        customer = self.customer(customer_id)
        if overdue_bill_id not in customer["bill_ids"]:
            raise ToolError(f"Overdue bill {overdue_bill_id} not found")
        if self.bill(overdue_bill_id)["status"] != "Overdue":
            raise ToolError(f"Overdue bill {overdue_bill_id} is not overdue")
        return True

    @helper
    def assert_no_overdue_bill(self, overdue_bill_id) -> bool:
        bill = next((b for b in self.db["bills"] if b["bill_id"] == overdue_bill_id), None)
        return bill is None or bill["status"] == "Paid"
