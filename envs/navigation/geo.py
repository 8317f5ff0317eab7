"""Coordinates: parsing in Amap's conventions, distances, and the offline road model.

Amap writes a point as "lon,lat" (longitude first) with at most six decimals, and rejects
anything else with INVALID_PARAMS. Parsing lives here so that both backends (offline and
live) reject the same malformed input before any request is made.
"""

from __future__ import annotations

import hashlib
import math
import re

EARTH_RADIUS_M = 6371008.8
# Mainland-China bounding box: a point outside it is almost always "lat,lon" swapped.
LON_RANGE = (73.0, 136.0)
LAT_RANGE = (3.0, 54.0)
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
MAX_WAYPOINTS = 16  # Amap's limit on driving waypoints
# Two "lon,lat" pairs this close are the same point written with other rounding (~11 m);
# never another POI, since the world keeps POIs of a city 80 m apart.
COORDINATE_TOLERANCE_DEG = 1e-4


class AmapError(Exception):
    """An Amap-style failure: ``info`` and ``infocode`` as the web API reports them."""

    def __init__(self, info: str, infocode: str, detail: str = ""):
        super().__init__(detail or info)
        self.info, self.infocode, self.detail = info, infocode, detail

    def __str__(self) -> str:
        text = f'{{"status": "0", "info": "{self.info}", "infocode": "{self.infocode}"}}'
        return f"{text} {self.detail}".strip()


def invalid_params(detail: str) -> AmapError:
    return AmapError("INVALID_PARAMS", "20000", detail)


def parse_lonlat(text, what: str = "location") -> tuple[float, float]:
    """"lon,lat" → (lon, lat), or an INVALID_PARAMS error that says what is wrong."""
    if not isinstance(text, str):
        raise invalid_params(f"{what} must be a string \"lon,lat\", got {type(text).__name__}")
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(_NUMBER.match(p) for p in parts):
        raise invalid_params(f"{what} {text!r} is not \"lon,lat\" (two numbers, longitude first)")
    if any("." in p and len(p.split(".")[1]) > 6 for p in parts):
        raise invalid_params(f"{what} {text!r}: at most 6 decimal places are allowed")
    lon, lat = float(parts[0]), float(parts[1])
    if not (LON_RANGE[0] <= lon <= LON_RANGE[1] and LAT_RANGE[0] <= lat <= LAT_RANGE[1]):
        hint = " (longitude comes first)" if LON_RANGE[0] <= lat <= LON_RANGE[1] else ""
        raise invalid_params(f"{what} {text!r} is outside the service area{hint}")
    return lon, lat


def format_lonlat(lon: float, lat: float) -> str:
    return f"{lon:.6f},{lat:.6f}"


def haversine_m(a: tuple[float, float], b: tuple[float, float]) -> float:
    lon1, lat1, lon2, lat2 = map(math.radians, (a[0], a[1], b[0], b[1]))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


def offset(origin: tuple[float, float], east_m: float, north_m: float) -> tuple[float, float]:
    """The point ``east_m`` metres east and ``north_m`` north of ``origin`` (small offsets)."""
    lat = origin[1] + math.degrees(north_m / EARTH_RADIUS_M)
    lon = origin[0] + math.degrees(east_m / (EARTH_RADIUS_M * math.cos(math.radians(origin[1]))))
    return round(lon, 6), round(lat, 6)


def bearing_name(a: tuple[float, float], b: tuple[float, float]) -> str:
    """Compass direction from a to b, as Amap's step 'orientation' ("东北")."""
    dx = (b[0] - a[0]) * math.cos(math.radians(a[1]))
    dy = b[1] - a[1]
    angle = (math.degrees(math.atan2(dx, dy)) + 360) % 360
    return ("北", "东北", "东", "东南", "南", "西南", "西", "西北")[int((angle + 22.5) // 45) % 8]


def stable_unit(*parts) -> float:
    """A deterministic number in [0, 1) from its arguments (never Python's salted hash())."""
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


# mode -> (detour factor range over the straight line, speed in m/s, longest allowed route in m)
ROAD_MODEL = {
    "driving": ((1.22, 1.45), None, 3_000_000),
    "walking": ((1.15, 1.35), 1.2, 100_000),
    "bicycling": ((1.18, 1.40), 4.2, 500_000),
    "electrobike": ((1.18, 1.40), 5.5, 500_000),
    "transit": ((1.25, 1.50), None, 300_000),
}


def leg_distance_m(mode: str, a: tuple[float, float], b: tuple[float, float]) -> int:
    """Road distance of one leg: the straight line times a detour factor that is a fixed
    function of the two points, so the same request always gets the same answer."""
    lo, hi = ROAD_MODEL[mode][0]
    factor = lo + (hi - lo) * stable_unit(mode, format_lonlat(*a), format_lonlat(*b))
    return max(1, int(round(haversine_m(a, b) * factor)))


def driving_seconds(distance_m: int) -> int:
    """Urban legs crawl, long legs use expressways: the mean speed grows with distance."""
    speed = 6.5 if distance_m < 5_000 else 10.0 if distance_m < 20_000 else 16.0
    return int(distance_m / speed) + 25 * (distance_m // 900)  # + traffic lights
