"""Each fixture-backed service module: routes answer from invented fixtures, writes land in
the audit's action lists under upstream's names, a missing record is a 200 with an error
key, a missing field a 422, and the clock-reading services follow the clock mode."""

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from envs.claw_eval import load_task
from envs.claw_eval.mock import Clock, ServiceHost
from envs.claw_eval.services import SERVICES
from envs.claw_eval.tasks import FIXTURE_SERVICES

SYNTHETIC = Path(__file__).resolve().parents[1] / "data" / "claw_eval"


def make(module: str, records, tmp_path: Path, clock: Clock | None = None, **kw):
    path = tmp_path / f"{module}.json"
    path.write_text(json.dumps(records))
    cls = SERVICES[module]
    return cls(module, path, clock or Clock(), data_dir=tmp_path, **kw)


def ok(svc, path, body):
    reply = svc.handle(path, body)
    assert reply.status == 200, reply
    return reply.body


def test_every_fixture_service_has_an_implementation():
    assert set(SERVICES) == set(FIXTURE_SERVICES)


def test_todo(tmp_path):
    svc = make("todo", [{"task_id": "t1", "title": "Pay rent", "status": "pending", "priority": "high", "tags": []}],
               tmp_path)
    assert ok(svc, "/todo/tasks", {"status": "done"}) == {"tasks": [], "total": 0}
    upd = ok(svc, "/todo/tasks/update", {"task_id": "t1", "status": "done"})
    assert upd["task"]["status"] == "done" and upd["task"]["title"] == "Pay rent"
    made = ok(svc, "/todo/tasks/create", {"title": "Call bank"})["task"]
    assert made["task_id"] == "todo_002" and made["priority"] == "medium" and made["created_at"].startswith("2026-03-02")
    assert ok(svc, "/todo/tasks/delete", {"task_id": "t1"})["status"] == "deleted"
    assert "not found" in ok(svc, "/todo/tasks/delete", {"task_id": "t1"})["error"]
    audit = svc.audit()
    assert [t["task_id"] for t in audit["deleted"]] == ["t1"] and audit["updated_tasks"][0]["status"] == "done"
    assert svc.handle("/todo/tasks/create", {}).status == 422


def test_contacts(tmp_path):
    svc = make("contacts", [{"contact_id": "c1", "name": "Ana Ruiz", "department": "Sales"},
                            {"contact_id": "c2", "name": "Bo Chen", "department": "Ops"}], tmp_path)
    assert [c["contact_id"] for c in ok(svc, "/contacts/search", {"query": "Ana"})["contacts"]] == ["c1"]
    assert ok(svc, "/contacts/search", {"query": "ana"})["total"] == 0  # case-sensitive substring
    assert ok(svc, "/contacts/search", {"query": "", "department": "Op"})["total"] == 1
    ok(svc, "/contacts/send_message", {"contact_id": "c2", "message": "hi"})
    assert svc.audit()["sent_messages"][0]["message"] == "hi"
    assert svc.handle("/contacts/search", {}).status == 422


def test_calendar(tmp_path):
    events = [{"event_id": "e1", "title": "Standup", "start_time": "2026-03-09T09:00:00Z",
               "end_time": "2026-03-09T09:15:00Z", "attendees": ["ana@corp.com"]},
              {"event_id": "e2", "title": "Review", "start_time": "2026-03-10T14:00:00Z",
               "end_time": "2026-03-10T15:00:00Z", "attendees": ["bo@corp.com"]}]
    svc = make("calendar", events, tmp_path)
    assert [e["event_id"] for e in ok(svc, "/calendar/events", {"date": "2026-03-09", "days": 2})["events"]] == ["e1", "e2"]
    assert ok(svc, "/calendar/events", {"date": "March 9"}) == {"error": "Invalid date format: March 9"}
    assert ok(svc, "/calendar/user_events", {"user": "ana", "date": "2026-03-09"})["total"] == 1
    made = ok(svc, "/calendar/events/create", {"title": "1:1", "start_time": "2026-03-11T10:00:00Z",
                                                "end_time": "2026-03-11T10:30:00Z"})["event"]
    assert made["event_id"] == "evt_003" and made["attendees"] == [] and made["recurring"] is False
    ok(svc, "/calendar/events/delete", {"event_id": "e1"})
    audit = svc.audit()
    assert [e["event_id"] for e in audit["deleted"]] == ["e1"] and audit["created_events"][0]["title"] == "1:1"
    assert svc.handle("/calendar/events", {}).status == 422  # date is required


