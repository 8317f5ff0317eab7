"""Navigation tasks: sampling, the five ordering levels, the gold annotation, the splits.

A task is a driving trip in one city: an origin (a hotel, station or airport — the anchor),
3 to 9 *waypoints* (attractions within 50 km of the anchor) and a destination (station,
airport, hotel or mall, also within 50 km). "Waypoints" counts the intermediate stops only;
the ``direction`` call carries them in its ``waypoints`` argument (at most 16, so 9 fit).

Ordering levels. The allowed visiting orders are always a *weak order*: the waypoints are
split into ordered groups, the groups are visited one after the other and the stops inside
a group in any order. The level fixes the group structure (n = number of waypoints):

    level 0  one group                      any order                      n! orders
    level 1  one stop pinned first or last  "先去X，其他随意"              (n-1)!
    level 2  two blocks, each >= 2 stops    "先逛A、B，再去C、D"           k!(n-k)!  (n=3: 1+2)
    level 3  a full order except one        "依次去A、B、C，B和C先后都行"  2
             adjacent pair that may swap
    level 4  a full order                   "严格按A→B→C"                  1

The number of allowed orders never increases with the level. Splits: tasks are drawn from
one seeded stream with the (waypoint count, level) cell cycling through all 35 cells, so
both splits cover every cell; the first 150 distinct tasks are the test split, the next 600
the train split. Two tasks are distinct when their (city, origin, destination, waypoint
set) differ, so the splits share no task.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, field

from envs.navigation.geo import haversine_m
from envs.navigation.world import POI, World, build_world

SPLIT_SIZES = {"test": 150, "train": 600}
MIN_WAYPOINTS, MAX_WAYPOINTS = 3, 9
LEVELS = (0, 1, 2, 3, 4)
ANCHOR_RADIUS_M = 50_000.0


@dataclass(frozen=True)
class NavTask:
    task_id: str
    city: str                       # full city name
    origin: POI
    destination: POI
    waypoints: tuple[POI, ...]      # in the order the groups are visited
    groups: tuple[tuple[int, ...], ...]  # indices into ``waypoints``; groups in visiting order
    level: int
    pinned: str = ""                # level 1: "first" or "last"
    requests: dict | None = field(default=None, compare=False)  # written requests (task files)

    @property
    def allowed_order_count(self) -> int:
        return math.prod(math.factorial(len(g)) for g in self.groups)

    def order_allowed(self, order: list[int]) -> bool:
        """Is ``order`` (waypoint indices in visiting order) one of the allowed orders?"""
        if sorted(order) != list(range(len(self.waypoints))):
            return False
        group_of = {i: g for g, members in enumerate(self.groups) for i in members}
        ranks = [group_of[i] for i in order]
        return all(a <= b for a, b in zip(ranks, ranks[1:]))

    def allowed_orders(self, limit: int = 24) -> list[list[int]] | None:
        """All allowed orders when there are at most ``limit`` of them, else None."""
        if self.allowed_order_count > limit:
            return None
        orders = [[]]
        for group in self.groups:
            orders = [o + list(p) for o in orders for p in _permutations(group)]
        return orders

    def canonical_order(self) -> list[int]:
        return [i for g in self.groups for i in g]

    def evidence(self) -> dict:
        """The gold annotation, for the Validator and the oracle (never observed)."""
        place = lambda p: {"name": p.name, "location": p.lonlat, "address": p.address,  # noqa: E731
                           "city": p.city.name, "district": p.district}
        names = [p.name for p in self.waypoints]
        orders = self.allowed_orders()
        return {
            "task_id": self.task_id, "city": self.city, "level": self.level,
            "origin": place(self.origin), "destination": place(self.destination),
            "waypoints": [place(p) for p in self.waypoints],
            "allowed_orders": {
                "groups": [[names[i] for i in g] for g in self.groups],
                "rule": "visit the groups one after another; inside a group any order is allowed",
                "count": self.allowed_order_count,
                "orders": [[names[i] for i in o] for o in orders] if orders is not None else None,
            },
            "judged_call": "the last direction call that returned a route",
            "mode": "driving",
            "match_radius_m": 30,
        }


def _permutations(items):
    if len(items) <= 1:
        yield tuple(items)
        return
    for i, head in enumerate(items):
        for rest in _permutations(items[:i] + items[i + 1:]):
            yield (head,) + rest


def _groups(rng: random.Random, n: int, level: int) -> tuple[tuple[tuple[int, ...], ...], str]:
    idx = list(range(n))
    if level == 0:
        return (tuple(idx),), ""
    if level == 1:
        if rng.random() < 0.5:
            return ((0,), tuple(idx[1:])), "first"
        return (tuple(idx[:-1]), (n - 1,)), "last"
    if level == 2:
        k = rng.randint(2, n - 2) if n >= 4 else rng.choice((1, 2))
        return (tuple(idx[:k]), tuple(idx[k:])), ""
    if level == 3:
        j = rng.randrange(n - 1)
        return tuple((i,) for i in idx[:j]) + ((j, j + 1),) + tuple((i,) for i in idx[j + 2:]), ""
    return tuple((i,) for i in idx), ""


class Benchmark:
    """The world and its 750 tasks for one seed."""

    def __init__(self, seed: int):
        self.seed = seed
        self.world: World = build_world(seed)
        self.tasks: dict[str, NavTask] = {}
        self.ids: dict[str, list[str]] = {}
        drawn = self._draw(sum(SPLIT_SIZES.values()))
        start = 0
        for split in ("test", "train"):  # test first: its tasks do not depend on the train size
            size = SPLIT_SIZES[split]
            self.ids[split] = []
            for k, (city, origin, dest, vias, groups, level, pinned) in enumerate(drawn[start:start + size]):
                task_id = f"nav-{split}-{k:04d}"
                self.tasks[task_id] = NavTask(task_id, city, origin, dest, vias, groups, level, pinned)
                self.ids[split].append(task_id)
            start += size

    def _draw(self, count: int) -> list[tuple]:
        rng = random.Random(f"navigation-tasks:{self.seed}")
        pools = {}
        for city in self.world.cities:
            pois = self.world.by_city[city.name]
            pools[city.name] = ([p for p in pois if p.category in ("hotel", "station", "airport")],
                                [p for p in pois if p.category in ("station", "airport", "hotel", "mall")],
                                [p for p in pois if p.category == "attraction"])
        seen, drawn = set(), []
        cells = [(n, level) for level in LEVELS for n in range(MIN_WAYPOINTS, MAX_WAYPOINTS + 1)]
        while len(drawn) < count:
            n, level = cells[len(drawn) % len(cells)]
            city = rng.choice(self.world.cities).name
            anchors, ends, attractions = pools[city]
            origin = rng.choice(anchors)
            near = lambda p: haversine_m(p.location, origin.location) <= ANCHOR_RADIUS_M  # noqa: E731
            vias = rng.sample([p for p in attractions if near(p)], n)
            dest = rng.choice([p for p in ends if near(p) and p is not origin])
            key = (city, origin.name, dest.name, frozenset(p.name for p in vias))
            groups, pinned = _groups(rng, n, level)
            if key in seen:
                continue
            seen.add(key)
            drawn.append((city, origin, dest, tuple(vias), groups, level, pinned))
        return drawn


@functools.lru_cache(maxsize=4)
def build_benchmark(seed: int) -> Benchmark:
    return Benchmark(seed)
