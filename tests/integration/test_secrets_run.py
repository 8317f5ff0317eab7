"""A key given as users give it (an environment variable) reaches the endpoint and nothing
else: not the run directory (config, metrics, TensorBoard, logs, checkpoint), not Ray's
session files, not the console."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

CANARY = "sk-canary-5f1c2e9a7b3d"


def _files_with(root: Path, needle: bytes) -> list[str]:
    hits = []
    for f in root.rglob("*"):
        try:
            if f.is_file() and not f.is_symlink() and needle in f.read_bytes():
                hits.append(str(f))
        except OSError:
            pass
    return hits


def test_an_endpoint_key_is_sent_and_written_nowhere(tiny_model_path, tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="rtikey", dir="/tmp")  # short: AF_UNIX paths are <= 107 bytes
    env = dict(os.environ, RAY_TMPDIR=ray_tmp, PYTHONPATH=str(REPO), RTI_ROLE_API_KEY=CANARY)
    env.pop("RAY_ADDRESS", None)  # a local cluster of its own, whose workers inherit the key
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("secrets_driver.py")), tiny_model_path,
                           str(tmp_path / "runs")], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    out = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert out["triggered"] == 2 and out["requests"] > 0 and out["with_key"] == out["requests"]  # it was used
    run = tmp_path / "runs" / "keyed"
    assert (run / "checkpoints").is_dir() and (run / "config.json").is_file() and list(run.glob("logs/*.log"))
    assert CANARY not in done.stdout + done.stderr
    assert _files_with(run, CANARY.encode()) == []
    assert _files_with(Path(ray_tmp), CANARY.encode()) == []
