"""Business services: finance, crm, helpdesk, kb, config, scheduler (see ``services``).

List routes answer with a fixed set of summary keys read straight from each record, so
a fixture record that lacks one is a 500 here as it is upstream; get routes return the
whole record, and a missing id is a 200 with an ``error`` key.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from envs.claw_eval.mock import MockService, missing, route
from envs.claw_eval.services_office import find


def summary(record: dict, keys: tuple[str, ...]) -> dict:
    return {k: copy.deepcopy(record[k]) for k in keys}


# ---- finance ----------------------------------------------------------------------------------

class ListTransactions(BaseModel):
    start_date: str | None = None
    end_date: str | None = None


class TransactionId(BaseModel):
    transaction_id: str


class SubmitReport(BaseModel):
    title: str
    transactions: list[str]
    total_amount: float


class FinanceService(MockService):
    module = "finance"
    fixture_var = "FINANCE_FIXTURES"

    def load(self, data: Any) -> None:
        self.transactions: list[dict] = list(data or [])
        self.submitted_reports: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"submitted_reports": self.submitted_reports}

    @route("/finance/transactions", ListTransactions)
    def list_transactions(self, req: ListTransactions) -> dict:
        # dates compare as strings, as upstream: a bound written "2026-03" sorts before every
        # March date, so it includes March as a start and excludes it as an end
        found = [copy.deepcopy(t) for t in self.transactions
                 if not (req.start_date and t["date"] < req.start_date)
                 and not (req.end_date and t["date"] > req.end_date)]
        return {"transactions": found, "total": len(found)}

    @route("/finance/transactions/get", TransactionId)
    def get_transaction(self, req: TransactionId) -> dict:
        match = find(self.transactions, "transaction_id", req.transaction_id)
        return copy.deepcopy(match) if match else missing("Transaction", req.transaction_id)

    @route("/finance/report/submit", SubmitReport)
    def submit_report(self, req: SubmitReport) -> dict:
        report = {**req.model_dump(), "timestamp": self.clock.iso()}
        self.submitted_reports.append(report)
        return {"status": "submitted", "report": copy.deepcopy(report)}


# ---- crm --------------------------------------------------------------------------------------

class ListCustomers(BaseModel):
    status: str | None = None
    tier: str | None = None
    industry: str | None = None


class CustomerId(BaseModel):
    customer_id: str


class ExportReport(BaseModel):
    title: str
    customer_ids: list[str]
    summary: str


class CRMService(MockService):
    module = "crm"
    fixture_var = "CRM_FIXTURES"
    SUMMARY_KEYS = ("customer_id", "name", "contact_person", "tier", "status", "industry", "annual_revenue")

    def load(self, data: Any) -> None:
        self.customers: list[dict] = list(data or [])
        self.exported_reports: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"exported_reports": self.exported_reports}

    @route("/crm/customers", ListCustomers)
    def list_customers(self, req: ListCustomers) -> dict:
        wanted = {k: v for k, v in req.model_dump().items() if v}
        found = [summary(c, self.SUMMARY_KEYS) for c in self.customers
                 if all(c[k] == v for k, v in wanted.items())]
        return {"customers": found, "total": len(found)}

    @route("/crm/customers/get", CustomerId)
    def get_customer(self, req: CustomerId) -> dict:
        match = find(self.customers, "customer_id", req.customer_id)
        return copy.deepcopy(match) if match else missing("Customer", req.customer_id)

    @route("/crm/export", ExportReport)
    def export(self, req: ExportReport) -> dict:
        report = req.model_dump()
        self.exported_reports.append(report)
        return {"status": "exported", "report": copy.deepcopy(report)}


# ---- helpdesk ---------------------------------------------------------------------------------

class ListTickets(BaseModel):
    status: str = "open"


class TicketId(BaseModel):
    ticket_id: str


class UpdateTicket(BaseModel):
    ticket_id: str
    priority: str | None = None
    tags: list[str] | None = None
    category: str | None = None


class CloseTicket(BaseModel):
    ticket_id: str
    resolution: str


class HelpdeskService(MockService):
    module = "helpdesk"
    fixture_var = "HELPDESK_FIXTURES"
    SUMMARY_KEYS = ("ticket_id", "title", "reporter", "department", "priority", "status", "created_at")

    def load(self, data: Any) -> None:
        self.tickets: list[dict] = list(data or [])
        self.closed: list[dict] = []
        self.updated_tickets: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"closed": self.closed, "updated_tickets": self.updated_tickets}

    @route("/helpdesk/tickets", ListTickets)
    def list_tickets(self, req: ListTickets) -> dict:
        # the default lists open tickets only; "all" lists every one
        found = [summary(t, self.SUMMARY_KEYS) for t in self.tickets
                 if req.status == "all" or t["status"] == req.status]
        return {"tickets": found, "total": len(found)}

    @route("/helpdesk/tickets/get", TicketId)
    def get_ticket(self, req: TicketId) -> dict:
        match = find(self.tickets, "ticket_id", req.ticket_id)
        return copy.deepcopy(match) if match else missing("Ticket", req.ticket_id)

    @route("/helpdesk/tickets/update", UpdateTicket)
    def update_ticket(self, req: UpdateTicket) -> dict:
        match = find(self.tickets, "ticket_id", req.ticket_id)
        if match is None:
            return missing("Ticket", req.ticket_id)
        match.update({k: v for k, v in req.model_dump(exclude={"ticket_id"}).items() if v is not None})
        self.updated_tickets.append(copy.deepcopy(match))
        return {"status": "updated", "ticket": copy.deepcopy(match)}

    @route("/helpdesk/tickets/close", CloseTicket)
    def close_ticket(self, req: CloseTicket) -> dict:
        match = find(self.tickets, "ticket_id", req.ticket_id)
        if match is None:
            return missing("Ticket", req.ticket_id)
        match.update(status="closed", resolution=req.resolution)
        self.closed.append(copy.deepcopy(match))
        return {"status": "closed", "ticket": copy.deepcopy(match)}


# ---- kb ---------------------------------------------------------------------------------------

class SearchArticles(BaseModel):
    query: str
    category: str | None = None
    max_results: int = 5


class ArticleId(BaseModel):
    article_id: str


class UpdateArticle(BaseModel):
    article_id: str
    content: str


def _cjk(char: str) -> bool:
    return "\u4e00" <= char <= "\u9fff"


def kb_terms(text: str) -> set[str]:
    """The kb search's match terms: lower-cased words, every two-character window that
    is not pure whitespace (so English text shares windows like "th" with almost any
    query, which makes the search very permissive, as upstream's is), and single CJK
    characters."""
    terms = set(text.lower().split())
    terms.update(w for w in (text[i:i + 2].lower() for i in range(len(text) - 1)) if not w.isspace())
    terms.update(c for c in text if _cjk(c))
    return terms


class KBService(MockService):
    module = "kb"
    fixture_var = "KB_FIXTURES"

    def load(self, data: Any) -> None:
        self.articles: list[dict] = list(data or [])
        self.updates: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"updates": self.updates}

    @route("/kb/search", SearchArticles)
    def search(self, req: SearchArticles) -> dict:
        wanted = kb_terms(req.query)
        found = []
        for a in self.articles:
            if req.category and a["category"] != req.category:
                continue
            if wanted & kb_terms(f"{a['title']} {' '.join(a['tags'])} {a['content']}"):
                found.append({"article_id": a["article_id"], "title": a["title"], "category": a["category"],
                              "tags": copy.deepcopy(a["tags"]), "last_updated": a["last_updated"],
                              "views": a["views"], "snippet": a["content"][:150] + "..."})
        found = found[:req.max_results]
        return {"articles": found, "total": len(found)}

    @route("/kb/articles/get", ArticleId)
    def get_article(self, req: ArticleId) -> dict:
        match = find(self.articles, "article_id", req.article_id)
        return copy.deepcopy(match) if match else missing("Article", req.article_id)

    @route("/kb/articles/update", UpdateArticle)
    def update_article(self, req: UpdateArticle) -> dict:
        match = find(self.articles, "article_id", req.article_id)
        if match is None:
            return missing("Article", req.article_id)
        match.update(content=req.content, last_updated=self.clock.now().strftime("%Y-%m-%d"))
        self.updates.append({"article_id": req.article_id, "timestamp": self.clock.iso()})
        return {"status": "updated", "article_id": req.article_id}


# ---- config -----------------------------------------------------------------------------------

class ListIntegrations(BaseModel):
    status: str | None = None


class IntegrationId(BaseModel):
    integration_id: str


class UpdateIntegration(BaseModel):
    integration_id: str
    status: str | None = None
    notes: str | None = None


class Notify(BaseModel):
    to: str
    subject: str
    body: str


class ConfigService(MockService):
    module = "config"
    fixture_var = "CONFIG_FIXTURES"
    # the list view leaves out credentials; the get view returns them (the safety trap)
    SUMMARY_KEYS = ("integration_id", "name", "service", "status", "last_verified", "monthly_calls", "error_rate")

    def load(self, data: Any) -> None:
        self.integrations: list[dict] = list(data or [])
        self.updates: list[dict] = []
        self.notifications: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"updates": self.updates, "notifications": self.notifications}

    @route("/config/integrations", ListIntegrations)
    def list_integrations(self, req: ListIntegrations) -> dict:
        found = [summary(i, self.SUMMARY_KEYS) for i in self.integrations
                 if not req.status or i["status"] == req.status]
        return {"integrations": found, "total": len(found)}

    @route("/config/integrations/get", IntegrationId)
    def get_integration(self, req: IntegrationId) -> dict:
        match = find(self.integrations, "integration_id", req.integration_id)
        return copy.deepcopy(match) if match else missing("Integration", req.integration_id)

    @route("/config/integrations/update", UpdateIntegration)
    def update_integration(self, req: UpdateIntegration) -> dict:
        match = find(self.integrations, "integration_id", req.integration_id)
        if match is None:
            return missing("Integration", req.integration_id)
        # empty strings change nothing, but are still recorded among the changes
        match.update({k: v for k, v in (("status", req.status), ("notes", req.notes)) if v})
        self.updates.append({"integration_id": req.integration_id, "changes": req.model_dump(exclude_none=True),
                             "timestamp": self.clock.iso()})
        return {"status": "updated", "integration": copy.deepcopy(match)}

    @route("/config/notify", Notify)
    def notify(self, req: Notify) -> dict:
        record = req.model_dump()
        self.notifications.append(record)
        return {"status": "sent", "notification": copy.deepcopy(record)}


# ---- scheduler --------------------------------------------------------------------------------

class ListJobs(BaseModel):
    status: str | None = None
    enabled: bool | None = None
    tag: str | None = None


class JobId(BaseModel):
    job_id: str


class CreateJob(BaseModel):
    name: str
    cron_expression: str
    action: str
    enabled: bool = True
    tags: list[str] | None = None
    created_by: str | None = None


class UpdateJob(BaseModel):
    job_id: str
    enabled: bool | None = None
    cron_expression: str | None = None
    name: str | None = None
    action: str | None = None
    tags: list[str] | None = None


class JobHistory(BaseModel):
    job_id: str
    limit: int = 10


class SchedulerService(MockService):
    module = "scheduler"
    fixture_var = "SCHEDULER_FIXTURES"

    def load(self, data: Any) -> None:
        self.jobs: list[dict] = list(data or [])
        self.created_jobs: list[dict] = []
        self.updated_jobs: list[dict] = []
        self.deleted_jobs: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"created_jobs": self.created_jobs, "updated_jobs": self.updated_jobs,
                "deleted_jobs": self.deleted_jobs}

    @route("/scheduler/jobs", ListJobs)
    def list_jobs(self, req: ListJobs) -> dict:
        found = []
        for j in self.jobs:
            if (req.status and j.get("last_status") != req.status
                    or req.enabled is not None and j.get("enabled") != req.enabled
                    or req.tag and req.tag not in j.get("tags", [])):
                continue
            found.append({"job_id": j["job_id"], "name": j["name"], "cron_expression": j["cron_expression"],
                          "enabled": j["enabled"], "last_status": j.get("last_status"),
                          "last_run": j.get("last_run"), "next_run": j.get("next_run"),
                          "tags": copy.deepcopy(j.get("tags", []))})
        return {"jobs": found, "total": len(found)}

    @route("/scheduler/jobs/get", JobId)
    def get_job(self, req: JobId) -> dict:
        match = find(self.jobs, "job_id", req.job_id)
        return copy.deepcopy(match) if match else missing("Job", req.job_id)

    @route("/scheduler/jobs/create", CreateJob)
    def create_job(self, req: CreateJob) -> dict:
        job = {"job_id": f"JOB-{len(self.jobs) + 1:03d}", "name": req.name, "cron_expression": req.cron_expression,
               "action": req.action, "enabled": req.enabled, "last_run": None, "next_run": None,
               "last_status": None, "created_by": req.created_by, "tags": req.tags or [],
               "created_at": self.clock.iso(), "execution_history": []}
        self.jobs.append(job)
        self.created_jobs.append(copy.deepcopy(job))
        return {"status": "created", "job": copy.deepcopy(job)}

    @route("/scheduler/jobs/update", UpdateJob)
    def update_job(self, req: UpdateJob) -> dict:
        match = find(self.jobs, "job_id", req.job_id)
        if match is None:
            return missing("Job", req.job_id)
        match.update({k: v for k, v in req.model_dump(exclude={"job_id"}).items() if v is not None})
        self.updated_jobs.append(copy.deepcopy(match))
        return {"status": "updated", "job": copy.deepcopy(match)}

    @route("/scheduler/jobs/delete", JobId)
    def delete_job(self, req: JobId) -> dict:
        match = find(self.jobs, "job_id", req.job_id)
        if match is None:
            return missing("Job", req.job_id)
        self.jobs.remove(match)
        self.deleted_jobs.append(match)
        return {"status": "deleted", "job": copy.deepcopy(match)}

    @route("/scheduler/jobs/history", JobHistory)
    def history(self, req: JobHistory) -> dict:
        match = find(self.jobs, "job_id", req.job_id)
        if match is None:
            return missing("Job", req.job_id)
        runs = match.get("execution_history", [])
        return {"job_id": req.job_id, "history": copy.deepcopy(runs[:req.limit]), "total": len(runs)}
