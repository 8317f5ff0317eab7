"""Pieces shared by the adapters of other packages' environments (OpenEnv, verifiers).

``Worker``: a daemon thread that runs an adapted environment's calls with a deadline.
``RewardRange``: how a foreign reward maps onto this library's [0, 1]. ``load_object``:
a ``"package.module:attr"`` string (what survives config files and Ray) as the object.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import math
import queue
import threading
from typing import Any, Awaitable, Callable

from envs.base import InfrastructureError, finite_number

#: how much longer than its own deadline the caller waits for an async call to unwind
_GRACE_S = 5.0
#: rounding slack when checking a reward against its declared range
_RANGE_TOL = 1e-9


class Worker:
    """One daemon thread per env that runs its calls in order, with an event loop of its
    own for async ones (a websocket session or an async tool must stay on one loop).

    ``call(fn, timeout_s)`` runs a plain callable: one that never returns leaves the thread
    stuck, so every later call fails at once and the env runner replaces the env.
    ``run(make_coro, timeout_s)`` runs a coroutine, cancelled on the loop at its deadline,
    after which the worker stays usable. The thread is a daemon: a stuck one never holds
    the process at exit."""

    def __init__(self, name: str):
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stuck: str | None = None  # the call that never returned
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
        if self.stuck is not None:
            raise InfrastructureError(f"{what} was not run: {self.stuck} never returned")
        self._start()
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((fn, done))
        try:
            return done.result(timeout_s)
        except concurrent.futures.TimeoutError:
            if done.done():  # the call itself raised TimeoutError
                raise
            if not done.cancel():  # running, and it cannot be interrupted
                self.stuck = what
            raise InfrastructureError(f"{what} did not return within {timeout_s:g} s") from None

    def run(self, make_coro: Callable[[], Awaitable], timeout_s: float, what: str) -> Any:
        async def bounded():
            try:
                return await asyncio.wait_for(make_coro(), timeout_s)
            except asyncio.TimeoutError:
                raise InfrastructureError(f"{what} did not finish within {timeout_s:g} s") from None

        return self.call(lambda: self.loop.run_until_complete(bounded()), timeout_s + _GRACE_S, what)

    def close(self) -> None:
        """Stop the thread after the calls already queued (a stuck one is left behind)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            if self.stuck is None:
                thread.join(_GRACE_S)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            while (job := self._jobs.get()) is not None:
                fn, done = job
                if not done.set_running_or_notify_cancel():
                    continue
                try:
                    done.set_result(fn())
                except BaseException as e:  # the caller decides what it means
                    done.set_exception(e)
        finally:
            # Let what a closed connection left behind (a keepalive task) finish cancelling,
            # as asyncio.run does, so no task is destroyed while pending.
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()


class RewardRange:
    """``env_config["reward_range"] = [lo, hi]``: a foreign reward ``r`` in that range
    becomes ``(r - lo) / (hi - lo)`` in [0, 1], the scale this library reads (1 is a
    success, 0 a failure RTI may correct, ``progress`` ranks the failures). A reward
    outside the declared range means the range is wrong: it raises, so the episode is
    never scored with a made-up number."""

    def __init__(self, value, source: str):
        pair = list(value) if isinstance(value, (list, tuple)) else None
        lo, hi = (finite_number(pair[0]), finite_number(pair[1])) if pair and len(pair) == 2 else (None, None)
        if lo is None or hi is None or not lo < hi:
            raise ValueError(f"env_config['reward_range'] must be [low, high] with finite low < high, got {value!r}")
        self.lo, self.hi, self.source = lo, hi, source

    def scale(self, raw) -> float:
        value = finite_number(raw)
        if value is None:
            raise ValueError(f"{self.source} gave the reward {raw!r}, which is not a finite number")
        scaled = (value - self.lo) / (self.hi - self.lo)
        if not -_RANGE_TOL <= scaled <= 1 + _RANGE_TOL or math.isnan(scaled):
            raise ValueError(f"{self.source} gave the reward {value:g}, outside reward_range [{self.lo:g}, {self.hi:g}]; "
                             "set env_config['reward_range'] to the range its rewards really take")
        return min(max(scaled, 0.0), 1.0)


def load_object(value, key: str, where: str | None = None):
    """``value`` itself when it is not a string, else the object a ``"module:attr"``
    string names (dots after the colon walk attributes). Errors name ``where`` (default:
    ``env_config[key]``)."""
    if not isinstance(value, str):
        return value
    where = where or f"env_config[{key!r}]"
    module, sep, attr = value.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{where} must be 'package.module:attribute', got {value!r}")
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{where} = {value!r} cannot be loaded: {type(e).__name__}: {e}") from None
    return obj


def positive_seconds(cfg: dict, key: str) -> float:
    value = finite_number(cfg[key])
    if value is None or value <= 0 or isinstance(cfg[key], bool):
        raise ValueError(f"env_config[{key!r}] must be a positive number of seconds, got {cfg[key]!r}")
    return value


__all__ = ["Worker", "RewardRange", "load_object", "positive_seconds"]
