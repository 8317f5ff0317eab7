"""LUFFY: the shaped objective on hand-made log-probs, its routing in the learner, the config."""

import json
import math

import pytest
import torch

from rti_actors.config import RTIConfig
from rti_actors.losses import LUFFY_GAMMA, finish_stats, grpo_loss, luffy_loss, luffy_shaping
from rti_actors.options import ConfigError


def _batch(probs, advantage=1.0):
    """One row: position 0 is the prompt, then tokens with these current probabilities
    (behaviour log-probs -1, so on-policy ratios are p * e)."""
    logp = torch.tensor([[0.0] + [math.log(p) for p in probs]], dtype=torch.float64, requires_grad=True)
    blp = torch.tensor([[0.0] + [-1.0] * len(probs)], dtype=torch.float64)
    mask = torch.tensor([[0] + [1] * len(probs)])
    return logp, blp, torch.tensor([advantage], dtype=torch.float64), torch.ones_like(blp), mask


def test_default_gamma_is_the_papers():
    assert LUFFY_GAMMA == 0.1 == RTIConfig()["luffy"]["gamma"]


@pytest.mark.parametrize("gamma", [0.1, 0.5, 1e-3])
def test_shaping_is_p_over_p_plus_gamma_with_its_gradient(gamma):
    probs = [1e-4, 0.05, 0.1, 0.5, 0.999]
    logp = torch.tensor([math.log(p) for p in probs], dtype=torch.float64, requires_grad=True)
    f = luffy_shaping(logp, gamma)
    assert f.tolist() == pytest.approx([p / (p + gamma) for p in probs], rel=1e-12)
    f.sum().backward()
    # df/dlogp = df/dp * dp/dlogp = gamma / (p + gamma)^2 * p
    assert logp.grad.tolist() == pytest.approx([gamma * p / (p + gamma) ** 2 for p in probs], rel=1e-10)
    with pytest.raises(ValueError, match="gamma"):
        luffy_shaping(logp, 0.0)


def test_without_teacher_tokens_luffy_is_grpo_exactly():
    logp, blp, adv, tw, mask = _batch([0.9, 0.1, 0.5, 0.2], advantage=-0.7)
    off = torch.zeros_like(mask)
    a, sa = luffy_loss(logp, blp, adv, tw, mask, off, clip_eps=0.2)
    a.backward()
    ga = logp.grad.clone()
    logp.grad = None
    b, sb = grpo_loss(logp, blp, adv, tw, mask, clip_eps=0.2)
    b.backward()
    assert a.item() == b.item()
    assert torch.equal(ga, logp.grad)
    assert finish_stats(sa) == finish_stats(sb)


def test_teacher_tokens_get_the_shaped_weight_unclipped_and_ignore_behaviour_logprobs():
    probs = [0.9, 0.02, 0.5, 0.3]
    logp, blp, adv, tw, mask = _batch(probs, advantage=2.0)
    off = torch.tensor([[0, 0, 0, 1, 1]])  # the last two tokens are the teacher's
    blp = blp.clone()
    blp[0, 3:] = 123.0  # a teacher has no behaviour log-probs: whatever is there is unread
    loss, stats = luffy_loss(logp, blp, adv, tw, mask, off, clip_eps=0.2, gamma=0.1)
    # on-policy: ratio p * e, clipped at 1.2 for A > 0 (0.9e is, 0.02e is not)
    on = [min(p * math.e, 1.2) for p in probs[:2]]
    shaped = [p / (p + 0.1) for p in probs[2:]]
    assert loss.item() == pytest.approx(-2.0 * (sum(on) + sum(shaped)) / 4)
    loss.backward()
    expected = [0.0, 0.0, -2.0 * 0.02 * math.e / 4] + [-2.0 * 0.1 * p / (p + 0.1) ** 2 / 4 for p in probs[2:]]
    assert logp.grad[0].tolist() == pytest.approx(expected)
    m = finish_stats(stats)
    assert m["clip_frac"] == 0.5  # of the two on-policy tokens
    assert m["teacher_tokens"] == 2 and m["shaped_weight_mean"] == pytest.approx(sum(shaped) / 2)
    assert m["approx_kl"] == pytest.approx(-sum(math.log(p) + 1 for p in probs[:2]) / 2)


def test_luffy_loss_is_finite_for_a_teacher_token_the_policy_finds_impossible():
    logp, blp, adv, tw, mask = _batch([0.5, 0.5])
    with torch.no_grad():
        logp[0, 2] = -1e4
    loss, _ = luffy_loss(logp, blp, adv, tw, mask, torch.tensor([[0, 0, 1]]))
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(logp.grad).all()


def _luffy(**teacher):
    return RTIConfig().environment("Navigation-v0").policy(engine="hf").training(
        algorithm="luffy", group_size=4).luffy(**teacher)


