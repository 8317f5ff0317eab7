"""The engine actor merges concurrent ``generate`` calls without changing their results."""

import random
from dataclasses import replace

import pytest
import ray

from policies.engines import PromptTooLongError, SamplingParams
from rti_actors.engine_actor import EngineActor, EnginePool, explicit_seeds

GREEDY = SamplingParams(max_tokens=6, temperature=0.0)
REQUESTS = ([[1, 2, 3, 4]], [[5, 6, 7], [8, 9]], [[10, 11, 12]])  # prompts per caller


def _actor(path, window):
    actor = ray.remote(EngineActor).options(num_cpus=0).remote("hf", path, {"dtype": "float32", "max_model_len": 64},
                                                              merge_window_s=window)
    ray.get(actor.ping.remote())
    return actor


@pytest.fixture(scope="module")
def merged(ray_cluster, tiny_model_path):
    actor = _actor(tiny_model_path, 0.5)  # a wide window: calls sent together are sure to meet
    yield actor
    ray.kill(actor)


def _tokens(gens):
    return [g.token_ids for g in gens]


def test_concurrent_requests_become_one_engine_call_with_unchanged_results(merged, tiny_model_path):
    before = ray.get(merged.get_stats.remote())
    refs = [merged.generate.remote(ps, GREEDY, [7] * len(ps)) for ps in REQUESTS]
    together = ray.get(refs)
    after = ray.get(merged.get_stats.remote())
    assert after["generate_requests"] - before["generate_requests"] == 3
    assert after["generate_engine_calls"] - before["generate_engine_calls"] == 1
    assert [len(t) for t in together] == [1, 2, 1]  # each caller gets its own prompts back, in order

    alone = _actor(tiny_model_path, 0.0)
    try:
        for ps, got in zip(REQUESTS, together):
            assert _tokens(ray.get(alone.generate.remote(ps, GREEDY, [7] * len(ps)))) == _tokens(got)
    finally:
        ray.kill(alone)


def test_different_sampling_settings_are_not_merged(merged):
    before = ray.get(merged.get_stats.remote())
    a = merged.generate.remote([[1, 2, 3]], GREEDY)
    b = merged.generate.remote([[1, 2, 3]], replace(GREEDY, max_tokens=3))
    c = merged.generate.remote([[4, 5, 6]], replace(GREEDY, seed=11))  # the seed is per prompt: merges with a
    _, gb, _ = ray.get([a, b, c])
    after = ray.get(merged.get_stats.remote())
    assert after["generate_engine_calls"] - before["generate_engine_calls"] == 2
    assert len(gb[0].token_ids) <= 3


def test_a_bad_request_fails_alone(merged):
    good = merged.generate.remote([[1, 2, 3]], GREEDY)
    too_long = merged.generate.remote([list(range(1, 70))], GREEDY)
    untyped = merged.generate.remote([[1, 2, 3]], {"max_tokens": 6, "temperature": 0.0})
    assert len(ray.get(good)[0].token_ids) > 0
    with pytest.raises(PromptTooLongError):
        try:
            ray.get(too_long)
        except ray.exceptions.RayTaskError as e:
            raise e.as_instanceof_cause()
    with pytest.raises(TypeError, match="sampling must be a policies.engines.SamplingParams, got dict"):
        try:
            ray.get(untyped)
        except ray.exceptions.RayTaskError as e:
            raise e.as_instanceof_cause()


def test_explicit_seeds():
    rng = random.Random(0)
    assert explicit_seeds(2, SamplingParams(), [5, 6], rng) == [5, 6]
    assert explicit_seeds(3, SamplingParams(seed=10), None, rng) == [10, 11, 12]
    unseeded = explicit_seeds(3, SamplingParams(), None, rng)
    assert len(set(unseeded)) == 3 and unseeded != explicit_seeds(3, SamplingParams(), None, rng)
    with pytest.raises(ValueError, match="one seed per prompt"):
        explicit_seeds(2, SamplingParams(), [1], rng)


@ray.remote(num_cpus=0)
class _NamedEngine:
    """Stands in for an engine actor: answers ``generate`` with its own name."""

    def __init__(self, name):
        self.name = name

    def generate(self, prompts, sampling, seeds):
        return [{"engine": self.name} for _ in prompts]


@ray.remote(num_cpus=0)
class _Runner:
    def __init__(self, pool):
        self.pool = pool

    def step(self):
        return self.pool.generate([[1, 2]], GREEDY)[0]["engine"]


def test_env_runners_in_lockstep_spread_over_the_engines(ray_cluster):
    # Ray pickles the pool into each runner; the copies must not all start on engine 0.
    engines = [_NamedEngine.remote(f"e{i}") for i in range(2)]
    pool = EnginePool(engines)
    runners = [_Runner.remote(pool) for _ in range(2)]
    try:
        for _ in range(3):
            assert sorted(ray.get([r.step.remote() for r in runners])) == ["e0", "e1"]
    finally:
        for a in runners + engines:
            ray.kill(a)
