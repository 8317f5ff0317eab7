"""The Navigation benchmark: multi-waypoint driving directions (one of the RTI paper's benchmarks).

Offline by default: a seeded generated map world (``world``), searched like Amap
(``search``) through an in-process Amap stand-in (``amap_offline``); optionally the real
Amap web API (``amap_live``). Tools: ``tools``; tasks, ordering levels and splits:
``tasks``; request wording: ``wording``; task files (export, annotated real trips):
``task_file``; reward: ``reward``; scripted oracle and naive agents: ``agents``; the
rule-based RTI Validator/Corrector: ``rules``; the gymnasium env: ``env`` (an episode is a
deterministic function of its config, task id and assistant turns, so replaying the turns
reproduces it).
"""

from envs.navigation.agents import NaiveAgent, OracleAgent, run_episode
from envs.navigation.env import NavigationEnv
from envs.navigation.task_file import FileTasks, dump_tasks
from envs.navigation.tasks import NavTask, build_benchmark

__all__ = ["NavigationEnv", "NavTask", "build_benchmark", "FileTasks", "dump_tasks",
           "OracleAgent", "NaiveAgent", "run_episode"]
