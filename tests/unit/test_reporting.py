"""The console line and the run directory's metrics after a resume."""

import json

from rti_actors.algorithms import get_algorithm
from rti_actors.reporting import Reporter, progress_line
from rti_actors.rti.plugin import rti_funnel


def _metrics(**extra):
    return {"iteration": 3, "reward_mean": 0.25, "success_rate": 0.0, "frac_all_fail_groups": 1.0, "turns_mean": 2.0,
            "seconds": {"sample": 2.0, "learn": 1.0}, "learner": {"loss": 0.5}, "num_groups": 2, "algorithm": "rti",
            **extra}


def test_the_rti_funnel_names_the_stage_where_candidates_were_lost():
    m = _metrics(**{"rti/triggered_groups": 2, "rti/candidates": 8, "rti/validator_found_error": 3,
                    "rti/corrector_parsed": 2, "rti/verifier_pass": 0})
    assert rti_funnel(m) == ("triggered 2/2: candidates 8 > error found 3 > fix parsed 2 > verified 0 > "
                             "gate passed 0 > accepted 0 > rescued 0 (lost at verified)")
    rescued = {f"rti/{k}": 1 for k in ("candidates", "validator_found_error", "corrector_parsed", "verifier_pass",
                                       "gate_pass", "accepted", "continuation_success")}
    assert "lost at" not in rti_funnel(_metrics(**{"rti/triggered_groups": 1, **rescued}))
    assert "rti: triggered 1/2" in progress_line(_metrics(**{"rti/triggered_groups": 1}))
    assert "rti:" not in progress_line(_metrics(algorithm="grpo", **{"rti/triggered_groups": 1}))  # not RTI's line


def test_the_progress_line_reports_recoveries_only_when_there_were_some():
    assert "faults" not in progress_line(_metrics(**{"faults/restarts/engine": 0, "faults/redone/queue_puts": 0}))
    line = progress_line(_metrics(**{"faults/restarts/engine": 1, "faults/redone/learner_steps_lost": 2}))
    assert line.endswith("faults (run so far): restarts/engine 1, redone/learner_steps_lost 2")


def test_rewind_keeps_each_iteration_once(tmp_path):
    rep = Reporter(tmp_path, tensorboard=False)
    rep.log("eval", 0, {"pass_at_1": 0.0})
    for step in range(1, 40, 13):
        rep.log("sft", step, {"loss": 1.0})
    for it in (1, 2, 3):  # a killed run logged iteration 3 after its last checkpoint (2)
        rep.log("train", it, {"reward_mean": it})
    again = Reporter(tmp_path, tensorboard=False)
    again.rewind(2)
    again.log("train", 3, {"reward_mean": 30})
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in rows] == [("eval", 0), ("sft", 1), ("sft", 14), ("sft", 27),
                                                      ("train", 1), ("train", 2), ("train", 3)]
    assert rows[-1]["reward_mean"] == 30 and [r["step"] for r in again.history if r["kind"] == "train"] == [1, 2, 3]


def test_an_rti_run_gets_rti_panels_and_a_grpo_run_does_not(tmp_path):
    grpo = Reporter(tmp_path / "grpo", tensorboard=False, panels=get_algorithm("grpo").panels)
    rti = Reporter(tmp_path / "rti", tensorboard=False, panels=get_algorithm("rti").panels)
    for it in (1, 2):
        # the panels are the method's, not whatever metrics happen to be there
        grpo.log("train", it, _metrics(pass_at_G=0.5, **{"rti/accepted": it}))
        rti.log("train", it, _metrics(pass_at_G=0.5, pre_intervention_pass_at_G=0.0,
                                      **{"rti/accepted": it, "rti/continuation_success": 1,
                                         "rti/mean_ppl_accepted": float("nan") if it == 1 else 2.5}))
    assert grpo.panels() == [["reward_mean"], ["success_rate"], ["learner/loss"], ["pass_at_G"]]
    assert rti.panels()[-3:] == [["pre_intervention_pass_at_G", "pass_at_G"],
                                 ["rti/accepted", "rti/continuation_success"], ["rti/mean_ppl_accepted"]]
    assert rti.plot().is_file() and grpo.plot().is_file()


def test_rewind_into_a_warm_start_drops_its_later_steps_and_the_line_says_it_resumed(tmp_path):
    from rti_actors.reporting import sft_line
    rep = Reporter(tmp_path, tensorboard=False)
    for step in (1, 2, 3):
        rep.log("sft", step, {"loss": 1.0})
    again = Reporter(tmp_path, tensorboard=False)
    again.rewind(0, learner_step=2)  # the checkpoint holds the warm start's step 2
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in rows] == [("sft", 1), ("sft", 2)]
    done = {"num_demonstrations": 8, "skipped_too_long": 0, "steps": 0, "resumed_at_step": 4, "seconds": 0.0}
    assert sft_line(done).endswith("nothing left to train (resumed after step 4)")


def test_an_aepo_run_shows_its_branching_on_the_line_and_in_panels(tmp_path):
    counts = {"aepo/global_rollouts": 2.5, "aepo/branches": 3, "aepo/branch_rate": 0.375, "aepo/decisions": 8,
              "aepo/branch_rounds": 2}
    line = progress_line(_metrics(algorithm="aepo", **counts))
    assert line.endswith("aepo: 2.5 global + 3 branches (0.38 of 8 decisions) in 2 rounds")
    assert "aepo:" not in progress_line(_metrics(algorithm="aepo"))
    rep = Reporter(tmp_path, tensorboard=False, panels=get_algorithm("aepo").panels)
    for it in (1, 2):
        rep.log("train", it, _metrics(algorithm="aepo", **counts, learner={"loss": 0.5, "entropy_mean": 1.5}))
    assert rep.panels()[-3:] == [["aepo/global_rollouts", "aepo/branches"], ["aepo/branch_rate"],
                                 ["learner/entropy_mean"]]
