"""Where the output of engine and learner actors goes.

vLLM, transformers and DeepSpeed write INFO lines and weight-loading progress bars to
stdout/stderr; Ray forwards every actor's output to the driver, so they buried the run's
own progress. Unless the config asks for ``debugging(log_level="INFO")`` or lower, each
engine and learner process writes its output to ``<run dir>/logs/<kind>-<pid>.log``
instead (warnings and errors included); the driver's console keeps its own lines.

The redirect is done at the start of the actor's worker process, before any library is
imported, by Ray's worker setup hook: ``threads_env`` (rti_actors.build) adds
``actor_env_vars(kind)`` to the runtime_env of those actors.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import weakref
from pathlib import Path

LOG_DIR_ENV = "RTI_ACTOR_LOG_DIR"
LOG_NAME_ENV = "RTI_ACTOR_LOG_NAME"
# Ray runs the function this names in each new worker process whose env carries it. The
# runtime_env field `worker_process_setup_hook` would set the same variable, but Ray reads
# that field only in ray.init's job-level runtime_env, which a driver that connects to a
# cluster it did not start cannot change.
RAY_SETUP_HOOK_ENV = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"

_log_dir: str | None = None
_run_dirs: dict[int, tuple[weakref.ref, Path]] = {}


def run_dir(config) -> Path:
    """The run's folder: reporting(run_dir) / (run_name or a time stamp). Chosen once per
    config object, so the build (which puts the actors' logs there) and the Algorithm
    (metrics, checkpoints) name the same folder."""
    hit = _run_dirs.get(id(config))
    if hit is not None and hit[0]() is config:
        return hit[1]
    rep = config["reporting"]
    name = rep["run_name"] or time.strftime("%Y%m%d-%H%M%S") + f"-{config['training']['algorithm']}"
    path = Path(rep["run_dir"]).expanduser().resolve() / name
    _run_dirs[id(config)] = (weakref.ref(config), path)
    return path


def capture_actor_output(log_dir: str | os.PathLike | None, log_level: str = "WARNING") -> None:
    """Send the output of the actors made from now on (by ``actor_env_vars``) to ``log_dir``;
    ``None``, or a ``log_level`` of INFO or lower, leaves it on the driver's console."""
    global _log_dir
    verbose = logging.getLevelName(log_level) <= logging.INFO
    _log_dir = None if log_dir is None or verbose else str(log_dir)


def actor_env_vars(kind: str) -> dict[str, str]:
    """The env_vars that make an actor of ``kind`` ("engine", "learner") log to a file."""
    if _log_dir is None:
        return {}
    return {LOG_DIR_ENV: _log_dir, LOG_NAME_ENV: kind, RAY_SETUP_HOOK_ENV: f"{__name__}.redirect_output"}


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
