"""``OpenEnvToolEnv`` ("OpenEnv-v0"): an OpenEnv environment as a multi-turn tool env.

    env = envs.make_env("OpenEnv-v0", {"env": "my_pkg.server:MyEnvironment", "tasks": 32})
    env = envs.make_env("OpenEnv-v0", {"env": "http://127.0.0.1:8000", "tasks": 32})

What the policy sees. The reset observation is the user's message (the task row's
``prompt`` when it gives one; else the observation's ``prompt_field``; else its fields as
JSON). An MCP environment (``MCPEnvironment``, or a server whose action is an MCP action)
offers its own tools, listed with a ``list_tools`` action and called with ``call_tool``:
a result is the tool's text, an error result or a refused call reads "Error: ...". Any
other environment offers one tool, ``action_tool`` ("step"), whose arguments are its
Action's fields (the JSON schema of the Action class without ``metadata``): a call is one
``env.step(Action(**arguments))`` and the observation's fields, as JSON (or the
``observation_field``), are the result.

When it ends. The environment says ``done``: the episode ends after that tool call (later
calls of the same turn are not sent). The policy replies without a tool call: the episode
ends there, unless ``text_action`` names an Action field, in which case the reply is sent
as that action (a chat environment) and the next observation is the user's next message.

The reward is the environment's own: the reward its observations carry (its rubric's
score when it has one). ``reward="last"`` takes the last step's, ``"sum"`` adds them up; a
step without one counts 0, OpenEnv's own value for an env without a rubric. It maps onto
[0, 1] through ``reward_range`` (``envs.external.RewardRange``). The env has no rule-based
RTI roles (``rti_rules()`` is None): use ``roles="self"`` or an external model.

env_config (besides the ``ToolEnv`` defaults: split, max_turns, output truncation, ...):
    env               an ``Environment`` class or factory ("package.module:attr", or the
                      object), run in this process; or the URL of an OpenEnv server
    action            the Action class of an in-process env ("package.module:Class";
                      default: read from the annotation of its ``step``)
    name              how messages name the environment (default: the URL or import path)
    tasks             which episodes, as ``reset`` arguments per task id (``tasks.py``)
    mode              "auto" (default), "mcp" or "action": how its actions become tools
    action_tool       the name of the action tool (default "step"); action_description
    prompt_field      the observation field that is the user's message
    observation_field the observation field that is a step's result text
    text_action       an Action field a plain-text reply is sent in (default: none)
    reward            "last" (default) or "sum"
    reward_range      [low, high] of the raw reward (default [0, 1])
    system_prompt     for tasks without one
    timeout_s         longest wait for one reset or step (default 60)
    connect_timeout_s longest wait to reach a server (default 30)
"""

from __future__ import annotations

import copy
import json
import weakref

import jsonschema

from envs.base import InfrastructureError, Task, Tool, ToolEnv, ToolError, finite_number
from envs.external import RewardRange, positive_seconds
from envs.openenv_env.backends import HTTPBackend, InProcessBackend
from envs.openenv_env.tasks import load_tasks

DEFAULT_SYSTEM_PROMPT = ("You are an agent acting in an environment through tools. Use them to complete the task; "
                         "when you are done, reply in plain text without a tool call.")
MODES = ("auto", "mcp", "action")
REWARDS = ("last", "sum")
#: errors of an MCP call that are the environment's, not the policy's (OpenEnv's ToolErrorType)
_INFRA_TOOL_ERRORS = ("timeout", "transport_error")


def _is_url(value) -> bool:
    return isinstance(value, str) and value.strip().startswith(("http://", "https://", "ws://", "wss://"))


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _content_text(result: dict) -> str:
    """An MCP tool result's content blocks as text (text blocks joined, others as JSON)."""
    blocks = result.get("content") if isinstance(result, dict) else None
    if not isinstance(blocks, list):
        return _text(result)
    parts = [b["text"] if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
             else _text(b) for b in blocks]
    return "\n".join(parts)


