"""The four Navigation tools with the Amap server's surface, over any Amap client.

``make_tools(client, on_route)`` returns ``poi_search``, ``around_search``, ``direction``
and ``weather``. Arguments follow the original server's conventions ("lon,lat",
``waypoints`` as "lon,lat;lon,lat", radius in metres). Values the Amap API would reject
(malformed coordinates, a bad radius, an unknown mode, more than 16 waypoints, waypoints
outside driving) are checked here, before any request, and answered in Amap's own error
form (``{"status": "0", "info": "INVALID_PARAMS", "infocode": "20000"}`` plus a reason);
the schemas are therefore loose on purpose, so these reach the agent in that form rather
than as generic schema errors. Every successful ``direction`` call is reported to
``on_route`` — the reward judges the last one.
"""

from __future__ import annotations

import json
from typing import Callable

from envs.base import Tool, ToolError
from envs.navigation.geo import MAX_WAYPOINTS, AmapError, invalid_params, parse_lonlat

MODES = ("driving", "walking", "bicycling", "electrobike", "transit")
_ENDPOINTS = {"driving": "/v3/direction/driving", "walking": "/v3/direction/walking",
              "bicycling": "/v4/direction/bicycling", "electrobike": "/v5/direction/electrobike",
              "transit": "/v3/direction/transit/integrated"}


def _text(value) -> str:
    """Amap's empty fields are [] (or missing): render them as ""."""
    return "" if value in ([], None) else str(value)


