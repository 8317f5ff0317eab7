"""The Ray cluster a run uses: joining or starting it, and what its nodes must have.

A run on several nodes keeps to two rules, checked at ``build()``:

- **Resources.** The actors' custom resources (``custom_resources_per_env_runner``,
  ``custom_resources_per_engine``, ``custom_resources_per_learner``) must exist in the cluster,
  in the amount all actors of a kind ask for together (``check_custom_resources``).
- **Paths.** Every node that can host an actor must see the model folder (engines, learners
  and env runners open it) and the run directory (learner ranks write their checkpoint
  shards and logs there): both on storage every node mounts (``check_shared_paths``).

What travels how, on several nodes:

| item | how other nodes get it |
|---|---|
| weights after each update | Ray's object store, or the broadcast group (``weight_sync``) |
| learner samples, trajectories | Ray's object store |
| env classes, custom envs | pickled by Ray (by value for a script's own classes); the code through `ray job submit --working-dir` |
| demonstrations (``pretrain_sft``) | read by the driver, sent as samples |
| model folder (built-in, local or hub id) | shared path: ``RTI_CACHE_DIR`` (built-in conversions) or ``HF_HOME`` (hub ids) on shared storage, or the same local folder on every node |
| checkpoints, actor logs | shared path: ``reporting(run_dir=...)`` |
| τ² data | per node: each env runner resolves it (``envs/tau2/data.py``: ``env_config["data_dir"]``, then its cache), so it is either on a shared path or fetched on every node |
| compiled-extension caches (DeepSpeed's ``TORCH_EXTENSIONS_DIR``, vLLM's) | per node: each node compiles its own; nothing needs sharing |
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import ray

from rti_actors.options import ConfigError

if TYPE_CHECKING:  # the builder sits above the graph it starts
    from rti_actors.config import RTIConfig


# Ray's system config switch for its metrics agent and Prometheus export (RayConfig's
# enable_metrics_collection, read from RAY_<name> by every process of the head)
METRICS_ENV = "RAY_enable_metrics_collection"


def cluster_resources(log_level: str = "WARNING") -> dict[str, float]:
    """The cluster's total resources (``ray.cluster_resources()``). Connects to the cluster of
    a `ray job submit` (or RAY_ADDRESS, or the one `ray start` left on this machine), else
    starts a local one, on loopback only (``start_local``), whose workers inherit this
    process's environment (VLLM_*, TORCH_EXTENSIONS_DIR)."""
    if not ray.is_initialized():
        from ray._private import services

        if services.canonicalize_bootstrap_address(None) is not None:  # a cluster to join
            ray.init(ignore_reinit_error=True, logging_level=log_level)
        else:
            start_local(logging_level=log_level)
    return {k: float(v) for k, v in ray.cluster_resources().items()}


def start_local(**init_kwargs) -> None:
    """Start a Ray cluster on this machine that other hosts cannot reach: the node on
    127.0.0.1, no dashboard, no metrics export. ``init_kwargs`` go to ``ray.init`` (CPUs,
    logging, runtime env)."""
    from ray._private import ray_constants

    # Ray rewrites a 127.0.0.1 node address to the host's IP unless its single-machine
    # switch is off (as on macOS), here (ray is imported already) and in the head's
    # processes (environment); restored after, for a later connection to a cluster. The
    # metrics switch is read by the head's processes: they then open no metrics server.
    saved = {k: os.environ.get(k) for k in (ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, METRICS_ENV)}
    was = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    os.environ[METRICS_ENV] = "0"
    try:
        ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, **init_kwargs)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = was
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


def check_custom_resources(config: RTIConfig, cluster: dict) -> None:
    """Raise ``ConfigError`` when the cluster (``ray.cluster_resources()``) lacks a custom
    resource the actors ask for, or has too little of it in total."""
    r, lr = config["env_runners"], config["learners"]
    need: dict[str, float] = {}
    for count, res in ((r["num_env_runners"], r["custom_resources_per_env_runner"]),
                       (r["num_engines"], r["custom_resources_per_engine"]),
                       (lr["num_learners"], lr["custom_resources_per_learner"])):
        for name, amount in res.items():
            need[name] = need.get(name, 0.0) + count * amount
    short = {n: (v, cluster.get(n, 0.0)) for n, v in need.items() if v > cluster.get(n, 0.0) + 1e-9}
    if short:
        detail = ", ".join(f"{n}: need {v:g}, the cluster has {have:g}" for n, (v, have) in short.items())
        raise ConfigError(f"custom resources short ({detail}): declare them on the nodes that should host these "
                          "actors (`ray start --resources='{\"NAME\": N}'`) or lower the custom_resources_per_* options")


def _missing(paths: dict[str, str]) -> list[str]:
    """Of ``{what: path}``, the ones this node cannot see (run on every node)."""
    return [what for what, p in paths.items() if not os.path.exists(p)]


def check_shared_paths(model_path: str, run_dir: Path) -> None:
    """With more than one node, check that every node sees the model folder and the run
    directory (a probe file the driver writes there), else raise a ``ConfigError`` naming
    the node and the path. One node: nothing to check."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) < 2:
        return
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    run_dir.mkdir(parents=True, exist_ok=True)
    probe = run_dir / f".node-probe-{uuid.uuid4().hex}"
    probe.write_text("written by the driver; every node must see it\n")
    paths = {"model folder": str(Path(model_path) / "config.json"), "run directory": str(probe)}
    look = ray.remote(num_cpus=0)(_missing)
    try:
        answers = ray.get([look.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                           .remote(paths) for n in nodes])
    finally:
        probe.unlink(missing_ok=True)
    unseen = [(n, what) for n, missing in zip(nodes, answers) for what in missing]
    if unseen:
        where = {"model folder": f"{model_path} (put it, or RTI_CACHE_DIR / HF_HOME, on storage every node mounts)",
                 "run directory": f"{run_dir} (give reporting(run_dir=...) a folder on storage every node mounts)"}
        lines = [f"node {n['NodeManagerAddress']} ({n['NodeID'][:12]}) does not see the {what}: {where[what]}"
                 for n, what in unseen]
        raise ConfigError("a run on several nodes needs shared paths:\n  - " + "\n  - ".join(lines))
