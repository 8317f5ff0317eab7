"""Where the user's copy of the Claw-Eval repository is.

The project ships none of Claw-Eval's tasks (its code has no licence file), so the user
provides a clone. It is looked up in this order, first hit wins:

    1. ``env_config["data_dir"]``
    2. the environment variable ``RTI_CLAW_EVAL_DIR``
    3. the cache folder ``~/.cache/rti_actors/claw-eval``

A folder that is named but wrong (or none at all) is an error that prints the exact
command to obtain the pinned copy, rather than a silent fall-through to the next step:
a typo in ``data_dir`` must not quietly evaluate some other copy.
"""

from __future__ import annotations

import os
from pathlib import Path

UPSTREAM_URL = "https://github.com/claw-eval/claw-eval"
#: the upstream commit this package's loader was written against
PINNED_COMMIT = "9365e1a96ec084a5c8820cdf438e7fb4e1a83b90"
ENV_VAR = "RTI_CLAW_EVAL_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/rti_actors/claw-eval")


class ClawEvalDataError(FileNotFoundError):
    """The Claw-Eval data is missing or is not a copy of the repository."""


def obtain_command(target: str | Path = DEFAULT_CACHE_DIR) -> str:
    """The shell command that puts the pinned copy at ``target``."""
    return (f"git clone {UPSTREAM_URL} {target} && "
            f"git -C {target} checkout {PINNED_COMMIT}")


def problem_with(path: Path) -> str | None:
    """Why ``path`` is not a usable copy, or None when it is: it must hold ``tasks/``
    with at least one task folder that has a ``task.yaml``."""
    if not path.is_dir():
        return f"{path} does not exist or is not a folder"
    tasks = path / "tasks"
    if not tasks.is_dir():
        return f"{path} has no tasks/ folder (is it the repository root of claw-eval?)"
    if not any(tasks.glob("*/task.yaml")):
        return f"{tasks} holds no task folder with a task.yaml"
    return None


def _fail(path: Path, source: str, reason: str) -> ClawEvalDataError:
    return ClawEvalDataError(
        f"Claw-Eval data from {source} is unusable: {reason}.\n"
        f"Obtain the pinned copy with:\n    {obtain_command(DEFAULT_CACHE_DIR)}\n"
        f"or clone it elsewhere (same commands with another folder) and pass "
        f'env_config["data_dir"] or set {ENV_VAR}.')


def find_data_dir(data_dir: str | os.PathLike | None = None, *,
                  environ: dict | None = None, cache_dir: str | os.PathLike | None = None) -> Path:
    """The repository root of the user's Claw-Eval copy (see the module docstring).
    ``environ`` and ``cache_dir`` replace ``os.environ`` and the default cache in tests."""
    environ = os.environ if environ is None else environ
    candidates: list[tuple[str, str | os.PathLike | None]] = [
        ('env_config["data_dir"]', data_dir),
        (f"${ENV_VAR}", environ.get(ENV_VAR) or None),
    ]
    for source, value in candidates:
        if value is not None:
            path = Path(value).expanduser().resolve()
            reason = problem_with(path)
            if reason:
                raise _fail(path, source, reason)
            return path
    cache = Path(cache_dir if cache_dir is not None else DEFAULT_CACHE_DIR).expanduser().resolve()
    reason = problem_with(cache)
    if reason:
        raise _fail(cache, f"the cache folder {cache} (no data_dir, {ENV_VAR} unset)", reason)
    return cache
