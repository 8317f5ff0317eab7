"""LoRA adapters on the learner's policy (peft): what is trained, and what is published.

With ``learners(lora={...})`` the base weights stay frozen and only low-rank adapters on
the decoder's linear layers train, so gradients and optimiser states are those of the
adapters alone. The inference engines never see an adapter: a publish (and ``export_hf``)
sends the merged weights, W + B @ A * alpha / r, under the base model's own parameter
names and shapes, so vLLM and transformers take them as an ordinary full weight update.

Settings, every one optional (``{}`` is all defaults):

- ``r``: the adapters' rank (default 8, peft's).
- ``alpha``: the adapters' output is scaled by alpha / r (default 2 * r, a scale of 2,
  the usual LoRA recipe; peft's own default of 8 would shrink the scale as r grows).
- ``target_modules``: ``"all-linear"`` (default: every linear layer of the decoder, the
  output layer left out) or a list of module-name suffixes, e.g. ``["q_proj", "v_proj"]``.
- ``dropout``: dropout on the adapters' input, in [0, 1) (default 0, peft's). Above 0 the
  learner's log-probs are noisy versions of the engine's, so on-policy ratios are not 1.

Not with ZeRO-3 (``check_lora`` says why). ``check_lora`` needs no torch for the checks
without a model, so the run config's validation can call it cheaply.
"""

from __future__ import annotations

from pathlib import Path

ALL_LINEAR = "all-linear"
DEFAULTS = {"r": 8, "alpha": None, "target_modules": ALL_LINEAR, "dropout": 0.0}
_PEFT_PREFIX = "base_model.model."  # where PeftModel puts the wrapped model's parameter names


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    import math
    return (_is_int(x) or isinstance(x, float)) and math.isfinite(x)


def lora_settings(lora: dict | None) -> dict | None:
    """``lora`` with every default filled in (alpha: 2 * r; target_modules sorted, since their
    order means nothing), as a checkpoint records it; None stays None. Check it first."""
    if lora is None:
        return None
    s = {**DEFAULTS, **lora}
    if s["alpha"] is None:
        s["alpha"] = 2 * s["r"]
    if s["target_modules"] != ALL_LINEAR:
        s["target_modules"] = sorted(set(s["target_modules"]))
    return s


def check_lora(lora, model_path: str | None = None, zero_stage=0) -> list[str]:
    """What is wrong with a ``lora`` setting, one sentence each (empty: nothing).

    Without ``model_path`` only the values are checked. With it, the model is built on the
    meta device from its config (no weights read) and every target must name a linear
    layer of it.
    """
    if lora is None:
        return []
    if not isinstance(lora, dict):
        return [f"must be None (full fine-tuning) or a dict with the keys {sorted(DEFAULTS)}, e.g. {{'r': 16}}"]
    problems = []
    unknown = [k for k in lora if k not in DEFAULTS]
    if unknown:
        problems.append(f"unknown key(s) {unknown!r}; the keys are {sorted(DEFAULTS)}")
    r = lora.get("r", DEFAULTS["r"])
    if not _is_int(r) or r < 1:
        problems.append(f"r must be an integer > 0 (the adapters' rank, e.g. 16), got {r!r}")
    alpha = lora.get("alpha")
    if alpha is not None and not (_is_number(alpha) and alpha > 0):
        problems.append(f"alpha must be a number > 0 (the adapters' output is scaled by alpha / r) or None "
                        f"(2 * r), got {alpha!r}")
    dropout = lora.get("dropout", DEFAULTS["dropout"])
    if not (_is_number(dropout) and 0 <= dropout < 1):
        problems.append(f"dropout must be a number in [0, 1), got {dropout!r}")
    targets = lora.get("target_modules", ALL_LINEAR)
    if not (targets == ALL_LINEAR if isinstance(targets, str) else
            isinstance(targets, (list, tuple)) and targets and all(isinstance(t, str) and t for t in targets)):
        problems.append(f"target_modules must be {ALL_LINEAR!r} or a non-empty list of module-name suffixes such as "
                        f"['q_proj', 'k_proj', 'v_proj', 'o_proj'], got {targets!r}")
    if _is_int(zero_stage) and zero_stage == 3:
        # GatheredParameters would be needed around each base matrix and its two adapters
        # for every merged publish and export; that path is not written (nor tested), and
        # with LoRA the optimiser states ZeRO partitions are small anyway.
        problems.append("LoRA is not supported with zero_stage=3 (ZeRO-3 partitions the frozen base weights and "
                        "the adapters, and the merged weights the engines get would need them gathered per matrix): "
                        "use zero_stage 0, 1 or 2")
    if not problems and model_path is not None:
        problems += target_problems(lora, _meta_model(model_path))
    return problems


