"""``PPLGate``: batched teacher-forced scoring for the perplexity gate and reweighting.

Many candidates ask at once ("score these corrected-step ids after this context"); the
gate collects requests for up to ``max_wait_s`` or until ``max_batch`` are waiting and
sends them to an engine as one ``score`` call. Scores are log-probs under the behaviour
weights at the rollout temperature, on exactly the ids that will be trained.

    PPL(u) = exp(-mean_t log pi(u_t | context, u_<t))      keep iff PPL <= delta
    rho_t  = pi(u_t | c_k, u_<t) / pi(u_t | h_k, u_<t)      w_t = clip(rho_t, 1-eps, 1+eps)
"""

from __future__ import annotations

import asyncio
import math

import numpy as np

from rti_actors.faults import Restartable


def perplexity(logprobs: list[float]) -> float:
    if not logprobs:
        return math.inf
    return float(math.exp(-float(np.mean(logprobs))))


def passes_gate(ppl: float, threshold: float) -> bool:
    """delta = 0 rejects everything (plain GRPO); delta = inf accepts everything."""
    if threshold <= 0:
        return False
    return math.isinf(threshold) or ppl <= threshold


def token_weights(logp_guided: list[float], logp_original: list[float], eps_cal: float) -> tuple[list[float], dict]:
    """w_t = clip(exp(lp_c - lp_h), 1 - eps, 1 + eps); eps 0 gives all ones (ablation)."""
    log_rho = np.asarray(logp_guided, dtype=np.float64) - np.asarray(logp_original, dtype=np.float64)
    rho = np.exp(log_rho)
    w = np.clip(rho, 1.0 - eps_cal, 1.0 + eps_cal)
    stats = {"mean_abs_log_rho": float(np.abs(log_rho).mean()) if len(log_rho) else 0.0,
             "clip_frac": float(np.mean((rho < 1 - eps_cal) | (rho > 1 + eps_cal))) if len(rho) else 0.0}
    return w.tolist(), stats


class PPLGate(Restartable):
    """An async Ray actor: ``await gate.score(context_ids, completion_ids)``."""

    def __init__(self, engine_pool, temperature: float, max_batch: int = 16, max_wait_s: float = 0.02):
        self.engines = engine_pool
        self.temperature = temperature
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.pending: list[tuple[list[int], list[int], asyncio.Future]] = []
        self.timer: asyncio.Task | None = None
        self.stats = {"requests": 0, "engine_calls": 0}

    async def score(self, context_ids: list[int], completion_ids: list[int]) -> list[float]:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((list(context_ids), list(completion_ids), fut))
        self.stats["requests"] += 1
        if len(self.pending) >= self.max_batch:
            await self._flush()
        elif self.timer is None:
            self.timer = asyncio.create_task(self._flush_later())
        return await fut

    async def score_many(self, requests: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        return list(await asyncio.gather(*(self.score(c, u) for c, u in requests)))

    async def _flush_later(self):
        await asyncio.sleep(self.max_wait_s)
        self.timer = None
        await self._flush()

    async def _flush(self):
        batch, self.pending = self.pending, []
        if not batch:
            return
        self.stats["engine_calls"] += 1
        try:
            # on a live engine: one dead for good is dropped and the batch scored by the next
            results = await self.engines.score_async([b[0] for b in batch], [b[1] for b in batch], self.temperature)
        except Exception as e:  # every waiter learns about the failure
            for *_, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
            return
        for (*_, fut), lps in zip(batch, results):
            if not fut.done():
                fut.set_result(lps)

    def get_stats(self) -> dict:
        return dict(self.stats)
