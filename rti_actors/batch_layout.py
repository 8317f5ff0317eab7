"""How the learner lays a batch of samples out for its forward passes: shared prefixes and packed rows.

A step's samples are cut into *rows* (one forward and one backward each). A row holds one
or more *lines* (the batch dimension); a line holds one or more *segments* laid end to end;
a segment is the tail ``ids[start:]`` of one sample. Two options change the layout, never
the loss:

- ``share_prefix``: the samples of a group open with the same tokens (system prompt, tool
  schemas, the task). Their longest common opening without loss tokens is run once (a
  *prefix* pass), its per-layer keys and values are kept, and every sample of the cluster
  becomes a segment starting after it whose queries attend to those keys first. The
  gradient that reaches the prefix's keys and values from all rows is then sent through
  the prefix pass in one more backward, so the result equals running each sample whole.
- ``pack_sequences``: a row is one line with the segments end to end up to the token
  budget (no padding). Each segment attends only to itself (and to its prefix), and its
  position ids restart at its own start.

Without either option a row is a right-padded micro-batch: lines of one segment each,
``lines x longest line <= budget``. Both options default to "auto": an opening is shared
where that saves a quarter of its group's positions, and those continuations are packed.
``plan`` is pure Python (tested on its own);
``segment_attention`` is the attention function that reads the layout, registered with
transformers as ``ATTENTION`` so it serves any model that uses transformers' attention
interface (Llama, Qwen2/3, Mistral without a sliding window, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

ATTENTION = "rti_segments"
# A prefix shorter than this is not worth a pass of its own (its K/V kept alive, one more
# backward): the samples of such a cluster run unshared.
MIN_SHARED_TOKENS = 16
# On CPU, queries behind a prefix at least this many times their own length attend through an
# explicit lower-right mask rather than the zero-padded causal kernel (``_sdpa``); below it the
# causal kernel's skipped blocks win (benchmarks/prefix_attention.py).
MASKED_FROM = 1.0
# share_prefix="auto" shares a cluster's opening only where that saves at least this share of
# the cluster's positions. Where continuations run several times longer than the opening the
# shared layout is the slower one (its queries attend past a long prefix in row-sized pieces,
# and one more backward runs), while a GRPO group of short completions after a long prompt
# gains most (benchmarks/learner.py).
AUTO_SHARE_FROM = 0.25


@dataclass(frozen=True)
class Segment:
    sample: int  # index into the step's samples
    start: int   # first token of the sample in this segment (the prefix length, or 0)
    length: int  # tokens in this segment: len(ids) - start


@dataclass
class Row:
    """One forward/backward: ``lines`` (the batch dimension) of end-to-end segments."""

    lines: list[list[Segment]]

    @property
    def width(self) -> int:
        return max(sum(s.length for s in line) for line in self.lines)

    @property
    def tokens(self) -> int:
        return sum(s.length for line in self.lines for s in line)


@dataclass
class Cluster:
    """Samples that share ``prefix`` (empty: none shared) and the rows of their segments."""

    prefix: list[int]
    rows: list[Row] = field(default_factory=list)

    @property
    def passes(self) -> int:  # backward passes: one per row, one more for a shared prefix
        return len(self.rows) + (1 if self.prefix else 0)


@dataclass
class Layout:
    clusters: list[Cluster]

    @property
    def passes(self) -> int:
        return sum(c.passes for c in self.clusters)

    @property
    def rows(self) -> int:  # forwards over samples (a prefix pass is not one)
        return sum(len(c.rows) for c in self.clusters)

    def stats(self, lengths: list[int]) -> dict:
        """Token accounting of the layout: computed positions (prefix once plus rows, pads
        included), the samples' own tokens, and the share of computed positions that are pads."""
        computed = sum(len(c.prefix) + sum(len(r.lines) * r.width for r in c.rows) for c in self.clusters)
        real = sum(len(c.prefix) + sum(r.tokens for r in c.rows) for c in self.clusters)
        shared = [c for c in self.clusters if c.prefix]
        return {"layout_tokens": computed, "sample_tokens": sum(lengths),
                "padding_frac": (computed - real) / max(computed, 1),
                "prefix_tokens_saved": sum(len(c.prefix) * (sum(len(line) for r in c.rows for line in r.lines) - 1)
                                           for c in shared),
                "prefix_clusters": len(shared),
                "unshared_samples": sum(len(line) for c in self.clusters if not c.prefix
                                        for r in c.rows for line in r.lines)}


def _first_loss(mask: list) -> int:
    return next((i for i, m in enumerate(mask) if m), len(mask))


