"""A real local Ray cluster for the integration tests (one per session)."""

import os

import pytest
import ray

from rti_actors.cluster import start_local
from tests.conftest import REPO


@pytest.fixture(scope="session")
def ray_cluster():
    # Logical CPUs: the actors of a run (engine, learner, runners) share 2 real cores. The
    # library's own local cluster: loopback only, no dashboard, no metrics export
    # (test_test_cluster.py checks every socket its processes listen on).
    env_vars = {k: v for k, v in os.environ.items() if k.startswith(("VLLM_", "TORCH_EXT", "TOKENIZERS", "RTI_"))}
    env_vars["PYTHONPATH"] = str(REPO)
    start_local(num_cpus=4, logging_level="ERROR", log_to_driver=False, runtime_env={"env_vars": env_vars})
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def lookup_start_policy(tmp_path_factory) -> str:
    """The committed Lookup start policy: SmolLM2-135M with its warm-start adapter merged in."""
    from policies.models import load_model
    from rti_actors.lora import merge_adapter

    out = tmp_path_factory.mktemp("lookup-start") / "policy"
    adapter = REPO / "results" / "lookup-cpu" / "start" / "adapter"
    return merge_adapter(load_model("smollm2-135m-instruct"), str(adapter), str(out))
