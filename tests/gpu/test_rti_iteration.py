"""RTI end to end on one GPU: the whole actor graph (engine, env runners, replay queue,
DeepSpeed learner, rule-based roles, PPL gate) with the engine and the learner sharing it.

Navigation's rule-based Validator/Corrector (``roles="rules"``) rescue the tiny random
model's failures, so the iteration does not depend on the model's quality. The engine is
CUDA vLLM where it is installed, else the transformers engine on the GPU. The weights are
published through the object store: ``weight_sync="auto"`` would pick an NCCL broadcast for
a learner and an engine on one GPU (see test_weight_sync_nccl.py's probe).
"""

from __future__ import annotations

import math
import os
import time

from tests.gpu.common import GPU
from tests.gpu.report import record

pytestmark = GPU

NAV = {"max_turns": 3, "max_tool_output_chars": 600}
GPU_SHARE = 0.4  # per engine and per learner: both on one GPU


def _config(model: str, engine: str, run_dir: str):
    from rti_actors import RTIConfig

    engine_kwargs = {"gpu_memory_utilization": 0.2, "enforce_eager": True} if engine == "vllm" else {}
    return (RTIConfig()
            .environment("Navigation-v0", env_config=NAV)
            .policy(model=model, engine=engine, dtype="bfloat16", max_new_tokens=32, max_model_len=4096,
                    engine_kwargs=engine_kwargs)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=4, num_gpus_per_engine=GPU_SHARE)
            .learners(num_gpus_per_learner=GPU_SHARE, weight_sync="object_store")
            .training(algorithm="rti", group_size=4, tasks_per_iteration=2, lr=1e-4, skip_zero_variance_groups=False)
            .interventions(roles="rules", verifier_llm=False, ppl_threshold=math.inf)
            .fault_tolerance(start_timeout_s=240.0)
            .reporting(run_dir=run_dir, run_name=f"gpu-rti-{engine}", tensorboard=False, plot=False))


def _numbers(result: dict) -> dict:
    return {k: v for k, v in result.items() if k.startswith("rti/") and isinstance(v, (int, float))}


def test_one_rti_iteration_on_one_gpu(ray_gpu, tiny_model_path, tmp_path):
    from policies.engines import vllm_available

    ray = ray_gpu
    engine = "vllm" if vllm_available() else "hf"
    run_dir = os.environ.get("RTI_GPU_ARTIFACTS") or str(tmp_path)  # the script keeps the actors' logs
    config = _config(tiny_model_path, engine, run_dir)
    config.validate(available_cpus=ray.cluster_resources()["CPU"], available_gpus=1.0)  # fractions of one GPU
    t0 = time.perf_counter()
    algo = config.build()
    build_s = time.perf_counter() - t0
    try:
        gpus = ray.cluster_resources().get("GPU", 0.0)
        in_use = gpus - ray.available_resources().get("GPU", 0.0)
        assert abs(in_use - 2 * GPU_SHARE) < 1e-3, f"{in_use} GPUs held, expected the engine's and the learner's"
        t0 = time.perf_counter()
        first = algo.train()
        iter1_s = time.perf_counter() - t0
        learn = first["learner"]
        assert first["policy_version"] == 1
        assert not learn.get("skipped") and learn["step"] == 1, learn
        assert math.isfinite(learn["loss"]) and math.isfinite(learn["grad_norm"])
        assert learn["num_samples"] >= first["num_episodes"]
        assert ray.get(algo.engines[0].version.remote()) == 1
        assert "rti/triggered_groups" in first  # the RTI funnel ran
        seconds = first["seconds"]
        record(f"rti iteration 1 ({engine})", build_s=build_s, iter_s=iter1_s, weight_sync=algo.updates.weight_sync,
               episodes=first["num_episodes"], reward_mean=first["reward_mean"], loss=learn["loss"],
               learner_tokens_per_s=learn.get("tokens_per_s"), gen_tokens=first["gen_tokens"],
               sample_s=seconds.get("sample"), intervene_s=seconds.get("intervene"), learn_s=seconds.get("learn"),
               publish_s=seconds.get("publish"))
        record(f"rti funnel ({engine})", **_numbers(first))
        if iter1_s < 60:  # a second, warm iteration: the steady seconds per iteration
            t0 = time.perf_counter()
            second = algo.train()
            iter2_s = time.perf_counter() - t0
            assert second["policy_version"] == 2 and second["learner"]["step"] == 2
            record(f"rti iteration 2 ({engine})", iter_s=iter2_s, publish_s=second["seconds"].get("publish"),
                   accepted=second.get("rti/accepted"), continued=second.get("rti/continued"))
    finally:
        algo.stop()
