"""The grading bridge: the episode in the copy's own types, upstream's score formula,
and the per-task time limit (graded as it stands)."""

import json
from pathlib import Path

import pytest

from envs.claw_eval import ClawEvalEnv, task_score
from envs.claw_eval.grading import PASS_THRESHOLD, upstream, upstream_episode

SYNTHETIC = Path(__file__).resolve().parents[1] / "data" / "claw_eval"
JUDGE_FREE = ["T003_stock_recount", "T005_mail_digest"]  # the synthetic tasks graded without a judge


def call(name: str, **arguments) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def test_score_formula_and_threshold():
    assert task_score(1.0, 1.0, 1.0) == 1.0 and task_score(0.5, 1.0, 1.0) == 0.6
    assert task_score(1.0, 1.0, 0.0) == 0.0 and task_score(0.9, 0.5, 0.5) == 0.41
    assert PASS_THRESHOLD == 0.75 and task_score(0.75, 0.75, 1.0) >= PASS_THRESHOLD > task_score(0.7, 0.75, 1.0)


def test_episode_in_upstream_types():
    env = ClawEvalEnv({"data_dir": str(SYNTHETIC), "split": "all", "tasks": JUDGE_FREE})
    env.reset(options={"task_id": "T003_stock_recount"})
    env.step("Let me look." + call("notes_list") + call("notes_get"))       # 200, then 422
    env.step(call("notes_get", note_id="N-1"))
    env.step("<tool_call>{broken</tool_call>")                                # never dispatched
    env.step("SKU-B: 5 in the system, 3 on the shelf.")
    trace, dispatches = upstream_episode(upstream(SYNTHETIC), env.messages, env.host.dispatches, "t")
    roles = [m.message.role for m in trace]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant", "assistant"]  # no system prompt
    first = trace[1].message.content
    assert first[0].text == "Let me look." and [b.name for b in first[1:]] == ["notes_list", "notes_get"]
    results = trace[2].message.content
    assert [r.tool_use_id for r in results] == [b.id for b in first[1:]] == [d.tool_use_id for d in dispatches[:2]]
    assert [r.is_error for r in results] == [False, True]
    assert json.loads(results[0].content[0].text)["notes"][0]["note_id"] == "N-1"
    assert [(d.tool_name, d.response_status) for d in dispatches] == [("notes_list", 200), ("notes_get", 422),
                                                                      ("notes_get", 200)]
    assert dispatches[2].request_body == {"note_id": "N-1"}
    assert dispatches[2].endpoint_url == "http://localhost:9109/notes/get"
    assert trace[-1].message.text.startswith("SKU-B")


def test_task_time_limit_ends_and_grades_the_episode():
    env = ClawEvalEnv({"data_dir": str(SYNTHETIC), "split": "all", "tasks": JUDGE_FREE, "timeout_s": 1e-9})
    env.reset(options={"task_id": "T003_stock_recount"})
    _, reward, terminated, truncated, info = env.step(call("notes_list"))
    assert truncated and not terminated and info["timed_out"] and "score" in info
    off = ClawEvalEnv({"data_dir": str(SYNTHETIC), "split": "all", "tasks": JUDGE_FREE, "timeout_s": 0,
                       "max_turns": 2})
    off.reset(options={"task_id": "T003_stock_recount"})
    assert off.config["max_turns"] == 2 and not off.step(call("notes_list"))[3]


@pytest.mark.parametrize("clock", ["frozen", "wall"])
def test_both_clock_modes_grade(clock):
    env = ClawEvalEnv({"data_dir": str(SYNTHETIC), "split": "all", "tasks": JUDGE_FREE, "clock": clock})
    env.reset(options={"task_id": "T005_mail_digest"})
    env.step(call("gmail_list_messages"))
    env.step(call("gmail_save_draft", to="billing@example.com", subject="INV-77", body="Re INV-77"))
    assert env.step("Saved.")[1] == 1.0
    with pytest.raises(ValueError, match="clock mode"):
        ClawEvalEnv({"data_dir": str(SYNTHETIC), "clock": "shifted"})
