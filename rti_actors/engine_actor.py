"""Inference engine actors and the client-side pool that spreads requests over them.

An ``EngineActor`` owns one engine (vLLM or transformers) and serves ``generate``,
``score`` and ``update_weights``. Rollouts, intervention roles and the PPL gate all call
the same actors, so they always see the same weights version.

It is an async actor so that requests from many callers meet: ``generate`` calls that
arrive while the engine is busy (or within ``merge_window_s`` of an idle engine) and have
the same sampling settings become one engine call, so two env runners with four episodes
each cost one batch of eight, not two batches of four. Every prompt carries its own seed
(an explicit one, ``sampling.seed + i``, or a fresh random one), so a request samples
the same tokens whatever it is merged with. The engine itself lives on one worker thread:
calls reach it one at a time, in arrival order, which is what the vLLM engine's scoring
and the weight updates rely on.

An engine that Ray restarts after a crash loads its model folder again, i.e. version 0.
Before it serves anything it installs the latest published weights from ``LatestWeights``
(the driver registers each publish there), so a retried request meets the current policy.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import ray

from policies.engines import Generation, SamplingParams, make_engine
from policies.engines.base import check_prompts
from rti_actors.failover import Members
from rti_actors.faults import Restartable
from rti_actors.weight_sync import init_group, receive


def explicit_seeds(n: int, sampling: SamplingParams, seeds: list[int] | None, rng: random.Random) -> list[int]:
    """One seed per prompt: the caller's, else ``sampling.seed + i``, else random."""
    if seeds is not None:
        if len(seeds) != n:
            raise ValueError(f"generate got {n} prompts but {len(seeds)} seeds; pass one seed per prompt")
        return [int(s) for s in seeds]
    if sampling.seed is not None:
        return [int(sampling.seed) + i for i in range(n)]
    return [rng.getrandbits(63) for _ in range(n)]


def _checked(sampling: SamplingParams) -> SamplingParams:
    """The settings an engine call runs with: seeds are per prompt from here on."""
    if not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling must be a policies.engines.SamplingParams, got {type(sampling).__name__}")
    return replace(sampling, seed=None)


class LatestWeights(Restartable):
    """The version and object-store ref of the last published weights (an actor).

    Holding the ref keeps that one copy alive in the object store for restarted engines. A
    broadcast publish leaves no copy there: then only the version is known, and a restarted
    engine serves its folder's weights until the driver's version check repairs it."""

    def __init__(self):
        self.version, self.refs = 0, None

    def set(self, version: int, refs: list | None) -> None:
        self.version, self.refs = version, refs  # refs: [ObjectRef], wrapped so Ray keeps it a ref

    def get(self) -> tuple[int, list | None]:
        return self.version, self.refs


class EngineActor(Restartable):
    """``latest``: the name of the run's ``LatestWeights`` actor (or its handle). A name, not
    a handle: Ray re-runs the constructor on a restart with the arguments it kept, and a
    plain string is one it cannot lose."""

    def __init__(self, kind: str, model_path: str, engine_kwargs: dict, merge_window_s: float = 0.005,
                 latest: str | None = None):
        # The engine is built on its worker thread too: a second thread doing torch work
        # starts a second OpenMP team, and on a small CPU the two teams' spinning threads
        # compete for the same cores and slow generation down noticeably.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self.engine = self._worker.submit(make_engine, kind, model_path, **engine_kwargs).result()
        if latest is not None:
            latest = ray.get_actor(latest) if isinstance(latest, str) else latest
            version, refs = ray.get(latest.get.remote())
            if refs:  # a restart: serve the current policy, not the folder's weights
                self._worker.submit(self.engine.update_weights, ray.get(refs[0]), version).result()
        self.merge_window_s = merge_window_s
        self._rng = random.Random()
        self._pending: dict[str, tuple] = {}  # repr(params) -> (params, [(prompts, seeds, future)])
        self._drainer: asyncio.Task | None = None
        self.stats = {"generate_requests": 0, "generate_engine_calls": 0, "prompts": 0}

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    # ---- generation: concurrent requests with equal settings become one engine call ---------
    async def generate(self, prompts: list[list[int]], sampling: SamplingParams,
                       seeds: list[int] | None = None) -> list[Generation]:
        if not prompts:
            return []
        # a bad setting or prompt fails this caller only, not the batch it would join
        params = _checked(sampling)
        check_prompts(prompts, self.engine.max_model_len)
        seeds = explicit_seeds(len(prompts), sampling, seeds, self._rng)
        fut = asyncio.get_running_loop().create_future()
        self._pending.setdefault(repr(params), (params, []))[1].append((list(prompts), seeds, fut))
        self.stats["generate_requests"] += 1
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self):
        try:
            await asyncio.sleep(self.merge_window_s)  # let callers that arrive together meet
            while self._pending:
                params, batch = self._pending.pop(next(iter(self._pending)))
                await self._generate_batch(params, batch)
        finally:
            self._drainer = None

    async def _generate_batch(self, params: SamplingParams, batch: list):
        prompts = [p for b in batch for p in b[0]]
        seeds = [s for b in batch for s in b[1]]
        self.stats["generate_engine_calls"] += 1
        self.stats["prompts"] += len(prompts)
        try:
            gens = await self._run(self.engine.generate, prompts, params, seeds)
        except Exception as e:  # every caller in the batch learns about the failure
            for *_, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
            return
        start = 0
        for p, _, fut in batch:
            if not fut.done():
                fut.set_result(gens[start:start + len(p)])
            start += len(p)

    # ---- everything else goes to the engine thread in arrival order -------------------------
    async def score(self, prompts: list[list[int]], completions: list[list[int]], temperature: float) -> list[list[float]]:
        return await self._run(self.engine.score, prompts, completions, temperature)

    async def update_weights(self, named_tensors, version: int) -> int:
        return await self._run(self.engine.update_weights, named_tensors, version)

    async def init_weight_sync(self, host: str, port: int, rank: int, world_size: int, backend: str) -> bool:
        """Join the learner's weight group (``rti_actors.weight_sync``) as ``rank``."""
        self._weight_group = await self._run(init_group, host, port, rank, world_size, backend)
        return True

    async def receive_weights(self, meta: list, version: int) -> int:
        """Receive a broadcast of the learner's weights and install them as ``version``."""
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        return await self._run(lambda: self.engine.update_weights(receive(self._weight_group, meta, device), version))

    async def version(self) -> int:
        return self.engine.version

    async def max_model_len(self) -> int:
        return self.engine.max_model_len

    async def get_stats(self) -> dict:
        return dict(self.stats)

    async def ping(self) -> bool:
        return True


