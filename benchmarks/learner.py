"""Learner throughput, memory and FLOP utilisation on agent-shaped batches.

    python benchmarks/learner.py [--model smollm2-135m-instruct] [--workload navigation]
                                 [--groups 2] [--group-size 8] [--page-size 3] [--steps 1]
                                 [--configs full,prefix,packed,prefix+packed,lora,lora+prefix+packed]
                                 [--backends deepspeed] [--dtypes float32] [--out benchmarks/results/learner.json]

Workloads:
- ``navigation`` (default): ``--groups`` groups of ``--group-size`` recorded rollouts shaped
  like a GRPO group on Navigation-v0. Each group is one task's oracle episode (search
  results cut to ``--page-size`` POIs); member j keeps a seeded random number of its turns,
  so the members share the opening (system prompt, tool schemas, worked example, request)
  and differ in length as sampled rollouts do. Advantages are seeded random.
- ``synthetic``: ``--seqs`` sequences of ``--seq-len`` random ids (the first quarter prompt).

Configurations (each with every ``--backends`` x ``--dtypes``): ``sdpa`` is the padded full
fine-tune on transformers' own SDPA attention (the learner before its attention function);
``full`` is the padded full fine-tune; ``prefix`` adds learners(share_prefix=True); ``packed`` adds
learners(pack_sequences=True); ``default`` sets no layout option, so each tree runs its learner's
own default (today: each group's opening shared and its continuations packed where that saves a
quarter of the group's positions, the rest padded; in f791ef2, padded rows);
``lora`` trains rank-16 adapters on every linear layer.

Each configuration runs in its own subprocess (its peak memory is its own) for one warm-up
step and ``--steps`` measured steps of ``Learner.update``. Reported: tokens/s (the batch's
tokens over the step's seconds), seconds per step, the loss (equal across layouts up to float
noise: a layout that changed it would be a bug), peak resident memory, the padding share of
computed positions, and model FLOP utilisation: the FLOPs the step really computes (6 x
non-embedding params per computed position, the vocabulary projection at loss positions, and
causal attention 12 x layers x attention width per query-key pair; a LoRA step skips the
weight-gradient third of the frozen matrices) per second, as a share of a 2048 x 2048
matmul measured in the same process, dtype and thread count.

Results to expect (SmolLM2-135M, fp32, 2 AVX2 cores, 1 group x 4 Navigation rollouts of 4.9-8.4K
tokens): about 30 tokens/s whatever the layout. Attention is most of a step at these lengths
(PyTorch's CPU flash kernel runs at roughly two thirds of a matmul's speed), so sharing the
opening (13 % of the positions) gains a few percent, within this machine's run-to-run noise of
about 10 %; packing changes nothing when every sample fills a row alone. LoRA (rank 16, every
linear layer) measured 42 tokens/s (44 with the shared prefix and packing) on a sitting whose
matmul ran a third faster than the full fine-tune's: per unit of matmul speed the two are
level, since the weight gradients LoRA skips are a small share beside attention at these
lengths. What LoRA saves is optimiser memory and a checkpoint of megabytes. The peak memory
of these 26K-token steps (18-21 GiB) is activations, which LoRA does not shrink; compare
runs by the utilisation column, which divides out the machine's speed of the day.

On the ``completions`` workload (32 tool-call completions, 9,959 tokens) on 2 cores with
AVX512-BF16 (README, "The learner's speed"), ``--profile`` splits a full-layout step so: in
fp32 (the code before bf16 was the default) linear layers 46.5 s, attention 6.9, norms and
activations 5.2, vocabulary projection and log-softmax 1.7 (its backward matmuls count as
linear layers there), optimizer 0.3; in bf16 linear layers 18.1, attention 7.2, vocabulary
3.5 (the sliced function's backward counted here), norms 2.7, optimizer 0.1. With prefix
sharing and packing the bf16 step was attention 9.8, linear 8.0, vocabulary 5.0 until
queries behind a prefix longer than themselves took the masked attention path; then
linear 8.8, attention 5.6, vocabulary 5.1, norms 2.1: the vocabulary's sliced log-softmax,
whose backward recomputes the projection, is now as large as attention.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

OFF = {"share_prefix": False, "pack_sequences": False}
LAYOUTS = {"full": OFF, "prefix": {**OFF, "share_prefix": True}, "packed": {**OFF, "pack_sequences": True},
           "prefix+packed": {"share_prefix": True, "pack_sequences": True},
           "default": {}}
LORA = {"r": 16, "alpha": 32, "dropout": 0.0}
BACKENDS = {"deepspeed": {"backend": "deepspeed", "zero_stage": 0}, "torch": {"backend": "torch"}}


def learner_config(name: str, backend: str, dtype: str, args) -> dict:
    lora = name.startswith("lora")
    layout = LAYOUTS[name.removeprefix("lora").strip("+") or "full"] if name != "sdpa" else OFF
    # "default": the dtype the learner picks itself on this machine
    return {**BACKENDS[backend], **layout, **({} if dtype == "default" else {"dtype": dtype}),
            "micro_batch_tokens": args.micro_batch_tokens,
            "gradient_checkpointing": args.gradient_checkpointing, "lr": 1e-4 if lora else 1e-6,
            **({"lora": LORA} if lora else {})}


def navigation_batch(tokenizer, groups: int, group_size: int, page_size: int, seed: int = 0) -> list[dict]:
    from envs import make_env
    from policies.chat import ChatRenderer
    from rti_actors.demonstrations import record_agent, to_sample

    rng = random.Random(seed)
    config = {"language": "en", "page_size": page_size}
    env = make_env("Navigation-v0", {"split": "train", **config}).unwrapped
    tasks = [t for t in env.task_ids("train") if env.difficulty(t)["waypoints"] >= 6][:groups]
    renderer, batch = ChatRenderer(tokenizer), []
    for record in record_agent("Navigation-v0", config, tasks):
        turns = [i for i, m in enumerate(record["messages"]) if m["role"] == "assistant"]
        for _ in range(group_size):
            keep = rng.randint(max(1, len(turns) * 6 // 10), len(turns))
            cut = {**record, "messages": record["messages"][:turns[keep - 1] + 1]}
            s = to_sample(renderer, cut)
            s.pop("messages")
            s["behaviour_logprobs"] = [-rng.uniform(0.05, 3.0) if m else 0.0 for m in s["loss_mask"]]
            batch.append({**s, "advantage": rng.uniform(-1.5, 1.5), "policy_version": 0})
    return batch


def completions_batch(tokenizer, prompts: int, group_size: int, max_new: int, seed: int = 0) -> list[dict]:
    """GRPO on single-turn tool calls: ``prompts`` Lookup-v0 tier-1 prompts (system prompt, tool
    schemas, question) x ``group_size`` completions. Each completion is the oracle's first
    tool call followed by seeded random tokens up to a seeded length in [max_new / 2, max_new]:
    only the lengths matter to the learner's speed, and these are a sampled group's."""
    from envs import make_env
    from policies.chat import ChatRenderer
    from rti_actors.demonstrations import record_agent, to_sample

    rng = random.Random(seed)
    config = {"tiers": [1]}
    tasks = make_env("Lookup-v0", {"split": "train", **config}).unwrapped.task_ids("train")[:prompts]
    renderer, batch = ChatRenderer(tokenizer), []
    for record in record_agent("Lookup-v0", config, tasks):
        first = next(i for i, m in enumerate(record["messages"]) if m["role"] == "assistant")
        s = to_sample(renderer, {**record, "messages": record["messages"][:first + 1]})
        start = s["loss_mask"].index(1)
        for _ in range(group_size):
            n = rng.randint(max_new // 2, max_new)
            tail = [rng.randrange(tokenizer.vocab_size) for _ in range(max(0, start + n - len(s["ids"])))]
            ids = (s["ids"] + tail)[:start + n]
            mask = [0] * start + [1] * n
            batch.append({"ids": ids, "loss_mask": mask, "token_weight": [1.0] * len(ids),
                          "behaviour_logprobs": [-rng.uniform(0.05, 3.0) if m else 0.0 for m in mask],
                          "advantage": rng.uniform(-1.5, 1.5), "policy_version": 0})
    return batch


def synthetic_batch(seqs: int, seq_len: int, vocab: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    prompt = seq_len // 4
    batch = []
    for _ in range(seqs):
        mask = [0] * prompt + [1] * (seq_len - prompt)
        batch.append({"ids": [rng.randrange(vocab) for _ in range(seq_len)], "loss_mask": mask,
                      "behaviour_logprobs": [-rng.uniform(8, 12) if m else 0.0 for m in mask],
                      "token_weight": [1.0] * seq_len, "advantage": rng.choice([-1.0, 1.0]), "policy_version": 0})
    return batch


def matmul_flops(dtype, threads: int, n: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of an n x n matmul in this process: the yardstick for utilisation."""
    import torch
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - t0)


