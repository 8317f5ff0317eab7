"""JSON lines for the GPU check's summary table (scripts/gpu_check.sh prints it).

``record(name, **numbers)`` appends one line to the file named by ``$RTI_GPU_REPORT`` (and
prints it), tagged with the running test's id; without the variable it only prints, so the
tests run the same outside the script. ``tests/gpu/conftest.py`` adds a line when each test
starts and one per phase (setup, call, teardown) as it ends, so a test whose process dies
or is killed by the script's time limit still shows up in the table.
"""

from __future__ import annotations

import json
import math
import os
import time

REPORT_ENV = "RTI_GPU_REPORT"


def write_line(line: dict) -> None:
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({**line, "time": round(time.time(), 3)}, default=str) + "\n")


def current_test() -> str:
    """The node id of the running test (pytest keeps it in PYTEST_CURRENT_TEST)."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def _clean(value):
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def record(name: str, **numbers) -> None:
    """One row's key numbers (tokens/s, publish seconds, ...), e.g. ``record("hf throughput", tokens_per_s=...)``."""
    numbers = _clean(numbers)
    print(f"[gpu-report] {name}: {numbers}", flush=True)
    write_line({"kind": "numbers", "test": current_test(), "name": name, "numbers": numbers})
