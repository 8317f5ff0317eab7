"""``ReplayQueue``: whole groups tagged with the policy version that produced them.

The learner pulls groups from it. ``max_policy_lag`` bounds staleness: a group produced
by weights older than ``current_version - max_policy_lag`` is dropped when the learner
reaches it, and counted, so the metrics say what happened. Lag 0 is strictly on-policy.
"""

from __future__ import annotations

from collections import deque


class ReplayQueue:
    def __init__(self, max_policy_lag: int = 0, capacity: int = 10_000):
        self.max_lag = max_policy_lag
        self.groups: deque = deque()
        self.capacity = capacity
        self.stats = {"put": 0, "got": 0, "dropped_stale": 0, "dropped_full": 0}

    def put(self, groups: list[list[dict]], version: int) -> int:
        for g in groups:
            if len(self.groups) >= self.capacity:
                self.groups.popleft()
                self.stats["dropped_full"] += 1
            self.groups.append((version, g))
            self.stats["put"] += 1
        return len(self.groups)

    def get(self, max_groups: int, current_version: int) -> list[list[dict]]:
        out = []
        while self.groups and len(out) < max_groups:
            version, g = self.groups[0]
            if current_version - version > self.max_lag:
                self.groups.popleft()
                self.stats["dropped_stale"] += 1
                continue
            self.groups.popleft()
            out.append(g)
        self.stats["got"] += len(out)
        return out

    def size(self) -> int:
        return len(self.groups)

    def get_stats(self) -> dict:
        return dict(self.stats, size=len(self.groups))
