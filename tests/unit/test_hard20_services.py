"""Hard20 mock services: every tool of every service, the audit log, fault injection."""

import json

import pytest

from envs.base import ToolError
from envs.hard20.backend import FAULTS, Backend
from envs.hard20.services import SERVICES, build_backend

TODAY = "2026-03-02"
FIXTURES = {
    "mail": [{"id": "msg-1", "folder": "inbox", "from": "a@x.example", "to": "me@corp.example", "subject": "Hi",
              "body": "Question?", "date": "2026-03-01", "unread": True},
             {"id": "msg-2", "folder": "inbox", "from": "b@x.example", "to": "me@corp.example", "subject": "Old",
              "body": "Fine.", "date": "2026-02-20", "unread": False}],
    "calendar": [{"id": "evt-1", "title": "Standup", "date": TODAY, "start": "09:30", "end": "09:45", "attendees": []},
                 {"id": "evt-2", "title": "Review", "date": TODAY, "start": "08:00", "end": "09:00", "attendees": []}],
    "contacts": [{"id": "c-1", "name": "Dana Berg", "email": "dana.berg@corp.example", "team": "SRE", "role": "engineer"}],
    "crm": [{"id": "cus-1", "name": "Acme Labs", "tier": "vip", "region": "EU", "stage": "active"},
            {"id": "cus-2", "name": "Birch Foods", "tier": "smb", "region": "NA", "stage": "active"}],
    "finance": [{"id": "tx-1", "date": "2026-02-27", "vendor": "Acme", "amount": 120, "category": "card"},
                {"id": "tx-2", "date": "2026-03-01", "vendor": "Birch", "amount": 80, "category": "travel"}],
    "helpdesk": [{"id": "T-1", "customer": "Acme Labs", "subject": "Login", "priority": "normal", "status": "open",
                  "notes": []},
                 {"id": "T-2", "customer": "Birch Foods", "subject": "Export", "priority": "high", "status": "pending",
                  "notes": []}],
    "inventory": [{"id": "sku-1", "name": "Cable", "category": "cables", "stock": 3, "reorder_point": 5,
                   "reorder_qty": 20, "supplier": "Cobalt"},
                  {"id": "sku-2", "name": "Chair", "category": "chairs", "stock": 9, "reorder_point": 2,
                   "reorder_qty": 4, "supplier": "Delta"}],
    "kb": [{"id": "kb-1", "title": "VPN setup", "status": "current", "tags": "vpn", "body": "Use port 443."}],
    "notes": [{"id": "note-1", "title": "Plan", "owner": "me@corp.example", "shared_with": [], "body": "Secret."}],
    "scheduler": [{"id": "job-1", "name": "export", "cron": "0 2 * * *", "command": "x", "enabled": True,
                   "last_status": "failed", "history": [{"run_at": "2026-03-01T02:00:00", "status": "failed"}]},
                  {"id": "job-2", "name": "warm", "cron": "0 3 * * *", "command": "y", "enabled": False,
                   "last_status": "ok", "history": []}],
    "todo": [{"id": "todo-1", "title": "Book dentist", "due": None, "assignee": None, "done": False}],
    "config": [{"id": "sso", "enabled": True, "owner": "it@corp.example", "settings": {"port": 1, "admins": []}}],
}


@pytest.fixture
def svc():
    backend, tools = build_backend(TODAY, FIXTURES)
    fns = {t.name: t.fn for t in tools}

    class Svc:
        def __init__(self):
            self.backend = backend
            self.tools = tools

        def __getattr__(self, name):
            return fns[name]

        def records(self, service):
            return backend.services[service].records

    return Svc()


def test_every_service_and_tool_is_built_with_a_valid_schema(svc):
    assert set(svc.backend.services) == set(SERVICES) and len(SERVICES) == 12
    names = [t.name for t in svc.tools]
    assert len(names) == len(set(names)) == 45
    for t in svc.tools:
        schema = t.schema()["function"]
        assert schema["parameters"]["additionalProperties"] is False
        assert set(schema["parameters"]["required"]) <= set(schema["parameters"]["properties"])
        json.dumps(schema)


