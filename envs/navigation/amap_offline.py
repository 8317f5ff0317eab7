"""An in-process stand-in for the Amap web service, answering from the generated world.

``OfflineAmap.request(path, params)`` takes the same endpoint paths and query parameters as
``https://restapi.amap.com`` and returns the same JSON shapes (string-typed numbers, ``[]``
for empty fields, ``status``/``info``/``infocode``; the v4 bicycling envelope with
``errcode``/``data``). The tool layer (``tools.py``) therefore reads offline and live
answers with one code path, and a test can serve these answers over HTTP to exercise the
live client end to end.
"""

from __future__ import annotations

import datetime as dt

from envs.navigation import lexicon as lx
from envs.navigation.geo import (
    MAX_WAYPOINTS,
    ROAD_MODEL,
    AmapError,
    bearing_name,
    driving_seconds,
    format_lonlat,
    haversine_m,
    invalid_params,
    leg_distance_m,
    parse_lonlat,
    stable_unit,
)
from envs.navigation.search import SearchIndex
from envs.navigation.world import POI, World

_OK = {"status": "1", "info": "OK", "infocode": "10000"}

# Keys of Amap's answers (offline and live alike), for telling a faked tool result in an
# agent's prose: the first set only Amap results have, the second they share with other
# JSON (two of those together are still an Amap answer).
RESULT_KEYS = ("pois", "results", "route", "paths", "forecasts", "geocodes", "regeocode", "infocode", "suggestion",
               "transits")
ENVELOPE_KEYS = ("status", "info", "count", "data", "error", "errcode", "errmsg", "distance", "duration", "message")
_FORECAST_START = dt.date(2025, 5, 12)


def _amap_str(value) -> object:
    """Amap writes an empty field as [] rather than ""."""
    return value if value not in ("", None) else []


def poi_json(poi: POI, distance: int | None = None) -> dict:
    out = {
        "id": poi.id, "parent": [], "name": poi.name, "type": poi.type, "typecode": poi.typecode,
        "address": _amap_str(poi.address), "location": poi.lonlat, "tel": _amap_str(poi.tel),
        "pname": poi.city.province, "cityname": poi.city.name, "adname": poi.district, "adcode": poi.adcode,
        "biz_ext": {"rating": _amap_str(poi.rating), "cost": _amap_str(poi.cost), "opentime2": _amap_str(poi.opentime)},
    }
    if distance is not None:
        out["distance"] = str(distance)
    return out


