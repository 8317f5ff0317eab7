"""Pass@k / Pass^k for ClawEval runs through rti_actors.metrics, in the paper's layout,
with grading errors left out (never scored 0) and upstream's (c/n)^k beside them."""

import pytest

from rti_actors.claw_eval_report import ClawTrial, claw_table, summarize_trials
from rti_actors.metrics import pass_hat_k


def trials(task, passes, score=0.8):
    return [ClawTrial(task, score if p else 0.1, p) for p in passes]


def test_summary_matches_the_shared_estimators_and_leaves_out_grading_errors():
    runs = trials("A", [True, True, False]) + trials("B", [False, False, False]) + \
        [ClawTrial("C", 0.9, True), ClawTrial("C", None, False, "grade: boom"), ClawTrial("C", 0.9, True)]
    s = summarize_trials(runs)
    assert s.left_out == ("C",) and s.summary["tasks_left_out_grading"] == 1
    assert s.summary["n"] == 3 and s.summary["num_tasks"] == 2
    assert s.summary["pass^2"] == pytest.approx(pass_hat_k(3, 2, 2) / 2)          # (1/3 + 0) / 2
    assert s.summary["upstream_pass^2"] == pytest.approx((2 / 3) ** 2 / 2)          # upstream's (c/n)^k
    # all 3 of 3 trials: A never (0), while (c/n)^3 still credits it
    assert s.summary["pass^3"] == 0.0 and s.summary["upstream_pass^3"] == pytest.approx((2 / 3) ** 3 / 2)
    assert s.summary["mean_score"] == pytest.approx((0.8 * 2 + 0.1 * 4) / 6)


def test_table_in_the_papers_layout():
    runs = {"policy": trials("A", [True, False]) + trials("B", [True, True]),
            "oracle": trials("A", [True, True]) + trials("B", [True, True])}
    summaries, table = claw_table(runs, benchmark="ClawEval-Hard20")
    lines = table.splitlines()
    assert "ClawEval-Hard20" in lines[0] and "p@1" in lines[1] and "avg p^k" in lines[1]
    assert lines[3].startswith("policy") and "75.00" in lines[3]
    assert lines[4].startswith("oracle") and lines[4].count("100.00") == 3
    assert summaries["oracle"].summary["avg_p^k"] == 1.0


def test_unequal_trials_are_refused():
    with pytest.raises(ValueError, match="same number of rollouts"):
        summarize_trials(trials("A", [True]) + trials("B", [True, False]))