def test_calendar_wall_clock_shift(tmp_path):
    events = [{"event_id": "e1", "title": "x", "start_time": "2020-01-06T09:30:00Z", "end_time": "2020-01-06T10:00:00Z"},
              {"event_id": "e2", "title": "y", "start_time": "2020-01-08T09:30:00Z", "end_time": "2020-01-08T10:00:00Z"}]
    frozen = make("calendar", events, tmp_path)
    assert frozen.events[0]["start_time"] == "2020-01-06T09:30:00Z"  # as written
    wall = make("calendar", events, tmp_path, Clock("wall"))
    start = datetime.fromisoformat(wall.events[0]["start_time"].replace("Z", "+00:00"))
    tomorrow = (datetime.now(timezone.utc) + timedelta(days=1)).date()
    assert start.date() == tomorrow and (start.hour, start.minute) == (9, 30)
    second = datetime.fromisoformat(wall.events[1]["start_time"].replace("Z", "+00:00"))
    assert second - start == timedelta(days=2)  # spacing kept


def test_gmail_frozen_anchor_and_wall_shift():
    task = load_task(SYNTHETIC / "tasks" / "T005_mail_digest", SYNTHETIC)
    host = ServiceHost(task, SYNTHETIC, SERVICES)
    assert host.clock.start == datetime(2026, 2, 27, 8, 0, tzinfo=timezone.utc)  # newest mail + 1 day
    listed = host.call("gmail_list_messages", {}).body
    assert [m["message_id"] for m in listed["messages"]] == ["M-1", "M-2"]  # M-3 is older than 7 days
    assert set(listed["messages"][0]) == {"message_id", "from", "subject", "date", "is_read", "labels"}
    assert host.call("gmail_list_messages", {"days_back": 60}).body["total"] == 3
    pinned = ServiceHost(task, SYNTHETIC, SERVICES, clock=Clock(start=datetime(2026, 6, 1, tzinfo=timezone.utc)))
    assert pinned.call("gmail_list_messages", {}).body["total"] == 0  # an explicit start wins
    wall = ServiceHost(task, SYNTHETIC, SERVICES, clock=Clock("wall"))
    newest = max(datetime.fromisoformat(e["date"].replace("Z", "+00:00")) for e in wall.services["gmail"].emails)
    assert abs((datetime.now(timezone.utc) - newest) - timedelta(days=1)) < timedelta(minutes=5)
    assert wall.call("gmail_list_messages", {}).body["total"] == 2


def test_gmail_writes(tmp_path):
    svc = make("gmail", [], tmp_path)
    assert ok(svc, "/gmail/send", {"to": "a@x", "subject": "s", "body": "b"})["status"] == "sent"
    assert ok(svc, "/gmail/drafts/save", {"to": "a@x", "subject": "s", "body": "b"})["draft"]["reply_to_message_id"] is None
    assert set(svc.audit()) == {"calls", "sent_messages", "drafts"}
    assert "not found" in ok(svc, "/gmail/messages/get", {"message_id": "nope"})["error"]


def test_finance_and_crm(tmp_path):
    fin = make("finance", [{"transaction_id": "x1", "date": "2026-02-01", "amount": 5},
                           {"transaction_id": "x2", "date": "2026-03-03", "amount": 7}], tmp_path)
    assert ok(fin, "/finance/transactions", {"start_date": "2026-03-01"})["total"] == 1
    rep = ok(fin, "/finance/report/submit", {"title": "Feb", "transactions": ["x1"], "total_amount": "5"})
    assert rep["report"]["total_amount"] == 5.0 and fin.audit()["submitted_reports"]
    assert fin.handle("/finance/report/submit", {"title": "Feb", "transactions": "x1", "total_amount": 5}).status == 422
    crm = make("crm", [{"customer_id": "k1", "name": "Acme", "contact_person": "Al", "tier": "gold", "status": "active",
                        "industry": "retail", "annual_revenue": 10, "notes": "secret"}], tmp_path)
    listed = ok(crm, "/crm/customers", {"tier": "gold"})["customers"]
    assert listed and "notes" not in listed[0] and ok(crm, "/crm/customers/get", {"customer_id": "k1"})["notes"]
    ok(crm, "/crm/export", {"title": "t", "customer_ids": ["k1"], "summary": "s"})
    assert crm.audit()["exported_reports"] == [{"title": "t", "customer_ids": ["k1"], "summary": "s"}]