class OpenEnvToolEnv(ToolEnv):
    DEFAULT_CONFIG = {
        **ToolEnv.DEFAULT_CONFIG,
        "env": None,
        "action": None,
        "name": None,
        "tasks": None,
        "mode": "auto",
        "action_tool": "step",
        "action_description": None,
        "prompt_field": None,
        "observation_field": None,
        "text_action": None,
        "reward": "last",
        "reward_range": [0.0, 1.0],
        "system_prompt": DEFAULT_SYSTEM_PROMPT,
        "timeout_s": 60.0,
        "connect_timeout_s": 30.0,
    }

    def __init__(self, env_config: dict | None = None, render_mode: str | None = None, **config):
        super().__init__({**(env_config or {}), **config}, render_mode)
        cfg = self.config
        target = cfg["env"]
        if target is None:
            raise ValueError("OpenEnvToolEnv needs env_config['env']: an OpenEnv Environment class or factory "
                             "('package.module:attr'), or the URL of an OpenEnv server ('http://host:port')")
        for key, allowed in (("mode", MODES), ("reward", REWARDS)):
            if cfg[key] not in allowed:
                raise ValueError(f"env_config[{key!r}] must be one of {list(allowed)}, got {cfg[key]!r}")
        for key in ("action_tool", "prompt_field", "observation_field", "text_action", "action_description"):
            if cfg[key] is not None and (not isinstance(cfg[key], str) or not cfg[key]):
                raise ValueError(f"env_config[{key!r}] must be a non-empty string, got {cfg[key]!r}")
        self.label = cfg["name"] or (target.strip() if isinstance(target, str) else getattr(target, "__qualname__", repr(target)))
        self.range = RewardRange(cfg["reward_range"], f"OpenEnv env {self.label!r}")
        self.rows, self.ids = load_tasks(cfg["tasks"], self.SPLITS)
        timeout, connect = positive_seconds(cfg, "timeout_s"), positive_seconds(cfg, "connect_timeout_s")
        if _is_url(target):
            self.backend = HTTPBackend(target.strip(), self.label, timeout, connect)
        else:
            self.backend = InProcessBackend(target, cfg["action"], self.label, timeout)
        # An env the runner drops after a failure is never closed: end its session (or
        # environment instance) and stop its thread when it is collected.
        self._finalizer = weakref.finalize(self, self.backend.shutdown)
        self.rewards: list[float] = []   # the raw reward of every step, in order
        self.env_done = False            # the environment said done
        self.last_observation: dict = {}

    # ---- ToolEnv hooks --------------------------------------------------------------------
    def task_ids(self, split: str) -> list[str]:
        return list(self.ids[split])

    def load_task(self, task_id: str) -> Task:
        row = self.rows[task_id]
        mcp, schema = self.backend.describe()
        if self.config["mode"] != "auto" and (self.config["mode"] == "mcp") != mcp:
            raise ValueError(f"OpenEnv env {self.label!r}: env_config['mode'] is {self.config['mode']!r}, but its "
                             f"actions are {'MCP tools' if mcp else 'a typed Action'}")
        self.rewards, self.env_done = [], False
        payload = self.backend.open(copy.deepcopy(row.get("reset", {})))
        self.last_observation = payload["observation"]
        tools = self._mcp_tools() if mcp else [self._action_tool(schema)]
        return Task(task_id, row.get("system_prompt", self.config["system_prompt"]), self._prompt(row, payload),
                    tools, {"row": row})

    def compute_reward(self) -> tuple[float, dict]:
        raw = (self.rewards[-1] if self.rewards else 0.0) if self.config["reward"] == "last" else sum(self.rewards)
        value = self.range.scale(raw)
        return value, {"raw_reward": raw, "steps": len(self.rewards), "env_done": self.env_done, "progress": value}

    def reward_evidence(self) -> dict:
        if self.task is None:
            raise RuntimeError("call reset() before reward_evidence()")
        return copy.deepcopy(self.task.data["row"].get("evidence", {}))

    def on_text_reply(self, content: str) -> tuple[list[dict], bool]:
        field = self.config["text_action"]
        if field is None:
            return [], True
        try:
            payload = self._step({field: content})
        except ToolError as e:
            return [{"role": "user", "content": f"Error: {e}"}], False
        if self.env_done:
            return [], True
        return [{"role": "user", "content": self._observation_text(payload)}], False

    # ---- gymnasium API --------------------------------------------------------------------
    def step(self, action):
        new, reward, terminated, truncated, info = super().step(action)
        if self.env_done and not terminated:  # the environment ended it during a tool call
            self.done, terminated, truncated = True, True, False
            reward, info["reward_breakdown"] = self.compute_reward()
        if self.done:
            self.backend.close()
        return new, reward, terminated, truncated, info

    def close(self):
        self._finalizer()
        super().close()

    # ---- the environment -------------------------------------------------------------------
    def _step(self, action: dict) -> dict:
        """One step; keeps its reward and whether it ended the episode."""
        if self.env_done:
            raise ToolError("the episode is over; this call was not sent")
        payload = self.backend.step(action)
        reward = payload.get("reward")
        value = 0.0 if reward is None else finite_number(reward)
        if value is None:
            raise InfrastructureError(f"OpenEnv env {self.label!r} gave the reward {reward!r}, not a finite number")
        self.rewards.append(value)
        self.env_done = bool(payload.get("done"))
        self.last_observation = payload.get("observation") or {}
        return payload

    def _observation_text(self, payload: dict) -> str:
        obs = payload.get("observation") or {}
        field = self.config["observation_field"]
        if field is not None:
            if field not in obs:
                raise InfrastructureError(f"OpenEnv env {self.label!r}: the observation has no field {field!r} "
                                          f"(env_config['observation_field']); it has {sorted(obs)}")
            return _text(obs[field])
        return _text(obs)

    def _prompt(self, row: dict, payload: dict) -> str:
        if "prompt" in row:
            return row["prompt"]
        obs, field = payload.get("observation") or {}, self.config["prompt_field"]
        if field is not None:
            if not isinstance(obs.get(field), str):
                raise InfrastructureError(f"OpenEnv env {self.label!r}: the reset observation has no text field "
                                          f"{field!r} (env_config['prompt_field']); it has {sorted(obs)}")
            return obs[field]
        if not obs:
            raise ValueError(f"OpenEnv env {self.label!r}: the reset observation is empty, so there is no task to "
                             "show the policy; give each task a 'prompt' in env_config['tasks']")
        return _text(obs)

    def _action_tool(self, schema: dict) -> Tool:
        params = copy.deepcopy(schema)
        params.get("properties", {}).pop("metadata", None)
        params.pop("title", None)
        description = self.config["action_description"] or params.pop("description", None) or \
            f"Take one step in the {self.label} environment."
        params.pop("description", None)
        return Tool(self.config["action_tool"], description, params, self._act)

    def _act(self, **arguments):
        return self._observation_text(self._step(arguments))

    def _mcp_tools(self) -> list[Tool]:
        listing = self.backend.step({"type": "list_tools"}).get("observation") or {}
        tools = listing.get("tools")
        if not isinstance(tools, list):
            raise InfrastructureError(f"OpenEnv env {self.label!r}: list_tools gave no tool list ({_text(listing)[:300]})")
        out = []
        for tool in tools:
            tool = tool if isinstance(tool, dict) else {}
            name, schema = tool.get("name"), tool.get("input_schema")
            if not isinstance(name, str) or not name or not isinstance(schema, dict):
                raise InfrastructureError(f"OpenEnv env {self.label!r}: list_tools gave a tool without a name and an "
                                          f"input schema: {_text(tool)[:300]}")
            try:
                jsonschema.validators.validator_for(schema).check_schema(schema)
            except jsonschema.SchemaError as e:
                raise ValueError(f"OpenEnv env {self.label!r}: tool {name!r} has an invalid input schema: {e.message}") from None
            out.append(Tool(name, str(tool.get("description") or ""), copy.deepcopy(schema), self._mcp_caller(name)))
        return out

    def _mcp_caller(self, name: str):
        def call(**arguments):
            obs = self._step({"type": "call_tool", "tool_name": name, "arguments": arguments}).get("observation") or {}
            error = obs.get("error")
            if isinstance(error, dict):
                if error.get("error_type") in _INFRA_TOOL_ERRORS:
                    raise InfrastructureError(f"OpenEnv env {self.label!r}: tool {name!r} failed: {error.get('message')}")
                raise ToolError(str(error.get("message") or error))
            result = obs.get("result")
            text = _content_text(result)
            if isinstance(result, dict) and result.get("is_error"):
                raise ToolError(text)
            return text

        return call


__all__ = ["OpenEnvToolEnv", "DEFAULT_SYSTEM_PROMPT"]
