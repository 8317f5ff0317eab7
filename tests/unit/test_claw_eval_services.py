"""In-process mock services: isolation, server-side validation, statuses, audit, faults, clock."""

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from envs.claw_eval import load_task
from envs.claw_eval.mock import Clock, MockService, ServiceHost, route
from envs.claw_eval.services import SERVICES

SYNTHETIC = Path(__file__).resolve().parents[1] / "data" / "claw_eval"
TASK = load_task(SYNTHETIC / "tasks" / "T003_stock_recount", SYNTHETIC)


def host(**kw) -> ServiceHost:
    return ServiceHost(TASK, SYNTHETIC, SERVICES, **kw)


def test_calls_answer_from_fixtures():
    h = host()
    d = h.call("inventory_list_products", {})
    assert (d.status, d.service, d.path) == (200, "inventory", "/inventory/products")
    assert [p["product_id"] for p in d.body["products"]] == ["SKU-A", "SKU-B"] and d.body["total"] == 2
    assert h.call("inventory_list_products", {"category": "garden"}).body == {"products": [], "total": 0}
    note = h.call("notes_get", {"note_id": "N-1"})
    assert note.status == 200 and "Red kettle: 3" in note.body["content"]
    listed = h.call("notes_list", {}).body["notes"][0]
    assert "content" not in listed and listed["duration_minutes"] == 30
    # a missing record is a 200 with an error key, as upstream
    missing = h.call("notes_get", {"note_id": "N-9"})
    assert missing.status == 200 and "not found" in missing.body["error"]


def test_two_hosts_do_not_share_state():
    a, b = host(), host()
    a.services["inventory"].handle("/inventory/orders/create", {"product_id": "SKU-B", "quantity": 4})
    a.services["inventory"].products[0]["stock"] = 0
    assert a.audit_data()["inventory"]["orders"] and not b.audit_data()["inventory"]["orders"]
    assert b.call("inventory_list_products", {}).body["products"][0]["stock"] == 12
    fixture = json.loads((SYNTHETIC / "tasks/T003_stock_recount/fixtures/inventory/products.json").read_text())
    assert fixture[0]["stock"] == 12  # the file itself is never written


def test_server_side_validation_statuses():
    h = host()
    missing = h.call("notes_get", {})
    assert missing.status == 422 and missing.body["detail"][0]["loc"] == ["body", "note_id"]
    bad_type = h.call("notes_list", {"max_results": "many"})
    assert bad_type.status == 422
    assert h.call("notes_list", {"max_results": "1"}).status == 200       # lax coercion, as pydantic
    assert h.call("notes_get", {"note_id": "N-1", "extra": 1}).status == 200  # unknown fields ignored
    assert h.call("notes_get", ["N-1"]).status == 422
    unknown = h.call("inventory_delete_everything", {"x": 1})
    assert (unknown.status, unknown.service) == (404, "")
    assert [d.status for d in h.dispatches] == [422, 422, 200, 200, 422, 404]
    # rejected calls never reach the audit log, as upstream (FastAPI rejects before the handler)
    assert [c["endpoint"] for c in h.audit_data()["notes"]["calls"]] == ["/notes/list", "/notes/get"]


def test_unknown_route_and_handler_crash():
    h = host()
    assert h.services["notes"].handle("/notes/nowhere", {}).status == 404
    h.services["notes"].notes.append({"note_id": "N-2"})  # lacks the summary keys
    crash = h.call("notes_list", {})
    assert crash.status == 500 and crash.body == {"detail": "Internal Server Error"}


def test_audit_shape_and_frozen_clock():
    h = host()
    h.call("inventory_list_products", {})
    h.call("inventory_list_products", {})
    order = h.services["inventory"].handle("/inventory/orders/create", {"product_id": "SKU-B", "quantity": "2"})
    audit = h.audit_data()
    assert set(audit) == {"inventory", "notes"} and set(audit["notes"]) == {"calls", "shared"}
    calls = audit["inventory"]["calls"]
    assert calls[0]["request_body"] == {"category": None}  # defaults filled in, as model_dump does
    assert [c["timestamp"] for c in calls[:2]] == ["2026-03-02T09:00:00+00:00", "2026-03-02T09:00:01+00:00"]
    assert order.body["order"]["quantity"] == 2 and audit["inventory"]["orders"][0]["supplier"] is None
    audit["inventory"]["orders"].clear()
    assert h.audit_data()["inventory"]["orders"]  # audit() hands out copies


