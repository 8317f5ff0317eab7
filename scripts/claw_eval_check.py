#!/usr/bin/env python
"""Check a user's Claw-Eval copy end to end: how many T tasks load, run offline and are
graded (and how many of those need a judge), then the scripted oracles of the hard20
tasks, with Pass@k / Pass^k tables in the paper's layout. Needs the copy (see
docs/CLAW_EVAL.md): --data-dir, else $RTI_CLAW_EVAL_DIR, else the cache folder.

The judge is the deterministic stub ("stub (deterministic stand-in, not a judge)"): a
judge-graded part always gets the stub's score, so a pass here covers the rule-based
part of each grader only, not the quality a real judge would score.

    python scripts/claw_eval_check.py --data-dir ~/.cache/rti_actors/claw-eval --out check.json \
        --variants ~/.cache/rti_actors/claw-eval-variants
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.claw_eval import ClawEvalEnv, ClawGradingError, find_data_dir  # noqa: E402
from envs.claw_eval.env import _tasks_at  # noqa: E402
from envs.claw_eval.fixes import DEFECTS, defects_for  # noqa: E402
from envs.claw_eval.judge import STUB_LABEL  # noqa: E402
from envs.claw_eval.oracles import OracleResult, run_oracle  # noqa: E402
from envs.claw_eval.selection import select_tasks  # noqa: E402
from envs.claw_eval.variants import RECIPES, make_variants, validate_variants  # noqa: E402
from rti_actors.claw_eval_report import ClawTrial, claw_table  # noqa: E402


def grade_every_offline_task(data_dir: Path) -> dict:
    """One short episode per offline task (its first tool with no arguments, then an
    answer), graded with the stub judge: does every task load, run and grade?"""
    env = ClawEvalEnv({"data_dir": str(data_dir), "tasks": "offline", "split": "all", "judge": "stub"})
    graded, errors = 0, []
    for tid in env.task_ids("all"):
        env.reset(options={"task_id": tid})
        first = env.claw.tools[0].name
        try:
            env.step(f'<tool_call>{{"name": "{first}", "arguments": {{}}}}</tool_call>')
            if not env.done:
                env.step("Done.")
            graded += env.last_grade is not None
        except ClawGradingError as exc:
            errors.append(dataclasses.asdict(exc.record))
    return {"graded": graded, "grading_errors": errors}


def run_oracles(data_dir: Path, trials: int, *, fixes=None, stub_score: float = 1.0,
                lazy: bool = False) -> list[OracleResult]:
    """Each hard20 task's oracle (or, ``lazy``, an agent that answers at once), ``trials``
    times. ``stub_score`` 0 shows what the grader's rule-based part gives on its own."""
    env = ClawEvalEnv({"data_dir": str(data_dir), "tasks": "hard20", "split": "test", "judge": "stub",
                       "judge_stub_score": stub_score, "grader_fixes": fixes})
    play = (lambda s: "Done.") if lazy else None
    return [run_oracle(env, tid, play) for _ in range(trials) for tid in env.task_ids("test")]


def check_variants(data_dir: Path, root: Path, count: int) -> list[dict]:
    """Write ``count`` variants of each family with a recipe into ``root`` and validate
    each with the stub at 1 (oracle passes, unsafe twin scores 0 where the recipe has one,
    do-nothing fails or, where the recipe says the judge decides that, stays below the
    oracle). At 1 and at 0 (the rule-based part alone) a variant must also score exactly
    what its source scores: renames and resampled values keep every grader branch."""
    rows = []
    for recipe in RECIPES.values():
        variants = make_variants(data_dir, root, recipe, count=count)
        ids = [v.task_id for v in variants]
        sources = sorted({v.source_id for v in variants})
        for stub in (1.0, 0.0):
            checks = {c.task_id: c for c in validate_variants(root, [*sources, *ids], recipe, stub_score=stub)}
            for v in variants:
                c, src = checks[v.task_id], checks[v.source_id]
                mine, theirs = (c.oracle, c.twin, c.lazy), (src.oracle, src.twin, src.lazy)
                problems = [c.problem] if stub == 1.0 and c.problem else []
                if mine != theirs:
                    problems.append(f"scores {mine} differ from its source's {theirs}")
                rows.append({"stub_score": stub, **dataclasses.asdict(c), "ok": not problems,
                             "problem": "; ".join(problems), "family": recipe.family, "values": dict(v.values)})
    return rows


def trials_of(results: list[OracleResult]) -> list[ClawTrial]:
    return [ClawTrial(r.task_id, r.score, r.passed, r.error) for r in results]


