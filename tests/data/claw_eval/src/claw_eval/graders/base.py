"""Stand-in grader base: the helpers the synthetic graders call.

``compute_robustness`` follows the rule docs/CLAW_EVAL.md states for upstream: 1 when no
call failed (status >= 400); otherwise the larger of the share of failing tool names
that later succeeded and min(success ratio, 0.5), both rounded to 2 places.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parents[3] / "tasks"


def load_peer_grader(task_id: str, tasks_dir: str | Path = TASKS_DIR) -> type:
    path = Path(tasks_dir) / task_id / "grader.py"
    spec = importlib.util.spec_from_file_location(f"standin_peer_{task_id}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, AbstractGrader) and value is not AbstractGrader:
            return value
    raise ValueError(f"{path} defines no grader")


class AbstractGrader(ABC):
    @abstractmethod
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None, env_snapshot=None):
        ...

    @staticmethod
    def _get_final_assistant_text(messages) -> str:
        said = [m.message.text for m in messages if m.message.role == "assistant"]
        return said[-1] if said else ""

    @staticmethod
    def _get_all_assistant_text(messages) -> str:
        return "\n".join(m.message.text for m in messages if m.message.role == "assistant")

    @staticmethod
    def get_service_actions(audit_data, service, action_key) -> list:
        found = ((audit_data or {}).get(service) or {}).get(action_key, [])
        return found if isinstance(found, list) else []

    @staticmethod
    def format_conversation(messages) -> str:
        return "\n".join(f"[{m.message.role.upper()}]: {m.message.text}" for m in messages if m.message.text)

    @staticmethod
    def compute_robustness(dispatches) -> float:
        failed = [d for d in dispatches if d.response_status >= 400]
        if not failed:
            return 1.0
        failing_tools = {d.tool_name for d in failed}
        seen_failure, recovered = set(), set()
        for d in dispatches:
            if d.response_status >= 400:
                seen_failure.add(d.tool_name)
            elif d.tool_name in seen_failure:
                recovered.add(d.tool_name)
        floor = round(min((len(dispatches) - len(failed)) / len(dispatches), 0.5), 2)
        return round(max(len(recovered) / len(failing_tools), floor), 2)
