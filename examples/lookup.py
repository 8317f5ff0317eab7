"""Watch a policy learn: chained record lookups (Lookup-v0) with SmolLM2-135M on a CPU.

A question of tier k ("What is the team of the mentor of the manager of P917?") needs k
dependent get_person calls and a reply. The start policy is SmolLM2 after a short SFT warm
start on oracle demonstrations of tiers 1-2, kept as a LoRA adapter in
results/lookup-cpu/start/adapter (scripts/lookup_experiment.py made it; `--model start`
merges it into SmolLM2, or warm-starts first where the adapter is missing). From it, GRPO
climbs tier 1, where most groups are mixed; on tiers 2-3 almost every group fails all its
rollouts, and only RTI's fixes give a signal there.

    # the quickstart: GRPO on tier 1 from the start policy, 6 iterations of 4 tasks x G = 8
    python examples/lookup.py --quick
    # longer: GRPO on tiers 1-2, RTI with the env's rule roles on the all-fail tiers 2-3
    python examples/lookup.py --model start --tiers 1,2 --eval-tiers 1,2 --iterations 10 --lr 2e-4
    python examples/lookup.py --model start --tiers 2,3 --eval-tiers 2,3 --algorithm rti --roles rules --lr 2e-4
    # a warm start of your own (SFT on 64 oracle demonstrations), exported as a policy folder
    python examples/lookup.py --warm-start 64 --sft-lr 5e-4 --iterations 0 --eval-tiers "" --export-policy DIR

What to expect from --quick (about 7 minutes on 2 cores with native bf16): a metrics line
per iteration in which the success rate of the policy's own tier-1 rollouts climbs from
about 0.3 to about 0.65 (the start policy writes the call, but often reads the wrong field
or the wrong person), then the held-out p@1 on tier 1 for the start and the trained policy.
On all-fail tiers GRPO prints "no update (all groups zero-variance)" while RTI's funnel
shows fixes accepted and rescued. Every evaluation's rollouts and per-task outcomes go to
<run dir>/eval-*.jsonl and <run dir>/lookup.json, beside metrics.jsonl and
learning_curves.png.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs import make_env  # noqa: E402
from rti_actors import RTIConfig, algorithm_names  # noqa: E402
from rti_actors.demonstrations import outcomes_by_task, record_agent  # noqa: E402
from rti_actors.reporting import progress_line, sft_line  # noqa: E402
from rti_actors.resume import add_resume_args, build_resumable, evaluate_once  # noqa: E402

ENV = "Lookup-v0"
ROOT = Path(__file__).resolve().parents[1]
START_ADAPTER = ROOT / "results" / "lookup-cpu" / "start" / "adapter"


def tiers(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def tier_ids(split: str, wanted: list[int]) -> list[str]:
    env = make_env(ENV, {"tiers": wanted}).unwrapped
    return env.task_ids(split)


def build_config(args) -> RTIConfig:
    # the env holds every tier trained or evaluated; training draws from its own tiers only
    train, evaluated = tiers(args.tiers), tiers(args.eval_tiers)
    return (RTIConfig()
            .environment(ENV, env_config={"tiers": sorted(set(train) | set(evaluated)), "max_turns": args.max_turns})
            .policy(model=args.model, engine="vllm", max_new_tokens=args.max_new_tokens,
                    max_model_len=args.max_model_len, temperature=args.temperature)
            .env_runners(num_env_runners=args.num_env_runners, num_envs_per_env_runner=args.num_envs_per_env_runner)
            .training(algorithm=args.algorithm, group_size=args.group_size,
                      tasks_per_iteration=args.tasks_per_iteration, lr=args.lr, task_ids=tier_ids("train", train))
            .interventions(roles=args.roles)
            .learners(backend="torch", dtype=args.learner_dtype, share_prefix=True, pack_sequences=True,
                      lora={"r": args.lora_rank} if args.lora_rank else None)
            .sft(lr=args.sft_lr, epochs=args.sft_epochs, batch_size=args.sft_batch_size)
            .evaluation(num_samples=args.eval_samples)
            .debugging(seed=args.seed)
            .reporting(run_name=args.run_name, run_dir=args.run_dir))


def demonstrations(n: int, from_tiers: list[int], seed: int) -> list[dict]:
    """The oracle on n training tasks of the given tiers, drawn with the seed (never the test split)."""
    import numpy as np
    ids = tier_ids("train", from_tiers)
    pick = np.random.default_rng(seed).permutation(len(ids))[:n]
    return record_agent(ENV, {"tiers": from_tiers}, [ids[i] for i in sorted(pick)])


def per_tier(algo, label: str, eval_tiers: list[int], num_tasks: int | None, split: str) -> dict:
    """Summaries per tier over the first num_tasks tasks of each tier in the split, with
    each task's outcomes (its rollouts are kept in <run dir>/eval-<label>-<split>-tier<k>.jsonl)."""
    out = {}
    for tier in eval_tiers:
        ids = tier_ids(split, [tier])[:num_tasks]
        name = f"{label}-{split}-tier{tier}"
        path = Path(algo.run_dir) / f"eval-{name}.jsonl"
        out[tier] = dict(evaluate_once(algo, name, split=split, task_ids=ids, record_path=path))
        out[tier]["successes"] = outcomes_by_task(path)  # per task: what intervals over tasks need
    return out


