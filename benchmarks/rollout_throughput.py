"""Rollout throughput through the actor graph.

    python benchmarks/rollout_throughput.py [--model smollm2-135m-instruct] [--latency 0.1]

Part 1 — overhead of the graph: generated tokens/s when 8 single-turn episodes go through
env runners + an engine actor, versus the same prompts (same seeds, so the same tokens)
sent straight to that engine actor in one batch. Target: ratio >= 0.8.

Part 2 — hiding environment latency: episodes/s with 1, 2 and 4 env runners (2 envs
each) when every environment step takes ``--latency`` seconds (like a web API call).
Target: >= 2.5x from 1 to 4 runners at 100 ms. The engine actor merges the runners'
concurrent requests; the table shows how many engine calls served them.

Prints a table and writes JSON (benchmarks/results/rollout_throughput.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from envs import Task, ToolEnv  # noqa: E402
from rti_actors.trajectory import EpisodeSpec  # noqa: E402


class LatencyEnv(ToolEnv):
    """Each step sleeps ``latency`` seconds; an episode lasts ``turns`` assistant turns."""

    DEFAULT_CONFIG = {**ToolEnv.DEFAULT_CONFIG, "latency": 0.1, "turns": 1}

    def task_ids(self, split):
        return [f"t{i}" for i in range(64)]

    def load_task(self, task_id):
        return Task(task_id, "You are a storyteller.", f"Tell story number {task_id[1:]} about the sea.", [])

    def on_text_reply(self, content):
        time.sleep(self.config["latency"])
        done = self.turns >= self.config["turns"]
        return ([] if done else [{"role": "user", "content": "Go on."}]), done

    def compute_reward(self):
        return 0.0, {}

    def reward_evidence(self):
        return {}


def _engine(model_path, kind):
    from rti_actors.build import threads_env
    from rti_actors.engine_actor import EngineActor

    kw = {"dtype": "bfloat16", "max_model_len": 2048} if kind == "vllm" else {"dtype": "float32"}
    engine = ray.remote(EngineActor).options(num_cpus=0, runtime_env=threads_env(None)).remote(kind, model_path, kw)
    ray.get(engine.ping.remote())
    return engine


def _runners(engine, model_path, num_runners, envs_per_runner, env_config, max_tokens):
    from rti_actors.engine_actor import EnginePool
    from rti_actors.env_runner import EnvRunner

    pool = EnginePool([engine])
    policy = {"max_model_len": 2048, "max_new_tokens": max_tokens}
    runners = [ray.remote(EnvRunner).options(num_cpus=0).remote(
        lambda cfg: LatencyEnv(cfg), env_config, envs_per_runner, model_path, policy, pool, i) for i in range(num_runners)]
    ray.get([r.ping.remote() for r in runners])
    return runners


def _run(runners, specs, sampling):
    n = len(runners)
    t = time.perf_counter()
    outs = ray.get([r.sample.remote(specs[i::n], sampling) for i, r in enumerate(runners)])
    return time.perf_counter() - t, [x for o in outs for x in o]


def part1(engine, model_path, max_tokens) -> dict:
    from rti_actors.env_runner import request_seed
    runners = _runners(engine, model_path, 2, 4, {"latency": 0.0, "turns": 1}, max_tokens)
    sampling = {"max_tokens": max_tokens, "temperature": 0.8}
    specs = [EpisodeSpec(f"t{i}") for i in range(8)]
    _run(runners, specs, sampling)  # warm-up
    dt_graph, trajs = _run(runners, specs, sampling)
    graph_tokens = sum(t.gen_tokens for t in trajs)
    prompts = [t.ids[:t.turn_spans[0][0]] for t in trajs]
    seeds = [request_seed(0, 0, t.task_id, 0, 0) for t in trajs]
    t0 = time.perf_counter()
    gens = ray.get(engine.generate.remote(prompts, sampling, seeds))
    dt_direct = time.perf_counter() - t0
    direct_tokens = sum(len(g.token_ids) for g in gens)
    for a in runners:
        ray.kill(a)
    return {"graph_tok_s": round(graph_tokens / dt_graph, 1), "direct_tok_s": round(direct_tokens / dt_direct, 1),
            "ratio": round((graph_tokens / dt_graph) / (direct_tokens / dt_direct), 3),
            "same_tokens": graph_tokens == direct_tokens}


def part2(engine, model_path, latency, turns, episodes) -> list[dict]:
    rows = []
    for n in (1, 2, 4):
        runners = _runners(engine, model_path, n, 2, {"latency": latency, "turns": turns}, 8)
        specs = [EpisodeSpec(f"t{i}", 0, 0, 1) for i in range(episodes)]
        _run(runners, specs[:2], {"max_tokens": 8, "temperature": 0.8})  # warm-up
        before = ray.get(engine.get_stats.remote())
        dt, _ = _run(runners, specs, {"max_tokens": 8, "temperature": 0.8})
        after = ray.get(engine.get_stats.remote())
        calls = after["generate_engine_calls"] - before["generate_engine_calls"]
        rows.append({"env_runners": n, "episodes_per_s": round(episodes / dt, 3), "seconds": round(dt, 2),
                     "engine_calls": calls,
                     "prompts_per_call": round((after["prompts"] - before["prompts"]) / max(calls, 1), 2)})
        for a in runners:
            ray.kill(a)
    base = rows[0]["episodes_per_s"]
    for r in rows:
        r["speedup"] = round(r["episodes_per_s"] / base, 2)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--out", default="benchmarks/results/rollout_throughput.json")
    args = ap.parse_args()
    from policies.models import load_model

    path = load_model(args.model)
    ray.init(num_cpus=8, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    engine = _engine(path, args.engine)  # one engine actor serves every configuration
    p1 = part1(engine, path, args.tokens)
    p2 = part2(engine, path, args.latency, args.turns, args.episodes)
    ray.shutdown()
    print(f"part 1 ({args.engine}, 8 episodes x {args.tokens} tokens): through runners {p1['graph_tok_s']} tok/s, "
          f"direct {p1['direct_tok_s']} tok/s, ratio {p1['ratio']} (target >= 0.8), same tokens: {p1['same_tokens']}")
    print(f"part 2 (latency {args.latency * 1000:.0f} ms/step, {args.turns} turns, {args.episodes} episodes, 2 envs/runner):")
    print(f"{'env_runners':>12} | {'episodes/s':>10} | {'seconds':>8} | {'speedup':>7} | {'engine calls':>12} | "
          f"{'prompts/call':>12}")
    for r in p2:
        print(f"{r['env_runners']:>12} | {r['episodes_per_s']:>10} | {r['seconds']:>8} | {r['speedup']:>7} | "
              f"{r['engine_calls']:>12} | {r['prompts_per_call']:>12}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "part1": p1, "part2": p2}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
