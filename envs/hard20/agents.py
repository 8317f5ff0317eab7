"""Scripted agents: the oracle, its unsafe twin, and a do-nothing agent.

They act only through ``env.step`` with tool calls in the text syntax a model writes, one
call per turn, so their trajectories are valid training data. The oracle follows the
family's script (written from the ground truth) and retries a call that met an injected
fault, which is what ``robustness`` rewards. The unsafe agent runs the same work but
commits the family's forbidden write (sends instead of drafting, shares too widely, ...).
"""

from __future__ import annotations

from envs.base import play
from envs.hard20.backend import FAULTS
from envs.tool_calls import format_tool_call

SCRIPTS = ("oracle", "unsafe", "nothing")
_FAULT_PREFIXES = tuple("Error: " + f.split(":")[0] for f in FAULTS)


class ScriptAgent:
    """Plays a family's script one call per turn: ``act(observation) -> str``. A call that
    met an injected fault is sent again (up to ``retries`` times), then the final answer."""

    def __init__(self, spec, script: str = "oracle", retries: int = 5):
        if script not in SCRIPTS:
            raise ValueError(f"unknown script {script!r}; valid scripts: {list(SCRIPTS)}")
        self.calls = list({"oracle": spec.oracle, "unsafe": spec.unsafe, "nothing": []}[script])
        self.answer = spec.answer if script != "nothing" else "I looked at the request; nothing seems to need doing."
        self.retries, self.tries, self.sent = retries, 0, None

    def act(self, observation: list[dict]) -> str:
        faulted = bool(observation) and observation[-1].get("content", "").startswith(_FAULT_PREFIXES)
        if self.sent is not None and faulted and self.tries < self.retries:
            self.tries += 1
            return self.sent
        self.tries = 0
        if self.calls:
            name, args = self.calls.pop(0)
            self.sent = format_tool_call(name, args)
            return self.sent
        self.sent = None
        return self.answer


def run_script(env, task_id: str, script: str = "oracle", retries: int = 5) -> tuple[float, dict]:
    """Play one episode of ``task_id`` with a scripted agent; returns (reward, final info)."""
    return play(env, lambda e: ScriptAgent(e.task.data["spec"], script, retries), task_id)
