"""The experiment script's reporting half on hand-made run directories: the held-out
numbers and their intervals come from the recorded rollouts, the curves from metrics.jsonl."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import navigation_experiment as ne  # noqa: E402


def _run(root: Path, arm: str, rewards: dict[str, list[float]], train_rows: list[dict]) -> None:
    run = root / arm
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps({"kind": "train", **r}) + "\n" for r in train_rows))
    label = f"{arm}-sampled"
    lines = [json.dumps({"task_id": t, "reward": r}) for t, rs in rewards.items() for r in rs]
    (run / f"eval-{label}.jsonl").write_text("\n".join(lines) + "\n")
    (run / "evaluations.json").write_text(json.dumps({label: {"p@1": 0.0, "avg_p@k": 0.1, "avg_p^k": 0.05,
                                                              "num_tasks": len(rewards), "table": "x"}}))


def test_report_reads_every_arm_and_bounds_pass_at_1(tmp_path):
    _run(tmp_path / "runs", "grpo", {"a": [1, 0, 0, 0], "b": [0, 0, 0, 0]},
         [{"step": 1, "success_rate": 0.1}, {"step": 2, "success_rate": 0.2}])
    _run(tmp_path / "runs", "rti-rules", {"a": [1, 1, 0, 0], "b": [1, 0, 0, 0]},
         [{"step": 1, "success_rate": 0.3, "rti/accepted": 2, "rti/ppl_fixes_now": 2.5}])
    out = tmp_path / "out"
    ne.main(["--report-only", "--runs", str(tmp_path / "runs"), "--out", str(out)])
    res = json.loads((out / "results.json").read_text())
    assert list(res) == ["grpo", "rti-rules"]  # ARMS order, only the arms that ran
    grpo = res["grpo"]["heldout"]["grpo-sampled"]
    assert grpo["p@1"] == pytest.approx((0.25 + 0.0) / 2)  # from the rollouts, not the stored summary
    lo, hi = grpo["p@1_ci95"]
    assert 0.0 <= lo <= grpo["p@1"] <= hi <= 0.25
    assert res["rti-rules"]["heldout"]["rti-rules-sampled"]["p@1"] == pytest.approx((0.5 + 0.25) / 2)
    assert [r["step"] for r in res["grpo"]["train"]] == [1, 2]
    table = (out / "heldout.md").read_text()
    assert "| rti-rules | sampled | 37.5 [" in table
    assert (out / "curves.png").stat().st_size > 0


def test_unknown_arm_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="unknown"):
        ne.main(["--arms", "grpo,ppo", "--runs", str(tmp_path), "--out", str(tmp_path)])


def test_a_kept_arm_is_reported_and_never_run_again(tmp_path, monkeypatch):
    # an arm's run directory, kept under --out the way a finished arm is, then the run
    # directory gone (a fresh machine): the report still reads it, and a new call does
    # not build the arm again
    _run(tmp_path / "runs", "grpo", {"a": [1, 0, 0, 0]}, [{"step": 1, "success_rate": 0.25}])
    run = tmp_path / "runs" / "grpo"
    (run / "config.json").write_text("{}")
    (run / "policy" / "adapter").mkdir(parents=True)
    (run / "policy" / "adapter" / "adapter_config.json").write_text("{}")
    out = tmp_path / "out"
    ne.keep(run, out / ne.KEPT / "grpo")
    assert sorted(p.name for p in (out / ne.KEPT / "grpo").iterdir()) == [
        "adapter", "config.json", "eval-grpo-sampled.jsonl", "evaluations.json", "metrics.jsonl"]
    import shutil
    shutil.rmtree(tmp_path / "runs")
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    monkeypatch.setattr(ne, "build_resumable", lambda *a: pytest.fail("a kept arm was built again"))
    ne.main(["--arms", "grpo", "--policy", str(policy), "--runs", str(tmp_path / "runs"), "--out", str(out)])
    res = json.loads((out / "results.json").read_text())
    assert res["grpo"]["heldout"]["grpo-sampled"]["p@1"] == pytest.approx(0.25)
    assert res["grpo"]["train"] == [{"kind": "train", "step": 1, "success_rate": 0.25}]


def test_a_missing_start_policy_says_how_to_make_it(tmp_path):
    with pytest.raises(SystemExit, match="warm_start.sh"):
        ne.main(["--policy", str(tmp_path / "nope"), "--runs", str(tmp_path), "--out", str(tmp_path)])
