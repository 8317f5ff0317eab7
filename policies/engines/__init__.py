"""Generation and scoring engines with one interface (see ``base``)."""

from policies.engines.base import Generation, PromptTooLongError, SamplingParams, StaleWeightsError

ENGINES = ("vllm", "hf")


def make_engine(kind: str, model_path: str, **kwargs):
    """Build an engine by name: ``"vllm"`` or ``"hf"`` (transformers)."""
    if kind == "hf":
        from policies.engines.hf import HFEngine
        return HFEngine(model_path, **kwargs)
    if kind == "vllm":
        from policies.engines.vllm_engine import VLLMEngine
        return VLLMEngine(model_path, **kwargs)
    raise ValueError(f"unknown engine {kind!r}; choose one of {list(ENGINES)}")


def vllm_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("vllm") is not None


__all__ = ["ENGINES", "Generation", "PromptTooLongError", "SamplingParams", "StaleWeightsError", "make_engine",
           "vllm_available"]
