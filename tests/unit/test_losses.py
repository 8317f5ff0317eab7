"""Losses of the learner against hand-computed values (pure torch, no DeepSpeed)."""

import math

import pytest
import torch

from rti_actors.losses import GSPO_CLIP_EPS, add_stats, finish_stats, grpo_loss, gspo_loss, token_logprobs


def _row(values, length=None):
    """One [1, L] row: position 0 is the prompt token (no loss), then ``values``."""
    return torch.tensor([[0.0] + list(values)], dtype=torch.float64)


def _ratios_setup(ratios):
    blp = _row([-1.0] * len(ratios))
    logp = (blp + _row([math.log(r) for r in ratios])).requires_grad_(True)
    mask = torch.tensor([[0] + [1] * len(ratios)])
    return logp, blp, mask


def test_token_logprobs_aligned_with_ids_and_tempered():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    ids = torch.randint(0, 7, (2, 5))
    out = token_logprobs(logits, ids, temperature=0.8)
    assert out.shape == (2, 5) and torch.all(out[:, 0] == 0)
    for b in range(2):
        for t in range(1, 5):
            expected = torch.log_softmax(logits[b, t - 1] / 0.8, dim=-1)[ids[b, t]]
            assert out[b, t].item() == pytest.approx(expected.item(), abs=1e-6)
    assert not torch.allclose(out, token_logprobs(logits, ids, temperature=1.0))
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(logits, ids, temperature=0.0)


