"""Losses of the learner: token log-probs, GRPO (PPO-clip), GSPO, LUFFY, AEPO and SFT (warm start).

OPD has no loss of its own: ``grpo_loss`` with one advantage per token ([batch, length], the
negated reverse KL to the teacher, ``rti_actors.opd``), PPO's importance ratio and clip kept,
as the on-policy distillation recipe of Thinking Machines (Lu et al., 2025) trains it.

Pure torch. Every tensor is ``[batch, length]`` and aligned with the token ids: position
``t`` holds the quantity for token ``t``, predicted from position ``t - 1`` (position 0 never
has loss). ``mask`` is the loss mask (1 only on policy-generated tokens).

Both losses take the *global* normaliser (loss tokens for GRPO, sequences for GSPO) so that
splitting a batch into micro-batches and summing their losses gives exactly the loss of
the whole batch. They return the loss and a dict of *sums* (clipped units, ratio, approx
KL, counts) that the caller adds up over micro-batches and divides once (``finish_stats``).
No KL penalty and no entropy bonus (docs/ALGORITHM.md, Losses).
"""

from __future__ import annotations

import torch

from rti_actors.options import DEFAULTS as _CONFIG_DEFAULTS
from rti_actors.options import gspo_clip_pair

# The GSPO paper's (low, high) = (3e-4, 4e-4), read from the run config's default so that
# a loss called without clip_eps and a learner built from RTIConfig() cannot disagree.
GSPO_CLIP_EPS = gspo_clip_pair(_CONFIG_DEFAULTS["training"]["gspo_clip"])


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log p(ids[:, t] | ids[:, <t]) at ``temperature``, aligned with ``ids`` (column 0 is 0).

    The temperature is the rollout's, so the ratio against the behaviour log-probs (computed
    by the engine from ``logits / T``) is 1 for unchanged weights. Computed in float32 as
    gathered logit minus logsumexp, which never materialises a second vocab-sized tensor.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to score tokens, got {temperature}")
    scaled = logits[:, :-1].float() / temperature
    target = ids[:, 1:]
    picked = scaled.gather(-1, target.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
    return torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)


# fp32 logits per slice of loss positions: the vocabulary projection runs slice by slice
# (forward and backward), so a step never holds [loss tokens x vocab] logits, their
# softmax and their gradient at once; big enough that each slice is one efficient matmul
LOGIT_SLICE_BYTES = 64 * 2**20


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias, temperature: float) -> torch.Tensor:
    return torch.nn.functional.linear(hidden, weight, bias).float() / temperature


