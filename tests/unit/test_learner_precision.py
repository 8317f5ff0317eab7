"""bf16 learner steps against fp32 ones: the same loss, gradient and update within a stated
tolerance, on both backends (the default dtype is bf16 on CPUs with native bf16)."""

import pytest
import torch

from rti_actors import learner as learner_module
from rti_actors.learner import Learner, learner_dtype
from tests.samples import make_batch

# bf16 keeps 8 bits of mantissa: a relative error of about 0.4 % per rounding, a few
# roundings deep in this 2-layer model. Stated bounds: loss within 2 %, gradient cosine
# at least 0.99 and norm within 5 %, the first AdamW update's cosine at least 0.9 and its
# norm within 5 % (AdamW's first step moves every weight by about lr whatever the precision).
LOSS_REL, GRAD_COS, GRAD_NORM_REL, UPDATE_COS, UPDATE_NORM_REL = 0.02, 0.99, 0.05, 0.9, 0.05


def _step(path: str, backend: str, dtype: str, batch: list[dict]):
    learner = Learner(path, {"backend": backend, "dtype": dtype, "lr": 1e-3, "grad_clip": 0.0})
    before = {n: t.float() for n, t in learner.get_weights().items()}  # what engines would get
    grads = {}
    step = learner._optimizer_step

    def capture(lr=None):  # the gradient as the optimiser receives it
        grads.update({n: p.grad.detach().float().clone() for n, p in learner.module.named_parameters()
                      if p.grad is not None})
        return step(lr)

    learner._optimizer_step = capture
    metrics = learner.update(batch)
    after = {n: t.float() for n, t in learner.get_weights().items()}
    flat = lambda d: torch.cat([d[n].flatten() for n in sorted(d)])  # noqa: E731
    return metrics, flat(grads), flat({n: after[n] - before[n] for n in before})


@pytest.mark.parametrize("backend", ["torch", "deepspeed"])
def test_a_bf16_step_matches_the_fp32_step_within_tolerance(tiny_model_path, backend):
    batch = make_batch(seed=3, n=4)
    m32, g32, d32 = _step(tiny_model_path, backend, "float32", batch)
    m16, g16, d16 = _step(tiny_model_path, backend, "bfloat16", batch)
    assert not m16["skipped"] and g16.abs().sum() > 0
    assert m16["loss"] == pytest.approx(m32["loss"], rel=LOSS_REL)
    assert torch.nn.functional.cosine_similarity(g16, g32, dim=0) >= GRAD_COS
    assert abs(g16.norm() / g32.norm() - 1) <= GRAD_NORM_REL
    # one GRPO update moves the policy the same way
    assert torch.nn.functional.cosine_similarity(d16, d32, dim=0) >= UPDATE_COS
    assert abs(d16.norm() / d32.norm() - 1) <= UPDATE_NORM_REL


def test_the_default_dtype_is_bf16_only_where_the_hardware_has_it(monkeypatch):
    monkeypatch.setattr(learner_module, "cpu_has_native_bf16", lambda: False)
    assert learner_dtype(cuda=False) == "float32" and learner_dtype(cuda=True) == "bfloat16"
    monkeypatch.setattr(learner_module, "cpu_has_native_bf16", lambda: True)
    assert learner_dtype(cuda=False) == "bfloat16"