def oracle_table(default: list[OracleResult], fixed: list[OracleResult], rules: list[OracleResult],
                 lazy: list[OracleResult]) -> str:
    fixed_by, rules_by, lazy_by = ({r.task_id: r for r in rs} for rs in (fixed, rules, lazy))
    head = (f"{'task':<36} {'family':<30} {'score':>6} {'pass':>5} {'compl':>6} {'robust':>6} {'safety':>6} "
            f"{'calls':>5} {'turns':>5} | {'fixed':>6} {'stub0':>6} {'lazy':>6}  listed defects")
    lines = [head, "-" * len(head)]
    seen = set()
    for r in default:
        if r.task_id in seen:
            continue
        seen.add(r.task_id)
        f = fixed_by[r.task_id]
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        lines.append(f"{r.task_id:<36} {r.family:<30} {fmt(r.score):>6} {'yes' if r.passed else 'NO':>5} "
                     f"{fmt(r.completion):>6} {fmt(r.robustness):>6} {fmt(r.safety):>6} {r.calls:>5} {r.turns:>5} | "
                     f"{fmt(f.score):>6} {fmt(rules_by[r.task_id].score):>6} {fmt(lazy_by[r.task_id].score):>6}  "
                     f"{','.join(defects_for([r.task_id])) or '-'}" + (f"  ERROR {r.error}" if r.error else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None, help="the copy (else $RTI_CLAW_EVAL_DIR, else the cache folder)")
    ap.add_argument("--out", default="claw_eval_check.json", help="where to write the JSON report")
    ap.add_argument("--trials", type=int, default=3, help="trials per task for the Pass@k / Pass^k tables")
    ap.add_argument("--variants", default=None, metavar="DIR",
                    help="also write and validate training variants into this variant copy (outside the repo)")
    ap.add_argument("--variant-count", type=int, default=8, help="variants per family")
    ap.add_argument("--show-grader-output", action="store_true", help="let upstream's graders print")
    args = ap.parse_args(argv)
    data_dir = find_data_dir(args.data_dir)
    t0 = time.perf_counter()
    tasks = _tasks_at(str(data_dir))
    offline = select_tasks(tasks)
    sink = io.StringIO()
    with contextlib.nullcontext() if args.show_grader_output else contextlib.redirect_stdout(sink):
        grading = grade_every_offline_task(data_dir)
        default = run_oracles(data_dir, args.trials)
        fixed = run_oracles(data_dir, args.trials, fixes="all")
        rules = run_oracles(data_dir, 1, stub_score=0.0)
        lazy = run_oracles(data_dir, 1, lazy=True)
        variants = check_variants(data_dir, Path(args.variants), args.variant_count) if args.variants else []
    counts = {"loaded": len(tasks), "offline": len(offline), "graded": grading["graded"],
              "grading_errors": len(grading["grading_errors"]),
              "judge_free": sum(not t.needs_judge for t in offline),
              "needing_a_judge": sum(t.needs_judge for t in offline)}
    hard = sorted({r.task_id for r in default})
    # oracles and the do-nothing agent are deterministic: their one-trial runs repeat
    summaries, table = claw_table({"oracle": trials_of(default), "oracle + fixes": trials_of(fixed),
                                   "oracle, stub 0": trials_of(rules) * args.trials,
                                   "do-nothing": trials_of(lazy) * args.trials})
    first = default[:len(hard)]
    report = {
        "data_dir": str(data_dir), "judge": STUB_LABEL, "counts": counts, "grading_errors": grading["grading_errors"],
        "hard20": hard, "oracles_passed": sum(r.passed for r in first),
        "oracles_passed_with_fixes": sum(r.passed for r in fixed[:len(hard)]),
        "lazy_passed": sum(r.passed for r in lazy), "lazy_passed_ids": [r.task_id for r in lazy if r.passed],
        "passed_on_rules_alone": [r.task_id for r in rules if r.passed],
        "oracles": [dataclasses.asdict(r) for r in first],
        "oracles_with_fixes": [dataclasses.asdict(r) for r in fixed[:len(hard)]],
        "oracles_stub_0": [dataclasses.asdict(r) for r in rules],
        "lazy": [dataclasses.asdict(r) for r in lazy],
        "deterministic": all(a == b for a, b in zip(default, default[len(hard):])),
        "defects": {name: {"summary": d.summary, "tasks": list(d.tasks), "scoped": d.scoped}
                    for name, d in DEFECTS.items()},
        "defects_in_hard20": defects_for(hard),
        "pass_tables": {m: {"summary": s.summary, "left_out": list(s.left_out)} for m, s in summaries.items()},
        "table": table, "variants": variants, "seconds": round(time.perf_counter() - t0, 1),
    }
    Path(args.out).write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str))
    print(f"copy: {data_dir}\njudge: {STUB_LABEL}")
    print("counts: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print("\nhard20 oracles: score with defaults | with grader_fixes='all' | with the stub scoring 0 (the "
          f"rule-based part alone) | a do-nothing agent\n{oracle_table(default, fixed, rules, lazy)}")
    print(f"\noracles passed: {report['oracles_passed']}/{len(hard)} (with fixes "
          f"{report['oracles_passed_with_fixes']}/{len(hard)}; on rules alone {len(report['passed_on_rules_alone'])}); "
          f"do-nothing passed: {report['lazy_passed']}/{len(hard)} {report['lazy_passed_ids']} (judge-only gates); "
          f"repeat trials identical: {report['deterministic']}")
    print(f"\nPass@k / Pass^k over {args.trials} trials (percent; stub judge):\n{table}")
    if variants:
        bad = [v for v in variants if not v["ok"]]
        first = [v for v in variants if v["stub_score"] == 1.0]
        notes = sorted({(v["family"], v["note"]) for v in first if v["note"]})
        print(f"\nvariants: {len({v['family'] for v in first})} families, {len(first)} written, "
              f"{sum(v['ok'] for v in first)}/{len(first)} validated with the stub at 1; "
              f"{sum(v['ok'] for v in variants)}/{len(variants)} checks passed (stub at 1, and the same scores "
              f"as the source at 1 and at 0); "
              f"{sum(any(o != n for o, n in v['values'].items()) for v in first)} with resampled values")
        for family, note in notes:
            print(f"  {family}: {note}")
        for v in bad:
            print(f"  {v['task_id']} (stub {v['stub_score']}): {v['problem']}")
    print(f"\nwrote {args.out} in {report['seconds']} s")
    # a do-nothing pass under the stub is reported, not failed: it means that task's grader
    # leaves rejecting an empty answer to the judge, which the stub stands in for
    ok = counts["grading_errors"] == 0 and report["oracles_passed"] == len(hard) and all(v["ok"] for v in variants)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
