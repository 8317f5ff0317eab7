"""The supervised warm start through the actor graph: demonstrations -> learner -> engines
-> better evaluation -> checkpoint -> RL. (The SFT objective of the learner itself is
tested in test_learner.py, which owns the in-process DeepSpeed process group.)"""

import pytest
import ray

from rti_actors import RTIConfig
from rti_actors.demonstrations import record_agent
from tests.integration import learnable_env  # noqa: F401  (registers FirstLetter-v0)
from tests.integration.test_learner import assert_weights_close

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def flat_model(tmp_path_factory):
    from policies.models import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("flat_sft"), logit_scale=1.0, seed=1)


def _config(model, tmp_path, name):
    return (RTIConfig()
            .environment("FirstLetter-v0", env_config={"target": "a"})
            .policy(model=model, engine="hf", max_new_tokens=4, max_model_len=512, temperature=1.0)
            .env_runners(num_env_runners=1, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.25)
            .training(algorithm="grpo", group_size=4, tasks_per_iteration=2, skip_zero_variance_groups=False)
            .learners(backend="deepspeed", zero_stage=0)
            .sft(lr=1e-2, epochs=5, batch_size=4)  # a flat random model needs a large step
            .evaluation(num_samples=4)
            .reporting(run_dir=str(tmp_path / "runs"), run_name=name, tensorboard=False, plot=False))


def test_warm_start_raises_success_and_its_checkpoint_loads_into_rl(ray_cluster, flat_model, tmp_path):
    demos = record_agent("FirstLetter-v0", {"target": "a"}, ["train-0", "train-1", "train-2", "train-3"] * 2)
    assert all(d["reward"] == 1.0 for d in demos)
    algo = _config(flat_model, tmp_path, "sft").build()
    try:
        before = algo.evaluate()
        sft = algo.pretrain_sft(demos + [{**demos[0], "reward": 0.0}])  # the failed record is skipped
        after = algo.evaluate()
        assert sft["num_demonstrations"] == 8 and sft["steps"] == 10 and sft["loss_last_epoch"] < sft["loss_first"]
        assert sft["policy_version"] == 1 and ray.get([e.version.remote() for e in algo.engines]) == [1]
        assert after["p@1"] >= 0.7 and before["p@1"] <= 0.2, (before["p@1"], after["p@1"])
        algo.save(tmp_path / "ckpt")
        weights = ray.get(algo.learner.get_weights())
    finally:
        algo.stop()
    rl = _config(flat_model, tmp_path, "rl").build()
    try:
        rl.restore(tmp_path / "ckpt")
        assert_weights_close(weights, ray.get(rl.learner.get_weights()), atol=0)
        assert rl.evaluate()["p@1"] >= 0.7  # the engines serve the warm-started weights
        m = rl.train()
        assert m["num_episodes"] == 8 and m["success_rate"] >= 0.5
    finally:
        rl.stop()
    lines = (tmp_path / "runs" / "sft" / "metrics.jsonl").read_text()
    assert lines.count('"kind": "sft"') == 10


def test_a_killed_warm_start_resumes_at_its_next_step_in_the_same_order(ray_cluster, flat_model, tmp_path):
    import shutil

    demos = record_agent("FirstLetter-v0", {"target": "a"}, ["train-0", "train-1", "train-2", "train-3"] * 2)

    def config(name):  # 8 demonstrations, batches of 4, 2 epochs: 4 steps, a checkpoint after each
        return (_config(flat_model, tmp_path, name).sft(lr=1e-2, epochs=2, batch_size=4, checkpoint_every=1)
                .checkpointing(keep=10))

    whole = config("whole").build()
    try:
        assert whole.pretrain_sft(demos)["steps"] == 4
        reference = ray.get(whole.learner.get_weights())
    finally:
        whole.stop()
    run = tmp_path / "runs" / "whole"
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == [f"iter_000000_sft_{k:06d}" for k in (1, 2, 3, 4)]
    for name in names[2:]:  # killed after step 2: its later checkpoints were never written
        shutil.rmtree(run / "checkpoints" / name)
    resumed = config("whole").build()
    try:
        assert resumed.resume() == 0 and resumed.sft_progress["done"] == 2
        with pytest.raises(ValueError, match="other demonstrations"):
            resumed.pretrain_sft(demos[:4])
        sft = resumed.pretrain_sft(demos)
        assert sft["resumed_at_step"] == 2 and sft["steps"] == 2
        assert_weights_close(reference, ray.get(resumed.learner.get_weights()), atol=0)
        assert resumed.pretrain_sft(demos)["steps"] == 0  # resumed after the warm start: nothing left to train
    finally:
        resumed.stop()
    lines = (run / "metrics.jsonl").read_text()
    assert lines.count('"kind": "sft"') == 4  # each step once, the killed run's later ones dropped
