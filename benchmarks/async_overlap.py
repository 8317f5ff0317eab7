"""What asynchronous rollouts buy: iterations with ``max_policy_lag=1`` against 0.

    python benchmarks/async_overlap.py                          # SmolLM2, Navigation, 4 iterations each
    python benchmarks/async_overlap.py --model tiny --engine hf # a random tiny model, for a quick look

With lag 0 an iteration is sample -> learn -> publish, one after the other. With lag 1 the
next iteration's rollouts run on the env runners and engines while the learner trains, so
an iteration costs about max(sample, learn) instead of their sum, less what the two steal
from each other on a shared CPU. The first iteration of each run is a warm-up and is left
out. Prints a table and writes benchmarks/results/async_overlap.json.

Results to expect: the gain needs the two sides on hardware of their own (engines and
learner on different GPUs, or CPU nodes). On one 2-core CPU both the engine and the learner
run one compute thread per core, so overlapping them oversubscribes the cores and an
iteration takes longer than the two phases one after the other (measured there: lag 1 at
about 0.6x the speed of lag 0); keep max_policy_lag=0 on such a machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rti_actors import RTIConfig  # noqa: E402


def run(args, lag: int, run_dir: str) -> dict:
    cfg = (RTIConfig().environment(args.env, env_config=json.loads(args.env_config))
           .policy(model=args.model, engine=args.engine, max_new_tokens=args.max_new_tokens,
                   max_model_len=args.max_model_len)
           .env_runners(num_env_runners=2, num_envs_per_env_runner=args.group_size * args.tasks // 2)
           .training(algorithm="grpo", group_size=args.group_size, tasks_per_iteration=args.tasks,
                     max_policy_lag=lag, skip_zero_variance_groups=False)
           .reporting(run_dir=run_dir, run_name=f"lag{lag}", tensorboard=False, plot=False, progress_bar=False))
    algo = cfg.build()
    try:
        rows = []
        for _ in range(args.iterations + 1):
            t0 = time.perf_counter()
            m = algo.train()
            rows.append({"seconds": time.perf_counter() - t0, **m["seconds"], "lag_counts": m["queue"]["lag_counts"]})
    finally:
        algo.stop()
    timed = rows[1:]  # the first iteration compiles and warms the caches
    return {"max_policy_lag": lag, "iterations": len(timed),
            "seconds_per_iteration": statistics.mean(r["seconds"] for r in timed),
            "sample_s": statistics.mean(r.get("sample", 0.0) for r in timed),
            "learn_s": statistics.mean(r.get("learn", 0.0) for r in timed),
            "publish_s": statistics.mean(r.get("publish", 0.0) for r in timed),
            "lag_counts": rows[-1]["lag_counts"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="Navigation-v0")
    ap.add_argument("--env-config", default='{"max_turns": 3, "max_tool_output_chars": 800}')
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a model name or folder; 'tiny': random")
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-model-len", type=int, default=4096)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "tiny":
            from policies.models import make_tiny_model
            args.model = make_tiny_model(Path(tmp) / "tiny")
        results = [run(args, lag, tmp) for lag in (0, 1)]
    base = results[0]["seconds_per_iteration"]
    print(f"{'max_policy_lag':>14} {'s/iter':>8} {'sample s':>9} {'learn s':>8} {'publish s':>10} {'speed-up':>9}  lag counts")
    for r in results:
        r["speedup"] = base / r["seconds_per_iteration"]
        print(f"{r['max_policy_lag']:>14} {r['seconds_per_iteration']:>8.1f} {r['sample_s']:>9.1f} {r['learn_s']:>8.1f} "
              f"{r['publish_s']:>10.2f} {r['speedup']:>8.2f}x  {r['lag_counts']}")
    out = Path(__file__).resolve().parent / "results" / "async_overlap.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
