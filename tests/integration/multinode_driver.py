"""One run on a two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``, both
nodes on 127.0.0.1), as a user would pin actor kinds to nodes with custom resources: each
node declares one ``rollout``, one ``serve`` and one ``learn``, so the two env runners, the
two engines and the two learner ranks land one per node. Trains, saves, restores into a
fresh build and trains once more; prints one JSON line with what the test checks.

    python tests/integration/multinode_driver.py MODEL RUN_DIR
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from rti_actors import RTIConfig  # noqa: E402
from rti_actors.cluster import check_shared_paths  # noqa: E402
from rti_actors.options import ConfigError  # noqa: E402
from tests.integration import learnable_env  # noqa: E402, F401  (registers FirstLetter-v0)

NODE = {"num_cpus": 2, "resources": {"rollout": 1, "serve": 1, "learn": 1}, "node_ip_address": "127.0.0.1",
        "object_store_memory": 300 * 2**20}


def config(model: str, run_dir: str, name: str) -> RTIConfig:
    return (RTIConfig()
            .environment("FirstLetter-v0")
            .policy(model=model, engine="hf", max_new_tokens=4, max_model_len=512, temperature=1.0)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.25,
                         num_engines=2, num_cpus_per_engine=0.5, num_threads_per_engine=1,
                         custom_resources_per_env_runner={"rollout": 1}, custom_resources_per_engine={"serve": 1})
            .training(algorithm="grpo", group_size=4, tasks_per_iteration=2, lr=1e-3, skip_zero_variance_groups=False)
            .learners(backend="deepspeed", zero_stage=2, num_learners=2, num_cpus_per_learner=0.5,
                      custom_resources_per_learner={"learn": 1})
            .reporting(run_dir=run_dir, run_name=name, tensorboard=False, plot=False, progress_bar=False))


def summary(m: dict) -> dict:
    return {"iteration": m["iteration"], "reward_mean": m["reward_mean"], "loss": m["learner"]["loss"],
            "grad_norm": m["learner"]["grad_norm"], "num_episodes": m["num_episodes"]}


def node_of(actor) -> str:
    return ray._private.state.actors(actor._actor_id.hex())["Address"]["NodeID"]


def main():
    model, run_dir = sys.argv[1], sys.argv[2]
    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    cluster.add_node(**NODE)
    cluster.connect()
    out = {"nodes": sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])}

    algo = config(model, run_dir, "first").build()
    try:
        g = algo.graph
        out["placed"] = {"runners": [node_of(a) for a in g.runners], "engines": [node_of(a) for a in g.engines],
                         "learner_ranks": [node_of(a) for a in g.learner.ranks]}
        out["first"] = [summary(algo.train()) for _ in range(2)]
        checkpoint = algo.save(os.path.join(run_dir, "ckpt"))
        out["third"] = summary(algo.train())
    finally:
        algo.stop()

    algo = config(model, run_dir, "restored").build()
    try:
        algo.restore(checkpoint)
        out["restored_iteration"] = algo.iteration
        out["restored_third"] = summary(algo.train())
    finally:
        algo.stop()

    # a model folder that no node sees is refused, naming each node
    try:
        check_shared_paths(os.path.join(run_dir, "no-such-model"), Path(run_dir))
        out["unseen_error"] = None
    except ConfigError as e:
        out["unseen_error"] = str(e)
    print("RESULT " + json.dumps(out), flush=True)
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main()
