"""The Lookup experiment's report: pooled p@1 over tasks with Wilson intervals, the tables
and the picture, from kept pieces (made up here, a few tasks each)."""

import json
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))

import lookup_report  # noqa: E402

from rti_actors.metrics import wilson  # noqa: E402


def summary(successes: dict) -> dict:
    n = len(next(iter(successes.values())))
    p1 = sum(sum(v) / n for v in successes.values()) / len(successes)
    return {"p@1": p1, "pass@8": sum(any(v) for v in successes.values()) / len(successes), "n": n,
            "num_tasks": len(successes), "successes": successes}


def write(folder, rows, metrics=()):
    folder.mkdir(parents=True)
    (folder / "lookup.json").write_text(json.dumps(rows))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))


def test_pooled_p1_averages_each_task_over_its_rollouts_then_over_tasks():
    a = {"successes": {"t1": [True, False], "t2": [False, False]}}
    b = {"successes": {"t1": [True, True], "t3": [True, False]}}
    got = lookup_report.pooled({"1": [a], "2": [b]}, ["1", "2"])
    # t1: 3 of 4, t2: 0 of 2, t3: 1 of 2 -> mean (0.75 + 0 + 0.5) / 3
    assert got["p@1"] == pytest.approx(1.25 / 3) and got["num_tasks"] == 3 and got["rollouts"] == 8
    assert got["ci95"] == pytest.approx(wilson(1.25 / 3, 3))
    assert lookup_report.pooled({"1": [a]}, ["4"]) == {}


def test_report_writes_tables_results_and_picture(tmp_path):
    arms = tmp_path / "arms"
    write(arms / "calibration", {"sft": {"1": summary({"a": [True] * 4 + [False] * 4, "b": [False] * 8}),
                                         "2": summary({"c": [False] * 8, "d": [False] * 8})}})
    write(arms / "start", {"start": {"1": summary({"a": [True, False], "b": [False, False]}),
                                     "2": summary({"c": [False, False], "d": [False, False]})}})
    for seed, rate in ((0, 0.5), (1, 0.75)):
        curve = [{"kind": "train", "iteration": i, "success_rate": rate * i / 3} for i in (1, 2, 3)]
        write(arms / f"grpo-easy-s{seed}", {"grpo": {"1": summary({"a": [True, True], "b": [True, False]}),
                                                     "2": summary({"c": [False, True], "d": [False, False]})}}, curve)
    results = lookup_report.report(tmp_path, {"grpo-easy": [], "grpo-hard": []}, (0, 1, 2),
                                   {"easy": ["1", "2"], "all-fail": ["2", "3"]})
    calibration = (tmp_path / "calibration.md").read_text()
    assert "| 1 | 2 | " in calibration and "| 50 % | 50 % |" in calibration  # b all-fail, a mixed
    held = (tmp_path / "heldout.md").read_text()
    assert "| start | - | 25.0 [" in held and "| **grpo-easy** | all 2 |" in held and "grpo-hard" not in held
    pooled = results["arms"]["grpo-easy"]["pooled"]["1"]
    assert pooled["p@1"] == pytest.approx(0.75) and pooled["rollouts"] == 8  # 2 seeds x 2 tasks x 2
    assert results["arms"]["grpo-easy"]["seeds"][1]["success_rate"] == pytest.approx([0.25, 0.5, 0.75])
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_funnel_lists_each_rti_iteration_and_skips_arms_without_interventions():
    results = {"arms": {"grpo-hard": {"seeds": {0: {"rti": []}}},
                        "rti-rules-hard": {"seeds": {0: {"rti": [
                            {"rti/triggered_groups": 8, "rti/validator_found_error": 32, "rti/accepted": 16,
                             "rti/continued": 16, "rti/continuation_success": 6, "rti/frac_learnable_before": 0.0,
                             "rti/frac_learnable_after": 0.625, "rti/mean_ppl_accepted": 1.17}]}}}}}
    text = lookup_report.funnel(results)
    assert "rti-rules-hard, seed 0" in text and "grpo-hard" not in text
    assert "| 1 | 8 | 32 | 16 | 16 | 6 | 0.00 | 0.62 | 1.17 |" in text
    assert lookup_report.funnel({"arms": {}}) == ""
