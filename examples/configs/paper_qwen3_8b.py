"""The RTI paper's setup: Qwen3-8B on one node of 8 GPUs, RTI on Claw-Eval-Hard20.

Layout: one vLLM engine with tensor parallelism 4 (GPUs 0-3) and a 4-rank ZeRO-3 DeepSpeed
learner (GPUs 4-7) with gradient checkpointing; G = 8 rollouts per task at temperature 0.8,
Adam at a constant lr of 1e-6 with weight decay 0.1, a 32k context, and role budgets that
leave a thinking model room to reason before its verdict.

How to run:
    python examples/configs/paper_qwen3_8b.py --dry-run     # the plan and memory, no GPU needed
    python examples/configs/paper_qwen3_8b.py               # train (8 GPUs, the model in the HF cache)

Results to expect from the dry run: the placement (4 + 4 GPUs of 8), per-GPU estimates for
an engine GPU and a learner rank, and "fits: yes" on 80 GB devices.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rti_actors import RTIConfig  # noqa: E402

MODEL = "Qwen/Qwen3-8B"
# Qwen3-8B's architecture as its published config.json gives it: the dry run plans from it
# when the model is not on this machine.
QWEN3_8B = {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
            "tie_word_embeddings": False}


def config(model: str = MODEL) -> RTIConfig:
    return (RTIConfig()
            .environment("Hard20-v0", env_config={"max_turns": 20})
            .policy(model=model, engine="vllm", dtype="bfloat16", max_model_len=32768, max_new_tokens=4096,
                    temperature=0.8, tensor_parallel_size=4)
            .env_runners(num_env_runners=8, num_envs_per_env_runner=16, num_cpus_per_env_runner=1,
                         num_engines=1, num_gpus_per_engine=4, num_cpus_per_engine=4)
            .training(algorithm="rti", group_size=8, tasks_per_iteration=16, lr=1e-6, weight_decay=0.1,
                      micro_batch_tokens=32768)
            .learners(backend="deepspeed", num_learners=4, num_gpus_per_learner=1, num_cpus_per_learner=2,
                      zero_stage=3, gradient_checkpointing=True, dtype="bfloat16", weight_sync="broadcast")
            .interventions(roles="self", ppl_threshold=5.0, max_role_tokens=2048)
            .evaluation(num_samples=4)
            .reporting(run_name="paper-qwen3-8b-hard20"))


def dry_run(model: str) -> str:
    from transformers import AutoConfig

    from rti_actors.plan import ModelShape, format_plan, placement_plan
    folder = Path(model).expanduser()
    hf = AutoConfig.from_pretrained(folder) if (folder / "config.json").is_file() else \
        AutoConfig.for_model("qwen3", **QWEN3_8B)
    return format_plan(placement_plan(config(model), ModelShape.from_hf_config(hf), gpus_per_node=8, gpu_gib=80))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=MODEL, help="hub id or local folder")
    ap.add_argument("--dry-run", action="store_true", help="print the placement plan and memory estimates")
    ap.add_argument("--iterations", type=int, default=200)
    a = ap.parse_args()
    if a.dry_run:
        print(dry_run(a.model))
        return
    algo = config(a.model).build()
    try:
        for _ in range(a.iterations):
            m = algo.train()
            print(f"iter {m['iteration']}: reward {m['reward_mean']:.3f} pass@G(pre) "
                  f"{m['pre_intervention_pass_at_G']:.2f} rti accepted {m.get('rti/accepted', 0)}", flush=True)
            if m["iteration"] % 20 == 0:
                algo.save(algo.run_dir / f"checkpoint-{m['iteration']}")
        print(algo.evaluate()["table"])
    finally:
        algo.stop()


if __name__ == "__main__":
    main()
