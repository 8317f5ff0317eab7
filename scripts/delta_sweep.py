"""The perplexity gate at other thresholds: the share of gate-scored attempts each delta accepts.

How to run:

    python scripts/delta_sweep.py RUN_DIR [RUN_DIR ...] [--out DIR]

A RUN_DIR is a run's directory, the one holding the ``metrics.jsonl`` that
``rti_actors.reporting.Reporter`` writes. The script prints one row per run and a pooled row
(the share accepted at delta in {0, 3, 5, 20, inf}, with counts) and writes
``delta_sweep.json`` and ``delta_sweep.png`` (a log-x histogram of the PPLs, with lines at
3, 5 and 20) into ``--out`` (default: the first RUN_DIR).

What it covers: each training row's ``rti/ppl_all`` lists the PPL of every Corrector attempt
the gate scored that iteration. Only attempts that passed the Verifier reach the gate, so
the sweep is over those, not over every Corrector attempt (``rti/corrector_attempts`` is
printed alongside for scale; with ``interventions(verifier=False)`` every complete attempt
is scored). ``rti/ppl_all`` keeps finite PPLs only, rounded to 3 decimals;
the rest of ``rti/gate_scored`` are counted back in as infinite PPLs, which
``passes_gate`` rejects at every finite delta and accepts at delta = inf. The PPLs are those
of the run as it trained (with its own delta): the sweep says what another gate would have
let through of these attempts, not how a run trained with that delta would have gone.

Results to expect: delta = 0 accepts nothing and delta = inf everything, and the share never
falls as delta grows. At a run's own delta the share matches its logged ``rti/gate_pass``
(the "logged" column), up to the 3-decimal rounding of PPLs at the threshold itself.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rti_actors.rti.gate import passes_gate  # noqa: E402

DELTAS = (0.0, 3.0, 5.0, 20.0, math.inf)
LINES = (3.0, 5.0, 20.0)


def _label(delta: float) -> str:
    return "inf" if math.isinf(delta) else f"{delta:g}"


def read_run(run_dir: Path) -> dict:
    """The gate-scored PPLs of one run (non-finite ones as inf) and its logged counts."""
    rows: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line) if line.strip() else {}
        if r.get("kind") == "train" and "rti/ppl_all" in r:
            rows[r["step"]] = r  # a step logged twice (a resumed run not rewound): the last one counts
    ppls, counts = [], {"iterations": len(rows), "corrector_attempts": 0, "gate_scored": 0, "gate_pass": 0}
    for r in rows.values():
        finite = [float(p) for p in r["rti/ppl_all"]]
        scored = int(r.get("rti/gate_scored", len(finite)))
        ppls += finite + [math.inf] * (scored - len(finite))
        counts["corrector_attempts"] += int(r.get("rti/corrector_attempts", 0))
        counts["gate_scored"] += scored
        counts["gate_pass"] += int(r.get("rti/gate_pass", 0))
    config = run_dir / "config.json"
    delta = json.loads(config.read_text()).get("interventions", {}).get("ppl_threshold") if config.is_file() else None
    return {"ppls": ppls, **counts, "non_finite": sum(not math.isfinite(p) for p in ppls),
            "delta": None if delta is None else float(delta)}


def sweep(ppls: list[float]) -> dict[str, dict]:
    """{delta label: {"accepted": n, "share": n / len(ppls)}}, accepted as the gate decides
    (share None when nothing was scored, so the JSON stays standard)."""
    out = {}
    for delta in DELTAS:
        n = sum(passes_gate(p, delta) for p in ppls)
        out[_label(delta)] = {"accepted": n, "share": n / len(ppls) if ppls else None}
    return out


def table(results: dict[str, dict]) -> str:
    head = (f"{'run':<24} {'iters':>5} {'corrector':>9} {'scored':>6} {'non-fin':>7} "
            + " ".join(f"{'delta=' + _label(d):>14}" for d in DELTAS) + "   logged")
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        cells = " ".join(f"{'n/a' if s['share'] is None else format(s['share'], '.3f'):>6} ({s['accepted']:>5})"
                         for s in r["sweep"].values())
        logged = f"{r['gate_pass']} pass" + (f" at delta={_label(r['delta'])}" if r.get("delta") is not None else "")
        lines.append(f"{name:<24} {r['iterations']:>5} {r['corrector_attempts']:>9} {r['gate_scored']:>6} "
                     f"{r['non_finite']:>7} {cells}   {logged}")
    return "\n".join(lines)


def plot(ppls_by_run: dict[str, list[float]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    finite = [p for ps in ppls_by_run.values() for p in ps if math.isfinite(p)]
    top = max(finite + [30.0]) * 1.1
    bins = np.logspace(0, math.log10(top), 40)  # PPL >= 1: a log-prob is never above 0
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, ps in ppls_by_run.items():
        ax.hist([min(max(p, 1.0), top) for p in ps if math.isfinite(p)], bins=bins, alpha=0.5, label=name)
    for x in LINES:
        ax.axvline(x, color="black", linestyle="--", linewidth=1)
        ax.text(x, 1, f" {x:g}", transform=ax.get_xaxis_transform(), va="top", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("PPL of a gate-scored attempt (under the policy at the rollout temperature)")
    ax.set_ylabel("attempts")
    hidden = sum(not math.isfinite(p) for ps in ppls_by_run.values() for p in ps)
    ax.set_title("Corrector attempts that passed the Verifier, by gate PPL"
                 + (f" ({hidden} non-finite not shown)" if hidden else ""), fontsize=9)
    if len(ppls_by_run) > 1:
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    ap.add_argument("--out", type=Path, default=None, help="where to write the JSON and PNG (default: the first RUN_DIR)")
    args = ap.parse_args(argv)
    results, ppls_by_run = {}, {}
    for run_dir in args.runs:
        name = run_dir.resolve().name
        if name in results:  # two runs of the same name from different folders
            name = f"{run_dir.resolve().parent.name}/{name}"
        r = read_run(run_dir)
        ppls_by_run[name] = r.pop("ppls")
        results[name] = {**r, "sweep": sweep(ppls_by_run[name])}
    pooled = [p for ps in ppls_by_run.values() for p in ps]
    sums = {k: sum(r[k] for r in results.values())
            for k in ("iterations", "corrector_attempts", "gate_scored", "gate_pass", "non_finite")}
    report = {"deltas": [_label(d) for d in DELTAS], "runs": results,
              "pooled": {**sums, "sweep": sweep(pooled)}}
    print(table({**results, "pooled": report["pooled"]}))
    out = args.out or args.runs[0]
    out.mkdir(parents=True, exist_ok=True)
    (out / "delta_sweep.json").write_text(json.dumps(report, indent=2))
    plot(ppls_by_run, out / "delta_sweep.png")
    print(f"wrote {out / 'delta_sweep.json'} and {out / 'delta_sweep.png'}")
    return report


if __name__ == "__main__":
    main()
