"""LUFFY end to end: a real Ray cluster, the tiny model, the hf engine and the DeepSpeed learner,
with Navigation's scripted oracle as the teacher."""

import pytest

import rti_actors.algorithms.base as plugin_base  # where advantages are assigned
from envs import ToolEnv
from rti_actors import RTIConfig
from rti_actors.groups import group_advantages
from rti_actors.luffy import has_oracle
from rti_actors.options import ConfigError
from tests.integration.learnable_env import FirstLetterEnv

pytestmark = pytest.mark.integration

# the policy gets 3 turns; the oracle needs 11 to 23 on Navigation, so it gets 30 (as the
# warm start's demonstrations do), and its traces (5k to 11k tokens here) a model with room for
# them; it reads whole tool outputs (a truncated search result loses the POI it needs)
NAV = {"max_turns": 3, "page_size": 3, "language": "en"}
MAX_LEN = 16384


@pytest.fixture(scope="module")
def long_tiny_model(tmp_path_factory) -> str:
    from policies.models import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("tiny_long"), max_position_embeddings=MAX_LEN)


def _luffy_config(model, tmp_path, name):
    return (RTIConfig()
            .environment("Navigation-v0", env_config=NAV)
            .policy(model=model, engine="hf", max_new_tokens=16, max_model_len=MAX_LEN)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
            .training(algorithm="luffy", group_size=2, tasks_per_iteration=2, lr=1e-4)
            .luffy(source="oracle", traces_per_group=1, max_turns=30)
            .reporting(run_dir=str(tmp_path), run_name=name, tensorboard=False, plot=False))


def _masked_runs(ids, mask):
    runs, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


def test_oracle_traces_join_each_group_and_train_with_it(ray_cluster, long_tiny_model, tmp_path, monkeypatch):
    algo = _luffy_config(long_tiny_model, tmp_path, "luffy").build()
    seen, samples = [], []
    assign = plugin_base.assign_advantages
    monkeypatch.setattr(plugin_base, "assign_advantages", lambda g: seen.append(assign(g)) or g)
    start = algo.updates.start
    algo.updates.start = lambda s, v: samples.extend(s) or start(s, v)
    try:
        result = algo.train()
        assert len(seen) == 2 and result["luffy/teacher_traces"] == 2 and result["luffy/teacher_missing"] == 0
        tok = algo.renderer.tokenizer
        for group in seen:
            # one of the G = 2 samples is the teacher's (in place of an on-policy one), numbered after them
            assert [t.off_policy for t in group] == [False, True] and len({t.task_id for t in group}) == 1
            teacher = group[1]
            assert teacher.reward == 1.0 and teacher.sample_index == 1 and teacher.num_turns >= 2
            # the loss mask is on the teacher's assistant turns (each closed by its end of turn) and nowhere else
            assert _masked_runs(teacher.ids, teacher.loss_mask) == [
                tok.encode(a, add_special_tokens=False) + [algo.renderer.eos_id] for a in teacher.actions]
            assert not teacher.loss_mask[0] and set(teacher.logprobs) == {0.0}
            # the advantage is GRPO's over the mixed group: a failing rollout beside a successful teacher
            assert [t.advantage for t in group] == pytest.approx(group_advantages([t.reward for t in group]))
        on_policy_failed = all(g[0].reward == 0 for g in seen)  # a random tiny model fails Navigation
        if on_policy_failed:
            assert result["luffy/groups_given_signal"] == 2 and result["pre_intervention_pass_at_G"] == 0.0
        assert result["num_episodes"] == 2  # the metrics count the policy's own episodes only
        # the learner got the off-policy flag and trained on both kinds of tokens
        assert [[s.off_policy for s in g] for g in samples] == [[False, True]] * 2
        learn = result["learner"]
        assert not learn["skipped"] and learn["num_samples"] == 4 and learn["step"] == 1
        assert learn["teacher_tokens"] == sum(sum(g[1].loss_mask) for g in seen)
        assert 0 < learn["shaped_weight_mean"] < 1
        # checkpoint and restore; the next iteration runs from the restored state
        ckpt = algo.save(tmp_path / "ckpt")
        algo.restore(ckpt)
        assert algo.iteration == 1 and algo.learner_step == 1
        again = algo.train()
        assert again["luffy/teacher_traces"] == 2 and again["learner"]["step"] == 2
    finally:
        algo.stop()


class _NoOracle(FirstLetterEnv):
    oracle_agent = ToolEnv.oracle_agent


def no_oracle_env(cfg):
    return _NoOracle(cfg)


def test_oracle_source_needs_an_env_with_an_oracle(ray_cluster, tiny_model_path, tmp_path):
    assert has_oracle(FirstLetterEnv({})) and not has_oracle(_NoOracle({}))
    cfg = (_luffy_config(tiny_model_path, tmp_path, "no-oracle").environment(no_oracle_env, env_config={})
           .policy(max_new_tokens=8, max_model_len=1024).env_runners(num_env_runners=1).luffy(max_turns=None))
    with pytest.raises(ConfigError, match="oracle_agent"):
        cfg.build()