def test_wall_clock_mode():
    before = datetime.now(timezone.utc)
    h = host(clock=Clock("wall"))
    h.call("inventory_list_products", {})
    stamp = datetime.fromisoformat(h.audit_data()["inventory"]["calls"][0]["timestamp"])
    assert stamp >= before
    with pytest.raises(ValueError, match="clock mode"):
        Clock("shifted")


def _statuses(seed: int, n: int = 60, rate: float = 0.3) -> list[tuple[int, str | None]]:
    h = host(fault_rate=rate, fault_seed=seed)
    return [(d.status, d.fault) for d in (h.call("inventory_list_products", {}) for _ in range(n))]


def test_faults_reproducible_from_seed():
    first = _statuses(7)
    assert first == _statuses(7)
    assert first != _statuses(8)
    kinds = {f for _, f in first if f}
    assert kinds <= {"rate_limit", "server_error", "slow"} and len(kinds) >= 2
    for status, fault in first:
        assert status == {"rate_limit": 429, "server_error": 500}.get(fault, 200)
    assert all(f is None for _, f in _statuses(7, rate=0.0))
    with pytest.raises(ValueError, match="fault_rate"):
        host(fault_rate=1.0)


def test_faults_depend_on_call_index_not_history():
    # The n-th call meets the same fault whatever the earlier calls were.
    a, b = host(fault_rate=0.5, fault_seed=3), host(fault_rate=0.5, fault_seed=3)
    for _ in range(10):
        a.call("inventory_list_products", {})
        b.call("notes_get", {})
    assert [d.fault for d in a.dispatches] == [d.fault for d in b.dispatches]


def test_missing_implementation_is_a_clear_error():
    class Lonely(MockService):
        module, fixture_var = "inventory", "INVENTORY_FIXTURES"

        def load(self, data):
            self.rows = data

        @route("/inventory/products")
        def rows_(self, body):
            return {"rows": self.rows}

    with pytest.raises(ValueError, match="'notes'"):
        ServiceHost(TASK, SYNTHETIC, {"inventory": Lonely})
    h = ServiceHost(TASK, SYNTHETIC, {"inventory": Lonely, "notes": SERVICES["notes"]})
    assert h.call("inventory_list_products", {"anything": 1}).body["rows"][0]["product_id"] == "SKU-A"


def _defaulting_copy(root: Path, with_default: bool = True) -> Path:
    """A task whose inventory service has no fixture path in task.yaml (so upstream's
    built-in default file applies) but whose own folder holds a translated file."""
    folder = root / "tasks" / "T020_stock_en"
    (folder / "fixtures" / "inventory").mkdir(parents=True)
    (folder / "fixtures" / "inventory" / "products.json").write_text(
        json.dumps([{"product_id": "P1", "name": "Kettle", "category": "kitchen"}]))
    text = (SYNTHETIC / "tasks" / "T003_stock_recount" / "task.yaml").read_text()
    text = text.replace("T003_stock_recount", "T020_stock_en").replace(
        "    env:\n      INVENTORY_FIXTURES: tasks/T020_stock_en/fixtures/inventory/products.json\n", "")
    (folder / "task.yaml").write_text(text)
    notes = folder / "fixtures" / "notes"
    notes.mkdir()
    (notes / "notes.json").write_text((SYNTHETIC / "tasks/T003_stock_recount/fixtures/notes/notes.json").read_text())
    if with_default:
        default = root / "tasks" / "T019zh_inventory_check" / "fixtures" / "inventory"
        default.mkdir(parents=True)
        (default / "products.json").write_text(json.dumps([{"product_id": "P1", "name": "水壶", "category": "厨房"}]))
    return folder


def test_default_fixtures_as_upstream_and_opt_in_fix(tmp_path):
    task = load_task(_defaulting_copy(tmp_path), tmp_path)
    inv = next(s for s in task.services if s.module == "inventory")
    assert inv.defaulted == ("INVENTORY_FIXTURES",)
    assert inv.fixtures["INVENTORY_FIXTURES"] == "tasks/T019zh_inventory_check/fixtures/inventory/products.json"
    assert task.offline
    parity = ServiceHost(task, tmp_path, SERVICES).call("inventory_list_products", {})
    fixed = ServiceHost(task, tmp_path, SERVICES, own_fixtures=True).call("inventory_list_products", {})
    assert parity.body["products"][0]["name"] == "水壶"   # upstream serves the twin's file
    assert fixed.body["products"][0]["name"] == "Kettle"  # the fix serves the task's own


def test_missing_default_fixture_is_not_offline(tmp_path):
    task = load_task(_defaulting_copy(tmp_path, with_default=False), tmp_path)
    assert not task.offline and "T019zh_inventory_check" in task.offline_problems[0]
