"""``VerifiersToolEnv`` ("Verifiers-v0"): the tasks of a verifiers taskset as a tool env.

    env = envs.make_env("Verifiers-v0", {"taskset": "my_pkg.tasks:MathTaskset",
                                         "splits": {"train": {"limit": 100}, "test": {"skip": 100}}})

Each task of the taskset (``verifiers.v1``: a ``Taskset`` yields ``Task``s) is a task id
(its ``TaskData.id``, else its ``name``, else ``task-<idx>``). An episode opens with the
task's ``system_prompt`` (else ``env_config["system_prompt"]``) and ``prompt``; its tools
are the task's and the taskset's ``vf.Toolset`` tools, hosted in-process (``tools.py``).
The policy replies without a tool call: the episode ends, as verifiers' chat harness ends a
rollout. A trace-level ``@vf.stop`` hook that fires between turns ends it too, and so does
``max_turns`` (recorded as verifiers' ``max_turns`` stop).

The reward is the task's own rubric: verifiers' ``Task.score`` runs its ``@vf.reward``
hooks (and plugged judges) on the episode's ``Trace`` (``trace.py``) and the reward is
their weighted sum, ``trace.reward``, mapped onto [0, 1] through ``reward_range``
(``envs.external.RewardRange``); every named reward and metric is in the breakdown. An
episode cut at ``max_turns`` is scored too, as verifiers scores a ``max_turns`` stop. The
env has no rule-based RTI roles (``rti_rules()`` is None): use ``roles="self"`` or an
external model; ``reward_evidence()`` is the task's data without its prompt.

env_config (besides the ``ToolEnv`` defaults: split, max_turns, output truncation, ...):
    taskset           a verifiers taskset id, or "package.module:attr" naming a Taskset
                      class or factory (``loading.py``)
    taskset_config    the taskset's config fields (default {})
    splits            split -> verifiers ``SelectConfig`` dict (default: every task in both)
    name              how messages name it (default: the taskset)
    reward_range      [low, high] of ``trace.reward`` (default [0, 1])
    system_prompt     for tasks without one
    timeout_s         longest wait for toolset setup or one tool call (default 60)
    scoring_timeout_s longest wait for scoring (default 120)
"""

from __future__ import annotations

import copy
import inspect
import weakref

import verifiers.v1 as vf
from verifiers.v1.session import call_hook
from verifiers.v1.trace import Trace
from verifiers.v1.types import content_text
from verifiers.v1.utils.decorators import discover_decorated

from envs.base import InfrastructureError, Task, Tool, ToolEnv, ToolError
from envs.external import RewardRange, Worker, positive_seconds
from envs.verifiers_env.loading import check_supported, load_taskset, split_tasks
from envs.verifiers_env.tools import ToolHost
from envs.verifiers_env.trace import build_trace

DEFAULT_SYSTEM_PROMPT = ("You are a helpful assistant. Use the tools you are given when they help; when you are done, "
                         "reply with your final answer in plain text without a tool call.")