def step_flops(hf_config, layout, samples: list[dict], lora: bool) -> float:
    """FLOPs one step computes for ``layout`` (rti_actors.batch_layout.Layout)."""
    h, layers = hf_config.hidden_size, hf_config.num_hidden_layers
    heads = hf_config.num_attention_heads
    head_dim = getattr(hf_config, "head_dim", None) or h // heads
    kv = hf_config.num_key_value_heads * head_dim
    inter = hf_config.intermediate_size
    per_layer = h * heads * head_dim * 2 + 2 * h * kv + 3 * h * inter  # q, o; k, v; gate, up, down
    # forward 2, input gradient 2, weight gradient 2 per weight per position; a frozen base
    # (LoRA) skips the weight gradient
    per_position = (4 if lora else 6) * per_layer * layers
    positions = pairs = 0
    for cluster in layout.clusters:
        p = len(cluster.prefix)
        positions += p
        pairs += p * (p + 1) // 2
        for row in cluster.rows:
            positions += len(row.lines) * row.width
            for line in row.lines:
                pairs += sum(s.length * p + s.length * (s.length + 1) // 2 for s in line)
    loss_tokens = sum(sum(s["loss_mask"]) for s in samples)
    return (per_position * positions + 6 * h * hf_config.vocab_size * loss_tokens
            + 12 * layers * heads * head_dim * pairs)


# Where a step's time goes, by the op (or the nearest enclosing op) it is spent in: the
# first rule whose pattern is in the op's name or an ancestor's wins. Self times are the
# main thread's (intra-op threads work inside the op that launched them).
PARTS = (("vocabulary projection + log-softmax", ("learner.vocab_logprobs", "_SlicedTokenLogprobs", "logsumexp",
                                                 "log_softmax", "LogsumexpBackward", "LogSoftmaxBackward")),
         ("optimizer", ("Optimizer.step", "Optimizer.zero_grad", "clip_grad_norm", "vector_norm")),
         ("attention", ("attention",)),
         ("linear layers (matmuls)", ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")),
         ("norms, activations, rotary", ("silu", "rsqrt", "aten::pow", "aten::mean", "aten::mul", "aten::add",
                                         "aten::neg", "aten::cat", "aten::cos", "aten::sin")),
         ("copies, casts, layout", ("aten::copy_", "aten::to", "aten::_to_copy", "aten::clone", "aten::contiguous",
                                    "aten::index", "aten::cat", "aten::fill_", "aten::zero_", "aten::empty")))


def profile_step(learner, batch) -> dict:
    """One more step under torch's profiler: seconds per part of the step (``PARTS``)."""
    from collections import Counter

    import torch
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        learner.update(batch)
    parts: Counter = Counter()
    for e in prof.events():
        names, up = [e.name], e.cpu_parent
        while up is not None:
            names.append(up.name)
            up = up.cpu_parent
        part = next((p for p, pats in PARTS if any(pat in n for n in names for pat in pats)), "other")
        parts[part] += e.self_cpu_time_total / 1e6
    return {p: round(v, 2) for p, v in sorted(parts.items(), key=lambda kv: -kv[1])}


def run_one(name: str, backend: str, dtype: str, args) -> dict:
    import torch
    from transformers import AutoConfig, AutoTokenizer

    if args.code:  # another tree's library (--compare): imported before ours
        sys.path.insert(0, args.code)
    from policies.models import load_model
    from rti_actors.batch_layout import plan
    from rti_actors.learner import Learner
    if args.threads:
        torch.set_num_threads(args.threads)
    path = load_model(args.model)
    hf_config = AutoConfig.from_pretrained(path)
    if args.workload == "navigation":
        batch = navigation_batch(AutoTokenizer.from_pretrained(path), args.groups, args.group_size, args.page_size)
    elif args.workload == "completions":
        batch = completions_batch(AutoTokenizer.from_pretrained(path), args.prompts, args.group_size, args.max_new)
    else:
        batch = synthetic_batch(args.seqs, args.seq_len, hf_config.vocab_size)
    config = learner_config(name, backend, dtype, args)
    if name == "sdpa":
        # the learner before its own attention function: transformers' SDPA, padded rows
        import rti_actors.learner
        rti_actors.learner.register = lambda: "sdpa"
    t0 = time.perf_counter()
    learner = Learner(path, config)
    init_s = time.perf_counter() - t0
    dtype = learner.config["dtype"]  # what "default" became
    peak = matmul_flops(getattr(torch, dtype), torch.get_num_threads())
    if args.warmup:
        learner.update(batch)  # allocator, DeepSpeed buffers
    metrics = [learner.update(batch) for _ in range(args.steps)]
    profile = profile_step(learner, batch) if args.profile else None
    seconds = sum(m["seconds"] for m in metrics) / len(metrics)
    layout = plan([s["ids"] for s in batch], [s["loss_mask"] for s in batch], config["micro_batch_tokens"],
                  **getattr(learner, "layout", {"pack": learner.config["pack_sequences"],
                                                "share": learner.config["share_prefix"]}))
    flops = step_flops(hf_config, layout, batch, "lora" in config)
    # the better of a matmul before and after the steps: a busy moment only lowers a reading
    peak = max(peak, matmul_flops(getattr(torch, dtype), torch.get_num_threads()))
    tokens = sum(len(s["ids"]) for s in batch)
    return {"config": name, "code": args.code_label, "backend": backend, "dtype": dtype,
            "threads": torch.get_num_threads(),
            "samples": len(batch), "tokens": tokens, "init_s": round(init_s, 1), "step_s": round(seconds, 1),
            "tokens_per_s": round(tokens / seconds, 1), "loss": metrics[0]["loss"],
            "padding_frac": round(metrics[0]["padding_frac"], 3), "rows": metrics[0]["num_micro_batches"],
            "prefix_tokens_saved": metrics[0]["prefix_tokens_saved"],
            "tflops": round(flops / seconds / 1e12, 4), "matmul_tflops": round(peak / 1e12, 4),
            "mfu": round(flops / seconds / peak, 3),
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            **({"profile": profile} if profile else {})}


COLUMNS = ["config", "code", "backend", "dtype", "tokens", "step_s", "tokens_per_s", "speedup", "loss", "padding_frac",
           "rows", "tflops", "matmul_tflops", "mfu", "peak_rss_gib"]


def worktree(rev: str) -> Path:
    """A checkout of ``rev`` beside the repository's own, made once and reused."""
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, check=True, capture_output=True,
                         text=True).stdout.strip()
    path = REPO / ".cache" / "bench-code" / sha
    if not path.is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), sha], cwd=REPO, check=True)
    return path


