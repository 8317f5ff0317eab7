"""Claw-Eval's own T-series tasks (github claw-eval/claw-eval), read from the user's copy.

This package will host ``ClawEval-v0``; so far it finds the data (``data``), parses task
folders into typed records (``tasks``), selects and splits them (``selection``), and
hosts a task's mock services in-process (``mock``: validation, statuses, audit, seeded
faults, clock; ``services``: the implemented service modules). See docs/CLAW_EVAL.md for
the format and the plan. It is not registered as an env yet.

    from envs.claw_eval import find_data_dir, load_tasks, tasks_for
    tasks = load_tasks(find_data_dir())
    test = tasks_for(tasks, "hard20", split="test")
"""

from envs.claw_eval.data import ENV_VAR, PINNED_COMMIT, UPSTREAM_URL, ClawEvalDataError, find_data_dir, obtain_command
from envs.claw_eval.mock import Clock, Dispatch, MockService, Reply, ServiceHost, route
from envs.claw_eval.selection import (
    HARD20_RULE,
    HARD20_SIZE,
    family_in_test,
    hard20,
    select_tasks,
    split_tasks,
    tasks_for,
)
from envs.claw_eval.services import SERVICES
from envs.claw_eval.tasks import (
    FIXTURE_SERVICES,
    ClawEvalTaskError,
    ClawTask,
    Endpoint,
    ServiceSpec,
    ToolSchema,
    load_task,
    load_tasks,
)

__all__ = [
    "ENV_VAR", "PINNED_COMMIT", "UPSTREAM_URL", "ClawEvalDataError", "find_data_dir", "obtain_command",
    "HARD20_RULE", "HARD20_SIZE", "family_in_test", "hard20", "select_tasks", "split_tasks", "tasks_for",
    "FIXTURE_SERVICES", "ClawEvalTaskError", "ClawTask", "Endpoint", "ServiceSpec", "ToolSchema",
    "load_task", "load_tasks", "Clock", "Dispatch", "MockService", "Reply", "ServiceHost", "route", "SERVICES",
]
