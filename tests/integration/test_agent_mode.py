"""Agent mode end to end: a plain ``openai`` tool loop (``async def agent(client, task)``)
plays Lookup-v0 against the env runners' loopback endpoints, backed by a real engine on a
real local Ray cluster, and one GRPO iteration trains on what it recorded. Before the
learner steps, every sampled turn of every trajectory is sampled again from the engine
with the episode's seed and the recorded prefix as the prompt: the trajectory's ids and
log-probs must be exactly what the engine gives."""

from __future__ import annotations

import pytest

from examples.openai_agent import tool_loop
from policies.engines import SamplingParams
from rti_actors import RTIConfig
from rti_actors.engine_actor import EnginePool
from rti_actors.env_runner import _agent_seed

pytestmark = pytest.mark.integration


async def agent(client, task):
    return await tool_loop(client, task, max_turns=3)


@pytest.fixture(scope="module")
def flat_model(tmp_path_factory):
    from policies.models import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("flat"), logit_scale=1.0, seed=1)


def _config(model, tmp_path, algorithm: str) -> RTIConfig:
    return (RTIConfig()
            .environment("Lookup-v0", env_config={"tiers": [1]})
            .policy(model=model, engine="hf", max_new_tokens=8, max_model_len=1024, temperature=1.0)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=2, num_cpus_per_env_runner=0.25, agent=agent)
            .training(algorithm=algorithm, group_size=2, tasks_per_iteration=2, skip_zero_variance_groups=False)
            .learners(backend="torch")
            .reporting(run_dir=str(tmp_path / "runs"), run_name=f"agent-{algorithm}"))


def _one_iteration(algo, look) -> dict:
    """One iteration of ``algo`` (then stopped); ``look(groups)`` sees the groups as they go
    to the learner."""
    advantages = algo.plugin.advantages

    def looked(driver, groups):
        look(groups)
        return advantages(driver, groups)

    algo.plugin.advantages = looked
    try:
        return algo.train()
    finally:
        algo.stop()


def test_one_grpo_iteration_trains_on_exactly_the_tokens_the_engine_sampled(ray_cluster, flat_model, tmp_path):
    algo = _config(flat_model, tmp_path, "grpo").build()
    seen = []

    def check(groups):
        pool = EnginePool(algo.engines)
        sampling = SamplingParams(max_tokens=8, temperature=1.0)
        for t in (t for g in groups for t in g):
            seen.append(t)
            for k, (start, end) in enumerate(t.turn_spans):
                gen = pool.generate([t.ids[:start]], sampling, [_agent_seed(t, k)])[0]
                assert gen.token_ids == t.ids[start:end] and gen.logprobs == pytest.approx(t.logprobs[start:end], abs=1e-5)

    m = _one_iteration(algo, check)
    assert m["num_episodes"] == 4 and m["num_groups"] == 2 and m["policy_version"] == 1
    assert len(seen) == 4 and all(t.turn_spans and not t.infra_error and not t.prefix_break for t in seen)
    # loss only on what the engine sampled
    for t in seen:
        assert [i for i, x in enumerate(t.loss_mask) if x] == [i for s, e in t.turn_spans for i in range(s, e)]
        assert "fetched" in t.reward_breakdown  # the env's grader scored the agent's answer


def test_rti_continues_an_agents_failed_episodes_by_replaying_the_agent(ray_cluster, flat_model, tmp_path):
    """Every rollout of the random policy fails; the env's rule roles correct a step and the
    runners continue from it by running the agent again (its first requests answered with
    the recorded turns and the fix). The fixes are trained with their weighted span."""
    algo = (_config(flat_model, tmp_path, "rti")
            .interventions(roles="rules", verifier_llm=False, ppl_threshold=float("inf"))
            .build())
    fixed = []
    m = _one_iteration(algo, lambda groups: fixed.extend(t for g in groups for t in g if t.intervened))
    assert m["frac_all_fail_groups"] == 1.0
    assert m["rti/continued"] >= 1 and m["rti/replay_errors"] == 0, {k: v for k, v in m.items() if k.startswith("rti/")}
    assert fixed and m["policy_version"] == 1
    for t in fixed:
        a, b = t.corrected_span
        assert t.turn_spans[t.intervened_step] == (a, b) and all(t.loss_mask[a:b])
