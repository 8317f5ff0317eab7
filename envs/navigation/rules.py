"""A rule-based Validator/Corrector pair for Navigation (``NavigationEnv.rti_rules()``,
used with ``roles="rules"``).

It plays the two roles with the gold evidence and exact checks instead of a model: a
competent corrector for testing the RTI pipeline on CPU, and a template for environments
whose steps can be checked.

The first derailing step is the first one the reward would hold against the episode. A
wrong POI choice is invisible where it is made — a search just returns candidates — and
only becomes a mistake where the agent *uses* the coordinate, so the Validator looks at
what the reward judges:

1. the first turn with a ``direction`` call that is not the annotated trip (mode, origin,
   destination, waypoint set, allowed order) and is not followed by a correct one;
2. else, a text answer given before any correct ``direction`` call (answered without a
   route, or after a failed one);
3. else, after a correct ``direction`` call, the first turn that is not a text answer (the
   episode ran out of turns without replying, so it was never scored).
Coordinates in ``around_search`` or ``poi_search`` calls are exploration and never flagged.
Anything else (a run truncated while still searching) gives None: no confident step.

The fix is minimal (it keeps as much of the turn as it can) and progressive (it repairs
one step and lets the policy carry on), and uses only what the history shows: a wrong
coordinate in the route is replaced by the intended POI's coordinate only if that exact
coordinate appears in an earlier tool output; otherwise the fix is one city-qualified
``poi_search`` for the first unresolved place, and the policy continues from there. A
missing final answer is written from the route the tool returned.
"""

from __future__ import annotations

import json
import re

from envs.base import RuleVerdict
from envs.navigation.geo import AmapError, haversine_m, parse_lonlat
from envs.tool_calls import format_assistant_turn, parse_tool_calls
from envs.transcript import grounding_text, own_turn_positions

_PAIR = re.compile(r"-?\d{1,3}\.\d+\s*,\s*-?\d{1,3}\.\d+")

_TEXT = {
    "en": {"wrong_origin": "the origin {got} is not {name}",
           "wrong_destination": "the destination {got} is not {name}",
           "wrong_waypoint": "waypoint {got} is none of the requested stops",
           "wrong_stop": "waypoint {got} is not {name} (it came from the search for that name)",
           "missing_waypoint": "the stop {name} is missing",
           "duplicate_waypoint": "waypoint {got} is listed twice",
           "wrong_order": "the stops are not in an order the user allows",
           "wrong_mode": "the mode is {got}, the user wants a driving route",
           "answered_without_route": "the reply comes before any correct route was planned",
           "no_final_answer": "the route is planned but the user never got a reply",
           "use": "Call direction again with {names} taken from the search results.",
           "search": "Search {name} again with the region {city} and take the candidate with exactly that name.",
           "reply": "Reply to the user with the planned route's distance and duration.",
           "answer": "Your driving route is planned: about {km} km, roughly {minutes} minutes. Have a good trip!"},
    "zh": {"wrong_origin": "起点{got}不是{name}",
           "wrong_destination": "终点{got}不是{name}",
           "wrong_waypoint": "途经点{got}不是用户要去的任何一个地点",
           "wrong_stop": "途经点{got}不是{name}（它来自对该名称的搜索结果）",
           "missing_waypoint": "缺少途经点{name}",
           "duplicate_waypoint": "途经点{got}重复了",
           "wrong_order": "途经点顺序不符合用户的要求",
           "wrong_mode": "出行方式是{got}，用户要的是驾车路线",
           "answered_without_route": "还没有规划出正确的路线就回复了用户",
           "no_final_answer": "路线已规划好，但没有回复用户",
           "use": "用搜索结果里{names}的坐标重新调用 direction。",
           "search": "带上城市{city}重新搜索{name}，选名称完全一致的结果。",
           "reply": "用已规划路线的距离和时间回复用户。",
           "answer": "路线已规划好：全程约{km}公里，预计{minutes}分钟。祝旅途愉快！"},
}


def _point(text) -> tuple[float, float] | None:
    try:
        return parse_lonlat(text)
    except AmapError:
        return None


