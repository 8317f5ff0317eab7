"""Parsing Claw-Eval task folders (the synthetic ones in tests/data/claw_eval) into records."""

import shutil
from pathlib import Path

import pytest

from envs.claw_eval import ClawEvalTaskError, load_task, load_tasks

SYNTHETIC = Path(__file__).resolve().parents[1] / "data" / "claw_eval"


@pytest.fixture(scope="module")
def tasks():
    return {t.task_id: t for t in load_tasks(SYNTHETIC)}


def test_loads_every_t_task_sorted(tasks):
    assert list(tasks) == ["T001zh_parcel_desk", "T002_parcel_desk", "T003_stock_recount", "T004_live_price_check",
                           "T005_mail_digest", "T006_ops_handover"]


def test_record_fields(tasks):
    t = tasks["T003_stock_recount"]
    assert (t.series, t.family, t.language, t.difficulty) == ("T", "stock_recount", "en", "hard")
    assert (t.max_turns, t.timeout_s) == (12, 600)
    assert t.tags == ("general", "multi_service")
    assert "recount note" in t.prompt
    assert [x.name for x in t.tools] == ["inventory_list_products", "notes_get", "notes_list"]
    assert t.tools[1].parameters["required"] == ["note_id"]
    assert t.tools[0].schema()["function"]["name"] == "inventory_list_products"
    assert [(s.name, s.module, s.port) for s in t.services] == [("inventory", "inventory", 9108), ("notes", "notes", 9109)]
    assert t.services[0].fixtures == {"INVENTORY_FIXTURES": "tasks/T003_stock_recount/fixtures/inventory/products.json"}
    assert t.services[0].env == t.services[0].fixtures and t.services[0].defaulted == ()
    ep = t.endpoint("notes_get")
    assert (ep.service, ep.path, ep.method) == ("notes", "/notes/get", "POST")
    assert t.endpoint("nope") is None


def test_twins_share_a_family_and_languages_differ(tasks):
    zh, en = tasks["T001zh_parcel_desk"], tasks["T002_parcel_desk"]
    assert zh.family == en.family == "parcel_desk"
    assert (zh.language, en.language) == ("zh", "en")


def test_needs_judge_follows_the_peer_grader(tasks):
    assert tasks["T001zh_parcel_desk"].needs_judge
    assert tasks["T002_parcel_desk"].needs_judge and tasks["T002_parcel_desk"].peer_task == "T001zh_parcel_desk"
    assert not tasks["T003_stock_recount"].needs_judge
    assert tasks["T004_live_price_check"].needs_judge


def test_offline_flag_and_reasons(tasks):
    assert all(tasks[i].offline for i in ("T001zh_parcel_desk", "T002_parcel_desk", "T003_stock_recount"))
    live = tasks["T004_live_price_check"]
    assert not live.offline and "web_real" in live.offline_problems[0]


def test_missing_fixture_or_unrouted_tool_is_not_offline(tmp_path):
    shutil.copytree(SYNTHETIC, tmp_path / "copy")
    folder = tmp_path / "copy" / "tasks" / "T003_stock_recount"
    (folder / "fixtures" / "notes" / "notes.json").unlink()
    text = (folder / "task.yaml").read_text()
    (folder / "task.yaml").write_text(text.replace("  - tool_name: notes_list\n", "  - tool_name: notes_listing\n"))
    t = load_task(folder, tmp_path / "copy")
    assert not t.offline
    assert any("missing fixtures" in p and "notes.json" in p for p in t.offline_problems)
    assert any("notes_list" in p for p in t.offline_problems if p.startswith("tools without"))


def test_defaults_follow_upstream(tmp_path):
    folder = tmp_path / "tasks" / "T009_bare"
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text("task_id: T009_bare\ntask_name: bare\nprompt:\n  text: hi\n")
    t = load_task(folder)
    assert (t.language, t.difficulty, t.max_turns, t.timeout_s) == ("zh", "simple", 20, 300)
    assert not t.needs_judge and t.offline_problems == ("no tools",)


@pytest.mark.parametrize("text", ["- not a mapping\n", "task_id: X\n", "task_id: X\nprompt: {text: hi}\ntools: [{description: no name}]\n",
                                  "task_id: X\nprompt: [unclosed\n"])
def test_malformed_task_raises_with_path(tmp_path, text):
    folder = tmp_path / "tasks" / "T001_bad"
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(text)
    with pytest.raises(ClawEvalTaskError, match="task.yaml"):
        load_task(folder)


def test_other_series_are_skipped(tmp_path):
    shutil.copytree(SYNTHETIC, tmp_path / "copy")
    shutil.copytree(tmp_path / "copy" / "tasks" / "T003_stock_recount", tmp_path / "copy" / "tasks" / "M001_media")
    ids = [t.task_id for t in load_tasks(tmp_path / "copy")]
    assert len(ids) == 6 and all(i.startswith("T") for i in ids)
    assert [t.folder.name for t in load_tasks(tmp_path / "copy", series="M")] == ["M001_media"]
