"""A Ray head of our own: on loopback only, under its own temp dir, stopped exactly.

    python scripts/ray_head.py start TEMP_DIR [--num-cpus N] [--port P] [--dashboard-port P]
        -> prints the dashboard address (http://127.0.0.1:PORT), the RAY_ADDRESS for jobs
    python scripts/ray_head.py stop TEMP_DIR

Used by scripts/main_job.sh and tests/integration/test_job_submit.py. ``ray stop`` is never
used: it would stop every Ray cluster on the machine (a test session's, another run's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psutil

# `ray start --node-ip-address=127.0.0.1` is rewritten to the host's IP (Ray resolves
# "localhost" to a remotely reachable address); with this switch off Ray keeps the node on
# 127.0.0.1 and binds its metrics servers there, as it does on macOS. Inherited by every
# process of the head.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start(temp_dir: str, num_cpus: int, port: int | None = None, dashboard_port: int | None = None) -> str:
    """Start the head; return its dashboard address. Every port with a fixed default gets a
    free one: another Ray on this machine may hold the defaults (the client server's 10001,
    the dashboard agent's 52365)."""
    gcs, dash, agent, agent_grpc, client, runtime_env = free_ports(6)
    ray_bin = str(Path(sys.executable).parent / "ray")
    cmd = [ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port or gcs}",
           "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port or dash}",
           f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
           f"--ray-client-server-port={client}", f"--runtime-env-agent-port={runtime_env}",
           f"--num-cpus={num_cpus}", "--disable-usage-stats", f"--temp-dir={temp_dir}"]
    done = subprocess.run(cmd, env={**os.environ, **LOOPBACK_ENV}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ray start failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return f"http://127.0.0.1:{dashboard_port or dash}"


def head_processes(temp_dir: str) -> list[psutil.Process]:
    """Every process of the head under ``temp_dir``. Not only those naming it on their command
    line: the agents rename themselves (ray::DashboardAgent) and the client server, started by
    `ray start` and re-parented to init, never names it; both keep log files open under it.
    Their descendants (workers, drivers of jobs, dashboard modules) come along."""
    tmp, real = temp_dir.rstrip("/"), os.path.realpath(temp_dir)
    found: dict[int, psutil.Process] = {}
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid == os.getpid():
                continue
            if any(tmp in a for a in p.info["cmdline"] or []) or any(
                    f.path.startswith((tmp + "/", real + "/")) for f in p.open_files()):
                found[p.pid] = p
        except psutil.Error:
            pass
    for p in list(found.values()):
        try:
            found.update({c.pid: c for c in p.children(recursive=True)})
        except psutil.Error:
            pass
    found.pop(os.getpid(), None)
    return list(found.values())


def stop(temp_dir: str, timeout_s: float = 10.0) -> list[psutil.Process]:
    """Terminate the head's processes, SIGKILL what survives ``timeout_s``, remove the temp
    dir; return the processes found. Repeated until a scan finds none: the raylet may start
    a worker between a scan and its kill."""
    seen: list[psutil.Process] = []
    for _ in range(5):
        procs = head_processes(temp_dir)
        if not procs:
            break
        seen += procs
        for p in procs:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(procs, timeout=timeout_s)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=5)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return seen


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["start", "stop"])
    ap.add_argument("temp_dir")
    ap.add_argument("--num-cpus", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--port", type=int, default=None, help="the GCS port (default: a free one)")
    ap.add_argument("--dashboard-port", type=int, default=None, help="default: a free one")
    a = ap.parse_args(argv)
    if a.action == "start":
        print(start(a.temp_dir, a.num_cpus, a.port, a.dashboard_port))
    else:
        stop(a.temp_dir)


if __name__ == "__main__":
    main()
