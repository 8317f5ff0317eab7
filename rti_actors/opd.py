"""On-policy distillation (OPD): a teacher scores the tokens the student sampled.

The student plays its groups exactly as in GRPO. Then every trajectory's ids, unchanged, are
scored twice by teacher forcing: by the policy's own engines (the student, log pi_s) and by the
teacher (log pi_t), a model on an engine actor of its own (``EngineActor.score``, the batched
path the RTI gate uses) or an OpenAI-compatible endpoint that echoes prompt log-probs. Each
loss token's advantage is its negated reverse KL, optionally plus the env reward's:

    k_t = log pi_s(y_t | y_<t) - log pi_t(y_t | y_<t)
    A_t = -k_t + reward_weight * A_i          (A_i: GRPO's group advantage; 0 off the loss mask)

per token, with no discounting over later tokens. The learner trains these with GRPO's clipped
surrogate (``rti_actors.losses.grpo_loss``, per-token advantages). docs/ALGORITHM.md gives the
method, why the student is scored again rather than read from the sampler, and the defaults.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rti_actors.failover import Members, as_members
from rti_actors.options import ConfigError
from rti_actors.trajectory import Trajectory

# ASCII only, so an endpoint's echoed token texts compare with the policy's decode exactly;
# tool-call JSON, digits and punctuation are where tokenizers of one family still differ
PROBE = ('OPD probe: <tool_call>\n{"name": "search_poi", "arguments": {"query": "Cafe 42, 5th Ave", "page": 3}}\n'
         "</tool_call> The quick brown fox jumps over 1234567 lazy dogs; e.g. x+y=z!")

# (prompt ids, completion ids): what an engine's ``score`` takes, one pair per trajectory
Request = tuple[list[int], list[int]]


@dataclass(frozen=True)
class ScoreSpan:
    """The tokens of one trajectory both models score: ids[start:end], after ids[:start]."""

    start: int
    end: int


def score_span(loss_mask: list[int], limit: int) -> ScoreSpan | None:
    """From the first loss token through the last, cut at ``limit`` tokens; None when no loss
    token lies below it. An engine scores sequences of at most ``max_model_len - 1`` tokens (vLLM
    keeps a place for one generated token), so a trajectory that filled the context exactly
    leaves its last token unscored: it keeps only the reward part of its advantage."""
    loss = [i for i, m in enumerate(loss_mask) if m]
    if not loss or loss[0] >= limit:
        return None
    return ScoreSpan(loss[0], min(loss[-1] + 1, limit))


def token_advantages(loss_mask: list[int], span: ScoreSpan | None, student: list[float], teacher: list[float],
                     advantage: float, reward_weight: float) -> list[float]:
    """OPD's advantage of every token, aligned with the ids: on a loss token
    -(student - teacher) + reward_weight * advantage, 0 elsewhere. ``student`` and ``teacher``
    are the two models' log-probs of ids[span.start:span.end]; loss tokens outside the span
    (unscored) get the reward part only."""
    n = 0 if span is None else span.end - span.start
    if len(student) != n or len(teacher) != n:
        raise ValueError(f"{len(student)} student and {len(teacher)} teacher log-probs for a span of {n} tokens")
    base = reward_weight * advantage
    out = [base if m else 0.0 for m in loss_mask]
    for j, (s, t) in enumerate(zip(student, teacher)):
        i = span.start + j
        if loss_mask[i]:
            out[i] = -(s - t) + base
    return out


def tokenizer_mismatch(student, teacher) -> str | None:
    """Why two Hugging Face tokenizers would give the same text other token ids, or None when
    they are one tokenizer: the same vocabulary (token -> id) and the same ids for ``PROBE``."""
    sv, tv = student.get_vocab(), teacher.get_vocab()
    if sv != tv:
        only_s, only_t = sorted(set(sv) - set(tv))[:3], sorted(set(tv) - set(sv))[:3]
        moved = sum(1 for k in set(sv) & set(tv) if sv[k] != tv[k])
        return (f"their vocabularies differ ({len(sv)} vs {len(tv)} tokens; only the policy's: {only_s}, only the "
                f"teacher's: {only_t}; {moved} shared tokens with other ids)")
    a, b = student.encode(PROBE, add_special_tokens=False), teacher.encode(PROBE, add_special_tokens=False)
    if a != b:
        return f"they split the probe text differently ({len(a)} vs {len(b)} tokens)"
    return None


def check_teacher_tokenizer(student, teacher, teacher_text: str, policy_text: str) -> None:
    """Raise ``ConfigError`` saying what to change when the teacher's tokenizer is not the policy's."""
    why = tokenizer_mismatch(student, teacher)
    if why:
        raise ConfigError(f"{teacher_text} does not share the tokenizer of {policy_text}: {why}. OPD scores the "
                          "student's own token ids under the teacher, so both need one tokenizer: choose a teacher "
                          "of the policy's model family (a larger or fine-tuned model with the same tokenizer), or "
                          "a policy that matches the teacher")


def check_endpoint_tokenizer(client, student, teacher_text: str, policy_text: str) -> None:
    """Send ``PROBE``'s policy token ids to the endpoint and compare the token texts it echoes
    with the policy's decode of the same ids: another tokenizer reads other text from them."""
    ids = student.encode(PROBE, add_special_tokens=False)
    try:
        tokens, _ = client.prompt_logprobs(ids)
    except RuntimeError as e:
        raise ConfigError(f"{teacher_text}: {e}") from None
    if tokens is None:
        raise ConfigError(f"{teacher_text} echoed no token texts (logprobs.tokens), so its tokenizer cannot be "
                          f"checked against {policy_text}'s: serve the teacher with a server that returns them")
    if "".join(tokens) != student.decode(ids):
        raise ConfigError(f"{teacher_text} reads other text from {policy_text}'s token ids (it echoed "
                          f"{''.join(tokens)[:60]!r}...), so it uses another tokenizer. OPD scores the student's own "
                          "token ids under the teacher: serve a teacher of the policy's model family")