def test_helpdesk_kb_config(tmp_path):
    desk = make("helpdesk", [{"ticket_id": "h1", "title": "VPN", "reporter": "r", "department": "IT", "priority": "low",
                              "status": "open", "created_at": "2026-02-01"}], tmp_path)
    assert ok(desk, "/helpdesk/tickets", {})["total"] == 1 and ok(desk, "/helpdesk/tickets", {"status": "closed"})["total"] == 0
    ok(desk, "/helpdesk/tickets/update", {"ticket_id": "h1", "priority": "high"})
    ok(desk, "/helpdesk/tickets/close", {"ticket_id": "h1", "resolution": "fixed"})
    audit = desk.audit()
    assert audit["closed"][0]["resolution"] == "fixed" and audit["updated_tickets"][0]["priority"] == "high"
    assert desk.handle("/helpdesk/tickets/close", {"ticket_id": "h1"}).status == 422

    kb = make("kb", [{"article_id": "a1", "title": "VPN setup", "category": "it", "tags": ["vpn"], "content": "x" * 200,
                      "last_updated": "2025-01-01", "views": 3},
                     {"article_id": "a2", "title": "报销流程", "category": "finance", "tags": [], "content": "报销需要发票",
                      "last_updated": "2025-01-01", "views": 1}], tmp_path)
    hit = ok(kb, "/kb/search", {"query": "vpn"})["articles"]
    assert [a["article_id"] for a in hit] == ["a1"] and hit[0]["snippet"] == "x" * 150 + "..."
    assert [a["article_id"] for a in ok(kb, "/kb/search", {"query": "发票"})["articles"]] == ["a2"]
    ok(kb, "/kb/articles/update", {"article_id": "a1", "content": "new"})
    assert kb.articles[0]["last_updated"] == "2026-03-02" and kb.audit()["updates"][0]["article_id"] == "a1"

    cfg = make("config", [{"integration_id": "i1", "name": "Pay", "service": "stripe", "status": "active",
                           "last_verified": "2026-01-01", "monthly_calls": 9, "error_rate": 0.1, "api_key": "sk-1"}],
               tmp_path)
    assert "api_key" not in ok(cfg, "/config/integrations", {})["integrations"][0]
    assert ok(cfg, "/config/integrations/get", {"integration_id": "i1"})["api_key"] == "sk-1"
    ok(cfg, "/config/integrations/update", {"integration_id": "i1", "status": "disabled"})
    ok(cfg, "/config/notify", {"to": "ops", "subject": "s", "body": "b"})
    audit = cfg.audit()
    assert audit["updates"][0]["changes"] == {"integration_id": "i1", "status": "disabled"} and audit["notifications"]


def test_scheduler(tmp_path):
    svc = make("scheduler", [{"job_id": "J1", "name": "backup", "cron_expression": "0 1 * * *", "enabled": True,
                              "last_status": "failed", "tags": ["db"],
                              "execution_history": [{"run": i} for i in range(15)]}], tmp_path)
    assert ok(svc, "/scheduler/jobs", {"status": "failed", "tag": "db"})["total"] == 1
    assert ok(svc, "/scheduler/jobs", {"enabled": False})["total"] == 0
    hist = ok(svc, "/scheduler/jobs/history", {"job_id": "J1"})
    assert len(hist["history"]) == 10 and hist["total"] == 15
    made = ok(svc, "/scheduler/jobs/create", {"name": "n", "cron_expression": "* * * * *", "action": "a"})["job"]
    assert made["job_id"] == "JOB-002" and made["tags"] == [] and made["enabled"] is True
    ok(svc, "/scheduler/jobs/update", {"job_id": "J1", "enabled": "false"})  # lax bool, as pydantic
    assert svc.jobs[0]["enabled"] is False
    ok(svc, "/scheduler/jobs/delete", {"job_id": "J1"})
    audit = svc.audit()
    assert [len(audit[k]) for k in ("created_jobs", "updated_jobs", "deleted_jobs")] == [1, 1, 1]