class NavigationRules:
    """``validate`` finds the first derailing step; ``correct`` writes its minimal fix.
    Both take the episode's OpenAI-style ``messages``, the assistant turns as written
    (``actions``: texts, or dicts with ``content``/``tool_calls``) and ``reward_evidence()``."""

    name = "rules"

    def __init__(self, language: str | None = None):
        self.language = language  # None: read it off the user's request

    # ---- shared reading of an episode --------------------------------------------------
    def _lang(self, messages: list[dict]) -> str:
        if self.language:
            return self.language
        user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        return "en" if len(re.findall(r"[A-Za-z]", user)) >= 20 else "zh"

    @staticmethod
    def _steps(messages: list[dict], actions: list) -> list[tuple[int, dict]]:
        """(message index, parsed turn) per assistant turn of the episode, from the text as
        written. With ``actions`` the episode's turns are the last ``len(actions)`` assistant
        messages: an env's worked example before them is context, not a step."""
        steps = []
        assistant = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
        if actions is not None:
            assistant = own_turn_positions(messages, len(actions))
        for k, i in enumerate(assistant):
            action = actions[k] if actions is not None and k < len(actions) else messages[i]
            if isinstance(action, str):
                turn = parse_tool_calls(action)
            else:
                turn = {"content": action.get("content") or "", "tool_calls": list(action.get("tool_calls") or []),
                        "parse_error": action.get("parse_error")}
                if not turn["tool_calls"] and "<tool_call>" in turn["content"]:
                    turn = parse_tool_calls(turn["content"])
            steps.append((i, turn))
        return steps

    @staticmethod
    def _places(evidence: dict) -> tuple[dict, dict, list[dict]]:
        return evidence["origin"], evidence["destination"], list(evidence["waypoints"])

    @staticmethod
    def _radius(evidence: dict) -> float:
        return float(evidence.get("match_radius_m", 30))

    def _is(self, location, place: dict, evidence: dict) -> bool:
        p = _point(location)
        return p is not None and haversine_m(p, parse_lonlat(place["location"])) <= self._radius(evidence)

    @staticmethod
    def _ranks(evidence: dict) -> list[int]:
        """Group rank of each waypoint (index into evidence["waypoints"])."""
        names = [w["name"] for w in evidence["waypoints"]]
        rank = [0] * len(names)
        for g, group in enumerate(evidence["allowed_orders"]["groups"]):
            for name in group:
                rank[names.index(name)] = g
        return rank

    def _match_waypoints(self, points: list[str], evidence: dict) -> list[int | None]:
        waypoints = evidence["waypoints"]
        return [next((i for i, w in enumerate(waypoints) if self._is(p, w, evidence)), None) for p in points]

    def _route_errors(self, args: dict, evidence: dict, source: dict | None = None) -> list[tuple[str, dict]]:
        """What makes a direction call's arguments differ from the annotated trip.
        ``source`` (location -> searched name) ties a wrong waypoint to the stop it was
        meant to be, so the diagnosis says "X is not Y" instead of "X wrong, Y missing"."""
        origin, destination, waypoints = self._places(evidence)
        errors = []
        mode = args.get("mode", "driving")
        if mode != "driving":
            errors.append(("wrong_mode", {"got": mode}))
        if not self._is(args.get("origin"), origin, evidence):
            errors.append(("wrong_origin", {"got": args.get("origin"), "name": origin["name"]}))
        if not self._is(args.get("destination"), destination, evidence):
            errors.append(("wrong_destination", {"got": args.get("destination"), "name": destination["name"]}))
        raw = args.get("waypoints") or ""
        points = [p.strip() for p in raw.split(";") if p.strip()] if isinstance(raw, str) else []
        matched = self._match_waypoints(points, evidence)
        seen: set[int] = set()
        names = [w["name"] for w in waypoints]
        for p, hit in zip(points, matched):
            searched = (source or {}).get(p)
            meant = names.index(searched) if searched in names else None
            if hit is None and meant is not None and meant not in matched and meant not in seen:
                errors.append(("wrong_waypoint", {"got": p, "name": searched, "text": "wrong_stop"}))
                seen.add(meant)
            elif hit is None:
                errors.append(("wrong_waypoint", {"got": p}))
            elif hit in seen:
                errors.append(("duplicate_waypoint", {"got": p}))
            else:
                seen.add(hit)
        for i, w in enumerate(waypoints):
            if i not in seen:
                errors.append(("missing_waypoint", {"name": w["name"]}))
        if not errors:
            rank = self._ranks(evidence)
            order = [rank[i] for i in matched]
            if any(a > b for a, b in zip(order, order[1:])):
                errors.append(("wrong_order", {}))
        return errors

    # ---- Validator -----------------------------------------------------------------------
    def validate(self, messages: list[dict], actions: list, evidence: dict) -> RuleVerdict | None:
        """``{"step": k, "is_valid": False, "error_types", "diagnosis", "suggest_next"}`` for
        the first derailing assistant turn k (0-based), or None when there is none."""
        steps = self._steps(messages, actions)
        lang = self._lang(messages)
        verdicts: list[tuple[int, list]] = []  # (k, errors) of every direction call, in order
        for k, (_, turn) in enumerate(steps):
            source = None
            for call in turn["tool_calls"]:
                if call.get("name") == "direction":
                    source = source if source is not None else self._searched_for(messages[:steps[k][0]])
                    verdicts.append((k, self._route_errors(call.get("arguments") or {}, evidence, source)))
        last_ok = max((k for k, errs in verdicts if not errs), default=-1)
        wrong = next(((k, errs) for k, errs in verdicts if errs and k > last_ok), None)
        if wrong is not None:
            return self._verdict(steps, wrong[0], wrong[1], evidence, messages, lang)
        for k, (_, turn) in enumerate(steps):
            is_reply = not turn["tool_calls"] and not turn["parse_error"]
            if k <= last_ok:
                continue
            if last_ok < 0 and is_reply:
                return self._verdict(steps, k, [("answered_without_route", {})], evidence, messages, lang)
            if last_ok >= 0:
                if is_reply:
                    return None  # a correct route, then a reply: nothing derailed
                return self._verdict(steps, k, [("no_final_answer", {})], evidence, messages, lang)
        return None

    def _verdict(self, steps: list, k: int, errors: list[tuple[str, dict]], evidence: dict,
                 messages: list[dict], lang: str) -> RuleVerdict:
        t = _TEXT[lang]
        diagnosis = "; ".join(t[info.get("text", kind)].format(**{"got": "", "name": "", **info}) for kind, info in errors)
        fix = self._plan(messages[:steps[k][0]], steps[k][1], errors, evidence, messages)
        if fix["kind"] == "search":
            suggest = t["search"].format(name=fix["place"]["name"], city=fix["region"])
        elif fix["kind"] == "reply":
            suggest = t["reply"]
        else:
            names = "、".join(fix["replaced"]) if lang == "zh" else ", ".join(fix["replaced"])
            suggest = t["use"].format(names=names or ("各地点" if lang == "zh" else "the same places"))
        return {"step": k, "is_valid": False, "error_types": list(dict.fromkeys(kind for kind, _ in errors)),
                "diagnosis": diagnosis, "suggest_next": suggest}

    # ---- Corrector -----------------------------------------------------------------------
    def correct(self, messages: list[dict], actions: list, evidence: dict, verdict: RuleVerdict) -> str:
        """The corrected text of assistant turn ``verdict["step"]``, in the agent's syntax."""
        k = int(verdict["step"])
        steps = self._steps(messages, actions)
        if not 0 <= k < len(steps):
            raise ValueError(f"verdict step {k} is outside the episode's {len(steps)} assistant turns")
        _, turn = steps[k]
        original = next((c for c in turn["tool_calls"] if c.get("name") == "direction"), None)
        errors = self._route_errors(original.get("arguments") or {}, evidence) if original else \
            [(kind, {}) for kind in verdict.get("error_types") or []]
        fix = self._plan(messages[:steps[k][0]], turn, errors, evidence, messages)
        if fix["kind"] == "reply":
            return fix["text"]
        if fix["kind"] == "search":
            return format_assistant_turn("", [{"name": "poi_search",
                                               "arguments": {"address": fix["place"]["name"], "region": fix["region"]}}])
        # Minimal edit: the agent's prose (unless it states numbers or coordinates, which
        # may be the wrong ones) and its other calls stay; its direction call is replaced
        # (a second direction call in the same turn would be judged instead, so it goes).
        prose = turn["content"] if original is not None and not re.search(r"\d", turn["content"]) else ""
        fixed = {"name": "direction", "arguments": fix["arguments"]}
        calls = [c for c in turn["tool_calls"] if c.get("name") != "direction"] if original is not None else []
        at = turn["tool_calls"].index(original) if original is not None else 0
        calls.insert(min(at, len(calls)), fixed)
        return format_assistant_turn(prose, calls)

    def _plan(self, before: list[dict], turn: dict, errors: list[tuple[str, dict]], evidence: dict,
              messages: list[dict]) -> dict:
        """The fix of ``turn`` given the messages ``before`` it: {"kind": "direction",
        "arguments", "replaced"} when every coordinate it needs is in the history, else
        {"kind": "search", "place", "region"}; {"kind": "reply", "text"} for a missing reply."""
        if {kind for kind, _ in errors} == {"no_final_answer"}:
            return {"kind": "reply", "text": self._reply(before, self._lang(messages))}
        origin, destination, waypoints = self._places(evidence)
        shown = self._shown(before)
        located = lambda place: next((loc for loc in shown if self._is(loc, place, evidence)), None)  # noqa: E731

        call = next((c for c in turn["tool_calls"] if c.get("name") == "direction"), None)
        args = dict(call.get("arguments") or {}) if call else {}
        needed: list[tuple[dict, str | None]] = []  # (place, grounded location) of every replaced slot
        new = {"origin": args.get("origin"), "destination": args.get("destination")}
        if "mode" in args or not call:
            new["mode"] = "driving"
        for key, place in (("origin", origin), ("destination", destination)):
            if not self._is(new[key], place, evidence):
                needed.append((place, located(place)))
                new[key] = needed[-1][1]
        raw = args.get("waypoints") if isinstance(args.get("waypoints"), str) else ""
        points = [p.strip() for p in raw.split(";") if p.strip()]
        matched = self._match_waypoints(points, evidence)
        missing = [i for i in range(len(waypoints)) if i not in matched]
        source = self._searched_for(before)
        slots: list[tuple[int, str | None]] = []  # (waypoint index, location) in the agent's order
        for p, hit in zip(points, matched):
            if hit is not None and hit not in {i for i, _ in slots}:
                slots.append((hit, p))
            elif hit is None and missing:
                # the stop the agent meant: the name it searched when this coordinate came
                # back, else the first stop still missing
                meant = next((i for i in missing if waypoints[i]["name"] == source.get(p)), missing[0])
                missing.remove(meant)
                needed.append((waypoints[meant], located(waypoints[meant])))
                slots.append((meant, needed[-1][1]))
        for i in missing:
            needed.append((waypoints[i], located(waypoints[i])))
            slots.append((i, needed[-1][1]))
        rank = self._ranks(evidence)
        slots.sort(key=lambda s: rank[s[0]])  # stable: the agent's order inside each group
        ungrounded = [place for place, loc in needed if loc is None]
        if ungrounded:
            return {"kind": "search", "place": ungrounded[0], "region": self._region(messages, evidence)}
        if waypoints:
            new["waypoints"] = ";".join(loc for _, loc in slots)
        arguments = {key: new[key] for key in ("origin", "destination", "mode", "waypoints") if key in new}
        return {"kind": "direction", "arguments": arguments, "replaced": [place["name"] for place, _ in needed]}

    @staticmethod
    def _shown(messages: list[dict]) -> list[str]:
        """Every "lon,lat" the user or a tool has shown, as written."""
        return [re.sub(r"\s+", "", m) for m in _PAIR.findall(grounding_text(messages))]

    @staticmethod
    def _searched_for(messages: list[dict]) -> dict[str, str]:
        """location -> the poi_search ``address`` whose results contained it."""
        out: dict[str, str] = {}
        calls: list[dict] = []
        for m in messages:
            if m.get("role") == "assistant":
                calls = list(m.get("tool_calls") or parse_tool_calls(m.get("content") or "")["tool_calls"])
            elif m.get("role") == "tool" and calls:
                call = calls.pop(0)
                if call.get("name") == "poi_search":
                    for loc in _PAIR.findall(m.get("content") or ""):
                        out.setdefault(re.sub(r"\s+", "", loc), str((call.get("arguments") or {}).get("address")))
        return out

    @staticmethod
    def _region(messages: list[dict], evidence: dict) -> str:
        """The city as the user wrote it ("成都" in a Chinese request, "成都市" in English)."""
        user = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "user")
        city = evidence["city"]
        if city in user:
            return city
        short = city[:-1] if city.endswith("市") else city
        return short if short in user else city

    def _reply(self, messages: list[dict], lang: str) -> str:
        """A final answer from the last route a tool returned (its numbers, converted)."""
        route = {}
        for m in messages:
            if m.get("role") == "tool":
                try:
                    obj = json.loads(m.get("content") or "")
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict) and "distance" in obj and "duration" in obj:
                    route = obj
        km = int(route.get("distance") or 0) / 1000
        minutes = int(route.get("duration") or 0) // 60
        return _TEXT[lang]["answer"].format(km=f"{km:.1f}", minutes=minutes)
