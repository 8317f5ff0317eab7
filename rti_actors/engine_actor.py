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

    def init_weight_sync(self, host: str, port: int, rank: int, world_size: int, backend: str) -> bool:
        """Join the learner's weight group (``rti_actors.weight_sync``) as ``rank``."""
        from rti_actors.weight_sync import init_group
        self._weight_group = init_group(host, port, rank, world_size, backend)
        return True

    def receive_weights(self, meta: list, version: int) -> int:
        """Receive a broadcast of the learner's weights and install them as ``version``."""
        import torch

        from rti_actors.weight_sync import receive
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return self.engine.update_weights(receive(self._weight_group, meta, device), version)

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
