"""Infrastructure failures are never rollouts: an env runner in one process, the tiny
model's transformers engine, and environments whose grader or tool backend fails."""

import pytest

from policies.engines import SamplingParams, make_engine
from rti_actors.engine_actor import LocalEngines
from rti_actors.env_runner import EnvRunner
from rti_actors.groups import all_failed, scored_groups
from rti_actors.options import DEFAULTS
from rti_actors.trajectory import EpisodeSpec
from tests.integration.learnable_env import BadValuesEnv, FailingEnv

POLICY = {**DEFAULTS["policy"], "max_new_tokens": 8, "max_model_len": 1024}
SAMPLING = SamplingParams(max_tokens=8, temperature=1.0, top_p=1.0)


@pytest.fixture(scope="module")
def runner(tiny_model_path):
    engines = LocalEngines(make_engine("hf", tiny_model_path, max_model_len=1024))
    return EnvRunner(FailingEnv, {}, 2, tiny_model_path, POLICY, engines, max_episode_retries=2)


def test_failed_envs_are_marked_retried_on_a_fresh_env_and_never_scored(runner):
    specs = [EpisodeSpec(t, j) for t in ("ok", "grader-down", "flaky", "bug") for j in range(2)]
    trajs = {(t.task_id, t.sample_index): t for t in runner.sample(specs, SAMPLING)}
    assert not trajs[("ok", 0)].infra_error and trajs[("ok", 0)].infra_retries == 0
    for j in range(2):
        down = trajs[("grader-down", j)]
        assert "InfrastructureError: the judge did not answer" in down.infra_error and down.infra_retries == 2
        assert "KeyError" in trajs[("bug", j)].infra_error and "step 0 of task 'bug'" in trajs[("bug", j)].infra_error
    flaky = trajs[("flaky", 0)]  # the first reset of the process failed, its retry did not
    assert not flaky.infra_error and flaky.infra_retries == 1 and flaky.num_turns == 1
    assert "reset of task 'flaky'" not in trajs[("flaky", 1)].infra_error

    groups, faults = scored_groups(list(trajs.values()))
    assert [g[0].task_id for g in groups] == ["ok", "flaky"]  # the env's failures never form a group
    assert faults == {"faults/infra_episodes": 4, "faults/episode_retries": 2 * 2 + 2 * 2 + 1,
                      "faults/groups_dropped": 2}
    # "grader-down" would have been an all-fail group (and an RTI trigger) had its failures been scored 0
    assert all(all_failed(g) for g in groups)


def test_a_group_left_with_one_scored_episode_is_dropped(runner):
    trajs = runner.sample([EpisodeSpec("ok", 0), EpisodeSpec("bug", 0), EpisodeSpec("bug", 1)], SAMPLING)
    trajs[2].task_id = "ok"  # an "ok" group of two whose second episode the env failed
    groups, faults = scored_groups(trajs)
    assert groups == [] and faults["faults/groups_dropped"] == 2 and faults["faults/infra_episodes"] == 2


def test_bad_rewards_are_env_failures_and_a_flood_is_cut_at_the_context(tiny_model_path):
    engines = LocalEngines(make_engine("hf", tiny_model_path, max_model_len=1024))
    runner = EnvRunner(BadValuesEnv, {}, 2, tiny_model_path, POLICY, engines, max_episode_retries=1)
    trajs = {t.task_id: t for t in runner.sample([EpisodeSpec(t, 0) for t in BadValuesEnv().task_ids("train")],
                                                 SAMPLING)}
    for task, shown in (("nan", "nan"), ("inf", "-inf"), ("text", "'one'"), ("none", "None")):
        t = trajs[task]
        assert f"compute_reward returned {shown}" in t.infra_error and "finite number" in t.infra_error, t.infra_error
        assert t.infra_retries == 1
    assert not trajs["numpy"].infra_error and trajs["numpy"].reward == 0.5
    flood = trajs["flood"]  # about a million tokens of tool output against a 1024-token context
    assert not flood.infra_error and flood.context_truncated and flood.truncated
    assert len(flood.ids) == len(flood.loss_mask) == len(flood.logprobs) == len(flood.token_weight) == 1024
    groups, faults = scored_groups(list(trajs.values()))
    assert faults["faults/infra_episodes"] == 4
