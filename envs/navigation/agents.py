"""Scripted agents: an oracle that solves every task, and a naive one that falls for the traps.

Both act only through ``env.step`` with real tool calls in the text syntax a model would
write, one call per turn, and read coordinates from the tool outputs (never from the
evidence), so their trajectories are valid training data.

- ``OracleAgent`` knows the evidence. For each place it searches the name with the city as
  region, then reads the candidates carefully: it takes the one whose name is exactly the
  requested name and whose location is the annotated one. If that is not on the first page
  it searches around the annotated point. Then it plans the route in an allowed order.
  With ``notes`` (the default) it thinks aloud the way a careful agent would, in a few
  words before its calls: the visiting order it will follow, and each place's coordinates
  as it picks them. A small model trained on these episodes makes each decision next to the
  text it depends on (the candidate list, the request) instead of recalling it at the end.
- ``NaiveAgent`` knows only the names (and, for the route, an allowed order, so that only
  place resolution is tested). It searches each name — nationwide by default, or with the
  city when ``qualified`` — and takes the first hit.
"""

from __future__ import annotations

import json

from envs.navigation.geo import haversine_m, parse_lonlat
from envs.navigation.reward import MATCH_RADIUS_M
from envs.tool_calls import format_tool_call


def _last_tool_json(observation: list[dict]) -> dict | None:
    for message in reversed(observation):
        if message["role"] == "tool":
            try:
                return json.loads(message["content"])
            except json.JSONDecodeError:
                return None
    return None


def mention_order(text: str, names: list[str]) -> list[str]:
    """``names`` in the order of their last mention in ``text``: a request lists the stops,
    then says how they may be ordered ("First A and B (in any order), then C"), and the
    later mention is the one to follow. An occurrence inside a longer name's occurrence
    (龙潭广场 in 龙潭广场停车场) does not count; a name never mentioned goes last."""
    taken = [False] * len(text)
    position = {}
    for name in sorted(names, key=len, reverse=True):
        start = text.rfind(name)
        while start >= 0 and any(taken[start:start + len(name)]):
            start = text.rfind(name, 0, start + len(name) - 1)
        if start >= 0:
            taken[start:start + len(name)] = [True] * len(name)
        position[name] = start if start >= 0 else len(text)
    return sorted(names, key=lambda n: position[n])


def _request(observation: list[dict]) -> str:
    return next((m["content"] for m in reversed(observation) if m["role"] == "user"), "")


class _ScriptedAgent:
    """Resolve origin, waypoints (in an allowed order) and destination, then route, then answer.

    Inside each group of freely ordered waypoints it keeps the order in which the request
    mentions them, so that the visiting order follows from what the agent was told."""

    def __init__(self, evidence: dict, language: str = "zh"):
        self.evidence, self.language = evidence, language
        self.places: list[dict] = []
        self.resolved: list[str | None] = []
        self.pending: str | None = None  # the tool whose answer the next turn reads
        self.routed = False
        self.notes: dict | None = None  # the wording of thinking aloud (see _NOTES), if it does

    def plan(self, request: str) -> None:
        evidence = self.evidence
        by_name = {w["name"]: w for w in evidence["waypoints"]}
        stops = [by_name[n] for group in evidence["allowed_orders"]["groups"] for n in mention_order(request, group)]
        self.places = [evidence["origin"], *stops, evidence["destination"]]

    def act(self, observation: list[dict]) -> str:
        if not self.places:
            self.plan(_request(observation))
            return self.say(self.plan_note(), self.search(self.places[0]))
        if self.pending is not None:
            call = self.read(_last_tool_json(observation))
            if call is not None:
                return call
        if len(self.resolved) < len(self.places):
            return self.say(self.found_note(), self.search(self.places[len(self.resolved)]))
        if not self.routed:
            self.routed = True
            self.pending = None
            origin, *vias, destination = [r or "0,0" for r in self.resolved]
            return self.say(self.found_note(), format_tool_call(
                "direction", {"origin": origin, "destination": destination, "mode": "driving", "waypoints": ";".join(vias)}))
        route = _last_tool_json(observation) or {}
        km, minutes = int(route.get("distance") or 0) / 1000, int(route.get("duration") or 0) // 60
        if self.language == "en":
            return f"Your driving route is planned: about {km:.1f} km, roughly {minutes} minutes. Have a good trip!"
        return f"路线已规划好：全程约{km:.1f}公里，预计{minutes}分钟。祝旅途愉快！"

    def search(self, place: dict) -> str:
        raise NotImplementedError

    def read(self, answer: dict | None) -> str | None:
        raise NotImplementedError

    # what the agent writes before its call: nothing unless it thinks aloud (``self.notes``)
    def plan_note(self) -> str:
        if self.notes is None:
            return ""
        return self.notes["plan"].format(stops=self.notes["arrow"].join(p["name"] for p in self.places))

    def found_note(self) -> str:
        if self.notes is None or not self.resolved or self.resolved[-1] is None:
            return ""
        return self.notes["found"].format(name=self.places[len(self.resolved) - 1]["name"], location=self.resolved[-1])

    @staticmethod
    def say(note: str, call: str) -> str:
        return f"{note}\n{call}" if note else call


_NOTES = {
    "zh": {"plan": "到访顺序：{stops}。", "found": "{name}的坐标：{location}。", "arrow": " → "},
    "en": {"plan": "Visiting order: {stops}.", "found": "{name} is at {location}.", "arrow": " -> "},
}


class OracleAgent(_ScriptedAgent):
    def __init__(self, evidence: dict, language: str = "zh", notes: bool = True):
        super().__init__(evidence, language)
        self.notes = _NOTES[language] if notes else None

    def search(self, place: dict) -> str:
        self.pending = "poi_search"
        return format_tool_call("poi_search", {"address": place["name"], "region": place["city"]})

    def read(self, answer):
        place = self.places[len(self.resolved)]
        gold = parse_lonlat(place["location"])
        for poi in (answer or {}).get("pois", []):
            if poi.get("name") == place["name"] and haversine_m(parse_lonlat(poi["location"]), gold) <= MATCH_RADIUS_M:
                self.resolved.append(poi["location"])
                self.pending = None
                return None
        if self.pending == "poi_search":  # not on the first page: look around the annotated point
            self.pending = "around_search"
            return format_tool_call("around_search", {"location": place["location"], "radius": 200,
                                                      "keyword": place["name"]})
        self.resolved.append(None)  # cannot happen in a consistent world; the route will then fail
        self.pending = None
        return None


class NaiveAgent(_ScriptedAgent):
    def __init__(self, evidence: dict, language: str = "zh", qualified: bool = False):
        super().__init__(evidence, language)
        self.qualified = qualified

    def search(self, place: dict) -> str:
        self.pending = "poi_search"
        args = {"address": place["name"]}
        if self.qualified:
            args["region"] = place["city"]
        return format_tool_call("poi_search", args)

    def read(self, answer):
        pois = (answer or {}).get("pois") or []
        self.resolved.append(pois[0]["location"] if pois else None)
        self.pending = None
        return None


def run_episode(env, agent_cls, task_id: str, **agent_kwargs) -> tuple[float, dict, list[dict]]:
    """Play one episode of ``task_id`` with a scripted agent: (reward, last info, messages)."""
    observation, info = env.reset(options={"task_id": task_id})
    agent = agent_cls(env.reward_evidence(), env.config.get("language", "zh"), **agent_kwargs)
    reward, done = 0.0, False
    while not done:
        observation, reward, terminated, truncated, info = env.step(agent.act(observation))
        done = terminated or truncated
    return reward, info, env.messages