class _SlicedTokenLogprobs(torch.autograd.Function):
    """log p(target) (and, without gradient, the entropy) of each row of ``hidden`` under the
    linear head ``weight``/``bias`` at ``temperature``. The backward recomputes each slice's
    logits from the saved hidden states and the log-normaliser instead of keeping them: the
    exact gradient (d logp / d logits = onehot - softmax), for one extra head matmul."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, temperature, with_entropy):
        w = weight.to(hidden.dtype)
        b = None if bias is None else bias.to(hidden.dtype)
        n, rows = hidden.shape[0], max(1, LOGIT_SLICE_BYTES // (4 * weight.shape[0]))
        logp, lse = hidden.new_empty(n, dtype=torch.float32), hidden.new_empty(n, dtype=torch.float32)
        entropy = hidden.new_zeros(n if with_entropy else 0, dtype=torch.float32)
        for i in range(0, n, rows):
            z = _logits(hidden[i:i + rows], w, b, temperature)
            lse[i:i + rows] = norm = torch.logsumexp(z, dim=-1)
            logp[i:i + rows] = z.gather(-1, target[i:i + rows, None]).squeeze(-1) - norm
            if with_entropy:
                entropy[i:i + rows] = norm - (torch.softmax(z, dim=-1) * z).sum(-1)
        ctx.save_for_backward(hidden, weight, bias, target, lse)
        ctx.temperature, ctx.rows = temperature, rows
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad, _):
        hidden, weight, bias, target, lse = ctx.saved_tensors
        w = weight.to(hidden.dtype)
        b = None if bias is None else bias.to(hidden.dtype)
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        dh = torch.empty_like(hidden) if want_h else None
        acc = torch.promote_types(weight.dtype, torch.float32)  # slices add up in at least fp32
        dw = torch.zeros(weight.shape, dtype=acc, device=weight.device) if want_w else None
        db = torch.zeros(weight.shape[0], dtype=acc, device=weight.device) if want_b else None
        for i in range(0, hidden.shape[0], ctx.rows):
            h, g = hidden[i:i + ctx.rows], grad[i:i + ctx.rows, None].float()
            z = _logits(h, w, b, ctx.temperature)
            dz = torch.exp(z - lse[i:i + ctx.rows, None]).mul_(-g)
            dz.scatter_add_(-1, target[i:i + ctx.rows, None], g).div_(ctx.temperature)
            dz_h = dz.to(hidden.dtype)
            if want_h:
                dh[i:i + ctx.rows] = dz_h @ w
            if want_w:
                dw += (dz_h.t() @ h).to(acc)
            if want_b:
                db += dz.to(acc).sum(0)
        return (dh, None if dw is None else dw.to(weight.dtype), None if db is None else db.to(bias.dtype),
                None, None, None)


def _sliceable(head: torch.nn.Module) -> bool:
    # a plain linear layer whose weight is all here: not an adapter-wrapped head (its
    # forward adds more than weight and bias), not a ZeRO-3 partition (gathered only by
    # the module's own forward hooks)
    return type(head) is torch.nn.Linear and not hasattr(head.weight, "ds_id")


def masked_token_logprobs(hidden: torch.Tensor, head: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor,
                          temperature: float = 1.0, with_entropy: bool = False):
    """``token_logprobs`` computed only where ``mask`` is set (0 elsewhere), from the
    decoder's hidden states. Projecting to the vocabulary only at loss positions skips most
    of the lm_head work: in an agent trajectory most tokens are prompt, tool output or
    template glue; and projecting them slice by slice (``_SlicedTokenLogprobs``) keeps the
    [tokens x vocab] logits that dominate learner memory from existing at all.

    ``with_entropy``: also return each loss token's entropy (nats, at ``temperature``, 0
    elsewhere), from the same logits and without gradient: AEPO weighs advantages by it, and
    reading it here spares a second forward."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to score tokens, got {temperature}")
    rows, cols = mask[:, 1:].nonzero(as_tuple=True)  # token t is predicted at position t - 1
    target = ids[rows, cols + 1]
    if _sliceable(head):
        picked, entropy = _SlicedTokenLogprobs.apply(hidden[rows, cols], head.weight, head.bias, target,
                                                     float(temperature), with_entropy)
    else:
        logits = head(hidden[rows, cols]).float() / temperature
        norm = torch.logsumexp(logits, dim=-1)
        picked = logits.gather(-1, target[:, None]).squeeze(-1) - norm
        if with_entropy:
            with torch.no_grad():
                entropy = norm - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    out = torch.zeros(ids.shape, dtype=picked.dtype, device=ids.device)
    logp = out.index_put((rows, cols + 1), picked)
    if not with_entropy:
        return logp
    return logp, torch.zeros_like(out).index_put((rows, cols + 1), entropy.detach())


