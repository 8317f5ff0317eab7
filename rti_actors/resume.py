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
"""

from __future__ import annotations

import json
from pathlib import Path

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