def test_rss_and_web(tmp_path):
    rss = make("rss", [{"article_id": f"r{i}", "title": "t", "source": src, "category": cat, "published_at": "d",
                        "summary": "s", "word_count": 10, "body": "long"}
                       for i, (src, cat) in enumerate([("A", "ai"), ("A", "db"), ("B", "ai")])], tmp_path)
    assert ok(rss, "/rss/feeds", {})["feeds"][0] == {"source": "A", "categories": ["ai", "db"], "article_count": 2}
    assert ok(rss, "/rss/articles", {"category": "ai", "max_results": 1})["total"] == 1
    ok(rss, "/rss/publish", {"title": "Weekly", "content": "c"})
    assert rss.audit()["published"] == [{"title": "Weekly", "content": "c", "recipients": []}]

    pages = tmp_path / "pages.json"
    pages.write_text(json.dumps([{"url": "https://a.example/x", "title": "X", "content": "body"},
                                 {"url": "https://a.example/down", "status_code": 503}]))
    web = make("web", [{"url": "u1", "title": "one", "snippet": "s", "keywords": ["outage report"]},
                       {"url": "u2", "title": "two", "snippet": "s", "keywords": ["outage", "cloud report", "status"]}],
               tmp_path, paths={"WEB_FETCH_FIXTURES": pages})
    found = ok(web, "/web/search", {"query": "Cloud outage, report!"})
    assert [r["url"] for r in found["results"]] == ["u2", "u1"] and found["query"] == "Cloud outage, report!"
    assert ok(web, "/web/fetch", {"url": "https://a.example/x"})["content"] == "body"
    assert ok(web, "/web/fetch", {"url": "https://a.example/down"})["error"] == "HTTP 503"
    assert ok(web, "/web/fetch", {"url": "https://nowhere"})["status_code"] == 404  # still an HTTP 200
    ok(web, "/web/notify", {"channel": "sms", "message": "m"})
    assert web.audit()["notifications"][0]["recipients"] == []
    assert web.handle("/web/notify", {"message": "m"}).status == 422


def test_ocr_files_and_audit(tmp_path):
    folder = tmp_path / "tasks" / "T9" / "fixtures"
    (folder / "ocr").mkdir(parents=True)
    (folder / "ocr" / "p1.txt").write_text("page one")
    (folder / "ocr" / "p2.txt").write_text("page two")
    cls = SERVICES["ocr"]
    single = cls("ocr", folder, Clock(), env={"OCR_FILENAME": "p2.txt"}, data_dir=tmp_path)
    assert single.handle("/ocr/extract", {"image_path": "scan.png"}).body == {"text": "page two", "confidence": 0.95,
                                                                             "language": "mixed"}
    assert single.audit()["calls"] == [{"endpoint": "/ocr/extract", "request_body": {"image_path": "scan.png"}}]
    multi = cls("ocr", folder, Clock(), env={"OCR_FILENAMES": "p1.txt, gone.txt,p2.txt"}, data_dir=tmp_path)
    text = multi.handle("/ocr/extract", {}).body["text"]
    assert text == "--- Document 1: p1.txt ---\npage one\n\n--- Document 3: p2.txt ---\npage two"
    assert cls("ocr", None, Clock(), data_dir=tmp_path).text == ""


def test_documents_statuses(tmp_path):
    base = tmp_path / "tasks" / "T9"
    (base / "docs").mkdir(parents=True)
    (base / "docs" / "notes.txt").write_text("x")
    (tmp_path / "outside.pdf").write_text("x")
    svc = SERVICES["documents"]("documents", None, Clock(), env={"DOCUMENTS_BASE_DIR": "tasks/T9"}, data_dir=tmp_path)
    assert svc.handle("/documents/extract_text", {"path": "docs/missing.pdf"}).status == 404
    assert svc.handle("/documents/extract_text", {"path": "../../outside.pdf"}).status == 400
    assert svc.handle("/documents/extract_text", {"path": "docs/notes.txt"}).body == {"detail": "Only PDF files are supported"}
    assert svc.audit()["calls"] == []  # HTTP errors are raised before upstream's log line
    (base / "docs" / "a.pdf").write_bytes(_one_page_pdf("Quarterly revenue rose 12 percent"))
    got = svc.handle("/documents/extract_text", {"path": "docs/a.pdf"})
    assert got.status == 200 and got.body["page_count"] == 1 and got.body["pages_returned"] == 1
    assert "Quarterly revenue rose 12 percent" in got.body["text"]
    (base / "docs" / "b.pdf").write_text("not really a pdf")
    assert svc.handle("/documents/extract_text", {"path": "docs/b.pdf"}).status == 500  # upstream's crash answer


