"""The DeepSpeed learner on CUDA: one rank in this process (bf16, ZeRO-2), and a 2-rank
``LearnerGroup`` of Ray actors over NCCL where there are two GPUs."""

from __future__ import annotations

import math
import os
import time

import pytest
import torch

from tests.gpu.common import GPU, needs_two_gpus
from tests.gpu.report import record
from tests.samples import make_batch

pytestmark = GPU

CONFIG = {"backend": "deepspeed", "zero_stage": 2, "dtype": "bfloat16", "lr": 1e-3,
          "micro_batch_tokens": 48}  # several micro-batches per step: gradient accumulation too


@pytest.fixture
def isolated_process_group():
    """DeepSpeed initialises torch.distributed (and its env vars) in this process; undo it after."""
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    saved = {k: os.environ.get(k) for k in keys}
    yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    try:
        import deepspeed.comm.comm as ds_comm
        ds_comm.cdb = None
    except ImportError:
        pass
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _finite(metrics: dict, keys=("loss", "grad_norm", "clip_frac", "approx_kl", "ratio_mean")) -> None:
    for key in keys:
        assert isinstance(metrics[key], float) and math.isfinite(metrics[key]), (key, metrics[key])


def test_deepspeed_zero2_bf16_step_on_one_gpu(tiny_model_path, isolated_process_group):
    pytest.importorskip("ray", reason="ray is not importable (rti_actors.learner needs it)")
    pytest.importorskip("deepspeed", reason="deepspeed is not importable")
    from rti_actors.learner import Learner

    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    learner = Learner(tiny_model_path, CONFIG)
    init_s = time.perf_counter() - t0
    assert learner.device.type == "cuda" and learner.engine is not None
    assert next(learner.module.parameters()).dtype == torch.bfloat16
    before = learner.get_weights()
    batch = make_batch()
    m = learner.update(batch)
    assert m["step"] == learner.step == 1 and not m["skipped"]
    assert m["num_samples"] == len(batch) and m["num_micro_batches"] > 1
    assert m["num_tokens"] == sum(sum(s["loss_mask"]) for s in batch)
    _finite(m)
    assert m["grad_norm"] > 0
    after = learner.get_weights()
    matrices = [k for k, v in before.items() if v.ndim >= 2]
    moved = [k for k in matrices if not torch.equal(before[k], after[k])]
    assert moved == matrices  # every weight matrix took the step (fp32 master -> bf16 copy)
    m2 = learner.update(make_batch(seed=1, n=8))  # warm: the steady-state step time
    _finite(m2)
    assert m2["step"] == 2
    t0 = time.perf_counter()
    weights = learner.get_weights(dtype="bfloat16")
    get_weights_s = time.perf_counter() - t0
    record("deepspeed 1 gpu", init_s=init_s, loss=m["loss"], grad_norm=m["grad_norm"], step1_s=m["seconds"],
           step2_s=m2["seconds"], step2_tokens_per_s=m2["tokens_per_s"], get_weights_bf16_s=get_weights_s,
           weights_mb=sum(t.numel() * t.element_size() for t in weights.values()) / 2**20,
           peak_gpu_mb=torch.cuda.max_memory_allocated() / 2**20)


@needs_two_gpus
def test_learner_group_two_ranks_over_nccl(ray_gpu, tiny_model_path):
    from rti_actors.learner_group import LearnerGroup

    ray = ray_gpu
    t0 = time.perf_counter()
    group = LearnerGroup(tiny_model_path, CONFIG, num_learners=2, num_cpus=1, num_gpus=1, start_timeout_s=180)
    try:
        assert group.ping()
        start_s = time.perf_counter() - t0
        batch = make_batch(seed=8, n=6)
        m = group.update(batch)
        assert m["step"] == 1 and not m["skipped"] and m["num_samples"] == len(batch)
        _finite(m)
        m2 = group.update(make_batch(seed=9, n=8))
        _finite(m2)
        t0 = time.perf_counter()
        weights = ray.get(group.get_weights("bfloat16"))
        get_weights_s = time.perf_counter() - t0
        assert weights and all(t.dtype == torch.bfloat16 for t in weights.values())
        record("learner group 2 ranks", start_s=start_s, loss=m["loss"], grad_norm=m["grad_norm"],
               step1_s=m["seconds"], step2_s=m2["seconds"], step2_tokens_per_s=m2["tokens_per_s"],
               get_weights_bf16_s=get_weights_s)
    finally:
        group.kill()
