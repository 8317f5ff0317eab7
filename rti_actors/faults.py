"""Knowing which actors restarted, so that recovery is counted and never silent.

Ray restarts a crashed actor in place (``max_restarts``): its handle stays valid and its
constructor runs again in a new process. Every actor of the graph mixes in ``Restartable``,
whose ``incarnation()`` names the process it lives in; ``ActorMonitor`` asks every actor for
it after each iteration and counts, per actor kind, the ones whose answer changed. What
the driver redid because of a crash (a rollout chunk re-run, an episode sampled by stale
weights, a learner step redone) it counts itself; both reach ``metrics["faults/..."]``.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import ray

# one per worker process: Ray runs each actor in a process of its own and a restart
# starts a new one, so a new value means the actor was rebuilt
_PROCESS = uuid.uuid4().hex


# What a call raises when the actor's process is gone: it crashed or was killed, or Ray's
# memory monitor killed it to save the node (``OutOfMemoryError``, not an actor error, though
# the actor restarts or dies just the same)
ACTOR_FAILURES = (ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError)


def died(err: BaseException) -> bool:
    """Whether ``err`` says the actor called is dead or restarting, rather than that the call
    itself raised: Ray makes a task's exception an instance of its cause's class too, so a
    call that failed because *another* actor died also looks like a ``RayActorError``."""
    return isinstance(err, ACTOR_FAILURES) and not isinstance(err, ray.exceptions.RayTaskError)


def gone(err: BaseException) -> bool:
    """Whether ``err`` says the actor called is dead for good: its restarts are spent or it was
    killed for good. One that is restarting raises ``ActorUnavailableError`` instead."""
    return died(err) and isinstance(err, ray.exceptions.ActorDiedError)


def cause_of(err: BaseException) -> str:
    """Why Ray says an actor died, in one line. Its message opens with a generic sentence and
    tab-indented fields (class, id, pid); the reason is the line after them, or, when the
    constructor raised, the traceback's last line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip() and not line.startswith("\t")]
    if not lines:
        return type(err).__name__
    if lines[0].startswith("The actor died because of an error raised in its creation task"):
        return f"its constructor raised {lines[-1]}"[:300]
    reasons = [line for line in lines if not line.startswith("The actor died unexpectedly before finishing")]
    return (reasons[-1] if reasons else lines[0])[:300]


class Restartable:
    """Mixin for actor classes: ``incarnation()`` changes when the actor is restarted."""

    def incarnation(self) -> str:
        return _PROCESS


class ActorMonitor:
    """``kinds``: {kind: [actor handles]} (e.g. "engine", "env_runner", "learner").

    ``check()`` returns the restarts counted so far per kind, plus the actors that no
    longer answer (restarts used up) as ``dead/<kind>``."""

    def __init__(self, kinds: dict[str, list], timeout_s: float = 120.0):
        self.kinds = {k: [a for a in v if a is not None] for k, v in kinds.items()}
        self.timeout_s = timeout_s
        self.restarts: Counter = Counter()
        self._seen: dict[tuple[str, int], str] = {}
        self.check()  # the incarnations the graph started with

    def replace(self, kind: str, actors: list) -> None:
        """A kind whose actors the driver rebuilt itself (the learner group)."""
        self.kinds[kind] = list(actors)
        for key in [k for k in self._seen if k[0] == kind]:
            del self._seen[key]
        self.check()

    def check(self) -> dict[str, int]:
        todo = [(kind, i, a) for kind, actors in self.kinds.items() for i, a in enumerate(actors)]
        dead: Counter = Counter()
        deadline = time.monotonic() + self.timeout_s
        while todo:
            calls = [(kind, i, a, a.incarnation.remote()) for kind, i, a in todo]
            ray.wait([r for *_, r in calls], num_returns=len(calls), timeout=max(deadline - time.monotonic(), 0))
            todo = []
            for kind, i, a, ref in calls:
                try:
                    now = ray.get(ref, timeout=0)
                except ray.exceptions.ActorUnavailableError:
                    # Ray is restarting it, and a call to an actor that allows no task retries
                    # fails meanwhile: ask again, so the restart is counted once it is up
                    if time.monotonic() < deadline:
                        todo.append((kind, i, a))
                    else:
                        dead[kind] += 1
                    continue
                except (*ACTOR_FAILURES, ray.exceptions.GetTimeoutError):
                    dead[kind] += 1
                    continue
                before = self._seen.get((kind, i))
                if before is not None and before != now:
                    self.restarts[kind] += 1
                self._seen[(kind, i)] = now
            if todo:
                time.sleep(0.5)
        return {**{f"restarts/{k}": self.restarts[k] for k in self.kinds}, **{f"dead/{k}": n for k, n in dead.items()}}
