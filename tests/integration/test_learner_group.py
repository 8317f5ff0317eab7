"""The learner group on a real Ray cluster: DeepSpeed ranks as actors over gloo, on CPUs.

Two ranks, each stepping on its token-balanced shard, must take the step that one rank takes
on the whole batch: same loss, grad norm and weights. Through the queue (rank 0 pulls and
splits), through a direct update (SFT), with fewer samples than ranks, and across a sharded
ZeRO-3 checkpoint. The last test runs the group inside a built Algorithm.

Tolerances, and why not 0: the ranks reduce gradients over gloo, so float sums run in
another order than one rank's accumulation; those are fp32 rounding differences (about 1e-7
relative), so loss and grad norm are held to rel 1e-5 / 1e-4 (as the subprocess test in
test_learner.py). Adam's first step moves each weight by about lr whatever the gradient's
size, so a gradient component near 0 can come out with another sign; weights are held to
lr * 1e-2, which that flip would break only for a near-zero component and a real error
(a wrong normaliser, a lost shard) breaks everywhere.
"""

import pytest
import ray
import torch

from rti_actors.build import threads_env
from rti_actors.learner_group import LearnerGroup
from rti_actors.replay import ReplayQueue
from tests.integration import learnable_env  # noqa: F401  (registers FirstLetter-v0)
from tests.integration.test_learner import LR, assert_weights_close, make_batch

pytestmark = pytest.mark.integration

CONFIG = {"dtype": "float32", "lr": LR, "micro_batch_tokens": 40}  # uneven shards: rank 0 needs more micro-batches than rank 1


def _group(model, n, **config):
    # one compute thread per rank: the test machine's cores are shared by every actor
    return LearnerGroup(model, {**CONFIG, **config}, n, num_cpus=0.5, runtime_env=threads_env(1),
                        start_timeout_s=120)


