"""One τ² environment instance: the agent toolkit, the optional user toolkit (telecom's
phone), the sync hook that couples them, and τ²'s tool-call contract (route by requestor, call, report errors as tool messages).

Nothing raises out of ``execute``: every failure becomes a tool message with
``error=True`` and content ``"Error: <message>"``, which the orchestrator counts toward
the episode's error limit.
"""

from __future__ import annotations

from typing import Any, Callable

from envs.base import ToolError
from envs.tau2.toolkit import Toolkit, fingerprint, render_result


def deep_merge(base: dict, update: dict) -> dict:
    """τ²'s initialisation merge: mappings merge recursively; any other value (lists too) is replaced."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = value
    return base


class Tau2Environment:
    def __init__(self, domain: str, agent: Toolkit, user: Toolkit | None = None,
                 sync: Callable[[Toolkit, Toolkit], None] | None = None, solo: bool = False):
        if solo and user is None:
            raise ValueError(f"the {domain} domain has no user tools, so it has no solo mode")
        self.domain = domain
        self.agent = agent
        self.user = user
        self.solo = solo
        self._sync = sync

    def sync(self) -> None:
        if self._sync is not None and self.user is not None:
            self._sync(self.agent, self.user)

    # ---- tool calls (τ²'s tool-call contract) ------------------------------------------
    def route(self, name: Any, requestor: str) -> Toolkit:
        """The toolkit that executes ``name`` for ``requestor``, or a ToolError."""
        if requestor == "user":
            if self.user is None or self.solo:
                raise ToolError("User tools not available")
            if not self.user.has_tool(name):
                raise ToolError(f"Tool '{name}' not found.")
            return self.user
        if self.solo and self.user.has_tool(name):  # solo: the agent operates the phone itself
            return self.user
        if not self.agent.has_tool(name):
            raise ToolError(f"Tool '{name}' not found.")
        return self.agent

    def execute(self, call: dict, requestor: str = "assistant") -> dict:
        """Run one tool call; always returns a τ² tool message."""
        message = {"id": call.get("id", ""), "role": "tool", "requestor": requestor}
        try:
            toolkit = self.route(call.get("name"), requestor)
            arguments = call.get("arguments", {})
            if not isinstance(arguments, dict):
                raise ToolError(f"arguments of {call.get('name')} must be a JSON object")
            result = toolkit.call(call["name"], arguments)
        except Exception as e:  # the contract: a failing tool is an observation, never a crash
            return {**message, "content": f"Error: {e}", "error": True}
        self.sync()
        return {**message, "content": render_result(result), "error": False}

    def run_function(self, env_type: str, func_name: str, arguments: dict) -> Any:
        """An environment function call (initialisation helper or assertion), then sync."""
        toolkit = self.user if env_type == "user" else self.agent
        if toolkit is None or not toolkit.has_function(func_name):
            raise ToolError(f"Function '{func_name}' not found in the {env_type} toolkit of {self.domain}.")
        result = toolkit.call(func_name, dict(arguments or {}))
        self.sync()
        return result

    # ---- episode set-up and evaluation helpers --------------------------------------------
    def initialise(self, task: dict) -> None:
        """τ²'s episode set-up: initialisation data, initialisation actions, then one more sync."""
        state = task.get("initial_state") or {}
        data = state.get("initialization_data") or {}
        if data.get("agent_data"):
            deep_merge(self.agent.db, data["agent_data"])
        if data.get("user_data") and self.user is not None:
            deep_merge(self.user.db, data["user_data"])
        for action in state.get("initialization_actions") or []:
            self.run_function(action["env_type"], action["func_name"], action.get("arguments") or {})
        if state.get("message_history"):
            raise ValueError("τ² tasks with a message_history are not supported (no shipped task has one)")
        self.sync()

    def apply_gold_action(self, action: dict) -> bool:
        """For the DB check: a gold action straight on its toolkit, no sync; failures are skipped."""
        requestor = action.get("requestor") or "assistant"
        toolkit = self.user if requestor == "user" else self.agent
        try:
            toolkit.call(action["name"], dict(action.get("arguments") or {}))
            return True
        except Exception:
            return False

    def fingerprints(self) -> tuple[str, str | None]:
        """(agent DB, user DB or None) fingerprints of the current state (``toolkit.fingerprint``)."""
        return fingerprint(self.agent.db), (fingerprint(self.user.db) if self.user is not None else None)