def _score_on(engines: Members, requests: list[Request], temperature: float, parts: int) -> Callable[[], list[list[float]]]:
    """Start scoring ``requests`` in ``parts`` calls (every ``parts``-th request in one), spread
    over live engine actors, all at once; return a function that waits and gives the log-probs
    in request order. Student and teacher split alike, so each side's engine scores the same
    batches: an engine's numbers depend on what shares a batch (padding widths). A batch whose
    engine died for good is scored whole by another engine, so the split survives it."""
    parts = max(1, min(parts, len(requests)))
    jobs = [(list(range(len(requests)))[i::parts],
             ([p for p, _ in requests[i::parts]], [c for _, c in requests[i::parts]], temperature))
            for i in range(parts)] if requests else []
    return engines.deal("score", jobs, len(requests)).collect


class EngineTeacher:
    """A teacher model on engine actors of its own (its folder's weights, never updated)."""

    def __init__(self, engines: list):
        self.engines = as_members(engines, "teacher engine")

    def start(self, requests: list[Request], temperature: float, parts: int) -> Callable[[], list[list[float]]]:
        return _score_on(self.engines, requests, temperature, parts)


class EndpointTeacher:
    """A teacher behind an OpenAI-compatible server (``OpenAIChatClient.prompt_logprobs``), with
    up to ``workers`` requests in flight. Its log-probs are at temperature 1: a server's prompt
    log-probs are the model's own distribution."""

    temperature = 1.0

    def __init__(self, client, workers: int = 8):
        self.client, self.pool = client, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="opd-teacher")

    def _score(self, prompt: list[int], completion: list[int]) -> list[float]:
        _, values = self.client.prompt_logprobs(prompt + completion)
        return [float(v) for v in values[len(prompt):]]

    def start(self, requests: list[Request], temperature: float, parts: int) -> Callable[[], list[list[float]]]:
        futures = [self.pool.submit(self._score, p, c) for p, c in requests]  # one request per trajectory
        return lambda: [f.result() for f in futures]


class Distiller:
    """The driver's handle on OPD: ``apply(groups)`` scores every trajectory under the student
    and the teacher and sets its ``token_advantages``; it returns the iteration's metrics.

    ``temperature`` is the KL's, the same on both sides: the rollout temperature for a model
    teacher (so with teacher = student every advantage is exactly 0), 1 for an endpoint.
    Stateless across iterations, so a restored run needs nothing saved for it."""

    def __init__(self, policy_engines: list, teacher, temperature: float, reward_weight: float, max_model_len: int):
        self.engines, self.teacher = as_members(policy_engines, "engine"), teacher
        self.temperature, self.reward_weight = temperature, reward_weight
        self.limit = max_model_len - 1

    def apply(self, groups: list[list[Trajectory]]) -> dict:
        trajectories = [t for g in groups for t in g]
        spans = [score_span(t.loss_mask, self.limit) for t in trajectories]
        scored = [k for k, s in enumerate(spans) if s is not None]
        requests = [(trajectories[k].ids[:spans[k].start], trajectories[k].ids[spans[k].start:spans[k].end])
                    for k in scored]
        t0 = time.perf_counter()
        # both start before either is awaited: on separate devices they overlap
        teacher_result = self.teacher.start(requests, self.temperature, len(self.engines))
        student_result = _score_on(self.engines, requests, self.temperature, len(self.engines))
        teacher = teacher_result()
        teacher_s = time.perf_counter() - t0
        student = student_result()
        scoring_s = time.perf_counter() - t0
        by_index = {k: (s, t) for k, s, t in zip(scored, student, teacher)}
        kl_sum, kl_tokens = 0.0, 0
        for k, tr in enumerate(trajectories):
            s, t = by_index.get(k, ([], []))
            tr.token_advantages = token_advantages(tr.loss_mask, spans[k], s, t, tr.advantage, self.reward_weight)
            for j, (a, b) in enumerate(zip(s, t)):
                if tr.loss_mask[spans[k].start + j]:
                    kl_sum, kl_tokens = kl_sum + a - b, kl_tokens + 1
        return {"opd/reverse_kl": kl_sum / kl_tokens if kl_tokens else float("nan"), "opd/scored_tokens": kl_tokens,
                "opd/unscored_tokens": sum(t.gen_tokens for t in trajectories) - kl_tokens,
                "opd/teacher_seconds": round(teacher_s, 3), "opd/scoring_seconds": round(scoring_s, 3)}
