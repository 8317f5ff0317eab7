"""Shared fixtures: a tiny random-weight model with SmolLM2's tokenizer, built once."""

import os
import sys
from pathlib import Path

import pytest

from policies.engines import cpu_flags as _cpu_flags

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# vLLM's CPU backend on a small machine (scripts/cpu_env.sh sets the same for scripts)
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATA = REPO.parent / "shared" / "data"

# The heaviest end-to-end tests (marked ``heavy``) take two to four minutes each where the CPU
# has AVX-512, and about three times that on the AVX2-only machines CI also runs on: the
# whole suite there was measured well past CI's 90 minutes. Those CPUs skip them unless
# RTI_HEAVY_TESTS=1; everything they cover below the end-to-end run has its own tests.
HEAVY_RUNS_HERE = os.environ.get("RTI_HEAVY_TESTS") == "1" or "avx512f" in _cpu_flags()


def pytest_collection_modifyitems(config, items):
    if HEAVY_RUNS_HERE:
        return
    skip = pytest.mark.skip(reason="heavy: runs on CPUs with AVX-512 or with RTI_HEAVY_TESTS=1 (about three times "
                                   "slower on this AVX2-only CPU, past CI's time)")
    for item in items:
        if "heavy" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    from policies.models import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def tokenizer(tiny_model_path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture(scope="session")
def tiny_family_models(tmp_path_factory, tiny_model_path):
    """``family -> folder`` of a tiny random-weight model of that chat family ("llama" is
    SmolLM2's, the shared ``tiny_model_path``; "qwen3", "llama3"), each built on first use."""
    from policies.models import make_tiny_model

    built = {"llama": tiny_model_path}

    def get(family: str) -> str:
        if family not in built:
            built[family] = make_tiny_model(tmp_path_factory.mktemp(f"tiny_{family}"), family=family)
        return built[family]

    return get


def perturbed_model(model_path: str, out_dir, scale: float = 0.05, seed: int = 123):
    """``model_path``'s weights plus seeded noise, saved (with the tokenizer) in ``out_dir``:
    the "new policy" that weight updates are checked against. Returns the fp32 model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(model_path).save_pretrained(out_dir)
    return model


@pytest.fixture(scope="module")
def isolated_process_group():
    """For a module whose DeepSpeed learners initialise torch.distributed (and its variables)
    in the test process: undo that afterwards, so later tests see a clean process."""
    import torch

    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    saved = {k: os.environ.get(k) for k in keys}
    yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    import deepspeed.comm.comm as ds_comm
    import deepspeed.utils.groups as ds_groups
    ds_comm.cdb = None
    # DeepSpeed keeps a clone of the world group, which the next process group would not know
    ds_groups._WORLD_GROUP = ds_groups._DATA_PARALLEL_GROUP = ds_groups._ZERO_PARAM_INTRA_PARALLEL_GROUP = None
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def example_config(example: str, argv: list[str], monkeypatch):
    """The config ``examples/<example>.py`` builds from ``argv``, captured where it would
    build the run (nothing is started)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"example_{example}", REPO / "examples" / f"{example}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Built(Exception):
        pass

    def capture(config, args):
        raise Built(config)

    monkeypatch.setattr(module, "build_resumable", capture)
    with pytest.raises(Built) as built:
        module.main(argv)
    return built.value.args[0]
