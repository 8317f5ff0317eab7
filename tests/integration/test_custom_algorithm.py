"""examples/custom_algorithm.py as a user runs it: a method registered in the script (Dr.
GRPO) selected by name, its advantages set by the driver's hook and its class shipped to
the learner actor, one iteration from the Lookup start policy."""

import json
import sys

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy]


def test_custom_algorithm_example_trains_an_iteration(ray_cluster, lookup_start_policy, tmp_path, capsys):
    sys.path.insert(0, str(REPO / "examples"))
    import custom_algorithm
    from ray import cloudpickle

    # run as a script, the plug-in class travels by value; imported here it would go by
    # reference, which the cluster's workers cannot import: ship it as the script does
    cloudpickle.register_pickle_by_value(custom_algorithm)
    custom_algorithm.main(["--model", lookup_start_policy, "--iterations", "1", "--tasks-per-iteration", "4",
                           "--group-size", "4", "--run-dir", str(tmp_path), "--run-name", "dr"])
    assert "iter   1" in capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "dr" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    assert len(train) == 1 and train[0]["dr_grpo/mean_abs_advantage"] >= 0
    assert 0 <= train[0]["frac_turns_unparsable"] <= 1  # the start policy loses some calls to the format
    assert json.loads((tmp_path / "dr" / "config.json").read_text())["training"]["algorithm"] == "dr-grpo"