class VerifiersToolEnv(ToolEnv):
    DEFAULT_CONFIG = {
        **ToolEnv.DEFAULT_CONFIG,
        "taskset": None,
        "taskset_config": {},
        "splits": {"train": {}, "test": {}},
        "name": None,
        "reward_range": [0.0, 1.0],
        "system_prompt": DEFAULT_SYSTEM_PROMPT,
        "timeout_s": 60.0,
        "scoring_timeout_s": 120.0,
    }

    def __init__(self, env_config: dict | None = None, render_mode: str | None = None, **config):
        super().__init__({**(env_config or {}), **config}, render_mode)
        cfg = self.config
        taskset = load_taskset(cfg["taskset"], cfg["taskset_config"])
        self.label = cfg["name"] or (cfg["taskset"] if isinstance(cfg["taskset"], str) else type(taskset).__name__)
        self.range = RewardRange(cfg["reward_range"], f"verifiers {self.label!r}")
        self.timeout_s = positive_seconds(cfg, "timeout_s")
        self.scoring_timeout_s = positive_seconds(cfg, "scoring_timeout_s")
        self.tasks = split_tasks(taskset, cfg["splits"], self.SPLITS)
        shared = taskset.toolsets(taskset.config)
        checked: set[type] = set()
        for task in (t for split in self.tasks.values() for t in split.values()):
            if type(task) not in checked:  # the checks read the class and its hooks: once per task type
                checked.add(type(task))
                check_supported(task, [*shared, *task.toolsets(task.config)])
                _check_async_scoring(task)
        self.worker = Worker(f"verifiers-{self.label[:40]}")
        self.host = ToolHost(shared)
        self._finalizer = weakref.finalize(self, self.worker.close)
        self.vtask: vf.Task | None = None
        self._opening: list[dict] | None = None  # a Messages prompt, as chat messages
        self.last_trace: Trace | None = None

    # ---- ToolEnv hooks --------------------------------------------------------------------
    def task_ids(self, split: str) -> list[str]:
        return list(self.tasks[split])

    def load_task(self, task_id: str) -> Task:
        vtask = self.tasks[self.config["split"]][task_id]
        listing = self.worker.run(lambda: self.host.open(vtask, repr(self.label)), self.timeout_s,
                                  f"verifiers {self.label!r}: toolset setup for task {task_id!r}")
        tools = [Tool(t.name, t.description, copy.deepcopy(t.parameters), self._caller(t.name)) for t in listing]
        self.vtask, self.last_trace = vtask, None
        prompt = vtask.data.prompt
        if isinstance(prompt, str):
            self._opening, user = None, prompt
        else:
            self._opening = [{"role": m.role, "content": content_text(getattr(m, "content", "") or "")} for m in prompt]
            user = vtask.data.prompt_text
        return Task(task_id, vtask.data.system_prompt or self.config["system_prompt"], user, tools)

    def compute_reward(self) -> tuple[float, dict]:
        return self._score(None)

    def reward_evidence(self) -> dict:
        if self.vtask is None:
            raise RuntimeError("call reset() before reward_evidence()")
        return self.vtask.data.model_dump(mode="json", exclude={"prompt", "system_prompt"}, exclude_none=True)

    # ---- gymnasium API --------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        if self._opening is not None:  # a prompt of several messages replaces the single user turn
            self.messages = [self.messages[0], *copy.deepcopy(self._opening)]
            obs = copy.deepcopy(self.messages)
        return obs, info

    def step(self, action):
        new, reward, terminated, truncated, info = super().step(action)
        stop = None if self.done else self._fired_stop()
        if stop is not None or truncated:
            self.done, terminated = True, stop is not None
            reward, info["reward_breakdown"] = self._score(stop or "max_turns")
        return new, reward, terminated, truncated and stop is None, info

    def close(self):
        self._finalizer()
        super().close()

    # ---- verifiers ---------------------------------------------------------------------------
    def _prompt_len(self) -> int:
        return 1 + (len(self._opening) if self._opening is not None else 1)

    def _trace(self, stop: str | None) -> Trace:
        return build_trace(self.vtask, self.messages, self.tool_schemas(), self._prompt_len(), stop)

    def _fired_stop(self) -> str | None:
        """The name of the first trace-level ``@vf.stop`` hook that fires now, if any."""
        stops = self.vtask.hooks("stop")
        if not stops:
            return None
        trace = self._trace(None)
        for fn in stops:
            fired = self._run(lambda fn=fn: call_hook(fn, {Trace: trace}), self.scoring_timeout_s, f"stop hook {fn.__name__!r}")
            if not isinstance(fired, bool):
                raise InfrastructureError(f"verifiers {self.label!r}: @vf.stop hook {fn.__name__!r} returned "
                                          f"{type(fired).__name__}, not a bool")
            if fired:
                return fn.__name__
        return None

    def _score(self, stop: str | None) -> tuple[float, dict]:
        trace = self._trace(stop)
        self._run(lambda: self.vtask.score(trace), self.scoring_timeout_s, "scoring")
        unscored = sorted(name for name, r in trace.rewards.items() if r is None)
        if unscored:
            raise InfrastructureError(f"verifiers {self.label!r}: rewards {unscored} were not scored")
        self.last_trace = trace
        raw = trace.reward
        value = self.range.scale(raw)
        breakdown = {"rewards": {k: {"score": r.score, "weight": r.weight} for k, r in trace.rewards.items()},
                     "metrics": dict(trace.metrics), "raw_reward": raw, "progress": value}
        if stop is not None:
            breakdown["stop_condition"] = stop
        return value, breakdown

    def _run(self, make_coro, timeout_s: float, what: str):
        try:
            return self.worker.run(make_coro, timeout_s, f"verifiers {self.label!r}: {what}")
        except InfrastructureError:
            raise
        except Exception as e:  # a scoring or stop hook's failure: the environment's, never scored 0
            raise InfrastructureError(f"verifiers {self.label!r}: {what} of task {self.task.task_id!r} raised "
                                      f"{type(e).__name__}: {e}") from e

    def _caller(self, name: str):
        def call(**arguments):
            try:
                return self.worker.run(lambda: self.host.call(name, arguments), self.timeout_s,
                                       f"verifiers {self.label!r}: tool {name!r}")
            except (ToolError, InfrastructureError):
                raise
            except Exception as e:
                raise InfrastructureError(f"verifiers {self.label!r}: tool {name!r} raised {type(e).__name__}: {e}") from e

        return call


def _check_async_scoring(task: vf.Task) -> None:
    """verifiers awaits every decorated reward and metric: a plain ``def`` would fail each
    episode's scoring, so it is refused now, with the fix."""
    sync = [fn.__name__ for kind in ("reward", "metric") for fn in discover_decorated(task, kind)
            if not inspect.iscoroutinefunction(fn)]
    if sync:
        raise ValueError(f"{type(task).__name__}: scoring hooks {sync} are plain functions; verifiers awaits them, "
                         "so declare them 'async def'")


__all__ = ["VerifiersToolEnv", "DEFAULT_SYSTEM_PROMPT"]
