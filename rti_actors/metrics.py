"""Pass@k and Pass^k with the unbiased estimators, and the results table in the RTI paper's layout.

Over n rollouts per task with c successes:
    Pass@k = 1 - C(n-c, k) / C(n, k)   (at least one of k succeeds)
    Pass^k = C(c, k) / C(n, k)         (all k succeed)
p@1 is the mean Pass@1 over tasks; avg p@k and avg p^k average k = 1..n.
"""

from __future__ import annotations

import math
from math import comb


def mean(values) -> float:
    """The mean, NaN for no values (a metric of an empty iteration, not an error)."""
    return sum(values) / len(values) if len(values) else float("nan")


def pass_at_k(n: int, c: int, k: int) -> float:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return comb(c, k) / comb(n, k)


def wilson(p: float, n: int, z: float = 1.96) -> list[float]:
    """95 % Wilson score interval for a mean of ``n`` values in [0, 1]. A task's p@1 is such a
    value and its variance is at most p(1 - p), so over tasks this is conservative; unlike a
    percentile bootstrap it does not collapse to [0, 0] when no task succeeds."""
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return [max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))]


def summarize(successes: dict[str, list[bool]]) -> dict:
    """Per-benchmark summary from {task_id: [success per rollout]} (all lists of length n)."""
    if not successes:
        raise ValueError("no evaluation results")
    ns = {len(v) for v in successes.values()}
    if len(ns) != 1:
        raise ValueError(f"every task needs the same number of rollouts, got {sorted(ns)}")
    n = ns.pop()
    out = {"n": n, "num_tasks": len(successes)}
    for k in range(1, n + 1):
        out[f"pass@{k}"] = sum(pass_at_k(n, sum(v), k) for v in successes.values()) / len(successes)
        out[f"pass^{k}"] = sum(pass_hat_k(n, sum(v), k) for v in successes.values()) / len(successes)
    out["p@1"] = out["pass@1"]
    out["avg_p@k"] = sum(out[f"pass@{k}"] for k in range(1, n + 1)) / n
    out["avg_p^k"] = sum(out[f"pass^{k}"] for k in range(1, n + 1)) / n
    return out


def merge_summaries(parts: list[dict]) -> dict:
    """The summary of the union of disjoint task sets, from each set's summary (as
    ``summarize`` or ``Algorithm.evaluate`` return them, with the same n): every rate is a
    mean over tasks, so the union's is the task-weighted mean; counts and seconds add up."""
    if not parts:
        raise ValueError("no summaries to merge")
    ns = {p["n"] for p in parts}
    if len(ns) != 1:
        raise ValueError(f"summaries of different numbers of rollouts per task cannot merge, got {sorted(ns)}")
    total = sum(p["num_tasks"] for p in parts)
    out = {"n": ns.pop(), "num_tasks": total}
    rates = [k for k, v in parts[0].items() if isinstance(v, float) and k not in ("seconds",)]
    for k in rates:
        out[k] = sum(p[k] * p["num_tasks"] for p in parts) / total
    for k in ("tasks_left_out_infra", "seconds"):
        if k in parts[0]:
            out[k] = sum(p[k] for p in parts)
    if "split" in parts[0]:
        out["split"] = parts[0]["split"]
    return out


# Table 1's rows, top to bottom; a label is matched by its first word ("RTI (iter 3)" is RTI)
PAPER_ORDER = ("base", "grpo", "gspo", "aepo", "opd", "luffy", "rti")


def paper_order(labels) -> list[str]:
    """``labels`` in the paper's row order. A label of no method there (e.g. a warm start)
    stays right after the row it followed, so "base, SFT warm start, RTI" keeps its story."""
    rank, out = -1.0, []
    for i, label in enumerate(labels):
        word = label.split()[0].lower() if label.split() else ""
        rank = PAPER_ORDER.index(word) if word in PAPER_ORDER else rank + 1e-3
        out.append((rank, i, label))
    return [label for *_, label in sorted(out)]


def format_table(rows: dict[str, dict[str, dict]]) -> str:
    """rows: {method: {benchmark: summary}} -> the paper's layout (percentages): one row
    per method in Table 1's order (``paper_order``), a column group (p@1, avg p@k, avg p^k)
    per benchmark."""
    rows = {method: rows[method] for method in paper_order(rows)}
    benchmarks = list(dict.fromkeys(b for per in rows.values() for b in per))
    head1 = f"{'method':<16}" + "".join(f"| {b:^26}" for b in benchmarks)
    head2 = f"{'':<16}" + "".join(f"| {'p@1':>7} {'avg p@k':>8} {'avg p^k':>8} " for _ in benchmarks)
    lines = [head1, head2, "-" * len(head2)]
    for method, per in rows.items():
        cells = []
        for b in benchmarks:
            s = per.get(b)
            cells.append(f"| {100 * s['p@1']:7.2f} {100 * s['avg_p@k']:8.2f} {100 * s['avg_p^k']:8.2f} " if s else f"| {'-':>26}")
        lines.append(f"{method:<16}" + "".join(cells))
    return "\n".join(lines)
