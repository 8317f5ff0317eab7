"""The learner group's pure parts: how a batch is split over ranks, how rank 0 hands the
shards on, and the config checks of num_learners, gradient_checkpointing and offload."""

import random
from collections import namedtuple

import pytest

from rti_actors import learner as learner_module
from rti_actors.config import RTIConfig
from rti_actors.learner import Learner, LearnerSample, QueueLearner
from rti_actors.learner_group import shard_by_tokens
from rti_actors.options import ConfigError, learner_settings

Tagged = namedtuple("Tagged", "ids tag")  # the splitter reads a sample's ids only


def _samples(lengths):
    return [Tagged(list(range(n)), i) for i, n in enumerate(lengths)]


def _tokens(shard):
    return sum(len(s.ids) for s in shard)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_shards_partition_the_batch_with_balanced_tokens(seed, n):
    rng = random.Random(seed)
    samples = _samples([rng.randrange(5, 3000) for _ in range(rng.randrange(n, 40))])
    shards = shard_by_tokens(samples, n)
    assert len(shards) == n
    assert sorted(s.tag for sh in shards for s in sh) == list(range(len(samples)))
    assert all(shards), "every rank gets a sample when there are at least as many samples as ranks"
    # greedy longest-first: a shard is over the mean by at most one sample, so the heaviest
    # and lightest differ by at most the longest sample
    loads = [_tokens(sh) for sh in shards]
    assert max(loads) - min(loads) <= max(len(s.ids) for s in samples)
    assert max(loads) <= sum(loads) / n + max(len(s.ids) for s in samples)
    for sh in shards:  # batch order inside a shard
        assert [s.tag for s in sh] == sorted(s.tag for s in sh)
    assert shard_by_tokens(samples, n) == shards  # deterministic: every rank could recompute it


def test_balance_beats_an_even_sample_count_split():
    # one long trajectory and many short ones: halves by count would give one rank ~all tokens
    samples = _samples([1000] + [100] * 10)
    a, b = shard_by_tokens(samples, 2)
    assert {_tokens(a), _tokens(b)} == {1000}
    assert [s.tag for s in a] == [0]


def test_one_shard_is_the_batch_itself():
    samples = _samples([5, 50, 7, 50])
    assert shard_by_tokens(samples, 1) == [samples]


def test_fewer_samples_than_ranks_leaves_the_last_ranks_empty():
    # those ranks run zero-loss passes (Learner.update); rank 0 always has a sample
    samples = _samples([30, 80])
    shards = shard_by_tokens(samples, 4)
    assert [[s.tag for s in sh] for sh in shards] == [[1], [0], [], []]
    assert shard_by_tokens([], 3) == [[], [], []]
    with pytest.raises(ValueError, match="num_shards"):
        shard_by_tokens(samples, 0)


# ---- rank 0 pulls once, each rank steps on its shard ---------------------------------------
class _Queue:
    def __init__(self, groups):
        self.groups, self.get = groups, self  # queue.get.remote(...) on a Ray handle

    def remote(self, max_groups, current_version):
        return "incarnation-0", self.groups[:max_groups]


class _Rank:
    pull_shards, update_shard = QueueLearner.pull_shards, QueueLearner.update_shard

    def __init__(self):
        self.seen = []

    def update(self, samples):
        self.seen.append(samples)
        return {"skipped": False, "num_samples": len(samples)}


def _group(advantages, length):
    return [LearnerSample([1] * length, [0] + [1] * (length - 1), [0.0] * length, [1.0] * length, a)
            for a in advantages]


def test_pull_shards_splits_the_trained_groups_and_every_rank_steps(monkeypatch):
    monkeypatch.setattr(learner_module.ray, "get", lambda ref: ref)
    mixed, flat = _group([1.0, -1.0, 0.5], 10) + _group([0.2], 40), _group([0.0, 0.0], 5)
    *shards, counts = _Rank().pull_shards(_Queue([mixed, flat]), 10, 0, True, 2)
    assert counts == {"num_groups": 2, "num_groups_trained": 1, "queue_incarnation": "incarnation-0"}
    assert sorted(map(_tokens, shards)) == [30, 40]  # the 40-token sample alone, the three 10s together
    ranks = [_Rank(), _Rank()]
    metrics = [r.update_shard(s, counts) for r, s in zip(ranks, shards)]
    assert [r.seen for r in ranks] == [[s] for s in shards]
    assert all(m["num_groups_trained"] == 1 and not m["skipped"] for m in metrics)


def test_nothing_pulled_means_every_rank_skips(monkeypatch):
    # ranks with and without a shard must agree, or one would wait in a collective forever
    monkeypatch.setattr(learner_module.ray, "get", lambda ref: ref)
    *shards, counts = _Rank().pull_shards(_Queue([_group([0.0, 0.0], 5)]), 10, 0, True, 3)
    assert shards == [[], [], []]
    ranks = [_Rank() for _ in range(3)]
    assert all(r.update_shard(s, counts) == {"skipped": True, "num_groups": 1, "num_groups_trained": 0,
                                              "num_samples": 0, "queue_incarnation": "incarnation-0"} for r, s in zip(ranks, shards))
    assert all(r.seen == [] for r in ranks)


