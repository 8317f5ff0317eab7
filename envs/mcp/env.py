"""``MCPToolEnv`` ("MCP-v0"): the tools of any MCP server as a multi-turn tool env.

    env = envs.make_env("MCP-v0", {"server": ["python", "-m", "my_server"],
                                   "tasks": "tasks.jsonl", "grader": "my_pkg.grading:grade"})

At ``reset`` the env opens a session, reads ``tools/list`` (checked: ``schemas.py``) and
offers those tools; each call the policy makes is validated against the tool's schema and
sent as ``tools/call``, and its result is the observation (an ``isError`` result reads
"Error: ..."). When the policy replies without a tool call the episode ends and the
grader scores it: ``grader(task, episode)`` with the task's row and an ``MCPEpisode``. A
subclass may override ``grade`` instead (and may call the server there, ``self.link``).

env_config (besides the ``ToolEnv`` defaults: split, max_turns, output truncation, ...):
    server            where the server is (``server_spec.py``): URL, command, argv or dict
    server_name       how messages name it (default: the command or URL)
    tasks             JSON-lines path or list of task dicts (``tasks.py``)
    grader            callable or "module:function" (unless a subclass overrides ``grade``)
    system_prompt     for tasks without one
    tools             the names of the tools to offer (default: all the server lists)
    session           "episode" (default): a fresh session (for stdio, a fresh server
                      process) per episode, so no state leaks between episodes and a
                      replay of the turns reproduces one; "reuse": one session for all
                      episodes, faster for stateless servers (reopened when it fails)
    timeout_s         longest wait for any one request (default 30)
    connect_timeout_s longest wait to start the server and shake hands (default 60)
    max_schema_chars  longest tool schema, as JSON, the prompt may carry (default 16000)
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass, field
from typing import Any

from envs.base import InfrastructureError, Task, Tool, ToolEnv, ToolError, finite_number, truncate_text
from envs.mcp.link import MCPLink
from envs.mcp.schemas import checked_tools, result_text
from envs.mcp.server_spec import server_spec
from envs.mcp.tasks import load_tasks, resolve_grader

DEFAULT_SYSTEM_PROMPT = ("You are a helpful assistant with tools. Use them to complete the user's task; when it is "
                         "done, reply to the user in plain text without a tool call.")
SESSIONS = ("episode", "reuse")


@dataclass
class ToolCallRecord:
    """One ``tools/call`` the server answered, before any truncation for the policy."""

    name: str
    arguments: dict
    text: str                  # the result as observation text, whole
    is_error: bool
    structured: Any = None     # the result's structuredContent, if any


@dataclass
class MCPEpisode:
    """What a grader sees of a finished episode."""

    task: dict                 # the task's row
    messages: list[dict]       # the transcript: system, user, assistant turns, tool results
    calls: list[ToolCallRecord] = field(default_factory=list)  # answered tool calls, in order
    answer: str = ""           # the content of the last assistant turn


def _positive(cfg: dict, key: str) -> float:
    value = finite_number(cfg[key])
    if value is None or value <= 0 or isinstance(cfg[key], bool):
        raise ValueError(f"env_config[{key!r}] must be a positive number of seconds, got {cfg[key]!r}")
    return value


class MCPToolEnv(ToolEnv):
    DEFAULT_CONFIG = {
        **ToolEnv.DEFAULT_CONFIG,
        "server": None,
        "server_name": None,
        "tasks": None,
        "grader": None,
        "system_prompt": DEFAULT_SYSTEM_PROMPT,
        "tools": None,
        "session": "episode",
        "timeout_s": 30.0,
        "connect_timeout_s": 60.0,
        "max_schema_chars": 16000,
    }

    def __init__(self, env_config: dict | None = None, render_mode: str | None = None, **config):
        super().__init__({**(env_config or {}), **config}, render_mode)
        cfg = self.config
        self.server = server_spec(cfg["server"], cfg["server_name"])
        self.rows, self.ids = load_tasks(cfg["tasks"], self.SPLITS)
        self.grader = resolve_grader(cfg["grader"])
        if self.grader is None and type(self).grade is MCPToolEnv.grade:
            raise ValueError("MCPToolEnv needs env_config['grader'] (grader(task, episode) -> reward, or a "
                             "'module:function' string), or a subclass that overrides grade()")
        if cfg["session"] not in SESSIONS:
            raise ValueError(f"env_config['session'] must be one of {list(SESSIONS)}, got {cfg['session']!r}")
        tools = cfg["tools"]
        if tools is not None and (not isinstance(tools, (list, tuple)) or not all(isinstance(t, str) for t in tools)):
            raise ValueError(f"env_config['tools'] must be a list of tool names, got {tools!r}")
        if not isinstance(cfg["max_schema_chars"], int) or cfg["max_schema_chars"] <= 0:
            raise ValueError(f"env_config['max_schema_chars'] must be a positive integer, got {cfg['max_schema_chars']!r}")
        self.link = MCPLink(self.server, _positive(cfg, "timeout_s"), _positive(cfg, "connect_timeout_s"))
        # An env the runner drops after a failure is never closed: stop its server when
        # it is collected (the link holds no reference back to the env).
        self._finalizer = weakref.finalize(self, self.link.close)
        self.calls: list[ToolCallRecord] = []

    # ---- ToolEnv hooks --------------------------------------------------------------------
    def task_ids(self, split: str) -> list[str]:
        return list(self.ids[split])

    def load_task(self, task_id: str) -> Task:
        row = self.rows[task_id]
        listing = self._listing()
        tools = checked_tools(listing, self.link.label, self.config["tools"], self.config["max_schema_chars"])
        self.calls = []
        return Task(task_id, row.get("system_prompt", self.config["system_prompt"]), row["prompt"],
                    [Tool(t.name, t.description or "", copy.deepcopy(t.input_schema), self._caller(t.name)) for t in tools],
                    {"row": row}, demonstration=copy.deepcopy(row.get("demonstration", [])))

    def compute_reward(self) -> tuple[float, dict]:
        row = self.task.data["row"]
        answer = next((m["content"] for m in reversed(self.messages) if m["role"] == "assistant"), "")
        episode = MCPEpisode(copy.deepcopy(row), copy.deepcopy(self.messages), list(self.calls), answer)
        out = self.grade(copy.deepcopy(row), episode)
        reward, breakdown = out if isinstance(out, tuple) and len(out) == 2 else (out, {})
        if not isinstance(breakdown, dict):
            raise ValueError(f"the grader of {self.link.label} returned a breakdown of type {type(breakdown).__name__}; "
                             "return a reward, or (reward, dict)")
        value = finite_number(reward)
        if value is not None and "progress" not in breakdown:
            breakdown = {**breakdown, "progress": min(max(value, 0.0), 1.0)}
        return reward, breakdown

    def grade(self, task: dict, episode: MCPEpisode):
        """The reward of a finished episode: ``reward`` or ``(reward, breakdown)``."""
        return self.grader(task, episode)

    def reward_evidence(self) -> dict:
        if self.task is None:
            raise RuntimeError("call reset() before reward_evidence()")
        return copy.deepcopy(self.task.data["row"].get("evidence", {}))

    # ---- gymnasium API --------------------------------------------------------------------
    def step(self, action):
        out = super().step(action)
        if self.done and self.config["session"] == "episode":
            self.link.close_session()  # after grading: a grader may still ask the server
        return out

    def close(self):
        self._finalizer()
        super().close()

    # ---- the server ------------------------------------------------------------------------
    def _listing(self):
        """``tools/list`` on a fresh session, or on the kept one (reopened once if it died)."""
        fresh = self.config["session"] == "episode" or not self.link.connected
        if fresh:
            self.link.open()
        try:
            return self.link.list_tools()
        except InfrastructureError:
            if fresh:
                raise
            self.link.open()
            return self.link.list_tools()

    def _caller(self, name: str):
        def call(**arguments):
            try:
                result = self.link.call_tool(name, arguments)
            except ToolError as e:
                self.calls.append(ToolCallRecord(name, copy.deepcopy(arguments), str(e), True))
                raise
            text = result_text(result)
            self.calls.append(ToolCallRecord(name, copy.deepcopy(arguments), text, bool(result.is_error),
                                             copy.deepcopy(result.structured_content)))
            if result.is_error:  # "Error: " + the text, cut like any observation
                raise ToolError(truncate_text(text, max(self.config["max_tool_output_chars"] - 7, 0)))
            return text

        return call


__all__ = ["MCPToolEnv", "MCPEpisode", "ToolCallRecord", "DEFAULT_SYSTEM_PROMPT"]
