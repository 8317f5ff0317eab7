"""ClawEval-v0 through the actor graph: one RTI iteration on the synthetic tasks (the user's
copy stands in as tests/data/claw_eval), graded by each task's own grader on the runners."""

import math
from pathlib import Path

import pytest

from rti_actors import RTIConfig
from rti_actors.trajectory import EpisodeSpec

pytestmark = pytest.mark.integration

SYNTHETIC = Path(__file__).resolve().parents[1] / "data" / "claw_eval"
JUDGE_FREE = ["T003_stock_recount", "T005_mail_digest"]  # graded without a judge


def test_one_rti_iteration_on_claw_eval(ray_cluster, tiny_model_path, tmp_path):
    algo = (RTIConfig()
            .environment("ClawEval-v0", env_config={"data_dir": str(SYNTHETIC), "tasks": JUDGE_FREE, "max_turns": 2,
                                                    "timeout_s": 0})
            .policy(model=tiny_model_path, engine="hf", max_new_tokens=8, max_model_len=4096)
            .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
            .training(algorithm="rti", group_size=2, tasks_per_iteration=1, lr=1e-4)
            .interventions(roles="self", ppl_threshold=math.inf, verifier_llm=False, max_role_tokens=16,
                           max_validator_steps=1)
            .reporting(run_dir=str(tmp_path), run_name="claw", tensorboard=False, plot=False)
            .build())
    try:
        assert sorted(algo.train_ids) == JUDGE_FREE
        traj = algo.rollouts.play([EpisodeSpec(JUDGE_FREE[0])])[0]
        m = algo.train()
    finally:
        algo.stop()
    # the task's own grader scored the episode on the runner, with upstream's breakdown
    assert not traj.infra_error and traj.reward == 0.0
    b = traj.info["reward_breakdown"]
    assert {"completion", "robustness", "safety", "score", "passed"} <= set(b) and b["passed"] is False
    assert traj.info["judge"] == "none"
    # a random policy fails both rollouts: the group is all-fail, so RTI took it up
    assert m["num_episodes"] == 2 and m["rti/triggered_groups"] == 1
