"""The run config is the one source of the learner's defaults; the learner pulls sample groups."""

import json
import math

import pytest
import torch

from rti_actors import learner as learner_actor
from rti_actors.config import RTIConfig
from rti_actors.groups import group_advantages
from rti_actors.learner import DEFAULTS, Learner, LearnerSample, QueueLearner, check_samples
from rti_actors.losses import GSPO_CLIP_EPS, gspo_loss
from rti_actors.options import ConfigError, learner_settings

KEYS = {"algorithm", "lr", "weight_decay", "clip_eps", "gspo_clip_eps", "temperature", "zero_stage",
        "micro_batch_tokens", "grad_clip", "seed", "backend", "dtype", "gradient_checkpointing", "offload",
        "pack_sequences", "share_prefix", "lora", "luffy_gamma", "aepo_advantage_weight", "aepo_entropy_clip"}


def test_learner_settings_map_the_config():
    cfg = (RTIConfig().training(algorithm="gspo", lr=2e-6, clip=0.3, gspo_clip=2e-4, micro_batch_tokens=1024)
           .policy(temperature=0.6).learners(zero_stage=2, dtype="float32", backend="torch", share_prefix=True,
                                             lora={"r": 4}).debugging(seed=7))
    s = learner_settings(cfg)
    assert set(s) == KEYS
    assert s == {"algorithm": "gspo", "lr": 2e-6, "weight_decay": 0.1, "clip_eps": 0.3,
                 "gspo_clip_eps": (2e-4, 2e-4),  # a float is a symmetric clip
                 "temperature": 0.6, "zero_stage": 2, "micro_batch_tokens": 1024, "grad_clip": 1.0, "seed": 7,
                 "backend": "torch", "dtype": "float32", "gradient_checkpointing": False, "offload": "none",
                 "pack_sequences": "auto", "share_prefix": True, "lora": {"r": 4}, "luffy_gamma": 0.1,
                 "aepo_advantage_weight": 0.2, "aepo_entropy_clip": True}
    # the learner's defaults are the config's, plus process-level keys only
    assert {k: DEFAULTS[k] for k in KEYS} == learner_settings(RTIConfig())
    assert set(DEFAULTS) - KEYS == {"betas", "rank", "world_size", "master_addr", "master_port", "plugin"}


def test_default_gspo_clip_is_the_papers_and_survives_json():
    cfg = RTIConfig().training(algorithm="gspo")
    assert cfg["training"]["gspo_clip"] == [3e-4, 4e-4]  # a list: what JSON gives back
    assert learner_settings(cfg)["gspo_clip_eps"] == (3e-4, 4e-4) == GSPO_CLIP_EPS == DEFAULTS["gspo_clip_eps"]
    again = RTIConfig.from_dict(json.loads(cfg.to_json()))
    assert learner_settings(again)["gspo_clip_eps"] == (3e-4, 4e-4)


def test_config_default_gspo_clip_reaches_the_loss():
    # s = e^-3.5e-4 lies between 1 - 4e-4 and 1 - 3e-4. With A < 0 the (3e-4, 4e-4) clip raises
    # it to 1 - 3e-4 (clipped, no gradient); a symmetric 4e-4 clip would leave it as is.
    eps = learner_settings(RTIConfig().training(algorithm="gspo"))["gspo_clip_eps"]
    assert eps == (3e-4, 4e-4)
    blp = torch.tensor([[0.0, -1.0, -2.0]], dtype=torch.float64)
    logp = (blp + torch.tensor([[0.0, -3.5e-4, -3.5e-4]], dtype=torch.float64)).requires_grad_(True)
    mask, adv, w = torch.tensor([[0, 1, 1]]), torch.tensor([-1.0], dtype=torch.float64), torch.ones_like(blp)
    s = math.exp(-3.5e-4)
    assert 1 - 4e-4 < s < 1 - 3e-4
    loss, stats = gspo_loss(logp, blp, adv, w, mask, clip_eps=eps)
    assert loss.item() == pytest.approx(1 - 3e-4, rel=1e-12) and stats["clipped"] == 1
    loss.backward()
    assert torch.all(logp.grad == 0)
    symmetric, sym_stats = gspo_loss(logp, blp, adv, w, mask, clip_eps=4e-4)
    assert symmetric.item() == pytest.approx(s, rel=1e-12) and sym_stats["clipped"] == 0
    assert abs(symmetric.item() - loss.item()) > 1e-5


@pytest.mark.parametrize("bad", [-1, [4e-4], "x", [3e-4, 1.5], True, 0])
def test_validate_rejects_bad_gspo_clip(bad):
    cfg = RTIConfig().environment("Navigation-v0").policy(engine="hf").training(gspo_clip=bad)
    with pytest.raises(ConfigError, match=r"gspo_clip=.*got .*\[low, high\]"):
        cfg.validate()
    with pytest.raises(ConfigError, match="gspo_clip"):
        learner_settings(cfg)