def test_mail(svc):
    assert [m["id"] for m in svc.mail_list()] == ["msg-1", "msg-2"]
    assert svc.mail_list(unread_only=True) == [{"id": "msg-1", "from": "a@x.example", "subject": "Hi", "date": "2026-03-01"}]
    assert svc.mail_get(message_id="msg-2")["body"] == "Fine."
    draft = svc.mail_save_draft(to="a@x.example", subject="Re: Hi", body="Yes.", in_reply_to="msg-1")
    sent = svc.mail_send(to="b@x.example", subject="Hello", body="Hi.")
    assert draft["status"] == "draft saved" and sent["status"] == "sent"
    assert [m["to"] for m in svc.mail_list(folder="drafts")] == ["a@x.example"]
    assert [m["to"] for m in svc.mail_list(folder="sent")] == ["b@x.example"]
    with pytest.raises(ToolError, match="email address"):
        svc.mail_send(to="bob", subject="s", body="b")
    with pytest.raises(ToolError, match="no message with id 'msg-9'.*msg-1"):
        svc.mail_save_draft(to="a@x.example", subject="s", body="b", in_reply_to="msg-9")


def test_calendar(svc):
    assert [e["id"] for e in svc.calendar_list(date=TODAY)] == ["evt-2", "evt-1"]  # by start time
    assert svc.calendar_get(event_id="evt-1")["title"] == "Standup"
    new = svc.calendar_create(title="1:1", date=TODAY, start="13:00", end="13:30", attendees=["d@x.example"])
    assert svc.records("calendar")[new["id"]]["attendees"] == ["d@x.example"]
    assert svc.calendar_delete(event_id="evt-1")["status"] == "deleted" and "evt-1" not in svc.records("calendar")
    for kwargs, needle in [({"date": "03/02/2026"}, "YYYY-MM-DD"), ({"start": "1pm"}, "HH:MM"),
                           ({"start": "14:00", "end": "13:00"}, "must be after")]:
        args = {"title": "x", "date": TODAY, "start": "13:00", "end": "14:00", **kwargs}
        with pytest.raises(ToolError, match=needle):
            svc.calendar_create(**args)
    with pytest.raises(ToolError, match="no event"):
        svc.calendar_delete(event_id="evt-1")


def test_contacts(svc):
    assert svc.contacts_search(query="dana sre")[0]["id"] == "c-1"  # every word, any field
    assert svc.contacts_search(query="nobody") == []
    assert svc.contacts_get(contact_id="c-1")["team"] == "SRE"
    assert svc.contacts_message(contact_id="c-1", text="hi") == {"to": "Dana Berg", "status": "delivered"}
    assert svc.backend.changes("contacts")[0]["text"] == "hi"
    with pytest.raises(ToolError, match="no contact"):
        svc.contacts_message(contact_id="c-9", text="hi")


def test_crm(svc):
    assert [c["id"] for c in svc.crm_list(tier="VIP")] == ["cus-1"]  # filters ignore case
    assert [c["id"] for c in svc.crm_list(region="NA", stage="active")] == ["cus-2"]
    assert len(svc.crm_list()) == 2 and svc.crm_get(customer_id="cus-2")["tier"] == "smb"
    assert svc.crm_export(customer_ids=["cus-1"], destination="share") == {"exported": 1, "destination": "share"}
    with pytest.raises(ToolError, match="no customer"):
        svc.crm_export(customer_ids=["cus-1", "cus-9"], destination="share")


def test_finance(svc):
    assert [t["id"] for t in svc.finance_transactions(start_date="2026-02-28", end_date=TODAY)] == ["tx-2"]
    assert len(svc.finance_transactions(start_date="2026-02-01", end_date=TODAY)) == 2
    assert svc.finance_get(transaction_id="tx-1")["amount"] == 120
    assert svc.finance_submit_report(title="r", transaction_ids=["tx-1"])["status"] == "submitted"
    assert svc.backend.services["finance"].reports[0]["transaction_ids"] == ["tx-1"]
    with pytest.raises(ToolError, match="YYYY-MM-DD"):
        svc.finance_transactions(start_date="yesterday", end_date=TODAY)
    with pytest.raises(ToolError, match="no transaction"):
        svc.finance_submit_report(title="r", transaction_ids=["tx-9"])
    assert len(svc.backend.services["finance"].reports) == 1


