"""``NavigationEnv`` ("Navigation-v0"): multi-waypoint driving directions with Amap tools.

    env = gymnasium.make("Navigation-v0", env_config={"split": "test", "language": "en"})
    obs, info = env.reset(options={"task_id": "nav-test-0000"})

env_config (besides the ``ToolEnv`` defaults: split, max_turns, output truncation, ...):
    language       "zh" (default, the paper's setting) or "en"
    world_seed     seed of the world and the task splits (default 0)
    backend        "offline" (default) or "live": the real Amap web API, which needs
                   AMAP_MAPS_API_KEY in the environment (never in the config)
    amap_base_url  the live API's base URL (default https://restapi.amap.com)
    amap_timeout_s per-request timeout of the live backend
    tasks_file     optional JSON-lines file of tasks to use instead of the generated ones
                   (format in ``task_file.py``; e.g. annotated real places for live mode)
    page_size      POIs per search result, 1..10 (default 10)
    poi_extensions "all" (default) or "base": without type, phone and business fields, as
                   Amap's parameter of that name; base + page_size 3 cut a search result's
                   tokens about fivefold, for small models and short contexts

The episode ends when the agent replies without a tool call (or at ``max_turns``); the
reward is 0/1 (see ``reward.py`` for which ``direction`` call is judged). The generated
tasks name places of the generated world, which do not exist on the real Amap: for live
evaluation give a ``tasks_file`` of annotated real trips (a server hosting the generated
world, as in the tests, also works with the generated tasks).

Mid-episode states (for RTI): offline, an episode is a deterministic function of its
config, task id and assistant turns — no randomness after ``reset`` — so replaying the
turns on a fresh ``reset`` reproduces it exactly.

For RTI the env also offers a rule-based Validator/Corrector (``rti_rules()``, see
``rules.py``) and the facts the Verifier needs about Amap answers (``verifier_facts()``).
"""

from __future__ import annotations

import copy
import functools

from envs.base import Task, ToolEnv, VerifierFacts
from envs.navigation.agents import OracleAgent
from envs.navigation.amap_live import DEFAULT_BASE_URL, LiveAmap
from envs.navigation.amap_offline import ENVELOPE_KEYS, RESULT_KEYS, OfflineAmap
from envs.navigation.geo import COORDINATE_TOLERANCE_DEG
from envs.navigation.reward import judge
from envs.navigation.rules import NavigationRules
from envs.navigation.task_file import FileTasks
from envs.navigation.tasks import build_benchmark
from envs.navigation.tools import EXTENSIONS, make_tools
from envs.navigation.wording import DEMONSTRATIONS, LANGUAGES, SYSTEM_PROMPTS, request_text

BACKENDS = ("offline", "live")
#: what ``verifier_facts()`` returns: Amap's result keys and the rounding tolerance
VERIFIER_FACTS: VerifierFacts = {"tool_output_keys": list(RESULT_KEYS), "tool_output_weak_keys": list(ENVELOPE_KEYS),
                                 "coordinate_tolerance_deg": COORDINATE_TOLERANCE_DEG}


@functools.lru_cache(maxsize=4)
def _offline_amap(seed: int) -> OfflineAmap:
    return OfflineAmap(build_benchmark(seed).world)


class NavigationEnv(ToolEnv):
    DEFAULT_CONFIG = {
        **ToolEnv.DEFAULT_CONFIG,
        "language": "zh",
        "world_seed": 0,
        "backend": "offline",
        "amap_base_url": DEFAULT_BASE_URL,
        "amap_timeout_s": 10.0,
        "tasks_file": None,
        "page_size": 10,            # POIs per search result (Amap's offset), 1..10
        "poi_extensions": "all",    # "base": no type/phone/business fields (for small contexts)
    }

    def __init__(self, env_config: dict | None = None, render_mode: str | None = None):
        super().__init__(env_config, render_mode)
        cfg = self.config
        if cfg["language"] not in LANGUAGES:
            raise ValueError(f"unknown language {cfg['language']!r} for NavigationEnv; valid languages: {list(LANGUAGES)}")
        if cfg["backend"] not in BACKENDS:
            raise ValueError(f"unknown backend {cfg['backend']!r} for NavigationEnv; valid backends: {list(BACKENDS)}")
        if cfg["tasks_file"]:
            self.benchmark = FileTasks(cfg["tasks_file"])
            if not self.benchmark.ids[cfg["split"]]:
                raise ValueError(f"tasks_file {cfg['tasks_file']} has no tasks in split {cfg['split']!r}")
        else:
            self.benchmark = build_benchmark(int(cfg["world_seed"]))
        if cfg["backend"] == "live":
            self.client = LiveAmap(cfg["amap_base_url"], float(cfg["amap_timeout_s"]))
        else:
            self.client = _offline_amap(int(cfg["world_seed"]))
        if cfg["poi_extensions"] not in EXTENSIONS:
            raise ValueError(f"unknown poi_extensions {cfg['poi_extensions']!r}; valid values: {list(EXTENSIONS)}")
        if not isinstance(cfg["page_size"], int) or not 1 <= cfg["page_size"] <= 10:
            raise ValueError(f"page_size={cfg['page_size']!r} must be an integer in 1..10")
        self.routes: list[dict] = []

    # ---- ToolEnv hooks --------------------------------------------------------------------
    def task_ids(self, split: str) -> list[str]:
        return list(self.benchmark.ids[split])

    def load_task(self, task_id: str) -> Task:
        spec = self.benchmark.tasks[task_id]
        self.routes = []
        language = self.config["language"]
        return Task(task_id, SYSTEM_PROMPTS[language], request_text(spec, language),
                    make_tools(self.client, self.routes.append, self.config["page_size"], self.config["poi_extensions"]), {"spec": spec},
                    demonstration=DEMONSTRATIONS[language])

    def compute_reward(self) -> tuple[float, dict]:
        return judge(self.task.data["spec"], self.routes)

    def reward_evidence(self) -> dict:
        if self.task is None:
            raise RuntimeError("call reset() before reward_evidence()")
        return self.task.data["spec"].evidence()

    def oracle_agent(self):
        return OracleAgent(self.reward_evidence(), self.config["language"])

    def rti_rules(self):
        return NavigationRules()

    def verifier_facts(self) -> VerifierFacts:
        return copy.deepcopy(VERIFIER_FACTS)

    def difficulty(self, task_id: str) -> dict:
        """How hard a task is: its waypoint count (3..9) and ordering level (0..4)."""
        spec = self.benchmark.tasks[task_id]
        return {"waypoints": len(spec.waypoints), "level": spec.level}

    def tasks_summary(self) -> dict:
        """Task counts per split, waypoint count and order level."""
        out = {}
        for split, ids in self.benchmark.ids.items():
            specs = [self.benchmark.tasks[i] for i in ids]
            out[split] = {"total": len(specs),
                          "by_waypoints": _count(len(s.waypoints) for s in specs),
                          "by_level": _count(s.level for s in specs)}
        return out


def _count(values) -> dict:
    out: dict = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))
