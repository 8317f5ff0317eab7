"""`ray job submit` of an example against a `ray start --head` cluster the test starts."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def _ray(args, env, **kw):
    ray_bin = str(Path(sys.executable).parent / "ray")
    return subprocess.run([ray_bin, *args], env=env, capture_output=True, text=True, **kw)


def test_ray_job_submit_navigation_example(tiny_model_path, tmp_path):
    env = dict(os.environ, RAY_AUTH_MODE="token")
    env.pop("RAY_ADDRESS", None)
    assert _ray(["get-auth-token", "--generate"], env).returncode == 0
    start = _ray(["start", "--head", "--port=6391", "--dashboard-host=127.0.0.1", "--dashboard-port=8266",
                  "--num-cpus=4", "--disable-usage-stats"], env, timeout=120)
    assert start.returncode == 0, start.stderr
    try:
        env["RAY_ADDRESS"] = "http://127.0.0.1:8266"
        runtime_env = ('{"excludes": [".venv", ".cache", "runs", ".git"], "env_vars": {"RTI_CACHE_DIR": "%s"}}'
                       % (REPO / ".cache"))
        job = _ray(["job", "submit", "--working-dir", str(REPO), "--runtime-env-json", runtime_env, "--",
                    "python", "examples/navigation.py", "--model", tiny_model_path, "--engine", "hf", "--quick",
                    "--iterations", "1", "--tasks-per-iteration", "1", "--group-size", "2", "--eval-tasks", "1",
                    "--eval-samples", "1", "--max-new-tokens", "8", "--max-turns", "2",
                    "--run-dir", str(tmp_path / "runs"), "--run-name", "job"], env, timeout=900)
        assert job.returncode == 0, job.stdout[-4000:] + job.stderr[-4000:]
        assert "iter   1" in job.stdout and "p@1" in job.stdout
        assert (tmp_path / "runs" / "job" / "metrics.jsonl").exists()
    finally:
        _ray(["stop", "--force"], env, timeout=120)