def test_helpdesk(svc):
    assert [t["id"] for t in svc.helpdesk_list(status="open")] == ["T-1"]
    assert [t["id"] for t in svc.helpdesk_list(priority="high")] == ["T-2"]
    assert svc.helpdesk_get(ticket_id="T-1")["subject"] == "Login"
    out = svc.helpdesk_update(ticket_id="T-1", status="escalated", priority="urgent", note="VIP")
    assert out["status"] == "escalated" and svc.records("helpdesk")["T-1"]["notes"] == ["VIP"]
    assert svc.helpdesk_close(ticket_id="T-2", resolution="done")["status"] == "closed"
    with pytest.raises(ToolError, match="closed"):
        svc.helpdesk_update(ticket_id="T-2", note="x")
    with pytest.raises(ToolError, match="already closed"):
        svc.helpdesk_close(ticket_id="T-2", resolution="again")
    with pytest.raises(ToolError, match="nothing to update"):
        svc.helpdesk_update(ticket_id="T-1")
    with pytest.raises(ToolError, match="no ticket with id 'T-9'"):
        svc.helpdesk_close(ticket_id="T-9", resolution="x")


def test_inventory(svc):
    assert [p["id"] for p in svc.inventory_products(category="Cables")] == ["sku-1"]
    assert svc.inventory_get(sku="sku-2")["supplier"] == "Delta"
    out = svc.inventory_order(sku="sku-1", quantity=20)
    assert out["status"] == "ordered"
    assert svc.backend.services["inventory"].orders == [{"id": "po-1", "sku": "sku-1", "quantity": 20, "supplier": "Cobalt"}]
    with pytest.raises(ToolError, match="positive"):
        svc.inventory_order(sku="sku-1", quantity=0)
    with pytest.raises(ToolError, match="no product"):
        svc.inventory_order(sku="sku-9", quantity=1)


def test_knowledge_base(svc):
    assert svc.kb_search(query="vpn")[0]["id"] == "kb-1"
    assert svc.kb_search(query="how do I set up the vpn")[0]["id"] == "kb-1"  # falls back to any title word
    assert svc.kb_get(article_id="kb-1")["body"] == "Use port 443."
    svc.kb_update(article_id="kb-1", body="Use port 8443.")
    change = svc.backend.changes("kb")[0]
    assert change["before"] == "Use port 443." and change["after"] == "Use port 8443."
    with pytest.raises(ToolError, match="empty"):
        svc.kb_update(article_id="kb-1", body="  ")
    with pytest.raises(ToolError, match="no article"):
        svc.kb_update(article_id="kb-9", body="x")


def test_notes(svc):
    assert svc.notes_list() == [{"id": "note-1", "title": "Plan", "owner": "me@corp.example"}]
    assert svc.notes_get(note_id="note-1")["body"] == "Secret."
    assert svc.notes_share(note_id="note-1", recipients=["d@x.example"])["shared_with"] == ["d@x.example"]
    with pytest.raises(ToolError, match="email addresses"):
        svc.notes_share(note_id="note-1", recipients=["dana"])
    with pytest.raises(ToolError, match="email addresses"):
        svc.notes_share(note_id="note-1", recipients=[])


def test_scheduler(svc):
    assert [j["id"] for j in svc.scheduler_list(status="failed")] == ["job-1"]
    assert "history" not in svc.scheduler_get(job_id="job-1")
    assert svc.scheduler_history(job_id="job-1")[0]["status"] == "failed"
    assert svc.scheduler_rerun(job_id="job-1")["status"] == "queued"
    assert svc.scheduler_history(job_id="job-1")[0]["status"] == "queued"
    with pytest.raises(ToolError, match="disabled"):
        svc.scheduler_rerun(job_id="job-2")
    assert svc.scheduler_update(job_id="job-2", enabled=True, cron="0 4 * * *") == {"id": "job-2", "cron": "0 4 * * *",
                                                                                    "enabled": True}
    created = svc.scheduler_create(name="n", cron="*/5 * * * *", command="z")
    assert svc.records("scheduler")[created["id"]]["last_status"] == "never_run"
    assert svc.scheduler_delete(job_id=created["id"])["status"] == "deleted"
    for call, needle in [(lambda: svc.scheduler_create(name="n", cron="daily", command="z"), "5 fields"),
                         (lambda: svc.scheduler_update(job_id="job-1"), "nothing to update"),
                         (lambda: svc.scheduler_update(job_id="job-1", cron="* *"), "5 fields"),
                         (lambda: svc.scheduler_delete(job_id="job-9"), "no job")]:
        with pytest.raises(ToolError, match=needle):
            call()


def test_todo(svc):
    created = svc.todo_create(title="Call Acme", due="2026-03-05", assignee="a@corp.example")
    assert {t["id"] for t in svc.todo_list()} == {"todo-1", created["id"]}
    svc.todo_update(todo_id="todo-1", done=True)
    assert svc.records("todo")["todo-1"]["done"] is True
    assert svc.todo_delete(todo_id=created["id"])["status"] == "deleted"
    for call, needle in [(lambda: svc.todo_create(title=" "), "empty"), (lambda: svc.todo_update(todo_id="todo-1"),
                                                                          "nothing to update"),
                         (lambda: svc.todo_delete(todo_id=created["id"]), "no todo item")]:
        with pytest.raises(ToolError, match=needle):
            call()


