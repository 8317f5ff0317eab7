"""Learner throughput and memory: DeepSpeed ZeRO 0 and 2 versus the plain torch loop.

    python benchmarks/learner.py [--model smollm2-135m-instruct] [--seqs 8] [--seq-len 512] [--steps 2]
                                 [--configs deepspeed-z0,deepspeed-z2,torch] [--out benchmarks/results/learner.json]

Every configuration trains on the same fixed synthetic batch (seeded random token ids; the
first quarter of each sequence is prompt, the rest carries loss; random advantages) for one
warm-up step and ``--steps`` measured steps, each a full ``Learner.update`` (forward,
backward, optimiser step). Each configuration runs in its own subprocess so peak memory
(ru_maxrss, which includes loading the model) is its own; ``rss_after_step_gib`` is what the
learner keeps resident between steps (it returns freed activations to the OS after each).
``model_states_gib`` is
``estimate_memory_gib`` (parameters + gradients + Adam states, no activations).
With one process ZeRO partitions nothing; stage 2 only adds the fp32 master copy DeepSpeed
keeps beside the weights, so it should cost memory and a little time here.
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

CONFIGS = {
    "deepspeed-z0": {"backend": "deepspeed", "zero_stage": 0},
    "deepspeed-z2": {"backend": "deepspeed", "zero_stage": 2},
    "torch": {"backend": "torch"},
    "torch-bf16": {"backend": "torch", "dtype": "bfloat16"},  # fp32 weights, bf16 autocast
}


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


def run_one(name: str, args) -> dict:
    import torch
    from transformers import AutoConfig

    from policies.models import load_model
    from rti_actors.learner import Learner, estimate_memory_gib
    if args.threads:
        torch.set_num_threads(args.threads)
    path = load_model(args.model)
    vocab = AutoConfig.from_pretrained(path).vocab_size
    batch = synthetic_batch(args.seqs, args.seq_len, vocab)
    config = {**CONFIGS[name], "micro_batch_tokens": args.micro_batch_tokens,
              "gradient_checkpointing": args.gradient_checkpointing, "dtype": args.dtype, **CONFIGS[name]}
    t0 = time.perf_counter()
    learner = Learner(path, config)
    init_s = time.perf_counter() - t0
    learner.update(batch)  # warm-up: allocator, DeepSpeed buffers
    metrics = [learner.update(batch) for _ in range(args.steps)]
    seconds = sum(m["seconds"] for m in metrics) / len(metrics)
    return {"config": name, "dtype": config["dtype"], "threads": torch.get_num_threads(),
            "grad_ckpt": args.gradient_checkpointing, "init_s": round(init_s, 1), "step_s": round(seconds, 2),
            "tokens_per_s": round(args.seqs * args.seq_len / seconds, 1),
            "loss_tokens_per_s": round(metrics[0]["num_tokens"] / seconds, 1),
            "micro_batches": metrics[0]["num_micro_batches"],
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            "rss_after_step_gib": round(metrics[-1]["host_rss_gib"], 2),
            "model_states_gib": round(estimate_memory_gib(
                path, CONFIGS[name].get("zero_stage", 0),
                config["dtype"] if config["backend"] == "deepspeed" else "float32"), 2)}  # torch: fp32 states


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--micro-batch-tokens", type=int, default=4096)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per run (0: torch's default). On a shared machine 1 avoids "
                         "OpenMP oversubscription, which can slow a step down tenfold")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default="benchmarks/results/learner.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(run_one(args.child, args)), flush=True)
        return
    env = os.environ.copy()
    env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".cache" / "torch_extensions"))
    rows = []
    for name in args.configs.split(","):
        cmd = [sys.executable, __file__, "--child", name] + [a for a in sys.argv[1:]]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
        if not line:
            print(out.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"learner config {name} failed")
        rows.append(json.loads(line[0][7:]))
        print(f"done {name}", file=sys.stderr, flush=True)
    cols = ["config", "dtype", "threads", "grad_ckpt", "init_s", "step_s", "tokens_per_s", "loss_tokens_per_s", "micro_batches",
            "peak_rss_gib", "rss_after_step_gib", "model_states_gib"]
    print(" | ".join(f"{c:>17}" for c in cols))
    for r in rows:
        print(" | ".join(f"{str(r[c]):>17}" for c in cols))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"model": args.model, "seqs": args.seqs, "seq_len": args.seq_len,
                                          "steps": args.steps, "micro_batch_tokens": args.micro_batch_tokens,
                                          "rows": rows}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
