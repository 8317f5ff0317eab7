"""Calls to the actors of one kind that go on while any of them is alive.

Ray restarts a crashed actor in place up to ``max_restarts`` times and re-runs the calls
that were in flight; after that, every call to it raises ``ActorDiedError``. ``Members``
holds the actors of one kind (the env runners, the engines), remembers the ones found dead
for good, and sends each call to a live one:

- ``call``: one call to any live member, on the next one when it died;
- ``spread`` / ``send``: a list of items in shards, one per live member, a dead member's
  shard sent again, whole, to another live one; ``map``: one call per item, spread alike;
- ``deal``: calls the caller has split itself (a batch that must stay whole), each on a live
  member, a dead member's call sent again, unchanged, to another;
- ``each``: the same call on every live member (publishing weights), the dead ones dropped.

Results come back in item order, whichever member played them: episodes are seeded by their
spec, never by the runner that plays them, so a shard played elsewhere gives what it would
have given. Only when no member is left does a call raise ``NoneLeft``, whose first line
names the kind, the member that died last and why.

A member is an actor handle, the name of a named actor (what crosses into other actors'
constructors: a plain string cannot be lost when Ray restarts that actor), or an in-process
object with the same methods (the unit tests), all called alike.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Callable

import ray

from rti_actors.faults import cause_of, died, gone

log = logging.getLogger("rti_actors")


class NoneLeft(RuntimeError):
    """Every actor of a kind is dead for good: the run cannot go on. The first line names
    the kind, the member that died last and its cause; the next, the others."""


class _Done:
    """The outcome of a call to an in-process member, kept where an ObjectRef would be."""

    def __init__(self, fn: Callable, args: tuple):
        self.value, self.error = None, None
        try:
            self.value = fn(*args)
        except Exception as err:  # handled like a Ray call's error, by the caller
            self.error = err

    def get(self):
        if self.error is not None:
            raise self.error
        return self.value


def _get(ref):
    return ref.get() if isinstance(ref, _Done) else ray.get(ref)


class Members:
    """The actors of one kind (``kind``: "env runner", "engine"), used as the list of them
    (``members[0]`` is the first actor as given) and called through the methods below.
    ``start``: where ``pick``'s rotation starts; ``max_tries``: how often one job is sent
    again after an actor that was restarting, not dead, failed it."""

    def __init__(self, kind: str, actors: list, start: int = 0, max_tries: int = 3):
        if not actors:
            raise ValueError(f"no {kind} was given: at least one is needed")
        self.kind, self.actors = kind, list(actors)
        self.start, self.max_tries = start, max_tries
        self.dead: dict[int, str] = {}  # member -> why it is dead, in the order they were found
        self._rotation = itertools.count(start)
        self._handles: dict[str, object] = {}  # names resolved in this process

    def __len__(self) -> int:
        return len(self.actors)

    def __getitem__(self, i):
        return self.actors[i]

    def __iter__(self):
        return iter(self.actors)

    def label(self, i: int) -> str:
        return f"{self.kind} {i}"

    def live(self) -> list[int]:
        return [i for i in range(len(self.actors)) if i not in self.dead]

    def pick(self) -> int:
        """The next live member in rotation."""
        if len(self.dead) == len(self.actors):
            raise self.none_left()
        while True:
            i = next(self._rotation) % len(self.actors)
            if i not in self.dead:
                return i

    def none_left(self) -> NoneLeft:
        last = next(reversed(self.dead))
        text = f"{self.label(last)} is dead for good ({self.dead[last]}) and no {self.kind} is left"
        earlier = [f"{self.label(i)} ({why})" for i, why in self.dead.items() if i != last]
        return NoneLeft(text + ("\nthe others died before it: " + "; ".join(earlier) if earlier else ""))

    def bury(self, i: int, why: BaseException | str) -> None:
        """Member ``i`` is dead for good: no call goes to it any more."""
        if i in self.dead:
            return
        self.dead[i] = why if isinstance(why, str) else cause_of(why)
        left = len(self.actors) - len(self.dead)
        log.warning("%s is dead for good (%s); %s", self.label(i), self.dead[i],
                    f"{left} left to take its calls" if left else f"no {self.kind} is left")

    def handle(self, i: int):
        """The actor of member ``i``: a name is looked up once per process. A name no actor
        has any more is an actor that is dead for good (Ray frees it then)."""
        member = self.actors[i]
        if not isinstance(member, str):
            return member
        if member not in self._handles:
            try:
                self._handles[member] = ray.get_actor(member)
            except ValueError:
                self.bury(i, f"no actor is named {member!r} any more")
                return None
        return self._handles[member]

    # ---- one call ---------------------------------------------------------------------------
    def call(self, method: str, *args):
        """``method(*args)`` on a live member, on another one while they die."""
        tries = 0
        while True:
            i, ref = self._send(method, args)
            try:
                return _get(ref)
            except Exception as err:
                tries = self._failed(i, err, tries)
                time.sleep(_pause(i in self.dead, tries))

    async def acall(self, method: str, *args):
        """``call`` for an async actor: the event loop goes on while it waits."""
        tries = 0
        while True:
            i, ref = self._send(method, args)
            try:
                return ref.get() if isinstance(ref, _Done) else await ref
            except Exception as err:
                tries = self._failed(i, err, tries)
                await asyncio.sleep(_pause(i in self.dead, tries))

    def each(self, method: str, *args, only: list[int] | None = None) -> dict[int, object]:
        """``method(*args)`` on every live member (of ``only``): {member: result}; a member
        that dies meanwhile is left out. Raises ``NoneLeft`` when none is left."""
        todo = {i: 0 for i in (self.live() if only is None else only) if i not in self.dead}
        out: dict[int, object] = {}
        while todo:
            refs = {i: self._start(i, method, args) for i in todo}
            for i, ref in refs.items():
                if ref is None:  # its name is gone: buried
                    del todo[i]
                    continue
                try:
                    out[i] = _get(ref)
                    del todo[i]
                except Exception as err:
                    todo[i] = self._failed(i, err, todo[i])
                    if i in self.dead:
                        del todo[i]
                    else:
                        time.sleep(_pause(False, todo[i]))
        if len(self.dead) == len(self.actors):
            raise self.none_left()
        return out

    # ---- many calls -------------------------------------------------------------------------
    def send(self, method: str, items: list, *args, per_item: bool = False) -> Sent:
        """Start ``method(shard, *args)`` on every live member, the items dealt round-robin
        into one shard per member (``per_item``: ``method(item, *args)`` per item, dealt
        alike); ``Sent.collect`` waits for them."""
        if per_item:
            return self.deal(method, [([k], (item, *args)) for k, item in enumerate(items)], len(items), True)
        n = len(self.live() or [self.pick()])  # pick raises NoneLeft
        shards = [list(range(len(items)))[j::n] for j in range(n)]
        return self.deal(method, [(job, ([items[k] for k in job], *args)) for job in shards if job], len(items))

    def spread(self, method: str, items: list, *args) -> list:
        """``send`` and ``collect``: one result per item, in item order."""
        return self.send(method, items, *args).collect()

    def map(self, method: str, items: list, *args) -> list:
        """``method(item, *args)`` for every item, spread over the live members, in item order."""
        return self.send(method, items, *args, per_item=True).collect()

    def deal(self, method: str, jobs: list[tuple[list[int], tuple]], n_items: int, one_each: bool = False) -> Sent:
        """Start every job (the items it covers, its call's arguments), job j on the j-th live
        member; a job is sent again whole, never re-split, when its member dies."""
        live = self.live() or [self.pick()]
        sent = Sent(self, method, jobs, n_items, one_each)
        for j in range(len(jobs)):
            sent.start(j, live[j % len(live)])
        return sent

    # ---- pieces -----------------------------------------------------------------------------
    def _send(self, method: str, args: tuple, i: int | None = None):
        """Start ``method(*args)`` on member ``i`` (None or dead: the next live one): (member, ref)."""
        while True:
            k = self.pick() if i is None or i in self.dead else i
            ref = self._start(k, method, args)
            if ref is not None:
                return k, ref
            i = None  # its name is gone: buried, try another

    def _start(self, i: int, method: str, args: tuple):
        """Start ``method(*args)`` on member ``i``; None when its name no longer resolves."""
        target = self.handle(i)
        if target is None:
            return None
        fn = getattr(target, method)
        return fn.remote(*args) if hasattr(fn, "remote") else _Done(fn, args)

    def _failed(self, i: int, err: Exception, tries: int) -> int:
        """After member ``i`` failed a call with ``err``: bury it if it is dead for good, count
        a try if it was restarting, else raise (the call itself raised, or another actor it
        needed died). Returns the tries counted."""
        if not died(err) or not self._names(i, err):
            raise _unwrapped(err)
        if gone(err):
            self.bury(i, err)
            return tries
        if tries >= self.max_tries:
            raise RuntimeError(f"{self.label(i)} kept failing while Ray restarted it ({cause_of(err)}) after "
                               f"{tries + 1} tries; raise fault_tolerance(max_task_retries=...)") from err
        return tries + 1

    def _names(self, i: int, err: Exception) -> bool:
        """Whether ``err`` is about member ``i`` itself, not about another actor whose result
        the call needed (a dead learner's weights passed to an engine)."""
        about = getattr(err, "actor_id", None)
        member = self.actors[i]
        mine = getattr(self._handles.get(member) if isinstance(member, str) else member, "_actor_id", None)
        return about is None or mine is None or about == mine.hex()


def _pause(buried: bool, tries: int) -> float:
    """Seconds to wait before sending a failed call again: none after a death for good (the
    next member takes it), a moment after a restarting actor failed it."""
    return 0.0 if buried else min(0.5 * tries, 5.0)


def _unwrapped(err: Exception) -> Exception:
    """A ``NoneLeft`` raised inside an actor (its engines all dead) as itself, so its first
    line still names the dead actor; any other error as it came."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, NoneLeft):
        out = NoneLeft(*cause.args)
        out.__cause__ = err
        return out
    return err


class Sent:
    """Jobs in flight on the members: each the items it covers and its call's arguments (a
    shard and the shared arguments, or one call's own); ``collect`` gathers them. With
    ``one_each`` a job's call answers for its one item; else with a list, one per item."""

    def __init__(self, members: Members, method: str, jobs: list[tuple[list[int], tuple]], n_items: int,
                 one_each: bool):
        self.members, self.method, self.jobs = members, method, jobs
        self.n_items, self.one_each = n_items, one_each
        self.results: list = [None] * len(jobs)
        self.pending: dict = {}  # ref -> (job, member, tries)
        self.resent = 0  # jobs sent again after their member died or was restarting

    def start(self, j: int, i: int | None, tries: int = 0) -> None:
        k, ref = self.members._send(self.method, self.jobs[j][1], i)
        self.pending[ref] = (j, k, tries)

    def collect(self, on_result: Callable[[list], None] | None = None) -> list:
        """One result per item, in item order; ``on_result(results)`` as each job's arrive."""
        while self.pending:
            local = [r for r in self.pending if isinstance(r, _Done)]
            ref = local[0] if local else ray.wait(list(self.pending), num_returns=1)[0][0]
            j, i, tries = self.pending.pop(ref)
            try:
                out = _get(ref)
            except Exception as err:
                tries = self.members._failed(i, err, tries)
                time.sleep(_pause(i in self.members.dead, tries))
                self.resent += 1
                self.start(j, None, tries)  # the next live member (pick raises NoneLeft)
                continue
            self.results[j] = [out] if self.one_each else list(out)
            if on_result is not None:
                on_result(self.results[j])
        flat: list = [None] * self.n_items
        for (covers, _), out in zip(self.jobs, self.results):
            for k, r in zip(covers, out):
                flat[k] = r
        return flat


def as_members(actors, kind: str, max_tries: int = 3) -> Members:
    """``actors`` as ``Members``: itself when it is one (its dead stay known), else a fresh one."""
    return actors if isinstance(actors, Members) else Members(kind, actors, max_tries=max_tries)