def _max_diff(a, b) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _assert_same_step(got, ref, w_got, w_ref, label):
    print(f"{label}: |d loss|={abs(got['loss'] - ref['loss']):.3g} "
          f"|d grad_norm|={abs(got['grad_norm'] - ref['grad_norm']):.3g} max |d w|={_max_diff(w_got, w_ref):.3g}")
    assert got["loss"] == pytest.approx(ref["loss"], rel=1e-5)
    assert got["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-4)
    assert got["num_tokens"] == ref["num_tokens"] and got["num_samples"] == ref["num_samples"]
    assert got["step"] == ref["step"]
    assert_weights_close(w_got, w_ref, atol=LR * 1e-2)


@pytest.fixture
def groups(tiny_model_path):
    made = []

    def make(n, **config):
        made.append(_group(tiny_model_path, n, **config))
        assert made[-1].ping()
        return made[-1]
    yield make
    for g in made:
        g.kill()


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_two_ranks_take_the_step_of_one(ray_cluster, groups, zero_stage):
    one, two = groups(1, zero_stage=zero_stage), groups(2, zero_stage=zero_stage)
    assert len(two.ranks) == 2 and two.placement_group is not None and one.placement_group is None
    batch = make_batch(seed=8, n=4)

    # 1. RL through the replay queue: rank 0 pulls once, shards by tokens, both ranks step
    metrics = []
    for g in (one, two):
        queue = ray.remote(ReplayQueue).options(num_cpus=0).remote(0)
        ray.get(queue.put.remote([batch[:2], batch[2:]], 0))
        metrics.append(ray.get(g.pull_and_update(queue, 2, 0, True)))
    (ref, got), weights = metrics, [ray.get(g.get_weights()) for g in (one, two)]
    assert got["num_groups"] == got["num_groups_trained"] == 2 and got["num_samples"] == 4
    _assert_same_step(got, ref, weights[1], weights[0], f"ZeRO-{zero_stage} queue step")

    # 2. a direct update (the SFT warm start's path), with its own learning rate
    ref, got = (g.update(batch, "sft", 2 * LR) for g in (one, two))
    _assert_same_step(got, ref, ray.get(two.get_weights()), ray.get(one.get_weights()), f"ZeRO-{zero_stage} sft step")
    assert got["lr"] == 2 * LR


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_fewer_samples_than_ranks(ray_cluster, groups, zero_stage):
    # one sample for two ranks: rank 1 gets an empty shard and runs zero-loss passes, which
    # keep ZeRO's collectives in step; the step is the one rank's
    one, two = groups(1, zero_stage=zero_stage), groups(2, zero_stage=zero_stage)
    sample = make_batch(seed=9, n=1)
    ref, got = one.update(sample), two.update(sample)
    assert got["num_samples"] == 1
    _assert_same_step(got, ref, ray.get(two.get_weights()), ray.get(one.get_weights()),
                      f"ZeRO-{zero_stage} one sample")


def test_zero3_checkpoint_of_two_ranks_continues_identically(ray_cluster, groups, tmp_path):
    config = {"dtype": "float32", "zero_stage": 3, "seed": 7}
    a = groups(2, **config)
    a.update(make_batch(seed=4))
    a.save(str(tmp_path / "ckpt"))
    ma, wa = a.update(make_batch(seed=5)), ray.get(a.get_weights())
    shards = sorted(p.name for p in (tmp_path / "ckpt" / "learner").glob("zero_pp_rank_*optim_states.pt"))
    assert len(shards) == 2, shards  # each rank wrote its own partition
    a.kill()

    b = groups(2, **config)
    assert b.load(str(tmp_path / "ckpt")) == 1
    mb, wb = b.update(make_batch(seed=5)), ray.get(b.get_weights())
    # the same ranks, shards and reductions in the same order: bit for bit
    assert mb["step"] == ma["step"] == 2
    assert mb["loss"] == ma["loss"] and mb["grad_norm"] == ma["grad_norm"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    with pytest.raises(ValueError, match="world_size"):  # one rank cannot take two ranks' partitions
        groups(1, **config).load(str(tmp_path / "ckpt"))


def test_algorithm_with_two_learner_ranks(ray_cluster, tmp_path):
    # the wiring: build starts the group, train pulls through it, a ZeRO-3 broadcast publish
    # (every rank gathers, rank 0 sends) reaches the engine, export writes rank 0's weights
    from policies.engines import make_engine
    from policies.models import make_tiny_model
    from rti_actors import RTIConfig

    model = make_tiny_model(tmp_path / "flat", logit_scale=1.0, seed=1)
    algo = (RTIConfig().environment("FirstLetter-v0")
            .policy(model=model, engine="hf", max_new_tokens=4, max_model_len=512, temperature=1.0)
            .env_runners(num_env_runners=1, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.25)
            .training(group_size=4, tasks_per_iteration=2, lr=LR, skip_zero_variance_groups=False)
            .learners(num_learners=2, zero_stage=3, weight_sync="broadcast", num_threads_per_learner=1)
            .reporting(run_dir=str(tmp_path / "runs"), run_name="two", tensorboard=False, plot=False).build())
    try:
        assert len(algo.learner.ranks) == 2 and algo.updates.weight_sync == "broadcast"
        m = algo.train()
        assert not m["learner"]["skipped"] and m["learner"]["num_samples"] == 8 and m["policy_version"] == 1
        assert ray.get([e.version.remote() for e in algo.engines]) == [1]
        exported = algo.export_policy(tmp_path / "exported")
        prompts, completions = [[1, 2, 3, 4, 5], [7, 8, 9]], [[10, 11, 12], [13, 14]]
        served = ray.get(algo.engines[0].score.remote(prompts, completions, 1.0))
    finally:
        algo.stop()
    learned = make_engine("hf", exported).score(prompts, completions, 1.0)
    initial = make_engine("hf", model).score(prompts, completions, 1.0)
    flat = lambda rows: [x for r in rows for x in r]  # noqa: E731
    assert flat(served) == pytest.approx(flat(learned), abs=1e-6)
    assert flat(served) != pytest.approx(flat(initial), abs=1e-6)  # the step moved the weights


@pytest.mark.heavy
def test_memory_options_take_the_same_step(ray_cluster, groups):
    # gradient checkpointing recomputes the same activations; ZeRO-Offload steps DeepSpeed's
    # CPU Adam (the same AdamW update) on host copies of the optimiser states and weights
    ref = groups(1, zero_stage=3)
    got = groups(2, zero_stage=3, gradient_checkpointing=True, offload="optimizer+params")
    batch = make_batch(seed=10, n=4)
    for step in range(2):  # the second step reads the offloaded Adam moments back
        m_ref, m_got = ref.update(batch), got.update(batch)
        _assert_same_step(m_got, m_ref, ray.get(got.get_weights()), ray.get(ref.get_weights()),
                          f"checkpointing + offload, step {step + 1}")
