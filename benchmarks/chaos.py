"""Chaos: an RTI run whose actors of every kind are killed at seeded random times.

    python benchmarks/chaos.py --minutes 3                  # the CI version (tests/integration/test_chaos.py)
    python benchmarks/chaos.py --minutes 60 --seed 0 --out benchmarks/results/chaos-60min.json

One config (Navigation, rule-based roles so every RTI stage runs, a tiny random model on the
hf engine, a checkpoint every iteration) runs twice: undisturbed for ``--baseline-minutes``,
then for ``--minutes`` with a chaos thread beside the driver, and one iteration more once it has
stopped (everything killed late must be back by its end). The thread sleeps a seeded
exponential gap (mean: the undisturbed iteration over ``--kills-per-iteration``), then kills
a seeded random actor of a seeded random kind among all the graph has: env runners, engines,
the replay queue, the gate, the role actors, the rule roles, learner ranks. Ray restarts the
actors (the learner is rebuilt by the driver from its newest checkpoint); what was in flight is
redone. When the kill lands in the iteration depends on the machine, so two runs with one seed
kill the same actors in the same order at the same offsets, not in the same phase.

Accounting, per iteration, by episode identity (round, task id, sample index): the episodes
the driver asked for against those in the groups sent to the learner. ``lost``: asked for and
neither trained nor replaced by an RTI fix of it; ``duplicated``: the same identity trained
twice. The learner's own count of samples it trained on is checked against what was sent.
The target is 0 and 0. ``same as undisturbed`` compares an iteration's tasks, rewards,
trained samples and RTI continuations with the undisturbed run's (seeded episodes: a run that
recovered fully samples what it would have); the slowdown is the disturbed run's time over
the undisturbed one's on the iterations both completed. Prints a table and writes JSON.

Results to expect: no episode lost or duplicated, every iteration completed, and each
iteration equal to the undisturbed one except where a learner rebuilt from a checkpoint
taken before a kill mid-publish (then the weights, not the episodes, differ). Each kill
costs a few seconds of restart (an engine reloads its model, a learner rank re-forms its
process group), so the slowdown grows with ``--kills-per-iteration``.
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
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from rti_actors import RTIConfig  # noqa: E402

GROUP_SIZE = 2


def config(model: str, run_dir: str, name: str, seed: int) -> RTIConfig:
    return (RTIConfig()
            .environment("Navigation-v0", env_config={"max_turns": 3, "max_tool_output_chars": 600})
            .policy(model=model, engine="hf", max_new_tokens=16, max_model_len=4096)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
            .training(algorithm="rti", group_size=GROUP_SIZE, tasks_per_iteration=2, lr=1e-4,
                      skip_zero_variance_groups=False)
            .interventions(roles="rules", verifier_llm=False, ppl_threshold=math.inf, num_role_actors=2)
            # restarts without a cap: an hour of chaos kills each actor many times
            .fault_tolerance(max_restarts=100_000, max_task_retries=100_000)
            .checkpointing(every=1, keep=1)
            .debugging(seed=seed)
            .reporting(run_dir=run_dir, run_name=name, tensorboard=False, plot=False, progress_bar=False))


class Ledger:
    """What each iteration asked for, what reached the learner and what the learner trained,
    recorded by wrapping the three places an episode passes: the launch of its spec, the
    plug-in's advantages (the groups as they go to the learner) and the learner's step."""

    def __init__(self, algo):
        self.asked: dict[int, set] = {}
        self.trained: dict[int, list] = {}
        self.sent: dict[int, int] = {}
        launch, advantages, start = algo.rollouts.launch, algo.plugin.advantages, algo.updates.start

        def on_launch(specs, *a, **kw):
            for s in specs:
                if s.split == "train":
                    self.asked.setdefault(int(s.round), set()).add((str(s.round), s.task_id, s.sample_index))
            return launch(specs, *a, **kw)

        def on_advantages(algo_, groups):
            self.trained[algo_.iteration] = [tr for g in groups for tr in g]
            return advantages(algo_, groups)

        def on_start(samples, versions, *rest):
            self.sent[algo.iteration] = sum(len(g) for g in samples)
            return start(samples, versions, *rest)
        algo.rollouts.launch, algo.plugin.advantages, algo.updates.start = on_launch, on_advantages, on_start

    def account(self, iteration: int) -> dict:
        trained = self.trained.get(iteration, [])
        keys = Counter((str(t.round), t.task_id, t.sample_index) for t in trained)
        # an RTI fix stands for the failed episode it was fixed from, which may leave the group
        replaced = {(str(iteration), t.task_id, t.source_index) for t in trained if t.intervened}
        asked = self.asked.get(iteration, set())
        return {"asked": len(asked), "trained": len(trained), "sent": self.sent.get(iteration, 0),
                "lost": len(asked - set(keys) - replaced), "duplicated": sum(n - 1 for n in keys.values() if n > 1)}


class Chaos(threading.Thread):
    """Kills a random actor after each seeded exponential gap until stopped."""

    def __init__(self, algo, seed: int, mean_gap_s: float):
        super().__init__(daemon=True)
        self.algo, self.rng, self.mean_gap_s = algo, random.Random(seed), mean_gap_s
        self.halt, self.kills, self.t0 = threading.Event(), [], time.perf_counter()

    def run(self) -> None:
        while not self.halt.wait(self.rng.expovariate(1 / self.mean_gap_s)):
            kinds = {k: [a for a in v if a is not None] for k, v in self.algo.graph.kinds().items()}
            kind = self.rng.choice(sorted(k for k, v in kinds.items() if v))
            index = self.rng.randrange(len(kinds[kind]))
            # a learner rank is not restarted by Ray: the driver rebuilds the whole group
            try:
                ray.kill(kinds[kind][index], no_restart=kind == "learner")
                killed = True
            except Exception:  # already dead (e.g. a learner rank of a group being replaced)
                killed = False
            self.kills.append({"seconds": round(time.perf_counter() - self.t0, 1), "iteration": self.algo.iteration,
                               "kind": kind, "index": index, "killed": killed})

    def stop(self) -> None:
        self.halt.set()
        self.join()


def row(m: dict, ledger: Ledger, seconds: float, kills: list) -> dict:
    it = m["iteration"] - 1  # the iteration's own index (the metrics count it as done)
    return {"iteration": m["iteration"], "seconds": round(seconds, 2), "kills": kills,
            "task_ids": m["task_ids"], "reward_mean": m["reward_mean"], "rti_continued": m["rti/continued"],
            "learner_samples": m["learner"].get("num_samples", 0), **ledger.account(it),
            "faults": {k: v for k, v in m.items() if k.startswith("faults/")}}


def run(model: str, tmp: str, name: str, seed: int, minutes: float, chaos_gap_s: float | None) -> dict:
    algo = config(model, tmp, name, seed).build()
    ledger, rows, chaos = Ledger(algo), [], None
    t0 = time.perf_counter()
    try:
        if chaos_gap_s is not None:
            chaos = Chaos(algo, seed, chaos_gap_s)
            chaos.start()
        while time.perf_counter() - t0 < minutes * 60 or (chaos and chaos.is_alive()):
            if chaos and time.perf_counter() - t0 >= minutes * 60:
                # one more iteration after the last kill: an actor killed late in the last
                # one (a learner rank is rebuilt only when next needed) has come back by its end
                chaos.stop()
            t, seen = time.perf_counter(), len(chaos.kills) if chaos else 0
            m = algo.train()
            rows.append(row(m, ledger, time.perf_counter() - t, [k["kind"] for k in chaos.kills[seen:]] if chaos else []))
            print(f"[{name}] iteration {m['iteration']}: {rows[-1]['seconds']:.1f} s, killed {rows[-1]['kills']}, "
                  f"lost {rows[-1]['lost']}, duplicated {rows[-1]['duplicated']}", flush=True)
    finally:
        if chaos and chaos.is_alive():
            chaos.stop()
        algo.stop()
    return {"rows": rows, "seconds": round(time.perf_counter() - t0, 1), "kills": chaos.kills if chaos else []}


def summarise(base: list, dis: dict) -> dict:
    rows = dis["rows"]
    last = rows[-1]["faults"] if rows else {}
    common = min(len(base), len(rows))
    same = sum((b["task_ids"], b["reward_mean"], b["learner_samples"], b["rti_continued"])
               == (d["task_ids"], d["reward_mean"], d["learner_samples"], d["rti_continued"])
               for b, d in zip(base, rows))
    base_s, dis_s = sum(r["seconds"] for r in base[:common]), sum(r["seconds"] for r in rows[:common])
    return {"iterations_completed": len(rows), "kills": len(dis["kills"]),
            "kills_by_kind": dict(Counter(k["kind"] for k in dis["kills"] if k["killed"])),
            "episodes_asked": sum(r["asked"] for r in rows), "episodes_lost": sum(r["lost"] for r in rows),
            "episodes_duplicated": sum(r["duplicated"] for r in rows),
            "samples_sent_not_trained": sum(r["sent"] - r["learner_samples"] for r in rows),
            "restarts": {k.split("/", 2)[-1]: v for k, v in last.items() if k.startswith("faults/restarts/")},
            "dead": {k.split("/", 2)[-1]: v for k, v in last.items() if k.startswith("faults/dead/")},
            "redone": {k.split("/", 2)[-1]: v for k, v in last.items() if k.startswith("faults/redone/") and v},
            "iterations_compared": common, "iterations_same_as_undisturbed": same,
            "slowdown": round(dis_s / base_s, 3) if common and base_s else None}


def chaos(model: str, minutes: float, baseline_minutes: float, kills_per_iteration: float, seed: int) -> dict:
    """The undisturbed run, then the disturbed one; their rows, kills and summary."""
    with tempfile.TemporaryDirectory() as tmp:
        if model == "tiny":
            from policies.models import make_tiny_model
            model = make_tiny_model(Path(tmp) / "tiny")
        base = run(model, tmp, "undisturbed", seed, baseline_minutes, None)["rows"]
        typical = sorted(r["seconds"] for r in base)[len(base) // 2]
        dis = run(model, tmp, "chaos", seed, minutes, typical / kills_per_iteration)
    return {"summary": summarise(base, dis), "undisturbed": base, "chaos": dis}


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=3.0, help="how long the disturbed run trains")
    ap.add_argument("--baseline-minutes", type=float, default=None,
                    help="how long the undisturbed run trains (default: a quarter of --minutes, at least 1)")
    ap.add_argument("--kills-per-iteration", type=float, default=2.0, help="mean kills per undisturbed iteration")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="tiny", help="'tiny' (random weights) or a model name / folder")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "chaos.json"))
    args = ap.parse_args()
    baseline_minutes = args.baseline_minutes if args.baseline_minutes is not None else max(1.0, args.minutes / 4)
    result = chaos(args.model, args.minutes, baseline_minutes, args.kills_per_iteration, args.seed)
    summary, base, dis = result["summary"], result["undisturbed"], result["chaos"]

    print(f"\n{'iter':>4} {'s':>6} {'asked':>5} {'trained':>7} {'lost':>4} {'dup':>3} {'same':>4}  killed")
    for i, d in enumerate(dis["rows"]):
        same = "-" if i >= len(base) else "yes" if (base[i]["task_ids"], base[i]["reward_mean"]) == \
            (d["task_ids"], d["reward_mean"]) else "NO"
        print(f"{d['iteration']:>4} {d['seconds']:>6.1f} {d['asked']:>5} {d['trained']:>7} {d['lost']:>4} "
              f"{d['duplicated']:>3} {same:>4}  {', '.join(d['kills']) or '-'}")
    print(f"\niterations completed: {summary['iterations_completed']}; kills: {summary['kills']} "
          f"{summary['kills_by_kind']}")
    print(f"episodes asked {summary['episodes_asked']}, lost {summary['episodes_lost']}, duplicated "
          f"{summary['episodes_duplicated']}; samples sent but not trained {summary['samples_sent_not_trained']}")
    print(f"restarts seen {summary['restarts']}; redone by the driver {summary['redone']}; dead {summary['dead']}")
    print(f"same as undisturbed: {summary['iterations_same_as_undisturbed']}/{summary['iterations_compared']}; "
          f"slowdown on those iterations: {summary['slowdown']}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(sys.argv), "args": vars(args), **result}, indent=2))
    print(f"wrote {out}")
    return summary


if __name__ == "__main__":
    main()
