"""`ray job submit` of an example against a `ray start --head` cluster the test starts."""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def _ray(args, env, **kw):
    ray_bin = str(Path(sys.executable).parent / "ray")
    return subprocess.run([ray_bin, *args], env=env, capture_output=True, text=True, **kw)


def _free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in socks]
    for sock in socks:
        sock.close()
    return ports


def _stop_cluster(temp_dir: str) -> None:
    """Kill exactly the processes of the cluster started under ``temp_dir`` (``ray stop``
    would also kill the session cluster the other integration tests share)."""
    import psutil

    procs = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(temp_dir in part for part in (p.info["cmdline"] or [])):
                procs.append(p)
        except psutil.Error:
            pass
    for p in procs:
        p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=20)
    for p in alive:
        p.kill()
    import shutil
    shutil.rmtree(temp_dir, ignore_errors=True)


def test_ray_job_submit_hard20_main_job(tiny_model_path, tmp_path):
    env = dict(os.environ, RAY_AUTH_MODE="token")
    env.pop("RAY_ADDRESS", None)
    assert _ray(["get-auth-token", "--generate"], env).returncode == 0
    # its own temp dir, so that stopping it cannot touch the session cluster of the other tests
    temp_dir = Path(tempfile.mkdtemp(prefix="rtijob", dir="/tmp"))  # short: AF_UNIX paths are <= 107 bytes
    # free ports for everything that has a fixed default: the session cluster of the other
    # tests already holds the defaults (its dashboard agent sits on 52365)
    gcs, dash, agent, agent_grpc = _free_ports(4)
    start = _ray(["start", "--head", f"--port={gcs}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
                  f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
                  "--num-cpus=4", "--disable-usage-stats", f"--temp-dir={temp_dir}"], env, timeout=120)
    assert start.returncode == 0, start.stderr
    try:
        env["RAY_ADDRESS"] = f"http://127.0.0.1:{dash}"
        runtime_env = ('{"excludes": [".venv", ".cache", "runs", ".git"], "env_vars": {"RTI_CACHE_DIR": "%s"}}'
                       % (REPO / ".cache"))
        for _ in range(12):  # the head's job agent registers a few seconds after `ray start`
            job = _ray(["job", "submit", "--working-dir", str(REPO), "--runtime-env-json", runtime_env, "--",
                        "python", "examples/hard20.py", "--model", tiny_model_path, "--engine", "hf", "--quick",
                        "--iterations", "1", "--tasks-per-iteration", "1", "--group-size", "2", "--eval-tasks", "2",
                        "--eval-samples", "1", "--max-new-tokens", "8", "--max-turns", "2",
                        "--run-dir", str(tmp_path / "runs"), "--run-name", "job"], env, timeout=900)
            if "No available agent" not in job.stdout + job.stderr:
                break
            time.sleep(5)
        assert job.returncode == 0, job.stdout[-4000:] + job.stderr[-4000:]
        assert "iter   1" in job.stdout and "p@1" in job.stdout and "RTI" in job.stdout
        assert "rti: triggered" in job.stdout
        assert (tmp_path / "runs" / "job" / "metrics.jsonl").exists()
    finally:
        _stop_cluster(str(temp_dir))


def test_navigation_example_runs(ray_cluster, tiny_model_path, tmp_path, capsys):
    sys.path.insert(0, str(REPO / "examples"))
    import navigation

    navigation.main(["--model", tiny_model_path, "--engine", "hf", "--quick", "--iterations", "1",
                     "--tasks-per-iteration", "1", "--group-size", "2", "--eval-tasks", "1", "--eval-samples", "1",
                     "--max-new-tokens", "8", "--max-turns", "2", "--run-dir", str(tmp_path), "--run-name", "nav",
                     "--warmup-sft", "2", "--sft-max-waypoints", "3", "--sft-epochs", "1", "--page-size", "1",
                     "--poi-extensions", "base"])
    out = capsys.readouterr().out
    assert "iter   1" in out and "p@1" in out and (tmp_path / "nav" / "metrics.jsonl").exists()
    assert "warm start: 2 demonstrations" in out and "SFT warm start" in out and "GRPO" in out
    assert len((tmp_path / "nav" / "demonstrations.jsonl").read_text().splitlines()) == 2


def test_custom_env_example_warm_starts_and_trains(ray_cluster, tiny_model_path, capsys):
    sys.path.insert(0, str(REPO / "examples"))
    import custom_env
    from ray import cloudpickle

    # run as a script the example's env class travels by value; imported here, by reference,
    # and the cluster's workers cannot import examples/ — ship it by value as the script does
    cloudpickle.register_pickle_by_value(custom_env)
    custom_env.main(["--model", tiny_model_path, "--engine", "hf", "--iterations", "1", "--warmup-sft", "4"])
    out = capsys.readouterr().out
    assert "warm start: 4 demonstrations (0 too long)" in out and "iter   1" in out and "p@1" in out