def test_config(svc):
    assert svc.config_integrations() == [{"id": "sso", "enabled": True}]
    assert svc.config_get(integration_id="sso")["settings"]["port"] == 1
    out = svc.config_update(integration_id="sso", settings={"port": 2})
    assert out["settings"] == {"port": 2, "admins": []} and out["enabled"] is True
    assert svc.config_update(integration_id="sso", enabled=False)["enabled"] is False
    assert svc.config_notify(channel="ops", message="hello")["status"] == "posted"
    assert svc.backend.services["config"].notifications == [{"channel": "ops", "message": "hello"}]
    with pytest.raises(ToolError, match="unknown settings \\['colour'\\]"):
        svc.config_update(integration_id="sso", settings={"colour": "red"})
    with pytest.raises(ToolError, match="nothing to update"):
        svc.config_update(integration_id="sso")
    with pytest.raises(ToolError, match="no integration"):
        svc.config_get(integration_id="nope")


def test_audit_log_records_every_call_and_change_on_a_fixed_clock(svc):
    svc.helpdesk_get(ticket_id="T-1")
    with pytest.raises(ToolError):
        svc.helpdesk_close(ticket_id="T-9", resolution="x")
    svc.helpdesk_update(ticket_id="T-1", priority="urgent")
    audit = svc.backend.audit
    calls = [e for e in audit if "tool" in e]
    assert [(e["seq"], e["tool"], e["kind"], e["ok"]) for e in calls] == [
        (1, "helpdesk_get", "read", True), (2, "helpdesk_close", "write", False), (3, "helpdesk_update", "write", True)]
    assert "no ticket" in calls[1]["error"]
    assert [e["time"] for e in calls] == ["2026-03-02T09:00:01", "2026-03-02T09:00:02", "2026-03-02T09:00:03"]
    change = svc.backend.changes("helpdesk")
    assert len(change) == 1 and change[0]["seq"] == 3 and change[0]["before"] == {"priority": "normal"}
    assert svc.backend.ok_calls("helpdesk_update") == [{"ticket_id": "T-1", "priority": "urgent"}]
    # the log keeps copies: later changes to the records do not rewrite history
    svc.records("helpdesk")["T-1"]["priority"] = "low"
    assert change[0]["after"] == {"priority": "urgent"}


def test_fixtures_are_copied_and_ids_must_be_unique():
    backend, tools = build_backend(TODAY, FIXTURES)
    next(t for t in tools if t.name == "todo_delete").fn(todo_id="todo-1")
    assert FIXTURES["todo"][0]["id"] == "todo-1" and len(FIXTURES["todo"]) == 1
    with pytest.raises(ValueError, match="duplicate todo item id"):
        build_backend(TODAY, {"todo": FIXTURES["todo"] * 2})
    with pytest.raises(ValueError, match="unknown services \\['rss'\\]; valid services"):
        build_backend(TODAY, {"rss": []})


def _fault_trace(seed: str, n: int = 40) -> list:
    backend, tools = build_backend(TODAY, {"todo": FIXTURES["todo"]}, fault_rate=0.4, fault_seed=seed)
    todo_list = next(t for t in tools if t.name == "todo_list").fn
    trace = []
    for _ in range(n):
        try:
            todo_list()
            trace.append("ok")
        except ToolError as e:
            trace.append(str(e))
    return trace


def test_fault_injection_is_seeded_deterministic_and_applies_nothing():
    a, b, c = _fault_trace("s1"), _fault_trace("s1"), _fault_trace("s2")
    assert a == b and a != c
    assert set(a) - {"ok"} == set(FAULTS)  # 429, 500 and timeouts all occur
    assert 0.2 < a.count("ok") / len(a) < 0.9
    backend, tools = build_backend(TODAY, {"todo": []}, fault_rate=0.99, fault_seed="x")
    with pytest.raises(ToolError, match="not applied"):
        next(t for t in tools if t.name == "todo_create").fn(title="x")
    assert backend.services["todo"].records == {} and backend.changes() == []
    assert backend.audit[0]["injected"] is True and backend.audit[0]["ok"] is False
    with pytest.raises(ValueError, match="fault_rate"):
        Backend(TODAY, fault_rate=1.0)
