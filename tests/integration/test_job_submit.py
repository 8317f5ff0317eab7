"""`ray job submit` of an example against a `ray start --head` cluster the test starts."""

import ipaddress
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import ray_head  # noqa: E402  (scripts/ray_head.py: how the main job starts and stops its head)

pytestmark = pytest.mark.integration


def _ray(args, env, **kw):
    ray_bin = str(Path(sys.executable).parent / "ray")
    return subprocess.run([ray_bin, *args], env=env, capture_output=True, text=True, **kw)


class HeadWatch(threading.Thread):
    """Polls the processes of the head under ``temp_dir`` while a job runs: which ones there
    were (pid, start time, name) and every TCP socket they listen on."""

    def __init__(self, temp_dir: str, every_s: float = 2.0):
        super().__init__(daemon=True)
        self.temp_dir, self.every_s, self.done = temp_dir, every_s, threading.Event()
        self.procs: dict[tuple[int, float], str] = {}
        self.listening: set[tuple[str, str, int]] = set()  # (process name, ip, port)

    def run(self):
        while not self.done.is_set():
            self.poll()
            self.done.wait(self.every_s)

    def poll(self):
        for p in ray_head.head_processes(self.temp_dir):
            try:
                name = " ".join(p.cmdline())[:120]
                self.procs[(p.pid, p.create_time())] = name
                self.listening |= {(name, c.laddr.ip, c.laddr.port) for c in p.net_connections("tcp")
                                   if c.status == psutil.CONN_LISTEN}
            except psutil.Error:
                pass

    def alive(self) -> list[str]:
        out = []
        for (pid, created), name in self.procs.items():
            try:
                if psutil.Process(pid).create_time() == created:
                    out.append(f"{pid} {name}")
            except psutil.NoSuchProcess:
                pass
        return out


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    return (getattr(addr, "ipv4_mapped", None) or addr).is_loopback


def test_ray_job_submit_hard20_main_job(tiny_model_path, tmp_path):
    # as the main job runs it: RTI through the actor graph on the vLLM engine (the default)
    env = dict(os.environ, RAY_AUTH_MODE="token")
    env.pop("RAY_ADDRESS", None)
    assert _ray(["get-auth-token", "--generate"], env).returncode == 0
    # its own temp dir, so that stopping it cannot touch the session cluster of the other
    # tests; started and stopped as scripts/main_job.sh does
    temp_dir = tempfile.mkdtemp(prefix="rtijob", dir="/tmp")  # short: AF_UNIX paths are <= 107 bytes
    head = [sys.executable, str(REPO / "scripts" / "ray_head.py")]
    watch = HeadWatch(temp_dir)
    try:
        start = subprocess.run([*head, "start", temp_dir, "--num-cpus=4"], env=env, capture_output=True, text=True,
                               timeout=180)
        assert start.returncode == 0, start.stderr
        env["RAY_ADDRESS"] = start.stdout.strip()
        watch.start()
        runtime_env = ('{"env_vars": {"RTI_CACHE_DIR": "%s"}}'
                       % (REPO / ".cache"))
        for _ in range(12):  # the head's job agent registers a few seconds after `ray start`
            job = _ray(["job", "submit", "--working-dir", str(REPO), "--runtime-env-json", runtime_env, "--",
                        "python", "examples/hard20.py", "--model", tiny_model_path, "--engine", "vllm", "--quick",
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
        # engine and learner output goes to the run's log files, not to the job's console
        logs = tmp_path / "runs" / "job" / "logs"
        assert list(logs.glob("engine-*.log")) and list(logs.glob("learner-*.log")), list(logs.glob("*"))
        assert "(EngineActor" not in job.stdout and "(QueueLearner" not in job.stdout, job.stdout[-4000:]
        watch.poll()
    finally:
        watch.done.set()
        stop = subprocess.run([*head, "stop", temp_dir], env=env, capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0, stop.stderr
    # no process of the head outlives the stop: not the agents (re-parented, renamed) nor
    # the client server (`ray start`'s child); and every one listened on loopback only
    names = " ".join(watch.procs.values())
    assert all(k in names for k in ("raylet", "ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray.util.client.server"))
    assert not watch.alive(), watch.alive()
    assert not ray_head.head_processes(temp_dir) and not os.path.exists(temp_dir)
    assert watch.listening
    assert not [x for x in watch.listening if not _loopback(x[1])], [x for x in watch.listening if not _loopback(x[1])]


@pytest.mark.heavy
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


def test_working_dir_upload_leaves_out_history_and_results():
    # `ray job submit --working-dir .` as the examples document it, with no excludes: what
    # Ray would pack must be the code only, well under its 100 MiB request limit
    from ray._private.runtime_env.packaging import _dir_travel

    files: list[Path] = []
    _dir_travel(REPO, [], lambda p: p.is_file() and files.append(p), include_gitignore=True)
    tops = {p.relative_to(REPO).parts[0] for p in files}
    assert {"rti_actors", "envs", "policies", "examples"} <= tops
    assert not tops & {".git", "results", ".venv", "runs", ".cache"}
    assert sum(p.stat().st_size for p in files) < 100 * 2**20
