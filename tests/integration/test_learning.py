"""Does the whole loop make a policy better? GRPO from the committed Lookup start policy
(SmolLM2-135M after its warm start) on tier-1 questions, from a fixed seed, must raise the
success rate of its own rollouts within a few minutes on 2 cores.

Every piece has unit tests of its own; this one fails when the pieces stop composing into
learning: an advantage with the wrong sign, a loss mask off by a token, weights that never
reach the engine all leave it flat or falling (each was checked with a temporary patch).
The bounds come from measured runs, with margin for this machine's noise: the start
policy's tier-1 success is near 0.35 on the training split, and five GRPO updates (lr 2e-4,
LoRA) took it to about 0.65.
"""


import numpy as np
import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.learning]

START_ADAPTER = REPO / "results" / "lookup-cpu" / "start" / "adapter"
ITERATIONS = 6
LAST = 2  # iterations averaged at the end of the curve
AT_MOST, AT_LEAST = 0.5, 0.55  # the start's success rate (the first iteration's), and the trained policy's


@pytest.fixture(scope="module")
def start_policy(tmp_path_factory) -> str:
    from policies.models import load_model
    from rti_actors.lora import merge_adapter

    out = tmp_path_factory.mktemp("lookup-start") / "policy"
    return merge_adapter(load_model("smollm2-135m-instruct"), str(START_ADAPTER), str(out))


def test_grpo_raises_tier1_success_from_the_start_policy(ray_cluster, start_policy, tmp_path):
    from envs import make_env
    from policies.engines import cpu_has_native_bf16
    from rti_actors import RTIConfig

    train_ids = make_env("Lookup-v0", {"tiers": [1]}).unwrapped.task_ids("train")
    algo = (RTIConfig()
            .environment("Lookup-v0", env_config={"tiers": [1]})
            .policy(model=start_policy, engine="vllm", max_new_tokens=96, max_model_len=2048, temperature=1.0)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=16)
            .training(algorithm="grpo", group_size=8, tasks_per_iteration=4, lr=2e-4, task_ids=train_ids)
            .learners(backend="torch", dtype="bfloat16" if cpu_has_native_bf16() else "float32",
                      share_prefix=True, pack_sequences=True, lora={"r": 16})
            .debugging(seed=0)
            .reporting(run_dir=str(tmp_path), plot=False, tensorboard=False)
            .build())
    try:
        curve = [algo.train() for _ in range(ITERATIONS)]
    finally:
        algo.stop()
    success = [m["success_rate"] for m in curve]
    updates = sum(not m["learner"].get("skipped") for m in curve)
    before, after = success[0], np.mean(success[-LAST:])
    print(f"tier-1 success per iteration: {np.round(success, 3).tolist()} ({updates} updates)")
    assert updates >= ITERATIONS - 1, "the start policy's groups are mixed: nearly every iteration must update"
    assert before <= AT_MOST, f"the start policy succeeded {before:.2f} of the time; the committed start moved?"
    assert after >= AT_LEAST, f"GRPO did not learn: success {before:.2f} -> {after:.2f} in {ITERATIONS} iterations"
