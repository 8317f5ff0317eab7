"""A run killed (SIGKILL, mid-iteration) resumes from its last checkpoint and continues
exactly: a training script run as a user runs it (resume_driver.py), three times."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from rti_actors.checkpoints import is_complete, periodic_path
from tests.conftest import REPO
from tests.integration.learnable_env import HOLD_AFTER, HOLD_DIR

pytestmark = [pytest.mark.integration, pytest.mark.heavy]


def _command(model: str, run_dir: Path, name: str, *extra: str) -> list[str]:
    return [sys.executable, str(Path(__file__).with_name("resume_driver.py")), model, str(run_dir), name,
            "--checkpoint-every", "1", *extra]


def _env(ray_tmp: str) -> dict:
    env = dict(os.environ, RAY_TMPDIR=ray_tmp, PYTHONPATH=str(REPO))
    env.pop("RAY_ADDRESS", None)  # a local cluster of its own, not the test session's
    return env


def _train_rows(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "train"]


def _kill_leftovers(ray_tmp: str) -> None:
    procs = [p for p in psutil.process_iter(["cmdline"]) if any(ray_tmp in a for a in (p.info["cmdline"] or []))]
    for p in procs:
        p.kill()
    psutil.wait_procs(procs, timeout=20)


@pytest.fixture(scope="module")
def flat_model(tmp_path_factory):
    # logit_scale 1: a flat random policy, so sampled first letters vary and every group teaches
    from policies.models import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("flat"), logit_scale=1.0, seed=1)


def test_a_run_killed_mid_iteration_resumes_and_continues_exactly(flat_model, tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="rtires", dir="/tmp")  # short: AF_UNIX paths are <= 107 bytes
    env = _env(ray_tmp)
    try:
        whole = subprocess.run(_command(flat_model, tmp_path, "whole"), env=env, capture_output=True,
                               text=True, timeout=900)
        assert whole.returncode == 0, whole.stderr[-3000:]

        # two iterations of 2 tasks x 4 samples; the first episode of iteration 3 never ends
        hold = tmp_path / "hold"
        hold.mkdir()
        held = dict(env, **{HOLD_DIR: str(hold), HOLD_AFTER: "16"})
        proc = subprocess.Popen(_command(flat_model, tmp_path, "killed"), env=held, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        second = periodic_path(tmp_path / "killed", 2)
        deadline = time.time() + 900
        while not (is_complete(second) and len(list(hold.iterdir())) > 16) and proc.poll() is None \
                and time.time() < deadline:
            time.sleep(0.2)
        assert is_complete(second), "the run never saved its second checkpoint"
        assert proc.poll() is None, "the run finished before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _kill_leftovers(ray_tmp)
        assert [r["step"] for r in _train_rows(tmp_path / "killed")] == [1, 2]

        resumed = subprocess.run(_command(flat_model, tmp_path, "killed", "--resume", str(tmp_path / "killed")),
                                 env=env, capture_output=True, text=True, timeout=900)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert "resumed at iteration 2" in resumed.stdout
    finally:
        _kill_leftovers(ray_tmp)
    want, got = _train_rows(tmp_path / "whole"), _train_rows(tmp_path / "killed")
    assert [r["step"] for r in got] == [1, 2, 3]  # each iteration once
    assert [r["policy_version"] for r in want] == [1, 2, 3]  # every iteration stepped and published
    for g, w in zip(got, want):
        assert g["reward_mean"] == w["reward_mean"] and g["policy_version"] == w["policy_version"]
        # the GRPO loss is a near-cancelling sum (about 1e-7 here), so the step is compared by
        # its gradient norm; another process may differ in the last bits of the reductions
        assert g["learner"]["grad_norm"] == pytest.approx(w["learner"]["grad_norm"], rel=1e-4)
        assert g["learner"]["loss"] == pytest.approx(w["learner"]["loss"], abs=1e-6)
    assert sorted(p.name for p in (tmp_path / "killed" / "checkpoints").iterdir()) == ["iter_000002", "iter_000003"]