def _masked_log_ratio(logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # Off-mask positions get log-ratio 0 (ratio 1), so nothing there can overflow, and the
    # final torch.where gives them zero gradient.
    return torch.where(mask, logp - behaviour_logp, torch.zeros_like(logp))


def _token_advantages(advantages: torch.Tensor, token_weight: torch.Tensor, dtype) -> torch.Tensor:
    # one advantage per row ([batch]) or per token ([batch, length]: a packed row holds
    # several sequences, each with its own)
    adv = advantages if advantages.dim() == 2 else advantages[:, None]
    return adv.to(dtype) * token_weight.to(dtype)


def _clipped_surrogate(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float):
    """Per-element PPO-clip loss and whether the clipped branch was the one taken."""
    unclipped = -ratio * adv
    clipped = -torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    return torch.maximum(unclipped, clipped), clipped > unclipped


def grpo_loss(logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor,
              token_weight: torch.Tensor, mask: torch.Tensor, clip_eps: float = 0.2,
              num_tokens: float | None = None) -> tuple[torch.Tensor, dict]:
    """PPO-clip per token, token-mean over all loss tokens of the (global) batch.

    ratio_t = exp(logp_t - behaviour_logp_t); A_t = advantage_seq * token_weight_t (``advantages``
    [batch], or [batch, length] with one per token: packed rows, OPD);
    loss = sum over loss tokens of -min(ratio_t A_t, clip(ratio_t, 1 - eps, 1 + eps) A_t),
    divided by ``num_tokens`` (default: this batch's loss tokens).
    """
    mask = mask.bool()
    n = float(mask.sum()) if num_tokens is None else float(num_tokens)
    log_ratio = _masked_log_ratio(logp, behaviour_logp, mask)
    ratio = torch.exp(log_ratio)
    adv = _token_advantages(advantages, token_weight, logp.dtype)
    per_token, was_clipped = _clipped_surrogate(ratio, adv, clip_eps, clip_eps)
    loss = torch.where(mask, per_token, torch.zeros_like(per_token)).sum() / max(n, 1.0)
    with torch.no_grad():
        stats = {"loss_tokens": float(mask.sum()),
                 "clipped": float((was_clipped & mask).sum()),
                 "clip_units": float(mask.sum()),
                 "ratio_sum": float(ratio[mask].sum()),
                 "kl_sum": float((-log_ratio)[mask].sum())}
    return loss, stats


def gspo_loss(logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor,
              token_weight: torch.Tensor, mask: torch.Tensor, clip_eps=GSPO_CLIP_EPS,
              num_sequences: float | None = None, seq: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """GSPO with sequence-level, length-normalised ratios and sequence-level clipping.

    s_i = exp(mean over sequence i's loss tokens of (logp - behaviour_logp)). Per token the
    surrogate uses s_i,t = sg(s_i) * exp(logp_t - sg(logp_t)) (GSPO-token): its value is s_i,
    so clipping is decided per sequence, but its gradient is s_i * grad(logp_t), which lets
    each token carry its own advantage A_i * token_weight_t. Aggregation: mean over each
    sequence's loss tokens, then sum over sequences divided by ``num_sequences`` (default:
    sequences in this batch with at least one loss token). ``clip_eps`` is a float
    (symmetric) or a (low, high) pair. ``seq`` ([batch, length], default: one sequence per
    row) numbers the sequence each token belongs to, for rows that pack several.
    """
    eps_low, eps_high = (clip_eps, clip_eps) if isinstance(clip_eps, (int, float)) else tuple(clip_eps)
    mask = mask.bool()
    if seq is None:
        seq = torch.arange(mask.shape[0], device=mask.device)[:, None].expand(mask.shape)
    flat = seq.reshape(-1)
    count = int(flat.max()) + 1 if flat.numel() else 0

    def per_sequence(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(count, dtype=x.dtype, device=x.device).index_add(0, flat, x.reshape(-1))

    lengths = per_sequence(mask.to(logp.dtype))
    has_loss = lengths > 0
    n = float(has_loss.sum()) if num_sequences is None else float(num_sequences)
    log_ratio = _masked_log_ratio(logp, behaviour_logp, mask)
    seq_ratio = torch.exp(per_sequence(log_ratio) / lengths.clamp(min=1)).detach()
    ratio = seq_ratio[seq] * torch.exp(logp - logp.detach())
    adv = _token_advantages(advantages, token_weight, logp.dtype)
    per_token, was_clipped = _clipped_surrogate(ratio, adv, eps_low, eps_high)
    per_token = torch.where(mask, per_token, torch.zeros_like(per_token))
    loss = (per_sequence(per_token) / lengths.clamp(min=1)).sum() / max(n, 1.0)
    with torch.no_grad():
        # Positive token weights keep every token of a sequence on the same side of the
        # clip, so "clipped" is a per-sequence count, like the GSPO paper reports it.
        seq_clipped = (per_sequence((was_clipped & mask).to(logp.dtype)) > 0) & has_loss
        stats = {"loss_tokens": float(mask.sum()),
                 "clipped": float(seq_clipped.sum()),
                 "clip_units": float(has_loss.sum()),
                 "ratio_sum": float(seq_ratio[has_loss].sum()),
                 "kl_sum": float((-log_ratio)[mask].sum())}
    return loss, stats


# LUFFY's gamma (Yan et al., 2025, "Learning to Reason under Off-Policy Guidance"), read
# from the run config's default like the GSPO clip above.
LUFFY_GAMMA = _CONFIG_DEFAULTS["luffy"]["gamma"]


def luffy_shaping(logp: torch.Tensor, gamma: float = LUFFY_GAMMA) -> torch.Tensor:
    """LUFFY's policy shaping of a teacher token: f(p) = p / (p + gamma) with p = exp(logp),
    the current policy's probability of the token. Written as sigmoid(logp - log(gamma)),
    the same value, which stays finite for any logp. Its gradient with respect to logp is
    gamma * p / (p + gamma)^2: small for tokens the policy already prefers, largest near
    p = gamma, so rare but useful teacher tokens get the bigger push."""
    if gamma <= 0:
        raise ValueError(f"luffy gamma must be > 0, got {gamma}")
    return torch.sigmoid(logp - float(torch.log(torch.tensor(gamma, dtype=torch.float64))))


def luffy_loss(logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor,
               token_weight: torch.Tensor, mask: torch.Tensor, off_policy: torch.Tensor, clip_eps: float = 0.2,
               gamma: float = LUFFY_GAMMA, num_tokens: float | None = None) -> tuple[torch.Tensor, dict]:
    """GRPO's loss on the policy's own tokens and LUFFY's shaped objective on a teacher's.

    On-policy token t (``off_policy`` 0): exactly ``grpo_loss``'s -min(ratio_t A_t, clip(...) A_t).
    Teacher token t (``off_policy`` 1): -f(p_t) A_t with f(p) = p / (p + gamma) (``luffy_shaping``),
    no clip and no behaviour log-prob (a teacher has none). Token-mean over all loss tokens of
    the (global) batch, both kinds together, divided by ``num_tokens``. With no teacher token
    the value and the gradient are ``grpo_loss``'s. Clip statistics count on-policy tokens only.
    """
    mask, off = mask.bool(), off_policy.bool()
    on = mask & ~off
    n = float(mask.sum()) if num_tokens is None else float(num_tokens)
    log_ratio = _masked_log_ratio(logp, behaviour_logp, on)
    ratio = torch.exp(log_ratio)
    adv = _token_advantages(advantages, token_weight, logp.dtype)
    clipped_loss, was_clipped = _clipped_surrogate(ratio, adv, clip_eps, clip_eps)
    shaped = luffy_shaping(logp, gamma)
    per_token = torch.where(off, -shaped * adv, clipped_loss)
    loss = torch.where(mask, per_token, torch.zeros_like(per_token)).sum() / max(n, 1.0)
    with torch.no_grad():
        teacher = mask & off
        stats = {"loss_tokens": float(mask.sum()),
                 "clipped": float((was_clipped & on).sum()),
                 "clip_units": float(on.sum()),
                 "ratio_sum": float(ratio[on].sum()),
                 "kl_sum": float((-log_ratio)[on].sum()),
                 "kl_tokens": float(on.sum()),
                 "teacher_tokens": float(teacher.sum()),
                 "shaped_sum": float(shaped[teacher].sum())}
    return loss, stats


# AEPO's defaults (Dong et al., 2025), read from the run config like the GSPO clip above.
AEPO_ADVANTAGE_WEIGHT = _CONFIG_DEFAULTS["aepo"]["advantage_weight"]


def standardised_entropy(entropy: torch.Tensor, mask: torch.Tensor, seq: torch.Tensor | None = None) -> torch.Tensor:
    """(H_t - mean) / std over each sequence's loss tokens (unbiased std; 1 where it is 0 or
    undefined), 0 off the mask. ``seq`` numbers the sequence of each token (default: one per
    row). Per sequence, because a sequence's loss tokens always share one micro-batch, so the
    result does not depend on how the learner lays a step out."""
    mask = mask.bool()
    if seq is None:
        seq = torch.arange(mask.shape[0], device=mask.device)[:, None].expand(mask.shape)
    flat, h = seq.reshape(-1), torch.where(mask, entropy, torch.zeros_like(entropy)).reshape(-1).double()
    m = mask.reshape(-1).double()
    count = int(flat.max()) + 1 if flat.numel() else 0

    def per_sequence(x):
        return torch.zeros(count, dtype=x.dtype, device=x.device).index_add(0, flat, x)

    n = per_sequence(m)
    mean = per_sequence(h) / n.clamp(min=1)
    var = per_sequence(m * (h - mean[flat]) ** 2) / (n - 1).clamp(min=1)
    std = torch.where((n > 1) & (var > 0), var.sqrt(), torch.ones_like(var))
    out = ((h - mean[flat]) / std[flat]).to(entropy.dtype).reshape(entropy.shape)
    return torch.where(mask, out, torch.zeros_like(out))


def aepo_loss(logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor,
              token_weight: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor, clip_eps: float = 0.2,
              advantage_weight: float = AEPO_ADVANTAGE_WEIGHT, entropy_clip: bool = True,
              num_tokens: float | None = None, seq: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """AEPO's entropy-balanced PPO-clip, token-mean over the (global) batch like ``grpo_loss``.

    A_t = advantage * token_weight_t * (1 + advantage_weight * sg(standardised entropy_t)), the
    entropy standardised over each sequence's loss tokens (``standardised_entropy``). With
    ``entropy_clip`` the clip's upper bound is (1 + eps) * ratio / sg(ratio): the value is
    GRPO's, but a token above 1 + eps with A_t > 0 keeps the gradient (1 + eps) A_t instead of
    none; every other token's gradient is GRPO's. With advantage_weight 0 and entropy_clip off,
    the value and the gradient are ``grpo_loss``'s.
    """
    mask = mask.bool()
    n = float(mask.sum()) if num_tokens is None else float(num_tokens)
    log_ratio = _masked_log_ratio(logp, behaviour_logp, mask)
    ratio = torch.exp(log_ratio)
    adv = _token_advantages(advantages, token_weight, logp.dtype)
    if advantage_weight:
        adv = adv * (1.0 + advantage_weight * standardised_entropy(entropy.detach(), mask, seq).to(logp.dtype))
    if entropy_clip:
        # value 1 + eps, gradient (1 + eps) * d log pi: the clipped branch stops zeroing it
        upper = (1.0 + clip_eps) * ratio / ratio.detach()
        bounded = torch.where(ratio > 1.0 + clip_eps, upper, torch.clamp(ratio, min=1.0 - clip_eps))
        unclipped, clipped = -ratio * adv, -bounded * adv
        per_token, was_clipped = torch.maximum(unclipped, clipped), clipped > unclipped
    else:
        per_token, was_clipped = _clipped_surrogate(ratio, adv, clip_eps, clip_eps)
    loss = torch.where(mask, per_token, torch.zeros_like(per_token)).sum() / max(n, 1.0)
    with torch.no_grad():
        preserved = mask & (ratio > 1.0 + clip_eps) & (adv > 0) if entropy_clip else torch.zeros_like(mask)
        stats = {"loss_tokens": float(mask.sum()),
                 "clipped": float((was_clipped & mask).sum()),
                 "clip_units": float(mask.sum()),
                 "ratio_sum": float(ratio[mask].sum()),
                 "kl_sum": float((-log_ratio)[mask].sum()),
                 "entropy_sum": float(entropy[mask].sum()),
                 "preserved": float(preserved.sum())}
    return loss, stats


def sft_loss(logp: torch.Tensor, token_weight: torch.Tensor, mask: torch.Tensor,
             num_tokens: float | None = None) -> tuple[torch.Tensor, dict]:
    """Token-level cross-entropy on the loss-mask tokens (the assistant's), token-mean over
    the (global) batch: -sum(token_weight_t * logp_t) / ``num_tokens``. ``logp`` must be at
    temperature 1. Tokens outside the mask contribute nothing, whatever their log-prob."""
    mask = mask.bool()
    n = float(mask.sum()) if num_tokens is None else float(num_tokens)
    nll = torch.where(mask, -logp * token_weight.to(logp.dtype), torch.zeros_like(logp))
    loss = nll.sum() / max(n, 1.0)
    with torch.no_grad():
        stats = {"loss_tokens": float(mask.sum()), "nll_sum": float(torch.where(mask, -logp, torch.zeros_like(logp)).sum())}
    return loss, stats


def finish_stats(totals: dict) -> dict:
    """Turn summed stats into metrics: clip_frac (of tokens for GRPO, of sequences for GSPO),
    mean ratio (over the same units), approx_kl (mean of behaviour_logp - logp over tokens;
    LUFFY's over on-policy tokens, ``kl_tokens``). With teacher tokens (LUFFY) also
    teacher_tokens and shaped_weight_mean (the mean f(p) over them); with AEPO's sums,
    entropy_mean and preserved_frac."""
    units, tokens = max(totals.get("clip_units", 0.0), 1.0), max(totals.get("loss_tokens", 0.0), 1.0)
    if "kl_tokens" in totals:
        tokens = max(totals["kl_tokens"], 1.0)
    out = {"clip_frac": totals.get("clipped", 0.0) / units,
           "ratio_mean": totals.get("ratio_sum", 0.0) / units if totals.get("clip_units") else 1.0,
           "approx_kl": totals.get("kl_sum", 0.0) / tokens}
    if "entropy_sum" in totals:  # AEPO: the loss tokens' mean entropy, and where the clip kept a gradient
        out["entropy_mean"] = totals["entropy_sum"] / tokens
        out["preserved_frac"] = totals.get("preserved", 0.0) / tokens
    if totals.get("teacher_tokens"):
        out["teacher_tokens"] = int(totals["teacher_tokens"])
        out["shaped_weight_mean"] = totals["shaped_sum"] / totals["teacher_tokens"]
    return out


def add_stats(totals: dict, stats: dict) -> dict:
    for k, v in stats.items():
        totals[k] = totals.get(k, 0.0) + v
    return totals
