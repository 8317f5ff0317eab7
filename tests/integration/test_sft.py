"""The supervised warm start: SFT through the RL learner (masking, loss, optimiser reset)
and through the actor graph (demonstrations -> learner -> engines -> better evaluation ->
checkpoint -> RL)."""

import copy

import pytest
import ray
import torch

from envs import make_env
from policies.chat import ChatRenderer
from rti_actors import RTIConfig
from rti_actors.demonstrations import record_agent, to_sample
from rti_actors.learner import Learner
from tests.integration import learnable_env  # noqa: F401  (registers FirstLetter-v0)
from tests.integration.test_learner import _isolated_process_group, assert_weights_close  # noqa: F401

pytestmark = pytest.mark.integration

LR = 1e-3


@pytest.fixture(scope="module")
def nav_record():
    env = make_env("Navigation-v0", {"split": "train", "language": "en"}).unwrapped
    tid = next(t for t in env.task_ids("train") if env.difficulty(t)["waypoints"] == 3)
    return record_agent("Navigation-v0", {"language": "en"}, [tid])[0]


def _sample(tokenizer, record):
    s = to_sample(ChatRenderer(tokenizer), record)
    s.pop("messages")
    return s


def _cut_after_tool(record, k):
    """The record up to and including its k-th tool result (ends on a tool message)."""
    out, seen = copy.deepcopy(record), 0
    for i, m in enumerate(out["messages"]):
        seen += m["role"] == "tool"
        if seen == k:
            out["messages"] = out["messages"][:i + 1]
            return out
    raise AssertionError("not enough tool results")


def _moved_differently(a, b) -> float:
    """Share of weights whose values differ by more than a tenth of a step."""
    diff = sum(int(((a[k] - b[k]).abs() > LR / 10).sum()) for k in a)
    return diff / sum(v.numel() for v in a.values())


def test_tool_results_carry_no_loss(tiny_model_path, tokenizer, nav_record, tmp_path):
    # a demonstration ending on a tool result: whatever that result says, the SFT loss and
    # the update are the same (it is context, never a target)
    base = _cut_after_tool(nav_record, 2)
    other = copy.deepcopy(base)
    other["messages"][-1]["content"] = '{"status": "1", "pois": [{"name": "somewhere else entirely"}]}'
    a, b = _sample(tokenizer, base), _sample(tokenizer, other)
    assert a["ids"] != b["ids"] and sum(a["loss_mask"]) == sum(b["loss_mask"])
    learner = Learner(tiny_model_path, {"lr": LR, "zero_stage": 0})
    learner.save(tmp_path / "start")
    m1 = learner.update([a], "sft")
    w1 = learner.get_weights()
    learner.load(tmp_path / "start")
    m2 = learner.update([b], "sft")
    assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-6) and m1["num_tokens"] == m2["num_tokens"] > 0
    # the two sequences differ in length, so float sums run in another order; Adam's first
    # step is about +-lr wherever a gradient is non-zero, so a gradient that is ~0 either
    # way can flip. Hence: almost no weight may move differently (the control moves many)
    assert _moved_differently(w1, learner.get_weights()) < 1e-4
    # changing an assistant turn does change the loss (the check above can fail)
    changed = copy.deepcopy(base)
    first = next(m for m in changed["messages"] if m["role"] == "assistant")
    first["tool_calls"][0]["arguments"]["address"] += " north gate"
    learner.load(tmp_path / "start")
    assert learner.update([_sample(tokenizer, changed)], "sft")["loss"] != pytest.approx(m1["loss"], rel=1e-5)
    assert _moved_differently(w1, learner.get_weights()) > 1e-2


@pytest.mark.parametrize("backend", ["deepspeed", "torch"])
def test_sft_loss_decreases_and_optimizer_resets(tiny_model_path, tokenizer, nav_record, backend):
    sample = _sample(tokenizer, nav_record)
    learner = Learner(tiny_model_path, {"lr": 1e-6, "backend": backend, "zero_stage": 0})
    losses = [learner.update([sample], "sft", lr=LR)["loss"] for _ in range(8)]
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(g["lr"] == 1e-6 for g in learner.optimizer.param_groups)  # the override was for those steps
    inner = getattr(learner.optimizer, "optimizer", learner.optimizer)
    assert len(inner.state) > 0
    learner.reset_optimizer_state()
    assert len(inner.state) == 0
    m = learner.update([sample], "sft", lr=LR)
    assert m["step"] == 9 and len(inner.state) > 0 and m["loss"] < losses[0]


def test_lr_zero_step_leaves_weights_and_unknown_objective_fails(tiny_model_path, tokenizer, nav_record):
    sample = _sample(tokenizer, nav_record)
    learner = Learner(tiny_model_path, {"lr": LR, "backend": "torch"})
    before = learner.get_weights()
    learner.update([sample], "sft", lr=0.0)
    assert_weights_close(before, learner.get_weights(), atol=0)
    with pytest.raises(ValueError, match="unknown objective"):
        learner.update([sample], "dpo")


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
        weights = ray.get(algo.learner.get_weights.remote())
    finally:
        algo.stop()
    rl = _config(flat_model, tmp_path, "rl").build()
    try:
        rl.restore(tmp_path / "ckpt")
        assert_weights_close(weights, ray.get(rl.learner.get_weights.remote()), atol=0)
        assert rl.evaluate()["p@1"] >= 0.7  # the engines serve the warm-started weights
        m = rl.train()
        assert m["num_episodes"] == 8 and m["success_rate"] >= 0.5
    finally:
        rl.stop()
    lines = (tmp_path / "runs" / "sft" / "metrics.jsonl").read_text()
    assert lines.count('"kind": "sft"') == 10