def start_policy(adapter: Path, out: Path) -> str:
    """SmolLM2 with the warm-start adapter merged in, built once into ``out``."""
    from policies.models import load_model
    from rti_actors.lora import merge_adapter

    if not (out / ".complete").is_file():
        merge_adapter(load_model("smollm2-135m-instruct"), str(adapter), str(out))
        (out / ".complete").touch()
    return str(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="a built-in name, a folder, or 'start': the committed Lookup start policy")
    ap.add_argument("--algorithm", default="grpo", choices=algorithm_names(), help="any registered algorithm")
    ap.add_argument("--roles", default="rules", help="RTI roles: 'rules', 'self', a model folder or an endpoint")
    ap.add_argument("--tiers", default="1,2", help="training tiers")
    ap.add_argument("--eval-tiers", default="1,2,3,4")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tasks-per-iteration", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--lora-rank", type=int, default=16, help="0: full fine-tune")
    ap.add_argument("--learner-dtype", default=None, choices=["float32", "bfloat16"],
                    help="default: the learner's own, bf16 where the CPU computes it natively, else fp32")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-turns", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--num-env-runners", type=int, default=2)
    ap.add_argument("--num-envs-per-env-runner", type=int, default=16)
    ap.add_argument("--warm-start", type=int, default=0, metavar="N", help="SFT on N oracle demonstrations first")
    ap.add_argument("--warm-start-tiers", default="1,2", help="the tiers the demonstrations come from")
    ap.add_argument("--sft-lr", type=float, default=2e-4)
    ap.add_argument("--sft-epochs", type=int, default=1)
    ap.add_argument("--sft-batch-size", type=int, default=8)
    ap.add_argument("--eval-tasks", type=int, default=60, help="held-out tasks per tier (60: all of them)")
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--eval-split", default="test", choices=["test", "train"],
                    help="train: calibrate the tiers against a policy (never choose anything on test)")
    ap.add_argument("--no-base-eval", action="store_true")
    ap.add_argument("--export-policy", default=None, metavar="DIR")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-name", default=None)
    ap.add_argument("--run-dir", default="runs")
    add_resume_args(ap)
    ap.add_argument("--quick", action="store_true", help="the quickstart: GRPO on tier 1 from the start policy")
    args = ap.parse_args(argv)
    if args.quick:
        args.model, args.tiers, args.eval_tiers, args.eval_tasks = "start", "1", "1", 30
        args.iterations, args.tasks_per_iteration, args.lr = 6, 4, 2e-4
    if args.model == "start":
        if START_ADAPTER.is_dir():
            args.model = start_policy(START_ADAPTER, Path(args.run_dir) / "lookup-start-policy")
        else:  # e.g. a job whose upload left results/ out: the warm start, in the run
            args.warm_start, args.model = args.warm_start or 64, "smollm2-135m-instruct"
    eval_tiers = tiers(args.eval_tiers)
    where = (eval_tiers, args.eval_tasks, args.eval_split)

    algo = build_resumable(build_config(args), args)
    try:
        rows = {}
        if not args.no_base_eval:
            rows["start"] = per_tier(algo, "start", *where)
        if args.warm_start and algo.iteration == 0:
            print(sft_line(algo.pretrain_sft(demonstrations(args.warm_start, tiers(args.warm_start_tiers), args.seed))), flush=True)
            rows["warm start"] = per_tier(algo, "sft", *where)
        for _ in range(args.iterations - algo.iteration):
            print(progress_line(algo.train()), flush=True)
        if args.iterations:
            rows[args.algorithm] = per_tier(algo, args.algorithm, *where)
        if args.export_policy:
            print(f"policy exported to {algo.export_policy(args.export_policy)}")
    finally:
        algo.stop()
    if eval_tiers:  # --eval-tiers "" trains only
        print(f"p@1 per tier on the {args.eval_split} split (sampled):")
        print("policy".ljust(12) + "".join(f"tier {t}".rjust(9) for t in eval_tiers))
        for label, by_tier in rows.items():
            print(label.ljust(12) + "".join(f"{100 * by_tier[t]['pass@1']:9.1f}" for t in eval_tiers))
    (Path(algo.run_dir) / "lookup.json").write_text(json.dumps(rows, indent=2, default=str) + "\n")
    print(f"run directory: {algo.run_dir}")


if __name__ == "__main__":
    main()
