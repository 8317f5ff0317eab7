"""A dry run: where a config's actors go and what each device must hold, before any GPU.

``placement_plan(config, shape)`` lays the engines (tensor-parallel groups), the learner
ranks and the CPU actors out on nodes of ``gpus_per_node`` GPUs and estimates per device:

    engine GPU   weights / TP (16-bit)  + KV cache for the rollouts in flight
    learner GPU  model states / ZeRO    + activations of one micro-batch + loss logits

Model states are 16-bit weights and gradients, an fp32 master copy and AdamW's two fp32
moments (16 bytes per parameter), partitioned over the ranks by the ZeRO stage (stage 1:
optimizer states, 2: and gradients, 3: and weights), less what is offloaded to CPU.
Activations follow the usual transformer accounting with a fused attention kernel (no
[seq x seq] scores kept): about 34 x hidden bytes per token and layer in 16-bit, or, with
gradient checkpointing, 2 x hidden bytes per token and layer kept plus one layer's full set
during its recomputation. The learner projects to the vocabulary only at loss tokens
(``losses.masked_token_logprobs``): fp32 logits and their gradient for ``loss_fraction`` of
the micro-batch. The KV cache holds 2 x layers x kv_heads x head_dim 16-bit values per token,
split over the TP group. These are estimates for planning, not measurements: allocator
fragmentation and framework buffers come on top (a 10 % margin is kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 2**30
MARGIN = 0.9            # a device counts as fitting at 90 % of its memory
ENGINE_OVERHEAD_GIB = 2.0  # CUDA context, graphs, sampler buffers of an engine


@dataclass(frozen=True)
class ModelShape:
    params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_hf_config(cls, hf_config) -> "ModelShape":
        """From a transformers config (a folder's config.json or ``AutoConfig.for_model``);
        parameters are counted on the meta device, so nothing is allocated."""
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
        c = getattr(hf_config, "text_config", None) or hf_config
        heads = c.num_attention_heads
        return cls(params=sum(p.numel() for p in model.parameters()), layers=c.num_hidden_layers,
                   hidden=c.hidden_size, heads=heads, kv_heads=getattr(c, "num_key_value_heads", None) or heads,
                   head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads, vocab=c.vocab_size)


def model_state_bytes(params: int, width: int, zero_stage: int, ranks: int = 1) -> tuple[float, float, float]:
    """Per-rank bytes of (weights, gradients, AdamW states) for ``width``-byte weights: the two
    fp32 moments, plus an fp32 master copy when the weights are 16-bit or ZeRO holds them;
    ZeRO stage 1 partitions the optimizer states over ``ranks``, 2 also the gradients, 3 also
    the weights."""
    master = 4 if (width != 4 or zero_stage >= 1) else 0
    weights, grads, optim = float(params * width), float(params * width), float(params * (8 + master))
    if zero_stage >= 1:
        optim /= ranks
    if zero_stage >= 2:
        grads /= ranks
    if zero_stage >= 3:
        weights /= ranks
    return weights, grads, optim


def learner_gib(shape: ModelShape, ranks: int, zero_stage: int, micro_batch_tokens: int,
                checkpointing: bool, offload: str = "none", loss_fraction: float = 0.25) -> dict:
    weights, grads, optim = model_state_bytes(shape.params, 2, zero_stage, ranks)
    if "optimizer" in offload:
        optim = 0.0
    if "params" in offload:
        weights = 0.0
    t, h, L = micro_batch_tokens, shape.hidden, shape.layers
    acts = (2.0 * t * h * L + 34.0 * t * h) if checkpointing else 34.0 * t * h * L
    logits = 2 * 4.0 * loss_fraction * t * shape.vocab  # fp32 logits and their gradient
    out = {"model_states": (weights + grads + optim) / GIB, "activations": acts / GIB, "loss_logits": logits / GIB}
    out["total"] = sum(out.values())
    return out


def engine_gib(shape: ModelShape, tp: int, tokens_in_flight: int) -> dict:
    kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * 2 / max(1, min(tp, shape.kv_heads))
    out = {"weights": 2.0 * shape.params / tp / GIB, "kv_cache": kv_per_token * tokens_in_flight / GIB,
           "runtime": ENGINE_OVERHEAD_GIB}
    out["total"] = sum(out.values())
    return out


def placement_plan(config, shape: ModelShape, gpus_per_node: int = 8, gpu_gib: float = 80.0, nodes: int = 1,
                   loss_fraction: float = 0.25) -> dict:
    """The plan of a config (an ``RTIConfig``) on ``nodes`` nodes of ``gpus_per_node`` GPUs."""
    p, r, lc, t = config["policy"], config["env_runners"], config["learners"], config["training"]
    tp = int(p.get("tensor_parallel_size", 1))
    ranks = int(lc.get("num_learners", 1))
    engine_gpus = r["num_engines"] * r["num_gpus_per_engine"]
    learner_gpus = ranks * lc["num_gpus_per_learner"]
    episodes = t["group_size"] * t["tasks_per_iteration"]
    # every episode of an iteration is in flight at once, each up to the full context
    per_engine_tokens = math.ceil(episodes / r["num_engines"]) * p["max_model_len"]
    engine = engine_gib(shape, tp, per_engine_tokens)
    learner = learner_gib(shape, ranks, lc["zero_stage"], t["micro_batch_tokens"],
                          bool(lc.get("gradient_checkpointing", False)), lc.get("offload", "none"), loss_fraction)
    budget = gpu_gib * MARGIN
    kv_room = budget - engine["weights"] - engine["runtime"]
    kv_wanted = engine["kv_cache"]
    kv_per_seq = kv_wanted / max(1, math.ceil(episodes / r["num_engines"]))
    # vLLM gives the KV cache what the device has left and queues the sequences beyond it
    engine["kv_cache"] = max(0.0, min(kv_wanted, kv_room))
    engine["total"] = engine["weights"] + engine["runtime"] + engine["kv_cache"]
    problems = []
    if engine_gpus + learner_gpus > gpus_per_node * nodes:
        problems.append(f"{engine_gpus + learner_gpus} GPUs requested, {gpus_per_node * nodes} available")
    if r["num_gpus_per_engine"] and tp != r["num_gpus_per_engine"]:
        problems.append(f"tensor_parallel_size={tp} but num_gpus_per_engine={r['num_gpus_per_engine']}")
    if shape.heads % tp:
        problems.append(f"tensor_parallel_size={tp} does not divide the model's {shape.heads} attention heads")
    if learner["total"] > budget:
        problems.append(f"a learner rank needs {learner['total']:.1f} GiB of {budget:.0f} usable: raise the ZeRO "
                        "stage or num_learners, turn gradient checkpointing on, or lower micro_batch_tokens")
    if kv_room <= 0:
        problems.append(f"the engine weights ({engine['weights']:.1f} GiB per GPU) leave no KV cache room: raise "
                        "tensor_parallel_size")
    return {
        "gpus": {"engines": engine_gpus, "learner": learner_gpus, "available": gpus_per_node * nodes},
        "engines": {"count": r["num_engines"], "tensor_parallel_size": tp, "per_gpu_gib": engine,
                    "kv_for_all_in_flight_gib": kv_wanted,
                    "kv_room_gib": kv_room, "full_context_sequences_in_kv": int(kv_room // kv_per_seq) if kv_per_seq else 0,
                    "sequences_in_flight": math.ceil(episodes / r["num_engines"])},
        "learner": {"ranks": ranks, "zero_stage": lc["zero_stage"], "per_gpu_gib": learner,
                    "micro_batch_tokens": t["micro_batch_tokens"]},
        "cpu_actors": {"env_runners": r["num_env_runners"], "envs_per_runner": r["num_envs_per_env_runner"]},
        "assumptions": {"gpu_gib": gpu_gib, "usable_fraction": MARGIN, "loss_fraction": loss_fraction,
                        "params": shape.params},
        "fits": not problems, "problems": problems,
    }


def format_plan(plan: dict) -> str:
    g, e, lr = plan["gpus"], plan["engines"], plan["learner"]
    a = plan["assumptions"]
    lines = [f"placement: {e['count']} engine(s) x TP {e['tensor_parallel_size']} = {g['engines']} GPUs, "
             f"learner {lr['ranks']} rank(s) (ZeRO-{lr['zero_stage']}) = {g['learner']} GPUs; "
             f"{g['engines'] + g['learner']} of {g['available']} GPUs; "
             f"{plan['cpu_actors']['env_runners']} env runners x {plan['cpu_actors']['envs_per_runner']} envs on CPUs",
             f"model: {a['params'] / 1e9:.2f} B parameters; device {a['gpu_gib']:g} GiB, {a['usable_fraction']:.0%} usable",
             "", f"{'per GPU (GiB)':<16}{'part':<16}{'GiB':>8}"]
    for part, v in e["per_gpu_gib"].items():
        lines.append(f"{'engine':<16}{part:<16}{v:>8.1f}")
    for part, v in lr["per_gpu_gib"].items():
        lines.append(f"{'learner rank':<16}{part:<16}{v:>8.1f}")
    lines += ["", f"KV cache room per engine GPU: {e['kv_room_gib']:.1f} GiB = {e['full_context_sequences_in_kv']} "
              f"full-context sequences; all {e['sequences_in_flight']} in flight at full context would need "
              f"{e['kv_for_all_in_flight_gib']:.1f} GiB (vLLM queues the rest)",
              f"learner micro-batch: {lr['micro_batch_tokens']} tokens, loss logits for {a['loss_fraction']:.0%} of them",
              "fits: yes" if plan["fits"] else "fits: NO\n  - " + "\n  - ".join(plan["problems"])]
    return "\n".join(lines)