def baseline(rows: list[dict], row: dict) -> dict:
    """What a row's speedup is against: the same configuration and backend on the compared
    code (or, without --compare, the padded full fine-tune), in the first dtype measured."""
    same = [r for r in rows if r["config"] == row["config"] and r["backend"] == row["backend"]]
    if row["code"] != "HEAD" or not any(r["code"] != "HEAD" for r in same):
        same = [r for r in rows if r["config"] in ("sdpa", "full") and r["backend"] == row["backend"]
                and r["code"] == row["code"]]
    return same[0] if same else row


def cpu_name() -> str:
    import platform
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--workload", choices=("navigation", "completions", "synthetic"), default="navigation")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=4, help="completions: Lookup tier-1 prompts")
    ap.add_argument("--max-new", type=int, default=128, help="completions: longest completion")
    ap.add_argument("--page-size", type=int, default=3)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1, help="1: one unmeasured step first (0 to save time)")
    ap.add_argument("--micro-batch-tokens", type=int, default=8192)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--configs", default="sdpa,full,prefix,packed,prefix+packed,lora,lora+prefix+packed")
    ap.add_argument("--backends", default="deepspeed")
    ap.add_argument("--dtypes", default="float32", help="comma-separated; 'default': the learner's own choice")
    ap.add_argument("--compare", metavar="REV", help="also run every configuration on the library as of git REV "
                    "(a worktree under .cache/bench-code), first, in the same run")
    ap.add_argument("--out", default="benchmarks/results/learner.json")
    ap.add_argument("--profile", action="store_true", help="one more step under torch's profiler: seconds per part")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--code", help=argparse.SUPPRESS)
    ap.add_argument("--code-label", default="HEAD", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        name, backend, dtype = args.child.split(":")
        print("RESULT " + json.dumps(run_one(name, backend, dtype, args)), flush=True)
        return
    env = os.environ.copy()
    env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".cache" / "torch_extensions"))
    trees = [(args.compare, str(worktree(args.compare)))] if args.compare else []
    trees.append(("HEAD", None))
    rows = []
    for backend in args.backends.split(","):
        for dtype in args.dtypes.split(","):
            for name in args.configs.split(","):
                for label, code in trees:
                    cmd = [sys.executable, __file__, "--child", f"{name}:{backend}:{dtype}", "--code-label", label,
                           *(["--code", code] if code else []), *sys.argv[1:]]
                    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
                    if not line:
                        print(out.stderr[-3000:], file=sys.stderr)
                        raise SystemExit(f"learner config {name} ({backend}, {dtype}, {label}) failed")
                    row = json.loads(line[0][7:])
                    row["speedup"] = round(row["tokens_per_s"] / baseline(rows, row)["tokens_per_s"], 2)
                    rows.append(row)
                    print(f"done {name} {backend} {dtype} {label}: {row['tokens_per_s']} tokens/s", file=sys.stderr,
                          flush=True)
                    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                    Path(args.out).write_text(json.dumps({"args": {k: v for k, v in vars(args).items()
                                                                   if k not in ("child", "code", "code_label")},
                                                          "cpu": cpu_name(), "rows": rows}, indent=2))
    print(" | ".join(f"{c:>13}" for c in COLUMNS))
    for r in rows:
        print(" | ".join(f"{(round(r[c], 5) if isinstance(r[c], float) else r[c])!s:>13}" for c in COLUMNS))
    for r in rows:
        if "profile" in r:
            print(f"profile {r['config']} {r['code']} {r['dtype']} (s): " + ", ".join(f"{k} {v}"
                                                                              for k, v in r["profile"].items()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
