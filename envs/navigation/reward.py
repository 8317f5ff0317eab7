"""The Navigation reward: 1 iff the judged ``direction`` call is the annotated trip.

The judged call is the **last ``direction`` call that returned a route**. Calls rejected
with an error (malformed coordinates, too many waypoints, ...) never produced a route and
are not judged, so an agent may fix a bad call; a later successful call replaces an
earlier plan, as a user would read the last route offered. The call earns 1 iff its mode
is driving, its origin and destination are the annotated POIs, and its waypoints are
exactly the annotated POIs in one of the allowed orders. A coordinate "is" a POI when it
lies within ``MATCH_RADIUS_M`` of it; the world keeps every two POIs of a city at least
80 m apart, so no other place matches. No partial credit: the breakdown reports the
individual checks and ``progress`` (the share of them met, also as ``checks_met``) for
ranking failed trajectories; the reward does not use them.
"""

from __future__ import annotations

from envs.navigation.geo import haversine_m, parse_lonlat
from envs.navigation.tasks import NavTask

MATCH_RADIUS_M = 30.0


def _is(location: str, poi) -> bool:
    return haversine_m(parse_lonlat(location), poi.location) <= MATCH_RADIUS_M


def judge(task: NavTask, routes: list[dict]) -> tuple[float, dict]:
    """(reward, breakdown) for the routes an episode planned, in call order."""
    n = len(task.waypoints)
    breakdown = {"direction_calls": len(routes), "judged_call": None, "mode_ok": False, "origin_ok": False,
                 "destination_ok": False, "waypoints_matched": 0, "waypoints_expected": n,
                 "waypoint_set_ok": False, "order_ok": False}
    if not routes:
        breakdown["checks_met"] = breakdown["progress"] = 0.0
        return 0.0, breakdown
    route = routes[-1]
    breakdown["judged_call"] = len(routes)
    breakdown["mode_ok"] = route["mode"] == "driving"
    breakdown["origin_ok"] = _is(route["origin"], task.origin)
    breakdown["destination_ok"] = _is(route["destination"], task.destination)
    matched = []
    for location in route["waypoints"]:
        hit = next((i for i, p in enumerate(task.waypoints) if _is(location, p)), None)
        matched.append(hit)
    distinct = {i for i in matched if i is not None}
    breakdown["waypoints_matched"] = len(distinct)
    breakdown["waypoint_set_ok"] = len(matched) == n and len(distinct) == n
    breakdown["order_ok"] = breakdown["waypoint_set_ok"] and task.order_allowed(matched)
    checks = [breakdown["mode_ok"], breakdown["origin_ok"], breakdown["destination_ok"], breakdown["order_ok"]]
    breakdown["checks_met"] = breakdown["progress"] = round((sum(checks) + len(distinct) / n) / 5, 4)
    ok = all(checks)
    return float(ok), breakdown
