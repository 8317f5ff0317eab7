"""One GRPO iteration end to end on each adapter of another package's environment: an
OpenEnv environment (in the env runners' processes, and behind an OpenEnv server on
loopback) and a verifiers taskset, on a real local Ray cluster with the tiny model."""

from __future__ import annotations

import contextlib
import time

import pytest
from openenv.core.env_server.http_server import create_fastapi_app

from rti_actors import RTIConfig
from tests.adapter_envs import LoopbackServer, SayAction, SayObservation, VowelEnvironment

pytestmark = pytest.mark.integration

# Each env says "start the reply with a vowel": the flat random policy's replies vary, so
# its groups carry a learning signal, and the reward comes from the environment's rubric.
OPENENV = {"env": "tests.adapter_envs:VowelEnvironment", "text_action": "message", "prompt_field": "prompt",
           "tasks": {"train": 4, "test": 2}}
VERIFIERS = {"taskset": "tests.adapter_envs:VowelTaskset", "splits": {"train": {"limit": 4}, "test": {"skip": 4}}}


@pytest.fixture(scope="module")
def flat_model(tmp_path_factory):
    from policies.models import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("flat"), logit_scale=1.0, seed=1)


@pytest.mark.parametrize("adapter", ["openenv-inproc", "openenv-http", "verifiers"])
def test_one_grpo_iteration_end_to_end(ray_cluster, flat_model, tmp_path, adapter):
    server = (LoopbackServer(create_fastapi_app(VowelEnvironment, SayAction, SayObservation, max_concurrent_envs=16))
              if adapter == "openenv-http" else contextlib.nullcontext())
    with server:
        env_id, env_config = ("Verifiers-v0", VERIFIERS) if adapter == "verifiers" else ("OpenEnv-v0", dict(OPENENV))
        if adapter == "openenv-http":
            env_config["env"] = server.url
        algo = (RTIConfig()
                .environment(env_id, env_config=env_config)
                .policy(model=flat_model, engine="hf", max_new_tokens=4, max_model_len=512, temperature=1.0)
                .env_runners(num_env_runners=2, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.25)
                .training(algorithm="grpo", group_size=4, tasks_per_iteration=2, skip_zero_variance_groups=False)
                .learners(backend="deepspeed", zero_stage=0)
                .evaluation(num_samples=2)
                .reporting(run_dir=str(tmp_path / "runs"), run_name=adapter)
                .build())
        try:
            start = time.perf_counter()
            m = algo.train()
            seconds = time.perf_counter() - start
            ev = algo.evaluate(num_tasks=2)
        finally:
            algo.stop()
    print(f"\n{adapter}: reward_mean={m['reward_mean']:.3f} success_rate={m['success_rate']:.3f} "
          f"episodes={m['num_episodes']} policy_version={m['policy_version']} train_s={seconds:.1f} "
          f"eval p@1={ev['p@1']:.3f}")
    # every episode scored by the environment's rubric (an infrastructure failure would drop one)
    assert m["num_episodes"] == 8 and m["num_groups"] == 2 and m["policy_version"] == 1
    assert 0.0 <= m["reward_mean"] <= 1.0 and m["gen_tokens"] > 0
    assert "loss" in m["learner"] and m["learner"]["num_groups"] == 2
    assert ev["num_tasks"] == 2 and ev.get("tasks_left_out_infra", 0) == 0
