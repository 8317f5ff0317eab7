"""Where the output of engine and learner actors goes.

vLLM, transformers and DeepSpeed write INFO lines and weight-loading progress bars to
stdout/stderr; Ray forwards every actor's output to the driver, so they buried the run's
own progress. Unless the config asks for ``debugging(log_level="INFO")`` or lower, each
engine and learner process writes its output to ``<run dir>/logs/<kind>-<pid>.log``
instead (warnings and errors included); the driver's console keeps its own lines.

The redirect is done at the start of the actor's worker process, before any library is
imported, by Ray's worker setup hook: the build adds ``actor_env_vars(kind, log_dir)`` to the
runtime_env of those actors.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

LOG_DIR_ENV = "RTI_ACTOR_LOG_DIR"
LOG_NAME_ENV = "RTI_ACTOR_LOG_NAME"
# Ray runs the function this names in each new worker process whose env carries it. The
# runtime_env field `worker_process_setup_hook` would set the same variable, but Ray reads
# that field only in ray.init's job-level runtime_env, which a driver that connects to a
# cluster it did not start cannot change.
RAY_SETUP_HOOK_ENV = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"

def actor_log_dir(run_dir: Path, log_level: str) -> Path | None:
    """Where engine and learner output goes: ``<run dir>/logs``, or None (the console)
    when ``log_level`` is INFO or lower."""
    return None if logging.getLevelName(log_level) <= logging.INFO else Path(run_dir) / "logs"


def actor_env_vars(kind: str, log_dir: Path | None) -> dict[str, str]:
    """The env_vars that make an actor of ``kind`` ("engine", "learner") log to a file in
    ``log_dir`` (none when it is None)."""
    if log_dir is None:
        return {}
    return {LOG_DIR_ENV: str(log_dir), LOG_NAME_ENV: kind, RAY_SETUP_HOOK_ENV: f"{__name__}.redirect_output"}


def redirect_output() -> None:
    """Ray's worker setup hook: point fds 1 and 2 of this process at its log file, so that
    C++ output, subprocesses (vLLM's workers) and Python's sys.stdout/stderr all land there.
    Never raises: a failing hook would make Ray kill the worker."""
    log_dir = os.environ.get(LOG_DIR_ENV)
    if not log_dir:
        return
    try:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        path = Path(log_dir) / f"{os.environ.get(LOG_NAME_ENV, 'actor')}-{os.getpid()}.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:
        print(f"rti_actors: output stays here, cannot open a log file in {log_dir}: {e}", file=sys.stderr)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
