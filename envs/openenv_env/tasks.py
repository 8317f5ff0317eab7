"""The tasks of an OpenEnv environment: what ``reset`` is called with, per task id.

An OpenEnv environment picks its own episode at ``reset(seed=..., **kwargs)``; this
library needs named tasks in splits (to group samples, to replay an episode for RTI, to
hold out a test set). ``env_config["tasks"]`` says which, in one of these forms:

    64                                  train tasks "seed-0" .. "seed-63": reset(seed=i)
    {"train": 64, "test": 16}           seeds numbered on across splits: test is 64 .. 79
    {"train": [0, 1, 2], "test": [99]}  these seeds
    [{"task_id": "easy", "reset": {"seed": 1, "level": "easy"}, "split": "test"}, ...]
    "tasks.jsonl"                       the same rows, one JSON object per line

A row may also carry ``prompt`` (the user's message, when the reset observation is not
one), ``system_prompt`` and ``evidence`` (private material for the RTI Validator).
"""

from __future__ import annotations

import json

DEFAULT_TASKS = {"train": 64, "test": 16}
_ROW_KEYS = ("task_id", "split", "reset", "prompt", "system_prompt", "evidence")


def _seed_rows(spec: dict, splits: tuple[str, ...]) -> list[dict]:
    unknown = set(spec) - set(splits)
    if unknown:
        raise ValueError(f"env_config['tasks'] names unknown splits {sorted(unknown)}; splits are {list(splits)}")
    rows, next_seed = [], 0
    for split in splits:  # counts number on from the previous split, so splits never share a seed
        value = spec.get(split, [])
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            seeds, next_seed = list(range(next_seed, next_seed + value)), next_seed + value
        elif isinstance(value, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value):
            seeds = value
        else:
            raise ValueError(f"env_config['tasks'][{split!r}] must be a count or a list of non-negative int seeds, "
                             f"got {value!r}")
        rows += [{"task_id": f"seed-{s}", "split": split, "reset": {"seed": s}} for s in seeds]
    return rows


def _file_rows(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except OSError as e:
        raise ValueError(f"cannot read the tasks file {path!r}: {e.strerror or e}") from None
    rows = []
    for number, line in lines:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}, line {number}: not JSON ({e.msg})") from None
    return rows


def _check(row, where: str, splits: tuple[str, ...]) -> None:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a task must be a dict, got {type(row).__name__}")
    unknown = set(row) - set(_ROW_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; a task has {list(_ROW_KEYS)}")
    if not isinstance(row.get("task_id"), str) or not row["task_id"].strip():
        raise ValueError(f"{where}: 'task_id' must be a non-empty string, got {row.get('task_id')!r}")
    if row.get("split", "train") not in splits:
        raise ValueError(f"{where}: split must be one of {list(splits)}, got {row.get('split')!r}")
    reset = row.get("reset", {})
    if not isinstance(reset, dict) or not all(isinstance(k, str) for k in reset):
        raise ValueError(f"{where}: 'reset' must be a dict of keyword arguments for reset(), got {reset!r}")
    for key in ("prompt", "system_prompt"):
        if key in row and not isinstance(row[key], str):
            raise ValueError(f"{where}: {key!r} must be a string, got {type(row[key]).__name__}")
    if not isinstance(row.get("evidence", {}), dict):
        raise ValueError(f"{where}: 'evidence' must be a dict, got {type(row['evidence']).__name__}")


def load_tasks(spec, splits: tuple[str, ...]) -> tuple[dict[str, dict], dict[str, list[str]]]:
    """(rows by task id, task ids per split) of ``env_config["tasks"]``."""
    if spec is None:
        spec = DEFAULT_TASKS
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = {"train": spec}
    if isinstance(spec, dict):
        rows = _seed_rows(spec, splits)
    elif isinstance(spec, str):
        rows = _file_rows(spec)
    elif isinstance(spec, (list, tuple)):
        rows = list(spec)
    else:
        raise ValueError(f"env_config['tasks'] must be a count, a dict of split -> count or seeds, a list of task "
                         f"dicts or a JSON-lines path; got {type(spec).__name__}")
    by_id: dict[str, dict] = {}
    ids: dict[str, list[str]] = {s: [] for s in splits}
    for i, row in enumerate(rows):
        _check(row, f"tasks[{i}]", splits)
        if row["task_id"] in by_id:
            raise ValueError(f"tasks[{i}]: duplicate task id {row['task_id']!r}")
        by_id[row["task_id"]] = row
        ids[row.get("split", "train")].append(row["task_id"])
    if not by_id:
        raise ValueError(f"env_config['tasks'] has no tasks: {spec!r}")
    return by_id, ids


__all__ = ["load_tasks", "DEFAULT_TASKS"]
