"""POI text search and around search over the world, ranked the way map search behaves.

Relevance of a name to a query is the IDF-weighted share of the query's characters that the
name contains, with a mild penalty for extra length and a penalty when the name does not
start like the query (1.0 for the exact name, ~0.9 for "东涌文化广场" or "东涌广场停车场"
against "东涌广场", ~0.5 for "东涌公园", little for "银湖广场": a rare character such as 涌
weighs more than 广 or 场). Results fall in two
tiers — close matches (relevance >= 0.85) and loose ones (>= 0.5) — and inside a tier they
are ordered by ``relevance + popularity`` plus a bonus for the exact name. The exact name
therefore wins only when it is not much less popular than its siblings: map search favours
prominent places, which is the trap the benchmark is about.

A region (city or district, by name or adcode) restricts the search, like Amap's
``city`` with ``citylimit=true``; a city or district name written at the start of the
query ("深圳东涌广场") works as a region too. A nationwide query (no region) is answered
from one city only — the city of the best-ranked hit — with the match counts of all cities
in ``suggestion.cities``. So when a namesake or sibling elsewhere is more prominent, the
requested place is not on the page at all: the agent must notice that no candidate has
the exact name (or the right city) and search again with a region.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from envs.navigation.geo import haversine_m
from envs.navigation.world import POI, World

CLOSE, LOOSE = 0.85, 0.5
EXACT_BONUS = 0.25
PAGE_SIZE = 10


def relevance(query: str, name: str, weight: dict[str, float]) -> float:
    """Share of the query's characters (rare characters weigh more) found in ``name``,
    times a mild penalty for extra length. Exact name → 1.0."""
    query = "".join(query.split())
    if not query:
        return 0.0
    if name == query:
        return 1.0
    chars = set(query)
    total = sum(weight.get(c, _RARE) for c in chars)
    covered = sum(weight.get(c, _RARE) for c in chars if c in name)
    # A Chinese place name leads with its proper part (东湖 in 东湖生态湖景区): a name that
    # starts differently is another place of the same kind, not a variant of this one.
    same_start = 1.0 if name[:2] == query[:2] else 0.85
    return covered / total * same_start * min(1.0, (len(query) + 1) / (len(name) + 1)) ** 0.25


_RARE = 8.0  # weight of a character no POI name contains


@dataclass(frozen=True)
class Region:
    city: str | None = None       # full city name
    district: str | None = None   # district name


class SearchIndex:
    """An inverted character index over POI names, with IDF character weights."""

    def __init__(self, world: World):
        self.world = world
        self.index: dict[str, list[POI]] = {}
        for poi in world.pois:
            for char in set(poi.name):
                self.index.setdefault(char, []).append(poi)
        n = len(world.pois)
        self.weight = {c: math.log(n / len(ps)) + 0.1 for c, ps in self.index.items()}

    def region(self, text: str | None) -> Region | None:
        """A Region for a city/district name or adcode; None when ``text`` names neither."""
        if not text or not text.strip():
            return None
        text = text.strip()
        city = self.world.city(text) or self.world.city(text.removesuffix("市"))
        if city is not None:
            return Region(city=city.name)
        found = self.world.district(text)
        if found is not None:
            return Region(city=found[0].name, district=found[1])
        return None

    def split_region_prefix(self, query: str) -> tuple[Region | None, str]:
        """"深圳市南山区东涌广场" → (Region(深圳市, 南山区), "东涌广场")."""
        region, rest = None, query.strip()
        for city in self.world.cities:
            for prefix in (city.name, city.short):
                if rest.startswith(prefix) and len(rest) > len(prefix) + 1:
                    region, rest = Region(city=city.name), rest[len(prefix):]
                    break
            if region:
                break
        cities = [self.world.city(region.city)] if region else self.world.cities
        for city in cities:
            for name, _ in city.districts:
                if rest.startswith(name) and len(rest) > len(name) + 1:
                    return Region(city=city.name, district=name), rest[len(name):]
        return region, rest

    def text_search(self, query: str, region_text: str | None) -> tuple[list[POI], int, dict[str, int]]:
        """(page of POIs, total match count, matches per city) for a keyword search."""
        region = self.region(region_text)
        prefix_region, core = self.split_region_prefix(query)
        region = region or prefix_region
        # the prefix may also belong to the name itself ("北京雕塑美术馆"): score both readings
        readings = {core, query.strip()}
        candidates = {id(p): p for reading in readings for p in self._candidates(reading)}
        scored = []
        for poi in candidates.values():
            if region and (poi.city.name != region.city or (region.district and poi.district != region.district)):
                continue
            rel = max(relevance(reading, poi.name, self.weight) for reading in readings)
            if rel >= LOOSE:
                bonus = EXACT_BONUS if rel == 1.0 else 0.0
                scored.append((0 if rel >= CLOSE else 1, -(rel + bonus + poi.popularity), poi.id, poi))
        scored.sort(key=lambda s: s[:3])
        per_city: dict[str, int] = {}
        for s in scored:
            per_city[s[3].city.name] = per_city.get(s[3].city.name, 0) + 1
        if region is None and scored:  # nationwide: answered from the best hit's city
            best = scored[0][3].city.name
            scored = [s for s in scored if s[3].city.name == best]
        return [s[3] for s in scored[:PAGE_SIZE]], len(scored), per_city

    def _candidates(self, query: str) -> list[POI]:
        """POIs that can reach LOOSE relevance: they must contain one of the query's
        heaviest characters that together carry over half its weight, since the others
        alone cannot (rare characters have short posting lists, so this is fast)."""
        chars = sorted(set("".join(query.split())), key=lambda c: -self.weight.get(c, _RARE))
        total = sum(self.weight.get(c, _RARE) for c in chars)
        seen, out, acc = set(), [], 0.0
        for char in chars:
            for poi in self.index.get(char, ()):
                if id(poi) not in seen:
                    seen.add(id(poi))
                    out.append(poi)
            acc += self.weight.get(char, _RARE)
            if acc > (1 - LOOSE) * total:
                break
        return out

    def around_search(self, center: tuple[float, float], radius_m: float, keyword: str | None,
                      region_text: str | None) -> tuple[list[tuple[POI, int]], int]:
        """POIs within ``radius_m`` of ``center`` matching ``keyword`` (name, type or close
        relevance), nearest first: (page of (POI, distance), total)."""
        region = self.region(region_text)
        keyword = (keyword or "").strip()
        hits = []
        for poi in self.world.pois:
            if region and poi.city.name != region.city:
                continue
            if abs(poi.location[1] - center[1]) > radius_m / 100_000 or abs(poi.location[0] - center[0]) > radius_m / 80_000:
                continue  # cheap bounding box before the exact distance (1 degree > 80 km here)
            d = haversine_m(center, poi.location)
            if d > radius_m:
                continue
            if keyword and not (keyword in poi.name or keyword in poi.type or relevance(keyword, poi.name, self.weight) >= CLOSE):
                continue
            hits.append((int(round(d)), poi.id, poi))
        hits.sort(key=lambda h: h[:2])
        return [(h[2], h[0]) for h in hits[:PAGE_SIZE]], len(hits)