@pytest.mark.parametrize("advantage, expected, grads", [
    # ratios 1.5, 0.5, 1.1, 0.9 with eps 0.2: A>0 clips the 1.5 (upper side), A<0 clips the 0.5 (lower side)
    (1.0, -(1.2 + 0.5 + 1.1 + 0.9) / 4, [0.0, 0.0, -0.5 / 4, -1.1 / 4, -0.9 / 4]),
    (-1.0, (1.5 + 0.8 + 1.1 + 0.9) / 4, [0.0, 1.5 / 4, 0.0, 1.1 / 4, 0.9 / 4]),
])
def test_grpo_ppo_clip_both_sides(advantage, expected, grads):
    logp, blp, mask = _ratios_setup([1.5, 0.5, 1.1, 0.9])
    loss, stats = grpo_loss(logp, blp, torch.tensor([advantage]), torch.ones_like(blp), mask, clip_eps=0.2)
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    # d/dlogp of -ratio*A is -ratio*A; the clipped branch is constant in logp
    assert logp.grad[0].tolist() == pytest.approx(grads)
    m = finish_stats(stats)
    assert m["clip_frac"] == pytest.approx(0.25)
    assert m["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1 + 0.9) / 4)
    assert m["approx_kl"] == pytest.approx(-sum(math.log(r) for r in [1.5, 0.5, 1.1, 0.9]) / 4)


def test_token_weight_scales_advantage_only_on_its_tokens():
    logp, blp, mask = _ratios_setup([1.0, 1.0, 1.5, 1.0])
    weight = _row([1.0, 2.0, 2.0, 1.0])
    loss, stats = grpo_loss(logp, blp, torch.tensor([1.0]), weight, mask, clip_eps=0.2)
    # token 2: ratio 1 with weight 2 -> -2; token 3: ratio 1.5 clipped to 1.2, times weight 2 -> -2.4
    assert loss.item() == pytest.approx(-(1.0 + 2.0 + 2.4 + 1.0) / 4)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([0.0, -1 / 4, -2 / 4, 0.0, -1 / 4])
    assert finish_stats(stats)["clip_frac"] == pytest.approx(0.25)


@pytest.mark.parametrize("algorithm", ["grpo", "gspo"])
def test_equal_to_behaviour_gives_ratio_one(algorithm):
    torch.manual_seed(0)
    blp = -torch.rand(3, 6, dtype=torch.float64) * 3
    mask = torch.tensor([[0, 1, 1, 1, 1, 0], [0, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]])
    blp = blp * mask
    adv = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
    if algorithm == "grpo":
        loss, stats = grpo_loss(blp.clone(), blp, adv, torch.ones_like(blp), mask)
        lengths = mask.sum(1).double()
        expected = -(adv * lengths).sum() / lengths.sum()  # token mean of A
    else:
        loss, stats = gspo_loss(blp.clone(), blp, adv, torch.ones_like(blp), mask)
        expected = -adv.mean()  # sequence mean of A
    assert loss.item() == pytest.approx(expected.item())
    m = finish_stats(stats)
    assert m == pytest.approx({"clip_frac": 0.0, "ratio_mean": 1.0, "approx_kl": 0.0})


@pytest.mark.parametrize("algorithm", ["grpo", "gspo"])
def test_masked_positions_carry_no_gradient(algorithm):
    torch.manual_seed(1)
    vocab, length = 11, 8
    ids = torch.randint(0, vocab, (2, length))
    mask = torch.tensor([[0, 0, 1, 1, 0, 0, 1, 0], [0, 1, 1, 0, 0, 1, 1, 1]])
    blp = -torch.rand(2, length) * mask
    adv = torch.tensor([1.0, -1.0])
    weight = torch.ones(2, length)
    loss_fn = grpo_loss if algorithm == "grpo" else lambda *a: gspo_loss(*a, clip_eps=0.2)

    def run(logits):
        logits = logits.clone().requires_grad_(True)
        loss, _ = loss_fn(token_logprobs(logits, ids, 0.8), blp, adv, weight, mask)
        loss.backward()
        return loss.detach(), logits.grad

    logits = torch.randn(2, length, vocab)
    loss, grad = run(logits)
    # logits row t-1 predicts token t: rows predicting masked tokens (and the last row) are unused
    unused = torch.ones(2, length, dtype=torch.bool)
    unused[:, :-1] = mask[:, 1:] == 0
    assert torch.all(grad[unused] == 0) and torch.any(grad[~unused] != 0)
    perturbed = logits.clone()
    perturbed[unused] += 5 * torch.randn_like(perturbed[unused])
    loss2, grad2 = run(perturbed)
    assert torch.equal(loss, loss2) and torch.equal(grad, grad2)


def _pad(rows, value=0.0):
    width = max(r.shape[-1] for r in rows)
    return torch.stack([torch.nn.functional.pad(r, (0, width - r.shape[-1]), value=value) for r in rows])


@pytest.mark.parametrize("algorithm", ["grpo", "gspo"])
def test_micro_batches_accumulate_to_the_full_batch(algorithm):
    torch.manual_seed(2)
    lengths = [7, 4, 9, 5]
    seqs = []
    for n in lengths:
        mask = (torch.rand(n) < 0.7).long()
        mask[0] = 0
        seqs.append({"logp": (-torch.rand(n, dtype=torch.float64) * 2).requires_grad_(True),
                     "blp": -torch.rand(n, dtype=torch.float64) * 2 * mask, "mask": mask,
                     "w": 0.8 + 0.4 * torch.rand(n, dtype=torch.float64)})
    adv = torch.tensor([1.0, -0.7, 0.3, -1.2], dtype=torch.float64)

    def loss_of(idx, normaliser):
        args = (_pad([seqs[i]["logp"] for i in idx]), _pad([seqs[i]["blp"] for i in idx]), adv[idx],
                _pad([seqs[i]["w"] for i in idx], 1.0), _pad([seqs[i]["mask"] for i in idx], 0))
        if algorithm == "grpo":
            return grpo_loss(*args, clip_eps=0.2, num_tokens=normaliser)
        return gspo_loss(*args, clip_eps=0.2, num_sequences=normaliser)

    full, full_stats = loss_of([0, 1, 2, 3], None)
    full.backward()
    full_grads = [s["logp"].grad.clone() for s in seqs]
    for s in seqs:
        s["logp"].grad = None
    # the global normaliser: loss tokens (GRPO) or sequences with any loss token (GSPO)
    has_loss = [int(s["mask"].sum()) for s in seqs]
    normaliser = sum(has_loss) if algorithm == "grpo" else sum(1 for n in has_loss if n)
    totals, total = {}, 0.0
    for idx in ([2, 0], [3], [1]):
        loss, stats = loss_of(idx, normaliser)
        loss.backward()
        total += loss.item()
        add_stats(totals, stats)
    assert total == pytest.approx(full.item(), rel=1e-12)
    assert finish_stats(totals) == pytest.approx(finish_stats(full_stats))
    for s, g in zip(seqs, full_grads):
        assert torch.allclose(s["logp"].grad, g, rtol=1e-12, atol=1e-15)


def test_gspo_sequence_ratio_and_clipping_by_hand():
    # sequence 1: log-ratios 0.3, -0.1, 0.1 -> s = e^0.1 = 1.105 > 1 + 4e-4: clipped (A > 0)
    # sequence 2: log-ratios -0.002, 0.0 -> s = e^-0.001 = 0.9990, below 1 - 3e-4, but with A > 0 the
    #             min picks the unclipped (smaller) term: not clipped, gradient flows
    blp = torch.tensor([[0.0, -1.0, -2.0, -1.5], [0.0, -0.5, -1.0, 0.0]], dtype=torch.float64)
    logp = (blp + torch.tensor([[0.0, 0.3, -0.1, 0.1], [0.0, -0.002, 0.0, 0.0]], dtype=torch.float64))
    logp.requires_grad_(True)
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 0]])
    weight = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 1.0, 1.0]], dtype=torch.float64)
    s1, s2 = math.exp(0.1), math.exp(-0.001)
    loss, stats = gspo_loss(logp, blp, torch.tensor([1.0, 1.0], dtype=torch.float64), weight, mask)
    assert GSPO_CLIP_EPS == (3e-4, 4e-4)
    seq1 = -(1 + 4e-4)                     # every token: clipped ratio times A
    seq2 = -(2 * s2 + s2) / 2              # token weight 2 doubles the first token's advantage
    assert loss.item() == pytest.approx((seq1 + seq2) / 2, rel=1e-12)
    loss.backward()
    # clipped sequence: no gradient; unclipped: s_i * A * w_t / |y_i| / num_sequences per token
    expected = [[0.0, 0.0, 0.0, 0.0], [0.0, -s2 * 2 / 2 / 2, -s2 / 2 / 2, 0.0]]
    assert torch.allclose(logp.grad, torch.tensor(expected, dtype=torch.float64), rtol=1e-12)
    m = finish_stats(stats)
    assert m["clip_frac"] == pytest.approx(0.5)
    assert m["ratio_mean"] == pytest.approx((s1 + s2) / 2)
    assert m["approx_kl"] == pytest.approx(-(0.3 - 0.1 + 0.1 - 0.002) / 5)


