"""``ReplayQueue``: whole groups tagged with the policy version that produced them.

The learner pulls groups from it. A group's version is the oldest weights version any of
its turns was sampled with (the engines report it per generation). ``max_policy_lag``
bounds staleness: a group older than ``current_version - max_policy_lag`` is dropped when
the learner reaches it, and counted. Lag 0 is strictly on-policy; with ``max_policy_lag >= 1``
the driver samples the next iteration while the learner trains on this one, so its groups
arrive one version old. ``lag_counts`` says how old the trained groups were.

The queue lives in an actor that Ray restarts after a crash, empty. ``put`` and ``get``
both answer with the queue's incarnation, so the driver sees when the groups it put are
gone before the learner got them, and puts them again (it keeps them until the step).
"""

from __future__ import annotations

from collections import deque

from rti_actors.faults import Restartable


class ReplayQueue(Restartable):
    def __init__(self, max_policy_lag: int = 0, capacity: int = 10_000):
        self.max_lag = max_policy_lag
        self.groups: deque = deque()
        self.capacity = capacity
        self.stats = {"put": 0, "got": 0, "dropped_stale": 0, "dropped_full": 0}
        self.lag_counts: dict[int, int] = {}

    def put(self, groups: list[list], version: int | list[int]) -> str:
        """``version``: one for all the groups, or one per group. Returns the incarnation."""
        versions = version if isinstance(version, list) else [version] * len(groups)
        if len(versions) != len(groups):
            raise ValueError(f"put got {len(groups)} groups but {len(versions)} versions")
        for g, v in zip(groups, versions):
            if len(self.groups) >= self.capacity:
                self.groups.popleft()
                self.stats["dropped_full"] += 1
            self.groups.append((v, g))
            self.stats["put"] += 1
        return self.incarnation()

    def get(self, max_groups: int, current_version: int) -> tuple[str, list[list]]:
        """(incarnation, up to ``max_groups`` groups not older than the lag bound)."""
        out = []
        while self.groups and len(out) < max_groups:
            version, g = self.groups.popleft()
            lag = current_version - version
            if lag > self.max_lag:
                self.stats["dropped_stale"] += 1
                continue
            self.lag_counts[lag] = self.lag_counts.get(lag, 0) + 1
            out.append(g)
        self.stats["got"] += len(out)
        return self.incarnation(), out

    def clear(self) -> int:
        """Drop what is queued (the driver puts an iteration's groups again after a crash)."""
        n, self.groups = len(self.groups), deque()
        return n

    def size(self) -> int:
        return len(self.groups)

    def get_stats(self) -> dict:
        return dict(self.stats, size=len(self.groups), lag_counts=dict(sorted(self.lag_counts.items())))
