"""Navigation tasks as JSON lines: export the generated splits, or load annotated ones.

The live backend asks the real Amap, where the generated world's places do not exist. To
evaluate on real places, annotate tasks in this format (one object per line) and pass
``env_config={"backend": "live", "tasks_file": path}``:

    {"task_id": "sz-001", "split": "test", "level": 1, "pinned": "first",
     "request": {"zh": "我在深圳，从深圳北站出发……", "en": "..."},
     "origin": {"name": "深圳北站", "location": "114.029185,22.609574", "city": "深圳市"},
     "destination": {"name": ..., "location": ..., "city": ...},
     "waypoints": [{"name": ..., "location": ..., "city": ...}, ...],
     "groups": [[0], [1, 2]]}

``groups`` lists waypoint indices, in visiting order of the groups (see ``tasks.py`` for
the levels); a place may also carry ``address`` and ``district``. Only the request
languages a file provides can be used. ``dump_tasks`` writes the generated tasks in this
format, with both languages, so a split can be frozen or edited by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from envs.navigation import lexicon as lx
from envs.navigation.geo import AmapError, parse_lonlat
from envs.navigation.tasks import LEVELS, NavTask
from envs.navigation.wording import LANGUAGES, request_text
from envs.navigation.world import POI


def dump_tasks(benchmark, path: str | Path) -> None:
    """Write every task of ``benchmark`` (both splits, both languages) as JSON lines."""
    place = lambda p: {"name": p.name, "location": p.lonlat, "city": p.city.name,  # noqa: E731
                       "address": p.address, "district": p.district}
    with open(path, "w", encoding="utf-8") as f:
        for split, ids in benchmark.ids.items():
            for task_id in ids:
                t = benchmark.tasks[task_id]
                row = {"task_id": task_id, "split": split, "level": t.level, "pinned": t.pinned,
                       "request": {lang: request_text(t, lang) for lang in LANGUAGES},
                       "origin": place(t.origin), "destination": place(t.destination),
                       "waypoints": [place(p) for p in t.waypoints], "groups": [list(g) for g in t.groups]}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


class FileTasks:
    """Tasks loaded from a JSON-lines file, with the ``ids``/``tasks`` shape of ``Benchmark``."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self.tasks: dict[str, NavTask] = {}
        self.ids: dict[str, list[str]] = {"train": [], "test": []}
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    split, task = _task(json.loads(line))
                except KeyError as e:
                    raise ValueError(f"{self.path}, line {number}: missing field {e}") from None
                except (ValueError, TypeError, AttributeError, AmapError) as e:
                    raise ValueError(f"{self.path}, line {number}: {e}") from None
                if task.task_id in self.tasks:
                    raise ValueError(f"{self.path}, line {number}: duplicate task id {task.task_id!r}")
                self.tasks[task.task_id] = task
                self.ids[split].append(task.task_id)


def _place(data: dict, what: str) -> POI:
    lon, lat = parse_lonlat(data["location"], f"{what} location")
    city_name = str(data["city"])
    city = next((c for c in lx.CITIES if city_name in (c.name, c.short)), None) or lx.City(
        city_name, city_name.removesuffix("市"), city_name, "", "", "", (lon, lat), ())
    return POI(id="", name=str(data["name"]), category="annotated", city=city, district=str(data.get("district", "")),
               adcode="", type="", typecode="", location=(lon, lat), address=str(data.get("address", "")), tel="",
               rating="", cost="", opentime="", popularity=0.0)


def _task(row: dict) -> tuple[str, NavTask]:
    split = row["split"]
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if row["level"] not in LEVELS:
        raise ValueError(f"level must be one of {list(LEVELS)}, got {row['level']!r}")
    waypoints = tuple(_place(w, f"waypoint {i + 1}") for i, w in enumerate(row["waypoints"]))
    groups = tuple(tuple(int(i) for i in g) for g in row["groups"])
    if sorted(i for g in groups for i in g) != list(range(len(waypoints))) or not all(groups):
        raise ValueError(f"groups {row['groups']} must split the waypoint indices 0..{len(waypoints) - 1} into non-empty groups")
    requests = row["request"]
    if not isinstance(requests, dict) or not requests or not set(requests) <= set(LANGUAGES):
        raise ValueError(f"request must map languages {list(LANGUAGES)} to the user's request text")
    origin = _place(row["origin"], "origin")
    task = NavTask(str(row["task_id"]), origin.city.name, origin, _place(row["destination"], "destination"),
                   waypoints, groups, int(row["level"]), str(row.get("pinned", "")), dict(requests))
    return split, task