def _meta_model(model_path: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def _linear_layers(model) -> dict:
    """name -> nn.Linear of the layers LoRA may adapt: the output layer is left out (peft's
    "all-linear" leaves it out too; with tied embeddings it is the input embedding)."""
    import torch

    head = model.get_output_embeddings()
    return {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not head}


def _matches(name: str, target: str) -> bool:
    return name == target or name.endswith("." + target)  # how peft matches a list of names


def target_problems(lora: dict, model) -> list[str]:
    """Targets that name no linear layer of ``model`` (any device, meta included), and a
    rank above the smallest adapted matrix's (no more expressive than training it whole)."""
    layers = _linear_layers(model)
    targets = lora.get("target_modules", ALL_LINEAR)
    if targets == ALL_LINEAR:
        chosen = layers
    else:
        missing = [t for t in targets if not any(_matches(n, t) for n in layers)]
        if missing:
            suffixes = sorted({n.rsplit(".", 1)[-1] for n in layers})
            return [f"target_modules {missing} match no linear layer of the model (its output layer and embeddings are "
                    f"not adapted); its linear layers are named {suffixes}, or use {ALL_LINEAR!r}"]
        chosen = {n: m for n, m in layers.items() if any(_matches(n, t) for t in targets)}
    if not chosen:
        return ["the model has no linear layer to adapt"]
    r = lora.get("r", DEFAULTS["r"])
    name, m = min(chosen.items(), key=lambda item: min(item[1].in_features, item[1].out_features))
    full = min(m.in_features, m.out_features)
    if r > full:
        return [f"r={r} is above the full rank {full} of the adapted layer {name} ({m.out_features} x "
                f"{m.in_features}): choose r <= {full}"]
    return []


def apply_lora(model, lora: dict):
    """``model`` wrapped by peft with LoRA adapters: only the adapters require grad. Raises
    ValueError for a setting ``check_lora`` (or the targets' check on this model) refuses."""
    problems = check_lora(lora) or target_problems(lora, model)
    if problems:
        raise ValueError(f"lora={lora!r}: " + "; ".join(problems))
    from peft import LoraConfig, get_peft_model

    s = lora_settings(lora)
    config = LoraConfig(r=s["r"], lora_alpha=s["alpha"], lora_dropout=s["dropout"], target_modules=s["target_modules"],
                        bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def _base_parameters(model):
    """(peft's name, the base model's name, parameter) for every parameter but the adapters'."""
    prefix = model.base_model.prefix  # "lora_": peft names every adapter module with it
    for name, p in model.named_parameters():
        if any(part.startswith(prefix) for part in name.split(".")):
            continue
        yield name, name.removeprefix(_PEFT_PREFIX).replace(".base_layer.", "."), p


def base_parameters(model):
    """(name, parameter) of the frozen base under a peft model, named and ordered as the
    un-wrapped model's ``named_parameters()`` would give them."""
    for _, base, p in _base_parameters(model):
        yield base, p


def merged_weights(model):
    """(base model's name, merged tensor) per base parameter: W + the active adapters' delta
    (peft's ``get_delta_weight``) for an adapted weight, the parameter itself otherwise.
    New tensors for the merged ones, summed in fp32 and cast back; the model is not changed."""
    import torch
    from peft.tuners.lora import LoraLayer

    layers = {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}
    with torch.no_grad():
        for name, base, p in _base_parameters(model):
            owner, _, leaf = name.rpartition(".")
            layer = layers.get(owner.removesuffix(".base_layer")) if owner.endswith(".base_layer") else None
            if layer is None or leaf != "weight":
                yield base, p.detach()
                continue
            if layer.merged:  # the base weight already holds the delta; adding it again would double it
                raise RuntimeError(f"{base}: the adapters are merged into the model; merged_weights needs them apart")
            merged = p.detach().to(torch.float32)
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A:
                    merged = merged + layer.get_delta_weight(adapter).to(torch.float32)
            yield base, merged.to(p.dtype)


def merge_adapter(base: str, adapter: str, out: str, dtype: str = "float32") -> str:
    """Write ``out``: the model folder ``base`` with the peft adapter folder ``adapter``
    merged in, a plain HF folder as ``export_hf`` writes it (the same sums, so the same
    bits for an adapter that learner trained on ``base`` in ``dtype``). A policy kept as
    its small adapter is rebuilt with it; the adapter is copied to ``out/adapter``."""
    import shutil

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, dtype)), adapter)
    weights = dict(merged_weights(model))
    model.get_base_model().save_pretrained(out, state_dict=weights)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    shutil.copytree(adapter, Path(out) / "adapter", dirs_exist_ok=True)
    return str(out)
