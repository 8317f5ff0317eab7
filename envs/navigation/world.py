"""The seeded, procedurally generated map world: cities, districts and POIs.

Every city gets districts around its real centre and a few hundred POIs: attractions
(stem + kind, e.g. "东涌" + "广场"), hotels, malls, railway stations and an airport.
Ambiguity is generated on purpose, in three ways, because it is what the benchmark tests:

1. *Near-duplicates in the same city*: an attraction gets 0-3 siblings that insert a
   modifier into its name ("东涌广场" → "东涌文化广场", "东涌凤凰广场") a few kilometres away,
   hotels get sibling brands at the same landmark ("如家酒店(X店)" / "如家精选酒店(X店)").
2. *Sub-POIs*: gates, car parks, metro and bus stops whose names contain the whole name
   ("东涌广场停车场", "东涌广场-东门"), a few hundred metres away.
3. *Namesakes in other cities*: cities draw stems from one shared pool and share generic
   names ("人民公园", "中山公园"), so the exact requested name exists in several cities.

Each POI has a popularity in [0, 1]; search ranks by relevance tier, then popularity
(``envs.navigation.search``), so a popular sibling or namesake often outranks the exact
place. Nothing here is random at run time: the world is a pure function of its seed.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, field

from envs.navigation import lexicon as lx
from envs.navigation.geo import format_lonlat, haversine_m, offset

MIN_SEPARATION_M = 80.0  # no two POIs of a city closer than this (keeps coordinate matching unambiguous)
CITY_RADIUS_M = 32_000.0


@dataclass(frozen=True, eq=False)  # read-only; identity equality (names repeat across cities)
class POI:
    id: str
    name: str
    category: str  # attraction | sub | hotel | mall | station | airport
    city: lx.City = field(repr=False)
    district: str
    adcode: str
    type: str
    typecode: str
    location: tuple[float, float]
    address: str
    tel: str
    rating: str
    cost: str
    opentime: str
    popularity: float
    parent: str = ""  # the name this one is a near-duplicate or sub-POI of

    @property
    def lonlat(self) -> str:
        return format_lonlat(*self.location)


class World:
    """All POIs of all cities, with lookups by city and by name."""

    def __init__(self, seed: int):
        self.seed = seed
        self.cities = lx.CITIES
        self.pois: list[POI] = []
        self.district_centers: dict[str, dict[str, tuple[float, float]]] = {}
        for index, city in enumerate(self.cities):
            self.pois += _CityBuilder(seed, index, city, self.district_centers).build()
        self.by_city: dict[str, list[POI]] = {c.name: [] for c in self.cities}
        for poi in self.pois:
            self.by_city[poi.city.name].append(poi)

    def city(self, text: str) -> lx.City | None:
        """A city by full name, short name, English name or adcode/citycode."""
        text = (text or "").strip()
        for c in self.cities:
            if text in (c.name, c.short, c.adcode, c.citycode) or text.lower() == c.english.lower():
                return c
        return None

    def district(self, text: str) -> tuple[lx.City, str] | None:
        """(city, district name) for a district name or adcode, e.g. "南山区" or "440305"."""
        text = (text or "").strip()
        for c in self.cities:
            for name, code in c.districts:
                if text in (name, code):
                    return c, name
        return None

    def nearest_city(self, point: tuple[float, float]) -> lx.City:
        return min(self.cities, key=lambda c: haversine_m(c.center, point))


@functools.lru_cache(maxsize=4)
def build_world(seed: int) -> World:
    """The world for ``seed`` (cached: every env of a process shares one read-only world)."""
    return World(seed)


class _CityBuilder:
    """Generates one city's POIs from its own random stream (cities are independent)."""

    def __init__(self, seed: int, index: int, city: lx.City, centers: dict):
        self.rng = random.Random(f"navigation-world:{seed}:{city.adcode}")
        self.city, self.index = city, index
        self.names: set[str] = set()
        self.pois: list[POI] = []
        self.grid: dict[tuple[int, int], list[tuple[float, float]]] = {}
        self.centers = self._district_centers()
        centers[city.name] = self.centers
        self.roads = {d: [self.rng.choice(lx.STEMS) + self.rng.choice(lx.ROAD_SUFFIXES) for _ in range(6)]
                      for d in self.centers}

    def build(self) -> list[POI]:
        stems = self.rng.sample(lx.STEMS, 34)
        mains: list[POI] = []
        for stem in stems:
            for kind in self._two_kinds():
                mains += self._attraction_family(stem, kind)
        generic_pairs = [("人民", 1), ("中山", 1), ("世纪", 0), ("文化", 0), ("人民", 0), ("滨江", 1), ("青年", 1), ("解放", 11)]
        for stem, k in self.rng.sample(generic_pairs, 5):
            mains += self._attraction_family(stem, lx.ATTRACTION_KINDS[k])
        for kind_index in (3, 7):  # the city's own museum and art gallery: unique names
            mains += self._attraction_family(self.city.short, lx.ATTRACTION_KINDS[kind_index])
        landmarks = [p for p in mains if p.category == "attraction"]
        self._stations()
        self._hotels(landmarks)
        self._malls(stems)
        return self.pois

    def _two_kinds(self) -> list[lx.Kind]:
        """Two distinct kinds, common ones (parks, squares) more often: they are everywhere,
        which is also why their names collide across cities."""
        kinds: list[lx.Kind] = []
        while len(kinds) < 2:
            kind = self.rng.choices(lx.ATTRACTION_KINDS, weights=[k.weight for k in lx.ATTRACTION_KINDS])[0]
            if kind not in kinds:
                kinds.append(kind)
        return kinds

    # ---- geometry -------------------------------------------------------------------------
    def _district_centers(self) -> dict[str, tuple[float, float]]:
        centers = {}
        for i, (name, _) in enumerate(self.city.districts):
            radius = self.rng.uniform(1_000, 4_000) if i == 0 else self.rng.uniform(6_000, 22_000)
            angle = self.rng.uniform(0, 2 * math.pi)
            centers[name] = offset(self.city.center, radius * math.cos(angle), radius * math.sin(angle))
        return centers

    def _free_spot(self, around: tuple[float, float], min_m: float, max_m: float) -> tuple[float, float]:
        """A point min..max metres from ``around``, inside the city, clear of other POIs."""
        for _ in range(40):
            r, angle = self.rng.uniform(min_m, max_m), self.rng.uniform(0, 2 * math.pi)
            point = offset(around, r * math.cos(angle), r * math.sin(angle))
            if haversine_m(point, self.city.center) <= CITY_RADIUS_M and self._clear(point):
                self._occupy(point)
                return point
        raise RuntimeError(f"could not place a POI near {around} in {self.city.name}")

    def _cell(self, point) -> tuple[int, int]:
        return int(point[0] / 0.002), int(point[1] / 0.002)  # ~200 m cells

    def _clear(self, point) -> bool:
        cx, cy = self._cell(point)
        return all(haversine_m(point, q) >= MIN_SEPARATION_M
                   for dx in (-1, 0, 1) for dy in (-1, 0, 1) for q in self.grid.get((cx + dx, cy + dy), ()))

    def _occupy(self, point) -> None:
        self.grid.setdefault(self._cell(point), []).append(point)

    def _nearest_district(self, point) -> str:
        return min(self.centers, key=lambda d: haversine_m(self.centers[d], point))

    # ---- POI factories ------------------------------------------------------------------------
    def _add(self, name, category, type_code, location, popularity, *, tel=True, rating="", cost="",
             opentime="", parent="", address=None) -> POI | None:
        if name in self.names:
            return None
        self.names.add(name)
        district = self._nearest_district(location)
        if address is None:
            address = f"{district}{self.rng.choice(self.roads[district])}{self.rng.randint(1, 999)}号"
        poi = POI(
            id=f"B0{self.index:01d}{len(self.pois):05d}{self.rng.choice('ABCDEFGHJK')}{self.rng.randint(0, 9)}",
            name=name, category=category, city=self.city, district=district,
            adcode=dict(self.city.districts)[district], type=type_code[0], typecode=type_code[1],
            location=location, address=address,
            tel=f"{self.city.citycode}-{self.rng.randint(20000000, 89999999)}" if tel else "",
            rating=rating, cost=cost, opentime=opentime, popularity=round(popularity, 3), parent=parent,
        )
        self.pois.append(poi)
        return poi

    def _attraction(self, name, kind, around, min_m, max_m, popularity, parent="") -> POI | None:
        if name in self.names:
            return None
        lo, hi = kind.cost
        price = self.rng.randint(lo, hi) if hi else 0
        return self._add(name, "attraction", (kind.type, kind.typecode), self._free_spot(around, min_m, max_m),
                         popularity, rating=f"{self.rng.uniform(3.9, 4.9):.1f}",
                         cost=f"{price}.00" if price else "", opentime=kind.opentime, parent=parent)

    def _attraction_family(self, stem: str, kind: lx.Kind) -> list[POI]:
        district = self.rng.choice(list(self.centers))
        main = self._attraction(stem + kind.suffix, kind, self.centers[district], 300, 9_000,
                                self.rng.uniform(0.25, 1.0))
        if main is None:
            return []
        family = [main]
        modifiers = [m for m in kind.modifiers if m not in stem]
        for modifier in self.rng.sample(modifiers, min(len(modifiers), self.rng.choice((0, 1, 1, 2, 2, 3)))):
            sibling = self._attraction(stem + modifier + kind.suffix, kind, main.location, 800, 6_000,
                                       self.rng.uniform(0.1, 0.95), parent=main.name)
            if sibling is not None:
                family.append(sibling)
        for suffix, type_, code in self.rng.sample(lx.SUB_POIS, self.rng.choice((0, 1, 1, 2, 3))):
            self._add(main.name + suffix, "sub", (type_, code), self._free_spot(main.location, 120, 450),
                      self.rng.uniform(0.0, 0.75), tel=False, parent=main.name, address=main.address)
        return family

    def _stations(self) -> None:
        for suffix in ["站"] + self.rng.sample(lx.STATION_SUFFIXES[1:], 2):
            station = self._add(self.city.short + suffix, "station", lx.STATION_TYPE,
                                self._free_spot(self.city.center, 3_000, 16_000), self.rng.uniform(0.7, 1.0),
                                rating="4.5", opentime="05:30-23:30")
            for sub in self.rng.sample(("-东广场", "-西广场", "(地铁站)", "停车场", "-出发层"), 2):
                self._add(station.name + sub, "sub", lx.SUB_POIS[3][1:] if "停车" in sub else lx.STATION_TYPE,
                          self._free_spot(station.location, 120, 400), self.rng.uniform(0.3, 0.9),
                          tel=False, parent=station.name, address=station.address)
        district = self.rng.choice(self.city.districts[1:])[0]
        self._add(f"{self.city.short}{district[:2]}国际机场", "airport", lx.AIRPORT_TYPE,
                  self._free_spot(self.centers[district], 2_000, 8_000), 1.0, rating="4.6", opentime="全天")

    def _hotels(self, landmarks: list[POI]) -> None:
        for _ in range(22):
            group = self.rng.choice(lx.HOTEL_BRANDS)
            landmark = self.rng.choice(landmarks)
            brands = self.rng.sample(group, min(len(group), self.rng.choice((1, 1, 2, 3))))
            for brand in brands:
                self._add(f"{brand}({landmark.name}店)", "hotel", lx.HOTEL_TYPE,
                          self._free_spot(landmark.location, 150, 1_500), self.rng.uniform(0.2, 0.9),
                          rating=f"{self.rng.uniform(4.2, 4.9):.1f}", cost=f"{self.rng.randint(159, 569)}.00",
                          opentime="全天", parent=landmark.name)

    def _malls(self, stems: list[str]) -> None:
        for stem in self.rng.sample(stems, 6):
            pattern = self.rng.choice(lx.MALL_PATTERNS)
            district = self.rng.choice(list(self.centers))
            self._add(pattern.format(stem=stem), "mall", lx.MALL_TYPE,
                      self._free_spot(self.centers[district], 200, 6_000), self.rng.uniform(0.4, 1.0),
                      rating=f"{self.rng.uniform(4.3, 4.9):.1f}", opentime="10:00-22:00")
