"""The CI version of benchmarks/chaos.py: a short RTI run whose actors of every kind are
killed at seeded random times loses no episode, trains none twice, and keeps every actor.

The run is bounded by wall time, not iterations, so a slower machine runs fewer iterations
in the same minutes instead of a longer test."""

import importlib.util

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def _chaos_module():
    spec = importlib.util.spec_from_file_location("chaos_benchmark", REPO / "benchmarks" / "chaos.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_chaos_run_loses_and_duplicates_no_episode(ray_cluster, tiny_model_path):
    result = _chaos_module().chaos(tiny_model_path, minutes=2.0, baseline_minutes=0.5, kills_per_iteration=4.0,
                                   seed=0)
    s = result["summary"]
    assert s["iterations_completed"] >= 2  # at least one under chaos and the one after it
    # the chaos really happened (the seeded gaps average a quarter of an undisturbed iteration)
    assert sum(s["kills_by_kind"].values()) >= 2, s["kills_by_kind"]
    assert s["episodes_asked"] == s["iterations_completed"] * 2 * 2  # tasks_per_iteration x group_size
    assert s["episodes_lost"] == 0 and s["episodes_duplicated"] == 0, result["chaos"]["rows"]
    assert s["samples_sent_not_trained"] == 0
    assert not any(s["dead"].values()), s["dead"]  # every killed actor came back
    # every kill of a Ray-restarted kind was seen as a restart (the learner is rebuilt instead)
    restarted = {k: n for k, n in s["kills_by_kind"].items() if k != "learner"}
    for kind, n in restarted.items():
        assert s["restarts"].get(kind, 0) >= 1, (kind, n, s["restarts"])
    if "learner" in s["kills_by_kind"]:
        assert s["redone"].get("learner_rebuilds", 0) >= 1, s["redone"]
