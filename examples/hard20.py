"""Train an office/ops agent with Rollout-Time Intervention on Claw-Eval-style Hard20.

Hard20: 20 hard multi-service task families (mail, calendar, CRM, finance, helpdesk,
inventory, knowledge base, notes, scheduler, todo, config); 160 training variants and the
20 held-out originals, graded as Claw-Eval grades: score = safety x (0.8 x completion +
0.2 x robustness), pass iff score >= 0.75.

    # the README's main job: a local Ray head, this script via `ray job submit`, CPU quick run
    bash scripts/main_job.sh
    # by hand, on a running cluster:
    ray job submit --working-dir . -- python examples/hard20.py --quick

    # paper-scale settings on a GPU cluster (G = 8, temperature 0.8, lr 1e-6, the 160
    # training variants, 4 evaluation rollouts of the 20 held-out tasks):
    ray job submit --working-dir . -- python examples/hard20.py --model /models/Qwen3-8B --gpu \
        --num-engines 4 --num-env-runners 16 --tasks-per-iteration 32 --iterations 100 \
        --max-turns 30 --max-new-tokens 1024 --max-model-len 32768 --eval-samples 4

    # Claw-Eval's own hard20 tasks from your copy (docs/CLAW_EVAL.md), graded by their own
    # graders with the policy as the judge they call:
    python examples/hard20.py --env ClawEval-v0 --claw-data-dir ~/claw-eval --quick

    # on-policy distillation: a stronger model with the policy's tokenizer scores its tokens
    python examples/hard20.py --quick --algorithm opd --teacher-model /path/to/warm-started-policy

What it prints: one metrics line per iteration (reward, success, the share of all-fail
groups, how many RTI interventions were accepted and rescued a group), then a table in
the paper's layout — p@1, avg p@k, avg p^k on the held-out tasks — for the base policy and
after training, and the run directory (metrics.jsonl, TensorBoard events, a PNG of the
curves, the config). The paper's Qwen3-8B numbers (p@1): base 18.75, GRPO 22.50, RTI 50.00.
With SmolLM2-135M on a CPU both rows are near 0: the model rarely completes a multi-step
office task; the quick run shows the machinery working, not the paper's gains.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs import make_env  # noqa: E402
from rti_actors import RTIConfig  # noqa: E402
from rti_actors.cli import add_opd_args, opd_options  # noqa: E402
from rti_actors.demonstrations import record_agent  # noqa: E402
from rti_actors.metrics import format_table  # noqa: E402
from rti_actors.reporting import progress_line, sft_line  # noqa: E402
from rti_actors.resume import add_resume_args, build_resumable, evaluate_once  # noqa: E402


def env_config(a) -> dict:
    if a.env == "Hard20-v0":
        return {"language": a.language, "max_turns": a.max_turns or 12, "max_tool_output_chars": a.max_tool_output_chars}
    # Claw-Eval's own tasks: each keeps its own turn limit unless --max-turns overrides it
    judge = {"policy": "policy", "none": "none", "stub": "stub"}.get(a.judge, "model")
    return {"data_dir": a.claw_data_dir, "tasks": "hard20", "language": a.language, "max_turns": a.max_turns,
            "max_tool_output_chars": a.max_tool_output_chars, "judge": judge,
            **({"judge_model": a.judge} if judge == "model" else {}), "judge_unreadable": a.judge_unreadable}


def build_config(a) -> RTIConfig:
    return (RTIConfig()
            .environment(a.env, env_config=env_config(a))
            .policy(model=a.model, engine=a.engine, max_new_tokens=a.max_new_tokens, max_model_len=a.max_model_len,
                    temperature=0.8)
            .env_runners(num_env_runners=a.num_env_runners, num_envs_per_env_runner=a.num_envs_per_env_runner,
                         num_engines=a.num_engines, num_gpus_per_engine=1 if a.gpu else 0)
            .training(algorithm=a.algorithm, group_size=a.group_size, tasks_per_iteration=a.tasks_per_iteration,
                      lr=a.lr)
            .interventions(roles=a.roles, ppl_threshold=a.ppl_threshold, eps_cal=a.eps_cal)
            # OPD (--algorithm opd): a model or an endpoint scores the policy's own tokens
            .opd(**opd_options(a))
            .learners(backend="deepspeed", zero_stage=a.zero_stage, num_gpus_per_learner=1 if a.gpu else 0,
                      dtype="bfloat16" if a.gpu else None)
            .sft(lr=a.sft_lr, epochs=a.sft_epochs)
            .evaluation(num_samples=a.eval_samples, num_tasks=a.eval_tasks)
            .reporting(run_name=a.run_name, run_dir=a.run_dir))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algorithm", default="rti", choices=["rti", "grpo", "gspo", "luffy", "opd", "aepo"],
                    help="luffy: Hard20's scripted oracle is the teacher; opd: a teacher (--teacher-model or "
                         "--teacher-endpoint) scores the policy's tokens; aepo: groups branch at uncertain tool "
                         "calls, entropy-balanced loss (docs/ALGORITHM.md)")
    add_opd_args(ap)
    ap.add_argument("--env", default="Hard20-v0", choices=["Hard20-v0", "ClawEval-v0"],
                    help="ClawEval-v0: Claw-Eval's own hard20 tasks from your copy, graded by their own graders "
                         "(docs/CLAW_EVAL.md)")
    ap.add_argument("--claw-data-dir", default=None,
                    help="ClawEval-v0: your copy of claw-eval (else $RTI_CLAW_EVAL_DIR, else the cache folder)")
    ap.add_argument("--judge", default="policy",
                    help="ClawEval-v0's judge: policy | a local model folder | stub (a fixed score, not a judge) | none")
    ap.add_argument("--judge-unreadable", default="error", choices=["error", "zero"],
                    help="ClawEval-v0: a judge reply with no readable score is a grading error (default) or scores 0 "
                         "(for a small local judge)")
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a built-in name or a local HF model folder")
    ap.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    ap.add_argument("--roles", default="self", help="RTI roles: self | a local model folder | an http(s) endpoint")
    ap.add_argument("--ppl-threshold", type=float, default=5.0)
    ap.add_argument("--eps-cal", type=float, default=0.2)
    ap.add_argument("--language", default="en", choices=["en", "zh"])
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tasks-per-iteration", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--num-env-runners", type=int, default=2)
    ap.add_argument("--num-envs-per-env-runner", type=int, default=8)
    ap.add_argument("--num-engines", type=int, default=1)
    ap.add_argument("--zero-stage", type=int, default=0)
    ap.add_argument("--max-turns", type=int, default=None, help="default: 12 on Hard20-v0, each task's own on ClawEval-v0")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-tool-output-chars", type=int, default=2000)
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--eval-tasks", type=int, default=None, help="held-out tasks to evaluate (default: all 20)")
    ap.add_argument("--run-name", default=None)
    ap.add_argument("--run-dir", default="runs")
    ap.add_argument("--warmup-sft", type=int, default=0, metavar="N",
                    help="before RL, SFT on N oracle demonstrations of training variants (round-robin over families)")
    ap.add_argument("--sft-epochs", type=int, default=2)
    ap.add_argument("--sft-lr", type=float, default=1e-5)
    ap.add_argument("--gpu", action="store_true")
    add_resume_args(ap)
    ap.add_argument("--quick", action="store_true",
                    help="CPU quick run: 2 iterations of 2 tasks x G=4, short turns, 2 eval rollouts of each held-out task")
    a = ap.parse_args(argv)
    if a.env == "ClawEval-v0" and (a.warmup_sft or a.algorithm == "luffy"):
        ap.error("--warmup-sft and --algorithm luffy need scripted demonstrations, which Hard20-v0 has for every "
                 "task; on ClawEval-v0 oracles cover the hard20 families only (envs/claw_eval/oracles.py)")
    if a.quick:
        a.iterations, a.tasks_per_iteration, a.group_size = 2, 2, 4
        a.max_turns, a.max_new_tokens, a.eval_samples = 3, 64, 2
        a.num_envs_per_env_runner = 4
    return a


def main(argv=None):
    a = parse_args(argv)
    t0 = time.time()
    algo = build_resumable(build_config(a), a)
    try:
        rows = run(algo, a)
    finally:
        algo.stop()
    last = list(rows.values())[-1]
    print()
    benchmark = "Hard20" if a.env == "Hard20-v0" else "ClawEval-Hard20"
    print(format_table({label: {benchmark: s} for label, s in rows.items()}))
    print(f"\n({last['num_tasks']} held-out tasks x {last['n']} rollouts; total {time.time() - t0:.0f} s)")
    print(f"run directory: {algo.run_dir}")


def oracle_demonstrations(a) -> list[dict]:
    """N oracle episodes of training variants, one family after another (never held-out tasks)."""
    ids = make_env("Hard20-v0", {"split": "train"}).unwrapped.task_ids("train")
    by_variant = sorted(ids, key=lambda t: (t.rsplit("-v", 1)[1], t))
    return record_agent("Hard20-v0", {**env_config(a), "max_turns": 60}, by_variant[:a.warmup_sft])


def run(algo, a):
    rows = {"base": evaluate_once(algo, "base")}
    print(f"base policy evaluated in {rows['base']['seconds']:.0f} s", flush=True)
    if a.warmup_sft:
        if algo.iteration == 0:  # a resumed run's checkpoint holds the warm start already
            print(sft_line(algo.pretrain_sft(oracle_demonstrations(a))), flush=True)
        rows["SFT warm start"] = evaluate_once(algo, "sft")
    for _ in range(a.iterations - algo.iteration):
        print(progress_line(algo.train()), flush=True)
    if a.iterations:
        rows[a.algorithm.upper()] = evaluate_once(algo, a.algorithm.upper())
    return rows


if __name__ == "__main__":
    main()
