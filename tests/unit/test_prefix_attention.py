"""``batch_layout._sdpa``: queries behind a shared prefix attend causally, lower-right, whether
the prefix is short (zero-padded causal kernel) or long (explicit mask): the same outputs and
gradients as a plain softmax attention written out, with grouped K/V heads."""

import pytest
import torch

import rti_actors.batch_layout as bl


def reference(q, k, v, scale):
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    q_len, k_len = q.shape[2], k.shape[2]
    scores = (q @ k.transpose(-1, -2)) * scale
    visible = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
    return scores.masked_fill(~visible, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("prefix,queries", [(0, 12), (5, 12), (12, 12), (40, 7)])
@pytest.mark.parametrize("masked_from", [-1.0, bl.MASKED_FROM, 1e9])
def test_queries_behind_a_prefix_attend_lower_right_on_either_path(monkeypatch, prefix, queries, masked_from):
    monkeypatch.setattr(bl, "MASKED_FROM", masked_from)
    g = torch.Generator().manual_seed(prefix * 100 + queries)
    q, k, v = (torch.randn(2, h, n, 8, generator=g, dtype=torch.float64, requires_grad=True)
               for h, n in ((6, queries), (2, prefix + queries), (2, prefix + queries)))
    out = bl._sdpa(q, k, v, 8 ** -0.5)
    want = reference(q, k, v, 8 ** -0.5)
    assert out.shape == want.shape
    torch.testing.assert_close(out, want)
    weights = torch.randn(want.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((out * weights).sum(), (q, k, v))
    expected = torch.autograd.grad((want * weights).sum(), (q, k, v))
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
