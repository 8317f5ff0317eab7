"""PPL gate: scoring throughput with 16 concurrent requests, batched vs one at a time.

    python benchmarks/gate_batching.py [--model smollm2-135m-instruct] [--engine vllm]

Each request scores a 48-token corrected step after a ~600-token context (the shape of a
gate request). "batched": 16 callers submit at once and the gate merges them into engine
calls; "one at a time": the same 16 requests sent to the engine one by one. Target: >= 3x.
Optionally (``--rti-run``) also reports the share of an RTI iteration's wall time spent in
intervention, from a short Navigation run with the rules provider.
Prints a table, writes JSON (benchmarks/results/gate_batching.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--rti-run", action="store_true")
    ap.add_argument("--out", default="benchmarks/results/gate_batching.json")
    args = ap.parse_args()
    from policies.models import load_model
    from rti_actors.build import threads_env
    from rti_actors.engine_actor import EngineActor, EnginePool
    from rti_actors.rti.gate import PPLGate

    path = load_model(args.model)
    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    kw = {"dtype": "bfloat16", "max_model_len": 2048} if args.engine == "vllm" else {"dtype": "float32"}
    engine = ray.remote(EngineActor).options(num_cpus=0, runtime_env=threads_env(None)).remote(args.engine, path, kw)
    pool = EnginePool([engine])
    gate = ray.remote(PPLGate).options(num_cpus=0).remote(pool, 0.8, args.requests, 0.05)
    rows = []
    for trial in range(2):  # trial 0 warms up
        reqs = [([1] + [(97 * i + 13 * j + trial) % 40000 + 100 for j in range(600)],
                 [(31 * i + 7 * j) % 40000 + 100 for j in range(48)]) for i in range(args.requests)]
        t = time.perf_counter()
        batched = ray.get([gate.score.remote(c, u) for c, u in reqs])
        dt_b = time.perf_counter() - t
        t = time.perf_counter()
        single = [ray.get(engine.score.remote([c], [u], 0.8))[0] for c, u in reqs]
        dt_s = time.perf_counter() - t
        same = max(abs(a - b) for x, y in zip(batched, single) for a, b in zip(x, y))
        rows = [{"mode": "batched (gate)", "seconds": round(dt_b, 3), "requests_per_s": round(len(reqs) / dt_b, 2)},
                {"mode": "one at a time", "seconds": round(dt_s, 3), "requests_per_s": round(len(reqs) / dt_s, 2)}]
    stats = ray.get(gate.get_stats.remote())
    speedup = rows[1]["seconds"] / rows[0]["seconds"]
    print(f"{'mode':>16} | {'seconds':>8} | {'requests/s':>10}")
    for r in rows:
        print(f"{r['mode']:>16} | {r['seconds']:>8} | {r['requests_per_s']:>10}")
    print(f"speedup {speedup:.2f}x (target >= 3x); gate engine calls {stats['engine_calls']} for "
          f"{stats['requests']} requests; max |batched - single| log-prob {same:.2e}")
    result = {"engine": args.engine, "rows": rows, "speedup": round(speedup, 2), "gate_stats": stats}
    ray.kill(gate)
    ray.kill(engine)
    if args.rti_run:
        result["rti_share"] = rti_share(args)
        print(f"intervention share of an RTI iteration's wall time: {result['rti_share']['share']:.1%}")
    ray.shutdown()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


def rti_share(args) -> dict:
    from rti_actors import RTIConfig

    algo = (RTIConfig().environment("Navigation-v0", env_config={"max_turns": 3, "max_tool_output_chars": 800})
            .policy(model=args.model, engine=args.engine, max_new_tokens=64, max_model_len=4096)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
            .training(algorithm="rti", group_size=4, tasks_per_iteration=2)
            .interventions(roles="rules", verifier_llm=False)
            .reporting(run_name=f"gate-bench-{int(time.time())}", tensorboard=False, plot=False).build())
    try:
        m = algo.train()
    finally:
        algo.stop()
    total = sum(m["seconds"].values())
    return {"seconds": m["seconds"], "share": m["seconds"].get("intervene", 0.0) / total, "accepted": m["rti/accepted"]}


if __name__ == "__main__":
    main()