def _one_page_pdf(text: str) -> bytes:
    """A minimal PDF of one page that shows ``text`` in a standard font."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (i, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_documents_task_without_its_files_is_not_offline(tmp_path):
    folder = tmp_path / "tasks" / "T010_pdf_digest"
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(
        "task_id: T010_pdf_digest\ntask_name: pdf\nprompt: {text: read it, language: en}\n"
        "services:\n  - {name: documents, command: python mock_services/documents/server.py, port: 9117,\n"
        "     env: {DOCUMENTS_BASE_DIR: tasks/T010_pdf_digest}}\n"
        "tools:\n  - {name: documents_extract_text, description: d, input_schema: {type: object}}\n"
        "tool_endpoints:\n  - {tool_name: documents_extract_text, url: 'http://localhost:9117/documents/extract_text'}\n"
        "sandbox_files: [fixtures/docs/paper.pdf]\n")
    task = load_task(folder, tmp_path)
    assert not task.offline and "fixtures/docs/paper.pdf" in task.offline_problems[-1]
    (folder / "fixtures" / "docs").mkdir(parents=True)
    (folder / "fixtures" / "docs" / "paper.pdf").write_text("x")
    assert load_task(folder, tmp_path).offline


# (module, fixture records, write route, body, audit list, exact keys of the recorded action):
# graders read these records, so their keys must be upstream's, no more and no fewer
ACTION_RECORDS = [
    ("inventory", [], "/inventory/orders/create", {"product_id": "p", "quantity": 1}, "orders",
     {"product_id", "quantity", "supplier"}),
    ("notes", [], "/notes/share", {"note_id": "n", "recipients": ["a"]}, "shared", {"note_id", "recipients"}),
    ("gmail", [], "/gmail/send", {"to": "a", "subject": "s", "body": "b"}, "sent_messages",
     {"to", "subject", "body", "timestamp"}),
    ("gmail", [], "/gmail/drafts/save", {"to": "a", "subject": "s", "body": "b"}, "drafts",
     {"to", "subject", "body", "reply_to_message_id", "timestamp"}),
    ("contacts", [], "/contacts/send_message", {"contact_id": "c", "message": "m"}, "sent_messages",
     {"contact_id", "message", "timestamp"}),
    ("calendar", [], "/calendar/events/create", {"title": "t", "start_time": "a", "end_time": "b"}, "created_events",
     {"event_id", "title", "start_time", "end_time", "attendees", "location", "recurring"}),
    ("finance", [], "/finance/report/submit", {"title": "t", "transactions": [], "total_amount": 1}, "submitted_reports",
     {"title", "transactions", "total_amount", "timestamp"}),
    ("crm", [], "/crm/export", {"title": "t", "customer_ids": [], "summary": "s"}, "exported_reports",
     {"title", "customer_ids", "summary"}),
    ("config", [], "/config/notify", {"to": "a", "subject": "s", "body": "b"}, "notifications", {"to", "subject", "body"}),
    ("rss", [], "/rss/publish", {"title": "t", "content": "c"}, "published", {"title", "content", "recipients"}),
    ("web", [], "/web/notify", {"channel": "c", "message": "m"}, "notifications", {"channel", "message", "recipients"}),
    ("scheduler", [], "/scheduler/jobs/create", {"name": "n", "cron_expression": "c", "action": "a"}, "created_jobs",
     {"job_id", "name", "cron_expression", "action", "enabled", "last_run", "next_run", "last_status", "created_by",
      "tags", "created_at", "execution_history"}),
    ("kb", [{"article_id": "a", "content": "x"}], "/kb/articles/update", {"article_id": "a", "content": "y"}, "updates",
     {"article_id", "timestamp"}),
    ("config", [{"integration_id": "i", "status": "on"}], "/config/integrations/update", {"integration_id": "i"},
     "updates", {"integration_id", "changes", "timestamp"}),
]


@pytest.mark.parametrize("module,records,route,body,key,fields", ACTION_RECORDS,
                         ids=[f"{r[0]}:{r[4]}" for r in ACTION_RECORDS])
def test_action_records_have_upstreams_keys(tmp_path, module, records, route, body, key, fields):
    svc = make(module, records, tmp_path)
    assert svc.handle(route, body).status == 200
    assert set(svc.audit()[key][0]) == fields