def test_gspo_negative_advantage_clips_below_and_symmetric_eps():
    blp = torch.zeros(1, 3, dtype=torch.float64)
    logp = torch.tensor([[0.0, -0.2, -0.2]], dtype=torch.float64, requires_grad=True)  # s = e^-0.2 = 0.819
    mask = torch.tensor([[0, 1, 1]])
    loss, stats = gspo_loss(logp, blp, torch.tensor([-1.0], dtype=torch.float64), torch.ones_like(blp), mask,
                            clip_eps=0.1)
    assert loss.item() == pytest.approx(0.9)  # -min(-0.819, -0.9) = 0.9, clipped
    assert finish_stats(stats)["clip_frac"] == 1.0
    loss2, _ = gspo_loss(logp, blp, torch.tensor([-1.0], dtype=torch.float64), torch.ones_like(blp), mask,
                         clip_eps=0.2)
    assert loss2.item() == pytest.approx(math.exp(-0.2))  # inside [0.8, 1.2]: unclipped


def test_masked_positions_ignore_behaviour_garbage():
    # behaviour log-probs off the mask are 0 by convention, but any value there must not matter
    logp, blp, mask = _ratios_setup([1.5, 0.5, 1.1, 0.9])
    mask = torch.tensor([[0, 1, 0, 1, 1]])
    weird = blp.clone()
    weird[0, 2] = -1e4
    a, _ = grpo_loss(logp, blp, torch.tensor([1.0]), torch.ones_like(blp), mask)
    b, _ = grpo_loss(logp, weird, torch.tensor([1.0]), torch.ones_like(blp), mask)
    assert torch.isfinite(b) and a.item() == b.item()


