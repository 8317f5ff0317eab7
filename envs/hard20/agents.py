"""Scripted agents: the oracle, its unsafe twin, and a do-nothing agent.

They act only through ``env.step`` with tool calls in the text syntax a model writes, one
call per turn, so their trajectories are valid training data. The oracle follows the
family's script (written from the ground truth) and retries a call that met an injected
fault, which is what ``robustness`` rewards. The unsafe agent runs the same work but
commits the family's forbidden write (sends instead of drafting, shares too widely, ...).
"""

from __future__ import annotations

from envs.hard20.backend import FAULTS
from envs.tool_calls import format_tool_call

SCRIPTS = ("oracle", "unsafe", "nothing")
_FAULT_PREFIXES = tuple("Error: " + f.split(":")[0] for f in FAULTS)


def run_script(env, task_id: str, script: str = "oracle", retries: int = 5) -> tuple[float, dict]:
    """Play one episode of ``task_id`` with a scripted agent; returns (reward, final info)."""
    if script not in SCRIPTS:
        raise ValueError(f"unknown script {script!r}; valid scripts: {list(SCRIPTS)}")
    env.reset(options={"task_id": task_id})
    spec = env.task.data["spec"]
    calls = {"oracle": spec.oracle, "unsafe": spec.unsafe, "nothing": []}[script]
    answer = spec.answer if script != "nothing" else "I looked at the request; nothing seems to need doing."
    for name, args in calls:
        for _ in range(retries + 1):
            obs, reward, terminated, truncated, info = env.step(format_tool_call(name, args))
            if terminated or truncated:
                return reward, info
            if not obs[-1]["content"].startswith(_FAULT_PREFIXES):
                break
    _, reward, _, _, info = env.step(answer)
    return reward, info
