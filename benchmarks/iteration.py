"""Wall time, peak memory and RTI stage counts of training iterations on a benchmark.

    python benchmarks/iteration.py --env Navigation-v0 --algorithm grpo --group-size 8 --tasks 4
    python benchmarks/iteration.py --env Navigation-v0 --algorithm rti --roles rules --iterations 2
    python benchmarks/iteration.py --env Navigation-v0 --algorithm rti --roles self --iterations 2
    # the baselines: LUFFY with the env's oracle as teacher, OPD with a teacher model, AEPO
    python benchmarks/iteration.py --algorithm luffy
    python benchmarks/iteration.py --algorithm opd --teacher-model runs/warm_start-navigation/policy
    python benchmarks/iteration.py --algorithm aepo
    # one RTI iteration on Claw-Eval's own tasks from a copy, the policy as the graders' judge
    python benchmarks/iteration.py --env ClawEval-v0 --algorithm rti --max-model-len 8192 \
        --env-config '{"data_dir": "/path/to/claw-eval", "tasks": "hard20", "max_turns": 4, "judge": "policy"}'

Peak memory is the largest sum of resident memory over this process and all its children
(the Ray actors), sampled every 0.5 s. Prints a table per iteration and, for RTI, the
per-stage acceptance counts; writes JSON (benchmarks/results/iteration-<name>.json).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402

from rti_actors.algorithms import algorithm_names  # noqa: E402
from rti_actors.cli import add_opd_args, opd_options  # noqa: E402


class PeakMemory(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.running = 0, True

    def run(self):
        me = psutil.Process()
        while self.running:
            total = 0
            for p in [me] + me.children(recursive=True):
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(0.5)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="Navigation-v0")
    ap.add_argument("--env-config", default='{"max_turns": 4, "max_tool_output_chars": 1500}')
    ap.add_argument("--algorithm", default="grpo", choices=algorithm_names())
    add_opd_args(ap)
    ap.add_argument("--roles", default="self")
    ap.add_argument("--verifier-llm", type=int, default=1)
    ap.add_argument("--ppl-threshold", type=float, default=5.0)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--skip-zero-variance", type=int, default=1)
    ap.add_argument("--name", default=None)
    args = ap.parse_args()
    from rti_actors import RTIConfig
    from rti_actors.rti.pipeline import STAGES

    name = args.name or f"{args.env}-{args.algorithm}" + (f"-{args.roles}" if args.algorithm == "rti" else "")
    mem = PeakMemory()
    mem.start()
    t0 = time.perf_counter()
    algo = (RTIConfig().environment(args.env, env_config=json.loads(args.env_config))
            .policy(model=args.model, engine=args.engine, max_new_tokens=args.max_new_tokens,
                    max_model_len=args.max_model_len)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=max(args.group_size * args.tasks // 2, 1))
            .training(algorithm=args.algorithm, group_size=args.group_size, tasks_per_iteration=args.tasks,
                      skip_zero_variance_groups=bool(args.skip_zero_variance))
            .interventions(roles=args.roles, verifier_llm=bool(args.verifier_llm), ppl_threshold=args.ppl_threshold)
            # LUFFY's teacher is the env's oracle, given the turns it needs; OPD's a model or an
            # endpoint (--teacher-*); the other algorithms read neither
            .luffy(source="oracle", max_turns=30).opd(**opd_options(args))
            .reporting(run_name=f"bench-{name}-{int(time.time())}", tensorboard=False, plot=False).build())
    build_s = time.perf_counter() - t0
    rows = []
    try:
        for _ in range(args.iterations):
            rows.append(algo.train())
    finally:
        algo.stop()
        mem.running = False
    print(f"{name}: build {build_s:.1f}s, peak memory {mem.peak / 2**30:.2f} GiB (driver + actors)")
    print(f"{'iter':>4} | {'total s':>8} | {'sample s':>8} | {'intervene s':>11} | {'learn s':>7} | {'episodes':>8} | "
          f"{'gen tokens':>10} | {'success':>7} | {'trained groups':>14}")
    for m in rows:
        s = m["seconds"]
        print(f"{m['iteration']:>4} | {sum(s.values()):>8.1f} | {s.get('sample', 0):>8.1f} | {s.get('intervene', 0):>11.1f} | "
              f"{s.get('learn', 0):>7.1f} | {m['num_episodes']:>8} | {m['gen_tokens']:>10} | {m['success_rate']:>7.3f} | "
              f"{m['learner'].get('num_groups_trained', m['learner'].get('num_groups', 0)):>14}")
    if args.algorithm == "rti":
        print("RTI stages (summed over iterations), provider:", rows[0]["rti/provider"])
        for k in STAGES:
            print(f"  {k:<24} {sum(m.get(f'rti/{k}', 0) for m in rows)}")
        cont = sum(m.get("rti/continued", 0) for m in rows)
        succ = sum(m.get("rti/continuation_success", 0) for m in rows)
        share = sum(m["seconds"].get("intervene", 0) for m in rows) / sum(sum(m["seconds"].values()) for m in rows)
        ppl = [p for m in rows for p in m.get("rti/ppl_all", [])]
        print(f"  continuation success rate {succ}/{cont}; intervention share of wall time {share:.1%}; "
              f"gate PPL median {sorted(ppl)[len(ppl) // 2] if ppl else math.nan}; v2 reject reasons "
              f"{[m.get('rti/v2_reject_reasons') for m in rows]}")
    out = Path(f"benchmarks/results/iteration-{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "build_s": build_s, "peak_memory_gib": mem.peak / 2**30,
                               "iterations": rows}, indent=2, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