def _common(a: list[int], b: list[int], limit: int) -> int:
    n = 0
    for x, y in zip(a[:limit], b[:limit]):
        if x != y:
            break
        n += 1
    return n


def shared_prefixes(ids: list[list[int]], masks: list[list], min_shared: int = MIN_SHARED_TOKENS) -> list[tuple[int, list[int]]]:
    """Clusters of samples with a common opening: [(prefix length, sample indices)].

    The shareable part of a sample ends one token before its first loss token: token t is
    predicted from position t - 1, so the position before the first loss token must be in
    the sample's own segment. Sorting the id lists puts samples with equal openings side by
    side. A sample joins the cluster before it only if that keeps the cluster's shared length
    (two groups with a common system prompt but different tasks stay two clusters, each
    sharing its whole prompt). A cluster whose opening is under ``min_shared`` tokens (or of
    one sample) gets length 0: run unshared.
    """
    order = sorted(range(len(ids)), key=lambda i: (ids[i], i))
    limit = [max(_first_loss(m) - 1, 0) for m in masks]
    out: list[tuple[int, list[int]]] = []
    for i in order:
        if out:
            length, members = out[-1]
            head = members[0]
            current = length if len(members) > 1 else limit[head]
            shared = min(current, _common(ids[head], ids[i], limit[i]))
            if shared >= min_shared and (len(members) == 1 or shared == current):
                out[-1] = (shared, members + [i])
                continue
        out.append((limit[i], [i]))
    return [(length if len(members) > 1 and length >= min_shared else 0, sorted(members)) for length, members in out]


def _padded_rows(segments: list[Segment], budget: int) -> list[Row]:
    # lines x longest line <= budget, longest first so each row's lines have similar lengths
    rows: list[Row] = []
    for s in sorted(segments, key=lambda s: (-s.length, s.sample)):
        if rows and (len(rows[-1].lines) + 1) * rows[-1].lines[0][0].length <= budget:
            rows[-1].lines.append([s])
        else:
            rows.append(Row([[s]]))
    return rows


def _packed_rows(segments: list[Segment], budget: int) -> list[Row]:
    # first fit, longest first: a row is one line of segments summing to <= budget tokens
    rows: list[Row] = []
    for s in sorted(segments, key=lambda s: (-s.length, s.sample)):
        row = next((r for r in rows if r.tokens + s.length <= budget), None)
        if row is None:
            rows.append(Row([[s]]))
        else:
            row.lines[0].append(s)
    return rows


def worth_sharing(length: int, lengths: list[int]) -> bool:
    """share_prefix="auto": does running an opening of ``length`` once for samples of these
    lengths save at least AUTO_SHARE_FROM of their positions?"""
    return length * (len(lengths) - 1) >= AUTO_SHARE_FROM * sum(lengths)


def plan(ids: list[list[int]], masks: list[list], budget: int, pack: bool | str = False, share: bool | str = False,
         min_shared: int = MIN_SHARED_TOKENS) -> Layout:
    """The layout of one step's samples (their token ids and loss masks) for a token budget
    per row. Deterministic: both backends and a restored learner see the same rows.
    ``share="auto"``: only the openings ``worth_sharing``; ``pack="auto"``: the rows of a
    shared opening's continuations are packed, the other samples padded."""
    groups = shared_prefixes(ids, masks, min_shared) if share else [(0, list(range(len(ids))))]
    if share == "auto":
        groups = [(length if length and worth_sharing(length, [len(ids[i]) for i in members]) else 0, members)
                  for length, members in groups]
    shared_rows = _packed_rows if pack else _padded_rows  # "auto" packs a shared opening's continuations
    loose_rows = _packed_rows if pack is True else _padded_rows
    clusters, loose = [], []
    for length, members in groups:
        segments = [Segment(i, length, len(ids[i]) - length) for i in members]
        if length:
            clusters.append(Cluster(list(ids[members[0]][:length]), shared_rows(segments, budget)))
        else:
            loose += segments
    if loose:
        clusters.append(Cluster([], loose_rows(loose, budget)))
    return Layout(clusters)


# ---- the attention function ---------------------------------------------------------------------
class PrefixKV:
    """Per-layer keys and values of a prefix pass. ``record`` collects them during the prefix
    forward; ``detach`` turns them into leaves whose ``.grad`` gathers what every row sends
    back; ``surrogate`` is the scalar whose backward sends that gradient through the prefix."""

    def __init__(self):
        self.recorded: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.leaves: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def detach(self) -> None:
        self.leaves = {i: (k.detach().requires_grad_(), v.detach().requires_grad_())
                       for i, (k, v) in self.recorded.items()}

    def surrogate(self) -> torch.Tensor:
        """sum over layers of <K, dL/dK> + <V, dL/dV>: its gradient is the prefix's share of dL/dweights."""
        terms = [(t * (leaf.grad.to(t.dtype) if leaf.grad is not None else 0.0)).sum()
                 for i, pair in self.recorded.items() for t, leaf in zip(pair, self.leaves[i])]
        return torch.stack(terms).sum()


