"""What the GPU checks share: how many GPUs torch sees, the skip marks, a learner batch.

Nothing here touches CUDA beyond ``torch.cuda.is_available()`` / ``device_count()``, so the
CPU suite imports these modules (and skips their tests) without a GPU stack.
"""

from __future__ import annotations

import pytest
import torch

CUDA = torch.cuda.is_available()
NUM_GPUS = torch.cuda.device_count() if CUDA else 0

needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device (torch.cuda.is_available() is False)")
needs_two_gpus = pytest.mark.skipif(
    NUM_GPUS < 2, reason=f"needs 2 GPUs (NCCL refuses two ranks on one device); this machine has {NUM_GPUS}")
GPU = [pytest.mark.gpu, needs_cuda]  # every module's pytestmark
