"""Pass@k and Pass^k for ClawEval runs, in the paper's layout (``rti_actors.metrics``).

A run is n graded trials per task (``ClawTrial``). Success is upstream's pass (score at
least 0.75). A task with a grading error in any trial is left out and counted, never
scored 0, as the actor graph's evaluation does, because Pass@k needs the same n
trials for every task.

Upstream reports pass^k with the estimator (c/n)^k; the paper's layout (and
``summarize``) uses C(c, k)/C(n, k), the share of k-subsets of the trials that all pass.
They agree only for tasks that always or never pass: at k = n, 2 passes of 3 give 0
here and (2/3)^3 upstream. ``upstream_pass^k`` is kept beside them so a figure can be
compared with upstream's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from rti_actors.metrics import format_table, summarize


@dataclass(frozen=True)
class ClawTrial:
    """One graded episode: ``score`` is None when grading failed (``error`` says why)."""

    task_id: str
    score: float | None
    passed: bool
    error: str = ""


@dataclass(frozen=True)
class ClawSummary:
    """One method's results: ``metrics.summarize``'s dict plus upstream's Pass^k, the mean
    score, and the tasks left out for grading errors."""

    summary: dict
    left_out: tuple[str, ...]


def summarize_trials(trials: Iterable[ClawTrial]) -> ClawSummary:
    by_task: dict[str, list[ClawTrial]] = {}
    for t in trials:
        by_task.setdefault(t.task_id, []).append(t)
    left_out = tuple(sorted(tid for tid, ts in by_task.items() if any(t.score is None for t in ts)))
    kept = {tid: ts for tid, ts in by_task.items() if tid not in left_out}
    summary = summarize({tid: [t.passed for t in ts] for tid, ts in kept.items()})
    n = summary["n"]
    for k in range(1, n + 1):
        summary[f"upstream_pass^{k}"] = sum((sum(t.passed for t in ts) / n) ** k for ts in kept.values()) / len(kept)
    summary["mean_score"] = sum(t.score for ts in kept.values() for t in ts) / (n * len(kept))
    summary["tasks_left_out_grading"] = len(left_out)
    return ClawSummary(summary, left_out)


def claw_table(runs: dict[str, Iterable[ClawTrial]], benchmark: str = "ClawEval-Hard20") -> tuple[dict, str]:
    """{method: trials} -> ({method: ClawSummary}, the table in the paper's layout)."""
    out = {method: summarize_trials(trials) for method, trials in runs.items()}
    return out, format_table({method: {benchmark: s.summary} for method, s in out.items()})


__all__ = ["ClawSummary", "ClawTrial", "claw_table", "summarize_trials"]
