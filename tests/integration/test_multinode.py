"""A run on two Ray nodes: env runners, engines and learner ranks split over both by custom
resources; it trains, and a checkpoint of the two-node learner group restores exactly."""

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.heavy]


def test_two_node_cluster_trains_and_restores(tmp_path):
    from policies.models import make_tiny_model

    model = make_tiny_model(tmp_path / "flat", logit_scale=1.0, seed=1)  # a flat policy: rewards vary
    ray_tmp = tempfile.mkdtemp(prefix="rtimn", dir="/tmp")  # short: AF_UNIX paths are <= 107 bytes
    env = dict(os.environ, RAY_TMPDIR=ray_tmp, PYTHONPATH=str(REPO), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    env.pop("RAY_ADDRESS", None)  # a cluster of its own, not the test session's
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("multinode_driver.py")), model,
                           str(tmp_path / "runs")], env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    out = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])

    nodes = out["nodes"]
    assert len(nodes) == 2
    for kind, where in out["placed"].items():  # one of each kind on each node
        assert sorted(where) == nodes, (kind, where)

    assert [r["iteration"] for r in out["first"]] == [1, 2] and all(r["num_episodes"] == 8 for r in out["first"])
    assert all(math.isfinite(r["grad_norm"]) and math.isfinite(r["loss"]) for r in out["first"])
    # the sharded checkpoint written by ranks on both nodes restores the run exactly
    ref, got = out["third"], out["restored_third"]
    assert out["restored_iteration"] == 2 and got["iteration"] == ref["iteration"] == 3
    assert got["reward_mean"] == ref["reward_mean"]
    assert got["loss"] == pytest.approx(ref["loss"], rel=1e-5, abs=1e-7)
    assert got["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-4)

    err = out["unseen_error"]
    assert err and err.count("does not see the model folder") == 2 and "RTI_CACHE_DIR" in err