@pytest.mark.parametrize("good", [4e-4, [3e-4, 4e-4], (2e-4, 5e-4)])
def test_validate_accepts_float_or_pair(good):
    RTIConfig().environment("Navigation-v0").policy(engine="hf").training(gspo_clip=good).validate()


def test_learner_rejects_bad_gspo_clip_before_loading_a_model():
    with pytest.raises(ValueError, match="gspo_clip_eps"):
        Learner("/no/such/model", {"gspo_clip_eps": "x"})
    with pytest.raises(ValueError, match="unknown algorithm"):
        Learner("/no/such/model", {"algorithm": "ppo"})


def test_samples_are_typed_and_a_mapping_is_read_by_field_name():
    typed = LearnerSample([1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], [1.0] * 3, 0.5)
    as_dict = {"ids": [1, 2, 3], "loss_mask": [0, 1, 1], "behaviour_logprobs": [0.0, -1.0, -1.0],
               "token_weight": [1.0] * 3, "advantage": 0.5, "messages": ["extra keys are left out"]}
    assert check_samples([typed, as_dict]) == [typed, typed]
    assert (typed.policy_version, typed.off_policy, typed.token_advantages) == (0, False, None)
    with pytest.raises(ValueError, match=r"sample 0 lacks \['advantage'\]"):
        check_samples([{k: v for k, v in as_dict.items() if k != "advantage"}])
    with pytest.raises(ValueError, match=r"sample 1: \['token_weight'\] must have one entry per id"):
        check_samples([typed, {**as_dict, "token_weight": [1.0]}])


class _Queue:
    def __init__(self, groups):
        self.groups = groups
        self.get = self  # queue.get.remote(...) on a Ray handle

    def remote(self, max_groups, current_version):
        return "incarnation-0", self.groups[:max_groups]


class _Learner:
    pull_and_update = QueueLearner.pull_and_update

    def __init__(self):
        self.seen = []

    def update(self, samples):
        self.seen.append(samples)
        return {"skipped": False, "num_samples": len(samples)}


def _group(advantages, tag):
    return [LearnerSample(ids=[1, 2, 3], loss_mask=[0, 1, 1], behaviour_logprobs=[0.0, -1.0, -1.0],
                          token_weight=[1.0, 1.0, 1.0], advantage=a, policy_version=tag) for a in advantages]


def test_pull_and_update_trains_on_sample_groups_and_skips_zero_advantage(monkeypatch):
    monkeypatch.setattr(learner_actor.ray, "get", lambda ref: ref)
    noise = group_advantages([0.7] * 3)  # equal rewards: float noise, not exactly 0
    assert any(a != 0 for a in noise) and max(map(abs, noise)) < learner_actor.ZERO_ADVANTAGE
    flat, mixed, zeros = _group(noise, 0), _group(group_advantages([1.0, 0.0, 0.0]), 1), _group([0.0] * 3, 2)

    learner = _Learner()
    m = learner.pull_and_update(_Queue([flat, mixed, zeros]), 10, 0, skip_zero_variance=True)
    assert learner.seen == [mixed] and m["num_groups"] == 3 and m["num_groups_trained"] == 1

    learner = _Learner()
    m = learner.pull_and_update(_Queue([flat, mixed, zeros]), 2, 0, skip_zero_variance=False)
    assert learner.seen == [flat + mixed] and m["num_groups_trained"] == 2

    learner = _Learner()
    m = learner.pull_and_update(_Queue([flat, zeros]), 10, 0)
    assert learner.seen == [] and m == {"skipped": True, "num_groups": 2, "num_groups_trained": 0,
                                        "num_samples": 0, "queue_incarnation": "incarnation-0"}


def test_a_hand_built_learner_is_held_to_the_options_rules_before_loading_a_model():
    """The learner declares no rule of its own: its settings are checked once with the rules
    of the options they come from (rti_actors.options), every problem in one message."""
    with pytest.raises(ValueError, match=r"(?s)learner\(lr=-1\.0\) must be a finite number > 0.*"
                                         r"learner\(luffy_gamma=0\) must be a finite number > 0.*gamma > 0"):
        Learner("/no/such/model", {"lr": -1.0, "luffy_gamma": 0})
    with pytest.raises(ValueError, match=r"learners\(backend='torch'\) runs on one process"):
        Learner("/no/such/model", {"backend": "torch", "world_size": 2})
    with pytest.raises(ValueError, match=r"share_prefix=True\) needs zero_stage <= 2"):
        Learner("/no/such/model", {"share_prefix": True, "zero_stage": 3})
