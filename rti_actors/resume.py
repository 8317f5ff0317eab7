"""Resumable runs for the example scripts: ``--checkpoint-every N`` and ``--resume RUN_DIR``.

A run killed at any point (a save included: saves are atomic) is resumed by running the
same command with ``--resume <its run directory>``: the run continues in that directory
from its newest periodic checkpoint, trains only the iterations still missing, and reuses
the evaluations already recorded in ``evaluations.json`` (a base evaluation is not redone).

    ap = argparse.ArgumentParser(); add_resume_args(ap); args = ap.parse_args()
    algo = build_resumable(build_config(args), args)
    base = evaluate_once(algo, "base")
    for _ in range(args.iterations - algo.iteration):
        algo.train()

A run whose machine will not be back travels as its newest checkpoint and metrics:
``keep_newest(run_dir, dst)`` copies them to ``dst`` (e.g. a folder kept in git), and
``restore_kept(dst, run_dir)`` puts them into an empty run directory on the next machine,
which then resumes as above.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from rti_actors.checkpoints import periodic

EVALUATIONS = "evaluations.json"


def add_resume_args(ap) -> None:
    ap.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                    help="save a checkpoint every N iterations under <run dir>/checkpoints (0: never)")
    ap.add_argument("--checkpoint-keep", type=int, default=2, metavar="K", help="how many periodic checkpoints stay")
    ap.add_argument("--resume", default=None, metavar="RUN_DIR",
                    help="continue the run in RUN_DIR from its newest checkpoint (same command otherwise)")


def build_resumable(config, args):
    """``config`` with the args' checkpointing, built; with ``--resume`` it writes into that
    run's directory and continues from its newest checkpoint."""
    config = config.checkpointing(every=args.checkpoint_every, keep=args.checkpoint_keep)
    if args.resume:
        run = Path(args.resume).expanduser().resolve()
        if not run.is_dir():
            raise SystemExit(f"--resume {args.resume}: no such run directory")
        config = config.reporting(run_dir=str(run.parent), run_name=run.name)
    algo = config.build()
    if args.resume:
        try:
            print(f"resumed at iteration {algo.resume()}", flush=True)
        except BaseException:
            algo.stop()
            raise
    return algo


def evaluate_once(algo, label: str, **kwargs) -> dict:
    """``algo.evaluate(method=label, ...)``, recorded in the run directory; a resumed run
    gets the recorded summary back instead of evaluating again."""
    path = Path(algo.run_dir) / EVALUATIONS
    done = json.loads(path.read_text()) if path.is_file() else {}
    if algo.resumed_from is not None and label in done:
        return done[label]
    summary = algo.evaluate(method=label, **kwargs)
    done[label] = summary
    path.write_text(json.dumps(done, indent=2, default=str))
    return summary


def keep_newest(run_dir: str | Path, dst: str | Path) -> str | None:
    """The run's newest complete checkpoint and its metrics.jsonl copied to ``dst``
    (replacing what was there, atomically); the checkpoint's name, or None when it has none."""

    run_dir, dst = Path(run_dir), Path(dst)
    checkpoints = periodic(run_dir)
    if not checkpoints:
        return None
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(checkpoints[-1], tmp / "checkpoints" / checkpoints[-1].name)
    shutil.copy2(run_dir / "metrics.jsonl", tmp / "metrics.jsonl")
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)
    return checkpoints[-1].name


def restore_kept(src: str | Path, run_dir: str | Path) -> str | None:
    """What ``keep_newest`` kept at ``src`` copied into ``run_dir`` (emptied first) to resume
    from; the checkpoint's name, or None when nothing was kept."""
    src, run_dir = Path(src), Path(run_dir)
    if not (src / "checkpoints").is_dir():
        return None
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(src / "checkpoints", run_dir / "checkpoints")
    shutil.copy2(src / "metrics.jsonl", run_dir / "metrics.jsonl")
    return next((run_dir / "checkpoints").iterdir()).name