class EnginePool:
    """Round-robin over engine actors; picklable, so env runners carry one.

    ``engines``: actor handles, or the names of named engine actors (what build passes, so
    an actor that carries a pool holds only strings and Ray can always restart it). Every
    pickled copy (one per env runner, gate or role actor) starts its rotation at a different
    engine, so callers that move in lockstep do not all land on the same one. A random start
    (as gRPC clients use) would put two runners on the same one of two engines half the time.

    An engine dead for good (its restarts spent) is dropped by the copy that finds it, and
    the call goes to the next one, so the caller's episode is not lost; only when every
    engine is dead does a call raise ``failover.NoneLeft``, naming the engine and its cause.
    """

    def __init__(self, engines: list, start: int = 0):
        if not engines:
            raise ValueError("an engine pool needs at least one engine actor")
        self.members = Members("engine", engines, start)
        self._copies = itertools.count(1)

    @property
    def handles(self) -> list:
        """The engines as given (handles or names)."""
        return self.members.actors

    def pick(self):
        return self.members.actors[self.members.pick()]

    def generate(self, prompts, sampling: SamplingParams, seeds=None) -> list[Generation]:
        return self.members.call("generate", prompts, sampling, seeds)

    async def generate_async(self, prompts, sampling: SamplingParams, seeds=None) -> list[Generation]:
        """``generate`` from an event loop (the agent endpoint): other requests go on meanwhile."""
        return await self.members.acall("generate", prompts, sampling, seeds)

    def score(self, prompts, completions, temperature: float) -> list[list[float]]:
        return self.members.call("score", prompts, completions, temperature)

    def call(self, method: str, *args):
        """Any other engine method, on a live engine (``max_model_len``)."""
        return self.members.call(method, *args)

    async def score_async(self, prompts, completions, temperature: float) -> list[list[float]]:
        """``score`` from an async actor (the gate)."""
        return await self.members.acall("score", prompts, completions, temperature)

    def __getstate__(self):
        # Each copy takes the next start offset from the pool it is pickled from (Ray pickles
        # an actor's arguments once per actor), so N runners over N engines start on N different
        # engines, deterministically. A per-copy in-flight count would not help: a copy sees
        # only its own calls, and its caller makes them one at a time.
        return {"handles": self.members.actors, "start": self.members.start + next(self._copies)}

    def __setstate__(self, state):
        self.__init__(state["handles"], state.get("start", 0))


class LocalEngines:
    """An engine in this process behind the calls the actors make of a pool (``generate``,
    ``score``) and of the gate (``score_many``, unbatched): the intervention's stages and an
    env runner then run in one process, as the unit tests and single-process tools do.
    ``temperature`` is the gate's: the rollout temperature the behaviour log-probs had."""

    def __init__(self, engine, temperature: float = 1.0):
        self.engine, self.temperature = engine, temperature

    def generate(self, prompts, sampling: SamplingParams, seeds=None) -> list[Generation]:
        params = _checked(sampling)
        return self.engine.generate(prompts, params, explicit_seeds(len(prompts), sampling, seeds, random.Random()))

    async def generate_async(self, prompts, sampling: SamplingParams, seeds=None) -> list[Generation]:
        return self.generate(prompts, sampling, seeds)

    def score(self, prompts, completions, temperature: float) -> list[list[float]]:
        return self.engine.score(prompts, completions, temperature)

    def score_many(self, requests: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        return self.score([c for c, _ in requests], [u for _, u in requests], self.temperature)