@dataclass
class Attend:
    """What ``segment_attention`` needs for one forward: per line, its segments' (offset,
    length) within the line; the prefix's keys and values (``mode="rows"``) or the store the
    prefix pass records them in (``mode="prefix"``)."""

    spans: list[list[tuple[int, int]]]
    prefix: PrefixKV | None = None
    mode: str = "rows"  # "rows" | "prefix"


def _sdpa(q, k, v, scaling):
    """Causal attention of the queries ``q`` on the last ``q_len`` positions of ``k``/``v``.

    Keys longer than the queries are a prefix every query sees. SDPA's ``is_causal`` aligns
    the mask top-left, so on a short prefix the queries are padded in front with zeros up to
    the key length and those rows cut off again: their outputs are never used, so they send
    no gradient, and the fast causal kernel runs. That kernel computes about (p + q)^2 / 2
    scores for a prefix of p, the q rows need q * (p + q): once the prefix is as long as the
    queries an explicit lower-right mask does less work, though a masked kernel skips no block.
    Grouped K/V heads are repeated here: the CPU kernel's own ``enable_gqa`` path is slower
    than the copy."""
    q_len, pad = q.shape[2], k.shape[2] - q.shape[2]
    rep = q.shape[1] // k.shape[1]
    gqa = rep > 1 and q.is_cuda
    if rep > 1 and not gqa:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    if pad >= MASKED_FROM * q_len and not q.is_cuda:
        mask = torch.ones(q_len, k.shape[2], dtype=torch.bool, device=q.device).tril(pad)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling)
    if pad:
        q = torch.cat([q.new_zeros(*q.shape[:2], pad, q.shape[3]), q], dim=2)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling, enable_gqa=gqa)
    return out[:, :, pad:]


def segment_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                      attend: Attend | None = None, **kwargs):
    """transformers' attention-function signature; returns ([batch, q_len, heads, dim], None).

    Without ``attend`` it is plain causal attention (rows of right-padded samples need no
    mask: real tokens never see the pads after them). An attention mask is never built for
    this implementation, so the learner's model must not be given left-padded input."""
    if dropout:
        raise ValueError("segment attention has no dropout; set the model's attention_dropout to 0")
    if kwargs.get("sliding_window"):
        raise ValueError("segment attention is full causal attention; a sliding-window model needs "
                         "learners(pack_sequences=False, share_prefix=False)")
    if attend is None:
        out = _sdpa(query, key, value, scaling)
    elif attend.mode == "prefix":
        attend.prefix.recorded[module.layer_idx] = (key, value)
        out = _sdpa(query, key, value, scaling)
    else:
        pk, pv = attend.prefix.leaves[module.layer_idx] if attend.prefix else (None, None)
        single = all(len(spans) == 1 for spans in attend.spans)
        if single:
            # one segment per line: the whole batch in one call (the prefix repeated per line)
            if pk is not None:
                b = query.shape[0]
                key = torch.cat([pk.expand(b, -1, -1, -1), key], dim=2)
                value = torch.cat([pv.expand(b, -1, -1, -1), value], dim=2)
            out = _sdpa(query, key, value, scaling)
        else:
            # a packed row: one line, each segment attends to itself (and the prefix)
            (spans,) = attend.spans
            parts = []
            for offset, length in spans:
                sl = slice(offset, offset + length)
                k, v = key[:, :, sl], value[:, :, sl]
                if pk is not None:
                    k, v = torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)
                parts.append(_sdpa(query[:, :, sl], k, v, scaling))
            out = torch.cat(parts, dim=2)
    return out.transpose(1, 2).contiguous(), None


def has_sliding_window(hf_config) -> bool:
    """True when some layer of the model attends within a window (Mistral, Gemma 2/3, a Qwen
    with use_sliding_window): segment attention is full causal attention and must not serve it."""
    if "sliding_attention" in (getattr(hf_config, "layer_types", None) or []):
        return True
    return bool(getattr(hf_config, "sliding_window", None)) and bool(getattr(hf_config, "use_sliding_window", True))


def register() -> str:
    """Make ``segment_attention`` selectable as ``model.set_attn_implementation(ATTENTION)``."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, segment_attention)
    return ATTENTION
