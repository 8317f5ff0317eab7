"""Claw-Eval's own T-series tasks (github claw-eval/claw-eval), read from the user's copy,
as the environment ``ClawEval-v0`` (``env.ClawEvalEnv``).

Parts: finding the data (``data``), task folders as typed records (``tasks``), selection
and family-wise splits (``selection``), the task's mock services in-process (``mock``:
validation, statuses, audit, seeded faults, clock; ``services*``: the sixteen
fixture-backed modules), the task's own grader run on the episode (``grading``), the
judge handed to it (``judge``), opt-in fixes of known upstream defects (``fixes``),
scripted oracles per family (``oracles``), training variants (``variants``) and Pass@k /
Pass^k tables (``report``, which uses ``rti_actors.metrics``). See docs/CLAW_EVAL.md.

    import gymnasium
    env = gymnasium.make("ClawEval-v0", env_config={"tasks": "hard20", "split": "test", "judge": "endpoint",
                                                     "judge_endpoint": {"base_url": ..., "model": ...}})
"""

from envs.claw_eval.data import ENV_VAR, PINNED_COMMIT, UPSTREAM_URL, ClawEvalDataError, find_data_dir, obtain_command
from envs.claw_eval.env import ClawEvalConfigError, ClawEvalEnv
from envs.claw_eval.fixes import DEFECTS, GraderDefect, GraderFixConfigError, GraderFixes
from envs.claw_eval.grading import PASS_THRESHOLD, ClawGradingError, Grade, GradingError, grade_episode, task_score
from envs.claw_eval.judge import JUDGES, ClawJudge, JudgeUnavailable, JudgeVerdict, make_judge
from envs.claw_eval.mock import Clock, Dispatch, HTTPError, MockService, Reply, ServiceHost, route
from envs.claw_eval.oracles import ORACLES, OracleResult, OracleSession, run_oracle
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
    "load_task", "load_tasks", "Clock", "Dispatch", "HTTPError", "MockService", "Reply", "ServiceHost", "route",
    "SERVICES", "ClawEvalEnv", "ClawEvalConfigError", "PASS_THRESHOLD", "ClawGradingError", "Grade", "GradingError",
    "grade_episode", "task_score", "JUDGES", "ClawJudge", "JudgeUnavailable", "JudgeVerdict", "make_judge",
    "DEFECTS", "GraderDefect", "GraderFixConfigError", "GraderFixes", "ORACLES", "OracleResult", "OracleSession",
    "run_oracle",
]