def test_config_accepts_luffy_and_says_what_to_change(tmp_path):
    _luffy().validate()
    demos = tmp_path / "demos.jsonl"
    demos.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                              {"role": "assistant", "content": "yo"}], "reward": 1.0}) + "\n")
    _luffy(source=str(demos), traces_per_group=3, gamma=0.5).validate()
    for teacher, words in [({"gamma": 0.0}, "gamma > 0"), ({"gamma": -1}, "gamma"),
                           ({"traces_per_group": 4}, "leaving none on-policy"),
                           ({"traces_per_group": 0}, "traces_per_group"),
                           ({"source": str(tmp_path / "nope.jsonl")}, "no such file"),
                           ({"source": ""}, "luffy(source=''")]:
        with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
            _luffy(**teacher).validate()
    # LUFFY's options only matter to LUFFY
    RTIConfig().environment("Navigation-v0").policy(engine="hf").luffy(traces_per_group=9).validate()


def test_on_policy_count_leaves_room_for_the_teacher():
    from rti_actors.luffy import on_policy_count
    assert on_policy_count(_luffy(traces_per_group=1)) == 3
    assert on_policy_count(RTIConfig().training(group_size=4)) == 4


def test_jsonl_teacher_renders_successful_records_with_the_mask_on_assistant_turns(tmp_path, tokenizer):
    from policies.chat import ChatRenderer
    from rti_actors.luffy import Teacher
    from rti_actors.trajectory import EpisodeSpec

    renderer = ChatRenderer(tokenizer)
    record = {"task_id": "t1", "messages": [{"role": "user", "content": "go"},
                                            {"role": "assistant", "content": "done"}], "reward": 1.0}
    demos = tmp_path / "demos.jsonl"
    demos.write_text("\n".join(json.dumps(r) for r in [record, {**record, "task_id": "t2", "reward": 0.0}]) + "\n")
    cfg = _luffy(source=str(demos))
    teacher = Teacher(cfg, [], renderer)
    specs = [EpisodeSpec(tid, j, 0, 5) for tid in ("t1", "t2") for j in range(3)]
    traces, counts = teacher.traces(specs, version=4)
    assert [(t.task_id, t.sample_index, t.off_policy, t.reward, t.policy_version) for t in traces] == [
        ("t1", 3, True, 1.0, 4)]
    assert counts["luffy/teacher_traces"] == 1 and counts["luffy/teacher_missing"] == 1
    t = traces[0]
    trained = tokenizer.decode([i for i, m in zip(t.ids, t.loss_mask) if m])
    assert "done" in trained and "go" not in trained and t.actions == ["done"]
    with pytest.raises(ConfigError, match="min_reward"):
        Teacher(_luffy(source=str(demos), min_reward=2.0), [], renderer)


def test_learner_routes_teacher_samples_to_the_shaped_objective(tiny_model_path):
    """A real (torch-backend) learner: without teacher samples a LUFFY step is a GRPO step;
    a teacher sample's tokens are counted as the teacher's, in padded and packed rows alike."""
    from rti_actors.learner import Learner
    from tests.samples import make_batch

    def step(algorithm, samples, **kw):
        learner = Learner(tiny_model_path, {"backend": "torch", "algorithm": algorithm, "lr": 1e-3, **kw})
        m = learner.update(samples)
        return m, next(learner.module.parameters()).detach().clone()

    batch = make_batch(n=3)
    grpo, w_grpo = step("grpo", batch)
    luffy, w_luffy = step("luffy", batch)
    assert luffy["loss"] == pytest.approx(grpo["loss"], rel=1e-6) and torch.allclose(w_grpo, w_luffy)
    assert "teacher_tokens" not in luffy

    mixed = [dict(s) for s in batch]
    mixed[1]["off_policy"] = True
    padded, _ = step("luffy", mixed)
    packed, _ = step("luffy", mixed, pack_sequences=True)
    assert padded["teacher_tokens"] == sum(mixed[1]["loss_mask"])
    assert 0 < padded["shaped_weight_mean"] < 1
    assert padded["loss"] != pytest.approx(luffy["loss"])
    assert packed["loss"] == pytest.approx(padded["loss"], rel=1e-5)
    assert packed["teacher_tokens"] == padded["teacher_tokens"]


def test_opd_options_matter_to_a_restore_of_luffy_runs_only():
    from rti_actors.checkpoints import config_changes

    grpo = json.loads(RTIConfig().to_json())
    older = {k: v for k, v in grpo.items() if k != "luffy"}  # a checkpoint from before LUFFY
    assert config_changes(older, grpo) == []
    luffy = json.loads(RTIConfig().training(algorithm="luffy").to_json())
    changed = json.loads(RTIConfig().training(algorithm="luffy").luffy(gamma=0.5).to_json())
    assert config_changes(luffy, changed) == ["luffy.gamma: 0.1 -> 0.5"]
    assert "luffy.gamma: 0.1 -> 0.5" in config_changes(luffy, {**changed, "training": grpo["training"]})
