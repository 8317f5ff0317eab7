"""What the GPU checks share: how many GPUs torch sees, the skip marks, a learner batch.

Nothing here touches CUDA beyond ``torch.cuda.is_available()`` / ``device_count()``, so the
CPU suite imports these modules (and skips their tests) without a GPU stack.
"""

from __future__ import annotations

import random

import pytest
import torch

CUDA = torch.cuda.is_available()
NUM_GPUS = torch.cuda.device_count() if CUDA else 0

needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device (torch.cuda.is_available() is False)")
needs_two_gpus = pytest.mark.skipif(
    NUM_GPUS < 2, reason=f"needs 2 GPUs (NCCL refuses two ranks on one device); this machine has {NUM_GPUS}")
GPU = [pytest.mark.gpu, needs_cuda]  # every module's pytestmark


def make_batch(seed: int = 0, n: int = 4, prompt: int = 6, completion: int = 10) -> list[dict]:
    """Learner samples with random ids, alternating advantages and off-policy behaviour
    log-probs (as tests/integration/test_learner.py's, without importing that module)."""
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        length = prompt + completion + 3 * i
        mask = [0] * prompt + [1] * (length - prompt)
        samples.append({"ids": [rng.randrange(200, 5000) for _ in range(length)], "loss_mask": mask,
                        "behaviour_logprobs": [-rng.uniform(5, 12) if m else 0.0 for m in mask],
                        "token_weight": [rng.uniform(0.8, 1.2) if m else 1.0 for m in mask],
                        "advantage": (-1.0) ** i * (0.5 + i / 4), "policy_version": 0})
    return samples
