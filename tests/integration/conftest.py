"""A real local Ray cluster for the integration tests (one per session)."""

import os

import pytest
import ray

from tests.conftest import REPO


@pytest.fixture(scope="session")
def ray_cluster():
    # Logical CPUs: the actors of a run (engine, learner, runners) share 2 real cores.
    env_vars = {k: v for k, v in os.environ.items() if k.startswith(("VLLM_", "TORCH_EXT", "TOKENIZERS", "RTI_"))}
    env_vars["PYTHONPATH"] = str(REPO)
    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
             runtime_env={"env_vars": env_vars})
    yield
    ray.shutdown()