def _dump(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _checked(raw: dict) -> dict:
    """Raise the Amap error a response carries (v3/v5 ``status``, v4 ``errcode``)."""
    if "errcode" in raw:
        if raw.get("errcode") not in (0, "0"):
            raise AmapError(_text(raw.get("errmsg")) or "UNKNOWN_ERROR", _text(raw.get("errcode")))
        return raw
    if str(raw.get("status")) != "1":
        raise AmapError(_text(raw.get("info")) or "UNKNOWN_ERROR", _text(raw.get("infocode")))
    return raw


EXTENSIONS = ("all", "base")


def _poi(p: dict, extensions: str = "all") -> dict:
    """One POI as the agent sees it. ``extensions="base"`` (as Amap's parameter of that name)
    leaves out type, phone and business info: a quarter of the tokens, for small contexts."""
    if extensions == "base":
        out = {"id": _text(p.get("id")), "name": _text(p.get("name")), "address": _text(p.get("address")),
               "location": _text(p.get("location")), "cityname": _text(p.get("cityname")),
               "adname": _text(p.get("adname"))}
        if "distance" in p:
            out["distance"] = _text(p.get("distance"))
        return out
    biz = p.get("biz_ext") if isinstance(p.get("biz_ext"), dict) else {}
    out = {"id": _text(p.get("id")), "name": _text(p.get("name")), "type": _text(p.get("type")),
           "address": _text(p.get("address")), "location": _text(p.get("location")),
           "cityname": _text(p.get("cityname")), "adname": _text(p.get("adname")), "tel": _text(p.get("tel")),
           "business": {"rating": _text(biz.get("rating")), "cost": _text(biz.get("cost")),
                        "opentime": _text(biz.get("opentime2") or biz.get("open_time"))}}
    if "distance" in p:
        out["distance"] = _text(p.get("distance"))
    return out


def _optional_str(value, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_params(f"{name} must be a string")
    return value.strip() or None


class NavigationTools:
    """Tool callables bound to one client; each turns an AmapError into a ToolError."""

    def __init__(self, client, on_route: Callable[[dict], None], page_size: int = 10, extensions: str = "all"):
        self.client, self.on_route = client, on_route
        self.page_size, self.extensions = str(page_size), extensions

    def _call(self, path: str, params: dict) -> dict:
        return _checked(self.client.request(path, params))

    def poi_search(self, address: str, region: str | None = None) -> str:
        address = address.strip() if isinstance(address, str) else ""
        if not address:
            raise invalid_params("address must be a non-empty place name")
        region = _optional_str(region, "region")
        raw = self._call("/v3/place/text", {"keywords": address, "city": region,
                                            "citylimit": "true" if region else None, "offset": self.page_size,
                                            "page": "1"})
        out = {"count": _text(raw.get("count")) or "0", "pois": [_poi(p, self.extensions) for p in raw.get("pois") or []]}
        cities = (raw.get("suggestion") or {}).get("cities") if isinstance(raw.get("suggestion"), dict) else None
        if cities:
            out["suggestion"] = {"cities": [{"name": _text(c.get("name")), "num": _text(c.get("num"))} for c in cities]}
        return _dump(out)

    def around_search(self, location: str, radius=5000, keyword: str | None = None, region: str | None = None) -> str:
        parse_lonlat(location, "location")
        try:
            radius = int(str(radius).strip())
        except ValueError:
            raise invalid_params(f"radius {radius!r} is not an integer number of metres") from None
        if not 0 <= radius <= 50000:
            raise invalid_params(f"radius {radius} is out of range 0..50000 metres")
        raw = self._call("/v3/place/around", {"location": location.strip(), "radius": str(radius),
                                              "keywords": _optional_str(keyword, "keyword"),
                                              "city": _optional_str(region, "region"), "offset": self.page_size,
                                              "page": "1"})
        return _dump({"count": _text(raw.get("count")) or "0",
                      "pois": [_poi(p, self.extensions) for p in raw.get("pois") or []]})

    def direction(self, origin: str, destination: str, mode: str = "driving", waypoints: str | None = None) -> str:
        if mode not in MODES:
            raise invalid_params(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        parse_lonlat(origin, "origin")
        parse_lonlat(destination, "destination")
        points = [w.strip() for w in (waypoints or "").split(";") if w.strip()]
        if points and mode != "driving":
            raise invalid_params(f"waypoints are only supported in driving mode, not {mode}")
        if len(points) > MAX_WAYPOINTS:
            raise invalid_params(f"{len(points)} waypoints given; at most {MAX_WAYPOINTS} are allowed")
        for i, point in enumerate(points):
            parse_lonlat(point, f"waypoint {i + 1}")
        params = {"origin": origin.strip(), "destination": destination.strip()}
        if mode == "driving":
            params.update({"waypoints": ";".join(points) or None, "extensions": "base", "strategy": "0"})
        if mode == "transit":
            params["city"], params["cityd"] = self._citycode(origin), self._citycode(destination)
        raw = self._call(_ENDPOINTS[mode], params)
        route = raw.get("data") if mode == "bicycling" else raw.get("route")
        if not isinstance(route, dict):
            raise AmapError("UNKNOWN_ERROR", "20003", "the answer has no route")
        out = {"mode": mode, "origin": params["origin"], "destination": params["destination"]}
        if mode == "driving":
            out["waypoints"] = points
        if mode == "transit":
            out["distance"] = _text(route.get("distance"))
            out["transits"] = [{"duration": _text(t.get("duration")), "cost": _text(t.get("cost")),
                                "walking_distance": _text(t.get("walking_distance")),
                                "lines": [line.get("name") for seg in t.get("segments") or []
                                          for line in ((seg.get("bus") or {}).get("buslines") or [])]}
                               for t in route.get("transits") or []]
        else:
            path = (route.get("paths") or [{}])[0]
            duration = path.get("duration") or (path.get("cost") or {}).get("duration")
            out.update({"distance": _text(path.get("distance")), "duration": _text(duration)})
            if mode == "driving":
                out.update({"tolls": _text(path.get("tolls")), "traffic_lights": _text(path.get("traffic_lights")),
                            "taxi_cost": _text(route.get("taxi_cost"))})
            out["steps"] = [{"instruction": _text(s.get("instruction")), "road": _text(s.get("road")),
                             "distance": _text(s.get("distance")), "duration": _text(s.get("duration"))}
                            for s in path.get("steps") or []]
        self.on_route({"mode": mode, "origin": params["origin"], "destination": params["destination"],
                       "waypoints": points})
        return _dump(out)

    def weather(self, city: str) -> str:
        city = city.strip() if isinstance(city, str) else ""
        if not city:
            raise invalid_params("city must be a city name or adcode")
        try:
            raw = self._call("/v3/weather/weatherInfo", {"city": city, "extensions": "all"})
        except AmapError as e:
            if e.info != "INVALID_PARAMS":
                raise
            raise AmapError(e.info, e.infocode, f"unknown city {city!r}; give a city name or adcode") from None
        forecasts = raw.get("forecasts") or []
        if not forecasts:
            raise invalid_params(f"no weather for {city!r}; give a city name or adcode")
        f = forecasts[0]
        return _dump({"city": _text(f.get("city")), "province": _text(f.get("province")),
                      "reporttime": _text(f.get("reporttime")),
                      "forecasts": [{k: _text(c.get(k)) for k in ("date", "week", "dayweather", "nightweather",
                                                                   "daytemp", "nighttemp", "daywind", "daypower")}
                                    for c in f.get("casts") or []]})

    def _citycode(self, location: str) -> str:
        component = (self._call("/v3/geocode/regeo", {"location": location.strip()}).get("regeocode") or {}).get("addressComponent") or {}
        code = _text(component.get("citycode"))
        if not code:
            raise AmapError("NO_ROADS_NEARBY", "20801", f"{location} is not in a city that transit covers")
        return code


def _wrap(fn):
    def call(**kwargs):
        try:
            return fn(**kwargs)
        except AmapError as e:
            raise ToolError(str(e)) from None
    return call


_STR = {"type": "string"}


def make_tools(client, on_route: Callable[[dict], None], page_size: int = 10, extensions: str = "all") -> list[Tool]:
    t = NavigationTools(client, on_route, page_size, extensions)
    fields = "city, district and business info" if extensions == "all" else "city and district"
    obj = lambda props, req: {"type": "object", "properties": props, "required": req, "additionalProperties": False}  # noqa: E731
    return [
        Tool("poi_search", f"Search places (POIs) by name or keyword, like Amap keyword search. Returns up to {page_size} "
             f"candidates with name, address, location \"lon,lat\", {fields}. Without a region the search is "
             "nationwide; give region (a city or district name, or adcode) to restrict it.",
             obj({"address": {**_STR, "description": "place name or keyword, e.g. 东涌广场"},
                  "region": {**_STR, "description": "optional city or district, e.g. 深圳 or 南山区"}}, ["address"]),
             _wrap(t.poi_search)),
        Tool("around_search", "Search POIs around a point, nearest first, with their distance in metres.",
             obj({"location": {**_STR, "description": "centre as \"lon,lat\" (longitude first)"},
                  "radius": {"type": ["integer", "string"], "description": "metres, 0 to 50000 (default 5000)"},
                  "keyword": {**_STR, "description": "optional keyword, e.g. 公园"},
                  "region": {**_STR, "description": "optional city name or adcode"}}, ["location"]),
             _wrap(t.around_search)),
        Tool("direction", "Plan a route from origin to destination and return its distance (m), duration (s) and "
             "steps. mode: driving (default), walking, bicycling, electrobike or transit. waypoints (driving only, "
             "at most 16) are visited in the order given.",
             obj({"origin": {**_STR, "description": "\"lon,lat\""}, "destination": {**_STR, "description": "\"lon,lat\""},
                  "mode": {**_STR, "description": "driving | walking | bicycling | electrobike | transit"},
                  "waypoints": {**_STR, "description": "\"lon,lat;lon,lat;...\" in visiting order"}},
                 ["origin", "destination"]),
             _wrap(t.direction)),
        Tool("weather", "Weather forecast (today and the next days) for a city.",
             obj({"city": {**_STR, "description": "city name or adcode, e.g. 深圳"}}, ["city"]),
             _wrap(t.weather)),
    ]