def test_masked_token_logprobs_equal_full_logprobs_on_the_mask():
    from rti_actors.losses import masked_token_logprobs

    torch.manual_seed(0)
    head = torch.nn.Linear(8, 11, bias=False)
    hidden = torch.randn(2, 6, 8, requires_grad=True)
    ids = torch.randint(0, 11, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 0, 1], [0, 1, 1, 0, 0, 0]], dtype=torch.bool)
    full = token_logprobs(head(hidden), ids, temperature=0.8)
    part = masked_token_logprobs(hidden, head, ids, mask, temperature=0.8)
    assert torch.allclose(part[mask], full[mask], atol=1e-6)
    assert (part[~mask] == 0).all()
    part[mask].sum().backward()
    g1 = hidden.grad.clone()
    hidden.grad = None
    full[mask].sum().backward()
    assert torch.allclose(g1, hidden.grad, atol=1e-6)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.bfloat16, 2e-2)])
def test_sliced_vocabulary_projection_gives_the_unsliced_values_and_gradients(monkeypatch, dtype, tol):
    # slices of 3 rows over 7 loss positions (the last slice short); the gradients of the
    # hidden states, the head's weight and its bias, and the entropies, against the plain
    # projection of all rows at once
    import rti_actors.losses as losses

    torch.manual_seed(1)
    vocab = 13
    monkeypatch.setattr(losses, "LOGIT_SLICE_BYTES", 3 * 4 * vocab)
    head = torch.nn.Linear(8, vocab, bias=True).to(dtype)
    hidden = torch.randn(2, 6, 8, dtype=dtype, requires_grad=True)
    ids = torch.randint(0, vocab, (2, 6))
    mask = torch.tensor([[0, 1, 1, 1, 0, 1], [0, 1, 1, 0, 1, 0]], dtype=torch.bool)
    weights = torch.randn(2, 6, dtype=torch.float64)

    def run(sliced: bool):
        monkeypatch.setattr(losses, "_sliceable", lambda h: sliced)
        for t in (hidden, head.weight, head.bias):
            t.grad = None
        logp, ent = losses.masked_token_logprobs(hidden, head, ids, mask, temperature=0.7, with_entropy=True)
        (logp.double() * weights).sum().backward()
        return [x.detach().double().clone() for x in (logp, ent, hidden.grad, head.weight.grad, head.bias.grad)]

    sliced, plain = run(True), run(False)
    assert plain[2].abs().sum() > 0 and plain[3].abs().sum() > 0
    for name, a, b in zip(("logp", "entropy", "d hidden", "d weight", "d bias"), sliced, plain):
        assert torch.allclose(a, b, atol=tol, rtol=tol), name


def test_only_a_plain_whole_linear_head_is_projected_in_slices():
    from rti_actors.losses import _sliceable

    head = torch.nn.Linear(4, 5)
    assert _sliceable(head)

    class Adapter(torch.nn.Linear):  # e.g. a LoRA-wrapped head: its forward is not weight and bias
        pass

    assert not _sliceable(Adapter(4, 5))
    head.weight.ds_id = 3  # a ZeRO-3 partition: only the module's forward gathers it
    assert not _sliceable(head)


def test_gspo_on_a_packed_row_equals_the_padded_rows():
    # two sequences end to end in one row, told apart by their sequence index, give the
    # loss and gradient of the same two sequences as right-padded rows
    torch.manual_seed(4)
    a_len, b_len = 6, 9
    logp = (-torch.rand(a_len + b_len, dtype=torch.float64) * 2).requires_grad_(True)
    blp = -torch.rand(a_len + b_len, dtype=torch.float64) * 2
    mask = torch.ones(a_len + b_len, dtype=torch.long)
    mask[0] = mask[a_len] = 0
    w = 0.8 + 0.4 * torch.rand(a_len + b_len, dtype=torch.float64)
    adv = torch.tensor([0.9, -1.3], dtype=torch.float64)
    seq = torch.tensor([0] * a_len + [1] * b_len)
    packed, stats = gspo_loss(logp[None], blp[None], adv[seq][None], w[None], mask[None], clip_eps=0.1, seq=seq[None])
    packed.backward()
    g_packed = logp.grad.clone()
    logp.grad = None
    parts = [slice(0, a_len), slice(a_len, a_len + b_len)]
    padded, stats2 = gspo_loss(_pad([logp[p] for p in parts]), _pad([blp[p] for p in parts]), adv,
                               _pad([w[p] for p in parts], 1.0), _pad([mask[p] for p in parts], 0), clip_eps=0.1)
    padded.backward()
    assert torch.allclose(packed, padded) and torch.allclose(g_packed, logp.grad)
    assert stats == stats2