def test_pull_shards_checks_samples_before_splitting(monkeypatch):
    monkeypatch.setattr(learner_module.ray, "get", lambda ref: ref)
    bad = _group([1.0, -1.0], 6)
    bad[1].loss_mask = bad[1].loss_mask[:-1]
    with pytest.raises(ValueError, match="loss_mask"):
        _Rank().pull_shards(_Queue([bad]), 10, 0, True, 2)


# ---- config -----------------------------------------------------------------------------
def _cfg(**learners):
    return RTIConfig().environment("Navigation-v0").policy(engine="hf").learners(**learners)


@pytest.mark.parametrize("learners,needle", [
    ({"num_learners": 0}, r"num_learners=0\) must be an integer >= 1"),
    ({"num_learners": 1.5}, r"num_learners=1.5\) must be an integer"),
    ({"num_learners": True}, r"num_learners=True\) must be an integer"),
    ({"num_learners": 2, "backend": "torch"}, r"use backend='deepspeed' for num_learners=2"),
    ({"backend": "torch", "zero_stage": 3}, r"zero_stage=3 .* only DeepSpeed"),
    ({"num_learners": 2, "num_cpus_per_learner": 0}, "cannot be empty"),
    ({"num_learners": 2, "num_gpus_per_learner": 0.5}, "two ranks on one GPU"),
    ({"gradient_checkpointing": "yes"}, r"gradient_checkpointing='yes'\) must be True or False"),
    ({"offload": "gpu"}, r"offload='gpu'\): choose one of"),
    ({"offload": "optimizer"}, "zero_stage >= 1"),
    ({"offload": "optimizer", "zero_stage": 2, "backend": "torch"}, "needs backend='deepspeed'"),
    ({"offload": "optimizer+params", "zero_stage": 2}, r"needs zero_stage=3 .* use offload='optimizer'"),
    ({"share_prefix": True, "zero_stage": 3}, r"share_prefix=True\) needs zero_stage <= 2"),
    ({"pack_sequences": 1}, r"pack_sequences=1\): choose one of \['auto', True, False\]"),
    ({"share_prefix": "yes"}, r"share_prefix='yes'\): choose one of \['auto', True, False\]"),
])
def test_bad_learner_group_configs_say_what_to_change(learners, needle):
    with pytest.raises(ConfigError, match=needle):
        _cfg(**learners).validate()


@pytest.mark.parametrize("learners", [
    {"num_learners": 4, "zero_stage": 3}, {"num_learners": 2, "num_gpus_per_learner": 1, "num_cpus_per_learner": 0},
    {"offload": "optimizer", "zero_stage": 1}, {"offload": "optimizer+params", "zero_stage": 3},
    {"gradient_checkpointing": True, "backend": "torch"},
])
def test_good_learner_group_configs_pass(learners):
    _cfg(**learners).validate()


def test_resource_checks_count_every_rank():
    cfg = _cfg(num_learners=4, num_cpus_per_learner=0.5)  # runners 0.5 + engine 0.5 + 4 x 0.5
    with pytest.raises(ConfigError, match=r"need 3 CPUs \(.* \+ 4 learners x 0.5\) but the cluster has 2.5"):
        cfg.validate(available_cpus=2.5)
    cfg.validate(available_cpus=3)
    gpus = _cfg(num_learners=4, num_gpus_per_learner=1).env_runners(num_gpus_per_engine=1)
    with pytest.raises(ConfigError, match=r"need 5 GPUs \(1 engines x 1 \+ 4 learners x 1\) but the cluster has 4"):
        gpus.validate(available_cpus=8, available_gpus=4)
    gpus.validate(available_cpus=8, available_gpus=5)


def test_memory_options_reach_the_learner_settings_and_deepspeed_config():
    s = learner_settings(_cfg(gradient_checkpointing=True, offload="optimizer+params", zero_stage=3))
    assert s["gradient_checkpointing"] is True and s["offload"] == "optimizer+params"
    assert learner_settings(RTIConfig())["offload"] == learner_module.DEFAULTS["offload"] == "none"

    def ds_zero(**config):
        learner = Learner.__new__(Learner)  # the config alone, no model
        learner.config, learner.world_size = {**learner_module.DEFAULTS, **config}, 2
        return learner._ds_config()["zero_optimization"]

    assert ds_zero(zero_stage=2) == {"stage": 2}
    assert ds_zero(zero_stage=2, offload="optimizer") == {"stage": 2, "offload_optimizer": {"device": "cpu",
                                                                                           "pin_memory": False}}
    z3 = ds_zero(zero_stage=3, offload="optimizer+params")
    assert z3["offload_optimizer"]["device"] == z3["offload_param"]["device"] == "cpu"


@pytest.mark.parametrize("config,needle", [
    ({"offload": "disk"}, r"learner\(offload='disk'\): choose one of"),
    ({"offload": "optimizer", "zero_stage": 0}, "zero_stage >= 1"),
    ({"offload": "optimizer+params", "zero_stage": 2}, "zero_stage=3"),
])
def test_learner_rejects_bad_offload_before_loading_a_model(config, needle):
    with pytest.raises(ValueError, match=needle):
        Learner("/no/such/model", config)
