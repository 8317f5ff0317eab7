"""Recovery under crashes: an RTI run where a random actor is killed in every iteration.

    python benchmarks/faults.py                     # tiny random model, hf engine, 8 iterations
    python benchmarks/faults.py --iterations 4 --seed 1

The same config runs twice, undisturbed and disturbed. In the disturbed run each iteration
kills one actor, drawn from engine, env runner, replay queue, gate, rule roles and learner
(the learner during its step; the others at a random moment of the iteration) and Ray or
the driver brings it back. Episodes are seeded, so an iteration that recovered fully samples
exactly the episodes the undisturbed run samples: the table compares them iteration by
iteration, with the restarts per actor kind and the wall time recovery cost. A learner
rebuilt from its last checkpoint (every iteration here) loses no step, so the runs stay equal.
Prints a table and writes benchmarks/results/faults.json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from rti_actors import RTIConfig  # noqa: E402

KINDS = ("engine", "env_runner", "replay_queue", "gate", "rule_roles", "learner")


def config(model: str, run_dir: str, name: str) -> RTIConfig:
    return (RTIConfig()
            .environment("Navigation-v0", env_config={"max_turns": 3, "max_tool_output_chars": 600})
            .policy(model=model, engine="hf", max_new_tokens=16, max_model_len=4096)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
            .training(algorithm="rti", group_size=2, tasks_per_iteration=2, lr=1e-4, skip_zero_variance_groups=False)
            .interventions(roles="rules", verifier_llm=False, ppl_threshold=math.inf)
            .fault_tolerance(max_restarts=20, max_task_retries=20)
            .checkpointing(every=1, keep=1)
            .reporting(run_dir=run_dir, run_name=name, tensorboard=False, plot=False, progress_bar=False))


def victims(algo, kind: str) -> list:
    g = algo.graph
    return {"engine": g.engines, "env_runner": g.runners, "replay_queue": [g.queue], "learner": g.learner.ranks,
            **g.extra}[kind]


def kill_later(actor, delay_s: float) -> threading.Thread:
    def run():
        time.sleep(delay_s)
        ray.kill(actor, no_restart=False)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def disturbed_iteration(algo, kind: str, rng: random.Random, typical_s: float) -> dict:
    actor = rng.choice(victims(algo, kind))
    if kind == "learner":  # killed during its step: sent the batch, then gone
        original = algo.updates.start

        def start_then_kill(samples, versions):
            algo.updates.start = original
            out = original(samples, versions)
            ray.kill(actor, no_restart=True)
            return out
        algo.updates.start = start_then_kill
        return algo.train()
    killer = kill_later(actor, rng.uniform(0.1, 0.8) * typical_s)
    m = algo.train()
    killer.join()
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="tiny", help="'tiny' (random weights) or a model name / folder")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model == "tiny":
            from policies.models import make_tiny_model
            model = make_tiny_model(Path(tmp) / "tiny")
        runs = {}
        for name in ("undisturbed", "disturbed"):
            algo = config(model, tmp, name).build()
            rows, t0 = [], time.perf_counter()
            try:
                for i in range(args.iterations):
                    t = time.perf_counter()
                    if name == "undisturbed":
                        m, kind = algo.train(), "-"
                    else:
                        kind = rng.choice(KINDS)
                        m = disturbed_iteration(algo, kind, rng, runs["undisturbed"]["rows"][i]["seconds"])
                    rows.append({"iteration": m["iteration"], "killed": kind, "seconds": time.perf_counter() - t,
                                 "num_episodes": m["num_episodes"], "trained_samples": m["learner"]["num_samples"],
                                 "reward_mean": m["reward_mean"], "rti_continued": m["rti/continued"],
                                 "faults": {k: v for k, v in m.items() if k.startswith("faults/")}})
            finally:
                algo.stop()
            runs[name] = {"rows": rows, "seconds": time.perf_counter() - t0}
    ref, dis = runs["undisturbed"]["rows"], runs["disturbed"]["rows"]
    print(f"{'iter':>4} {'killed':>13} {'episodes':>9} {'trained':>8} {'same episodes':>14} {'s undisturbed':>14} "
          f"{'s disturbed':>12}")
    same = 0
    for r, d in zip(ref, dis):
        ok = (r["num_episodes"], r["trained_samples"], r["reward_mean"], r["rti_continued"]) == \
             (d["num_episodes"], d["trained_samples"], d["reward_mean"], d["rti_continued"])
        same += ok
        print(f"{d['iteration']:>4} {d['killed']:>13} {d['num_episodes']:>9} {d['trained_samples']:>8} "
              f"{'yes' if ok else 'NO':>14} {r['seconds']:>14.1f} {d['seconds']:>12.1f}")
    last = dis[-1]["faults"]
    restarts = {k.split("/", 2)[-1]: v for k, v in last.items() if k.startswith("faults/restarts/")}
    redone = {k.split("/", 2)[-1]: v for k, v in last.items() if k.startswith("faults/redone/") and v}
    overhead = runs["disturbed"]["seconds"] / runs["undisturbed"]["seconds"] - 1
    summary = {"iterations_completed": len(dis), "iterations_equal_to_undisturbed": same,
               "episodes_trained": sum(d["trained_samples"] for d in dis),
               "episodes_trained_undisturbed": sum(r["trained_samples"] for r in ref),
               "restarts": restarts, "redone": redone, "wall_overhead": overhead}
    print(f"\niterations completed {len(dis)}/{args.iterations}; equal to the undisturbed run: {same}; episodes "
          f"trained {summary['episodes_trained']} vs {summary['episodes_trained_undisturbed']} undisturbed")
    print(f"restarts per kind: {restarts}; redone by the driver: {redone}")
    print(f"wall time: {runs['disturbed']['seconds']:.0f} s vs {runs['undisturbed']['seconds']:.0f} s undisturbed "
          f"({overhead:+.0%} for recovery)")
    out = Path(__file__).resolve().parent / "results" / "faults.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "summary": summary, "runs": runs}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
