"""Inference engine actors and the client-side pool that spreads requests over them.

An ``EngineActor`` owns one engine (vLLM or transformers) and serves ``generate``,
``score`` and ``update_weights``. Rollouts, intervention roles and the PPL gate all call
the same actors, so they always see the same weights version. Ray calls to one actor run
one at a time, which is what the vLLM engine's scoring relies on.
"""

from __future__ import annotations

import itertools

import ray

from policies.engines import SamplingParams, make_engine


class EngineActor:
    def __init__(self, kind: str, model_path: str, engine_kwargs: dict):
        self.engine = make_engine(kind, model_path, **engine_kwargs)

    def generate(self, prompts: list[list[int]], sampling: dict, seeds: list[int] | None = None) -> list[dict]:
        gens = self.engine.generate(prompts, SamplingParams(**sampling), seeds=seeds)
        return [g.__dict__ for g in gens]

    def score(self, prompts: list[list[int]], completions: list[list[int]], temperature: float) -> list[list[float]]:
        return self.engine.score(prompts, completions, temperature)

    def update_weights(self, named_tensors, version: int) -> int:
        return self.engine.update_weights(named_tensors, version)

    def version(self) -> int:
        return self.engine.version

    def max_model_len(self) -> int:
        return self.engine.max_model_len

    def ping(self) -> bool:
        return True


class EnginePool:
    """Round-robin over engine actor handles; picklable, so env runners carry one."""

    def __init__(self, handles: list):
        if not handles:
            raise ValueError("an engine pool needs at least one engine actor")
        self.handles = list(handles)
        self._next = itertools.count()

    def pick(self):
        return self.handles[next(self._next) % len(self.handles)]

    def generate(self, prompts, sampling: dict, seeds=None) -> list[dict]:
        return ray.get(self.pick().generate.remote(prompts, sampling, seeds))

    def score(self, prompts, completions, temperature: float) -> list[list[float]]:
        return ray.get(self.pick().score.remote(prompts, completions, temperature))

    def __getstate__(self):
        return {"handles": self.handles}

    def __setstate__(self, state):
        self.handles = state["handles"]
        self._next = itertools.count()
