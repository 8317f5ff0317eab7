"""Checkpoint folders that are either whole or absent, and the run's periodic ones.

A save writes into a hidden sibling folder and renames it into place only when every
file is written and ``checkpoint.json`` (the marker, written last) is there. Replacing an
existing checkpoint moves the old one aside first, so a save killed at any point leaves
either the old checkpoint or the new one, never a mix of two states; ``resolve`` finds
whichever is whole. Periodic checkpoints live in ``<run dir>/checkpoints/iter_NNNNNN``.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

MARKER = "checkpoint.json"


def _aside(path: Path, what: str) -> Path:
    return path.with_name(f".{path.name}.{what}")


def is_complete(path: Path) -> bool:
    return (path / MARKER).is_file()


@contextmanager
def atomic_dir(path: str | Path, meta: dict):
    """``with atomic_dir(p, meta) as tmp:`` write the checkpoint into ``tmp``; on success it
    becomes ``p`` (with ``meta`` in its marker). On an exception nothing at ``p`` changes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = _aside(path, "partial"), _aside(path, "old")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a save that was killed
    tmp.mkdir()
    yield tmp
    (tmp / MARKER).write_text(json.dumps({**meta, "saved_at": time.time()}, indent=2))
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def resolve(path: str | Path) -> Path:
    """The whole checkpoint saved at ``path``: ``path`` itself, or, when a save over it was
    killed between its two renames, the finished new one or the old one set aside."""
    path = Path(path)
    for candidate in (path, _aside(path, "partial"), _aside(path, "old")):
        if is_complete(candidate):
            return candidate
    if path.exists():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {MARKER}: its save did not finish)")
    raise FileNotFoundError(f"no checkpoint at {path}")


def periodic_path(run_dir: str | Path, iteration: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"iter_{iteration:06d}"


def periodic(run_dir: str | Path) -> list[Path]:
    """The run's complete periodic checkpoints, oldest first."""
    folder = Path(run_dir) / "checkpoints"
    return sorted(p for p in folder.glob("iter_*") if is_complete(p)) if folder.is_dir() else []


def prune(run_dir: str | Path, keep: int) -> None:
    for p in periodic(run_dir)[:-keep]:
        shutil.rmtree(p, ignore_errors=True)
