"""The user's side of an MCP env: the tasks (JSON lines or a list of dicts) and the grader.

One task per line::

    {"task_id": "t1", "prompt": "What is 2+3?", "split": "test", "answer": "5"}

``task_id`` and ``prompt`` (the user's message) are required. Optional: ``split`` ("train"
by default), ``system_prompt`` (else the env's), ``demonstration`` (a worked example: a
list of chat messages shown before the task), ``evidence`` (privileged material for the
RTI Validator and an oracle, never observed). Every field reaches the grader.

The grader is ``grader(task, episode) -> reward`` or ``(reward, breakdown)``: a callable,
or a ``"package.module:function"`` string (which also survives config files).
"""

from __future__ import annotations

import importlib
import json
from typing import Callable

_OPTIONAL_STR = ("system_prompt",)


def _check_row(row, splits: tuple[str, ...]) -> str | None:
    """What is wrong with one task, or None."""
    if not isinstance(row, dict):
        return f"a task must be a JSON object, got {type(row).__name__}"
    for key in ("task_id", "prompt"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            return f"{key!r} must be a non-empty string, got {row.get(key)!r}"
    if row.get("split", "train") not in splits:
        return f"split must be one of {list(splits)}, got {row.get('split')!r}"
    for key in _OPTIONAL_STR:
        if key in row and not isinstance(row[key], str):
            return f"{key!r} must be a string, got {type(row[key]).__name__}"
    demo = row.get("demonstration", [])
    if not isinstance(demo, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in demo):
        return "'demonstration' must be a list of chat messages (dicts with 'role' and 'content')"
    if not isinstance(row.get("evidence", {}), dict):
        return f"'evidence' must be an object, got {type(row['evidence']).__name__}"
    return None


def _rows(source) -> list[tuple[str, object]]:
    """(where, row) for every task of a path or a list."""
    if isinstance(source, (list, tuple)):
        return [(f"tasks[{i}]", row) for i, row in enumerate(source)]
    if not isinstance(source, str) and not hasattr(source, "__fspath__"):
        raise ValueError("env_config['tasks'] is required: the path of a JSON-lines file of tasks, or a list of task "
                         f"dicts; got {type(source).__name__}")
    out = []
    try:
        with open(source, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    try:
                        out.append((f"{source}, line {number}", json.loads(line)))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{source}, line {number}: not JSON ({e.msg} at char {e.pos})") from None
    except OSError as e:
        raise ValueError(f"cannot read the tasks file {source!r}: {e.strerror or e}") from None
    return out


def load_tasks(source, splits: tuple[str, ...]) -> tuple[dict[str, dict], dict[str, list[str]]]:
    """(task rows by id, task ids per split) of ``env_config["tasks"]``."""
    rows: dict[str, dict] = {}
    ids: dict[str, list[str]] = {s: [] for s in splits}
    for where, row in _rows(source):
        problem = _check_row(row, splits)
        if problem:
            raise ValueError(f"{where}: {problem}")
        if row["task_id"] in rows:
            raise ValueError(f"{where}: duplicate task id {row['task_id']!r}")
        rows[row["task_id"]] = row
        ids[row.get("split", "train")].append(row["task_id"])
    if not rows:
        raise ValueError(f"env_config['tasks'] has no tasks: {source!r}")
    return rows, ids


def resolve_grader(value) -> Callable | None:
    """A grader callable from a callable or a ``"module:function"`` string (None stays None)."""
    if value is None or callable(value):
        return value
    if not isinstance(value, str) or value.count(":") != 1:
        raise ValueError(f"env_config['grader'] must be a callable grader(task, episode) or a 'package.module:function' "
                         f"string, got {value!r}")
    module, attr = value.split(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load the grader {value!r}: {type(e).__name__}: {e}") from None
    if not callable(fn):
        raise ValueError(f"the grader {value!r} is a {type(fn).__name__}, not a callable grader(task, episode)")
    return fn