class OfflineAmap:
    """The Amap web API over a ``World``. Stateless: the same request gives the same answer."""

    def __init__(self, world: World):
        self.world = world
        self.index = SearchIndex(world)
        self._routes = {
            "/v3/place/text": self._place_text,
            "/v3/place/around": self._place_around,
            "/v3/direction/driving": lambda p: self._direction(p, "driving"),
            "/v3/direction/walking": lambda p: self._direction(p, "walking"),
            "/v4/direction/bicycling": lambda p: self._direction(p, "bicycling"),
            "/v5/direction/electrobike": lambda p: self._direction(p, "electrobike"),
            "/v3/direction/transit/integrated": self._transit,
            "/v3/weather/weatherInfo": self._weather,
            "/v3/geocode/regeo": self._regeo,
        }

    def __repr__(self) -> str:
        return f"OfflineAmap(world_seed={self.world.seed})"

    def request(self, path: str, params: dict) -> dict:
        handler = self._routes.get(path)
        if handler is None:
            return {"status": "0", "info": "INVALID_REQUEST", "infocode": "20003"}
        try:
            return handler({k: v for k, v in params.items() if v not in (None, "")})
        except AmapError as e:
            if path.startswith("/v4/"):
                return {"errcode": int(e.infocode), "errmsg": e.info, "errdetail": e.detail, "data": ""}
            return {"status": "0", "info": e.info, "infocode": e.infocode}

    # ---- search -------------------------------------------------------------------------------
    # (first page only; ``offset`` is the page size, at most the index's PAGE_SIZE)
    def _place_text(self, p: dict) -> dict:
        keywords = p.get("keywords", "").strip()
        if not keywords:
            raise AmapError("MISSING_REQUIRED_PARAMS", "20001", "keywords is required")
        pois, total, per_city = self.index.text_search(keywords, p.get("city"))
        cities = []
        if not p.get("city") and len(per_city) > 1:  # Amap suggests cities for a nationwide query
            for name, num in sorted(per_city.items(), key=lambda kv: -kv[1]):
                c = self.world.city(name)
                cities.append({"name": name, "num": str(num), "citycode": c.citycode, "adcode": c.adcode})
        return {**_OK, "count": str(total), "suggestion": {"keywords": [], "cities": cities},
                "pois": [poi_json(x) for x in pois[:_page_size(p)]]}

    def _place_around(self, p: dict) -> dict:
        center = parse_lonlat(p.get("location"), "location")
        radius = _int_param(p.get("radius", "5000"), "radius")
        if not 0 <= radius <= 50000:
            raise invalid_params(f"radius {radius} is out of range 0..50000 metres")
        hits, total = self.index.around_search(center, radius, p.get("keywords"), p.get("city"))
        return {**_OK, "count": str(total), "pois": [poi_json(poi, d) for poi, d in hits[:_page_size(p)]]}

    # ---- routes -------------------------------------------------------------------------------
    def _points(self, p: dict, mode: str) -> list[tuple[float, float]]:
        points = [parse_lonlat(p.get("origin"), "origin")]
        waypoints = [w for w in str(p.get("waypoints", "")).split(";") if w.strip()]
        if waypoints and mode != "driving":
            raise invalid_params("waypoints are only supported in driving mode")
        if len(waypoints) > MAX_WAYPOINTS:
            raise invalid_params(f"{len(waypoints)} waypoints given; at most {MAX_WAYPOINTS} are allowed")
        points += [parse_lonlat(w.strip(), f"waypoint {i + 1}") for i, w in enumerate(waypoints)]
        points.append(parse_lonlat(p.get("destination"), "destination"))
        return points

    def _legs(self, points, mode):
        legs = [leg_distance_m(mode, a, b) for a, b in zip(points, points[1:])]
        if sum(legs) > ROAD_MODEL[mode][2]:
            raise AmapError("OVER_DIRECTION_RANGE", "20803", f"the route is longer than {mode} supports")
        return legs

    def _steps(self, points, legs, mode) -> list[dict]:
        steps = []
        for i, (a, b, dist) in enumerate(zip(points, points[1:], legs)):
            arrive = "到达目的地" if i == len(legs) - 1 else "到达途经地"
            roads = [lx.STEMS[int(stable_unit(k, a, b) * len(lx.STEMS))] +
                     lx.ROAD_SUFFIXES[int(stable_unit(k, b, a) * len(lx.ROAD_SUFFIXES))] for k in (1, 2)]
            first = int(dist * (0.3 + 0.4 * stable_unit(a, b)))
            for road, d, action in ((roads[0], first, "右转"), (roads[1], dist - first, [])):
                seconds = driving_seconds(d) if mode == "driving" else int(d / ROAD_MODEL[mode][1])
                steps.append({"instruction": f"向{bearing_name(a, b)}行驶{d}米" + (action or f"，{arrive}"),
                              "orientation": bearing_name(a, b), "road": road, "distance": str(d),
                              "duration": str(seconds), "action": action,
                              "assistant_action": [] if action else arrive})
        return steps

    def _direction(self, p: dict, mode: str) -> dict:
        points = self._points(p, mode)
        legs = self._legs(points, mode)
        total = sum(legs)
        if mode == "driving":
            seconds = sum(driving_seconds(d) for d in legs) + 60 * (len(points) - 2)
        else:
            seconds = int(total / ROAD_MODEL[mode][1])
        path = {"distance": str(total), "duration": str(seconds), "steps": self._steps(points, legs, mode)}
        ends = {"origin": format_lonlat(*points[0]), "destination": format_lonlat(*points[-1])}
        if mode == "driving":
            path.update({"strategy": "速度最快", "tolls": str(int(total / 1000 * 0.45 * (total > 30_000))),
                         "toll_distance": str(int(total * 0.4) if total > 30_000 else 0), "restriction": "0",
                         "traffic_lights": str(total // 900)})
            taxi = round(12 + 2.6 * max(0.0, total / 1000 - 2), 1)
            return {**_OK, "count": "1", "route": {**ends, "taxi_cost": str(taxi), "paths": [path]}}
        if mode == "bicycling":  # the v4 envelope
            return {"errcode": 0, "errmsg": "OK", "errdetail": None, "data": {**ends, "paths": [path]}}
        if mode == "electrobike":  # v5: the duration sits under cost
            path["cost"] = {"duration": path["duration"]}
        return {**_OK, "count": "1", "route": {**ends, "paths": [path]}}

    def _transit(self, p: dict) -> dict:
        a, b = parse_lonlat(p.get("origin"), "origin"), parse_lonlat(p.get("destination"), "destination")
        if not p.get("city"):
            raise AmapError("MISSING_REQUIRED_PARAMS", "20001", "city is required for transit")
        dist = self._legs([a, b], "transit")[0]
        options = []
        for k in range(3):
            line = f"地铁{1 + int(stable_unit(k, a, b) * 14)}号线"
            walk = int(300 + 900 * stable_unit(b, k))
            ride = max(0, dist - walk)
            seconds = int(walk / 1.2 + ride / 8.5 + 300 + 240 * k)
            options.append({"cost": str(2 + ride // 6000), "duration": str(seconds), "walking_distance": str(walk),
                            "distance": str(dist), "segments": [
                                {"walking": {"distance": str(walk // 2)},
                                 "bus": {"buslines": [{"name": f"{line}({lx.STEMS[k]}--{lx.STEMS[k + 9]})",
                                                       "distance": str(ride), "duration": str(int(ride / 8.5))}]}}]})
        return {**_OK, "count": "3", "route": {"origin": format_lonlat(*a), "destination": format_lonlat(*b),
                                               "distance": str(dist), "transits": options}}

    # ---- weather, reverse geocoding -------------------------------------------------------------
    def _weather(self, p: dict) -> dict:
        text = p.get("city", "").strip()
        city = self.world.city(text) or self.world.city(text.removesuffix("市"))
        if city is None and self.world.district(text):
            city = self.world.district(text)[0]
        if city is None:
            raise invalid_params(f"unknown city {text!r}; give a city name or adcode")
        casts = []
        for day in range(4):
            date = _FORECAST_START + dt.timedelta(days=day)
            u = [stable_unit(self.world.seed, city.adcode, day, k) for k in range(4)]
            high = int(12 + 20 * u[0] + (city.center[1] < 28) * 6)
            casts.append({"date": date.isoformat(), "week": str(date.isoweekday()),
                          "dayweather": lx.WEATHER_KINDS[int(u[1] * len(lx.WEATHER_KINDS))],
                          "nightweather": lx.WEATHER_KINDS[int(u[2] * len(lx.WEATHER_KINDS))],
                          "daytemp": str(high), "nighttemp": str(high - 5 - int(6 * u[3])),
                          "daywind": lx.WIND_DIRECTIONS[int(u[3] * 8)], "nightwind": lx.WIND_DIRECTIONS[int(u[2] * 8)],
                          "daypower": "1-3", "nightpower": "1-3"})
        return {**_OK, "count": "1", "forecasts": [{"city": city.name, "adcode": city.adcode, "province": city.province,
                                                     "reporttime": f"{_FORECAST_START.isoformat()} 08:00:00", "casts": casts}]}

    def _regeo(self, p: dict) -> dict:
        point = parse_lonlat(p.get("location"), "location")
        city = self.world.nearest_city(point)
        if haversine_m(city.center, point) > 80_000:
            component = {"province": [], "city": [], "citycode": [], "district": [], "adcode": []}
            return {**_OK, "regeocode": {"formatted_address": [], "addressComponent": component}}
        centers = self.world.district_centers[city.name]
        district = min(centers, key=lambda d: haversine_m(centers[d], point))
        component = {"province": city.province, "city": city.name, "citycode": city.citycode,
                     "district": district, "adcode": dict(city.districts)[district]}
        return {**_OK, "regeocode": {"formatted_address": f"{city.province}{city.name}{district}", "addressComponent": component}}


def _int_param(value, name: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise invalid_params(f"{name} {value!r} is not an integer") from None


def _page_size(p: dict) -> int:
    size = _int_param(p.get("offset", "10"), "offset")
    if size < 1:
        raise invalid_params(f"offset {size} must be >= 1")
    return size
