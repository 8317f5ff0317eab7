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

from rti_actors.options import DEFAULTS, LAYOUT, OWNER, upgrade

MARKER = "checkpoint.json"

# What a checkpoint's torch files may hold besides tensors and plain containers: DeepSpeed's
# ZeRO optimizer states. DeepSpeed loads its files with an unrestricted unpickler, so every
# file is scanned first and one naming any other Python global (code a tampered file would
# run on load) is refused before anything reads it.
TRUSTED_GLOBALS = frozenset({
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.utils.tensor_fragment.fragment_address",
})


class CheckpointError(ValueError):
    """A checkpoint that cannot be restored; the message names the file."""


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
    files = {str(f.relative_to(tmp)): f.stat().st_size for f in sorted(tmp.rglob("*")) if f.is_file()}
    (tmp / MARKER).write_text(json.dumps({**meta, "saved_at": time.time(), "files": files}, indent=2))
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


def check_pickles(folder: str | Path) -> None:
    """Refuse any torch file under ``folder`` that cannot be parsed or that names a Python
    global outside ``TRUSTED_GLOBALS``, without running anything in it."""
    import torch

    for f in sorted(Path(folder).rglob("*.pt")):
        try:
            found = torch.serialization.get_unsafe_globals_in_checkpoint(str(f))
        except Exception as e:
            raise CheckpointError(f"{f} cannot be read ({type(e).__name__}: {e}); the checkpoint is corrupt") from None
        bad = sorted(set(found) - TRUSTED_GLOBALS)
        if bad:
            raise CheckpointError(f"{f} names Python objects no checkpoint of this library holds ({', '.join(bad)}): "
                                  "it was altered or written by other code, and is not loaded")


def verify(path: str | Path) -> Path:
    """The whole checkpoint at ``path`` (``resolve``), checked before anything is restored from
    it: every file its marker lists is there with the size it was saved with, every JSON file
    parses and every torch file passes ``check_pickles``. Raises ``CheckpointError`` naming
    the file, so a restore either has a sound checkpoint or changes nothing."""
    path = resolve(path)
    for f in sorted(path.rglob("*.json")):
        try:
            json.loads(f.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise CheckpointError(f"{f} is corrupt ({type(e).__name__}: {e})") from None
    for rel, size in json.loads((path / MARKER).read_text()).get("files", {}).items():
        f = path / rel
        if not f.is_file():
            raise CheckpointError(f"{f} is missing from the checkpoint")
        if f.stat().st_size != size:
            raise CheckpointError(f"{f} has {f.stat().st_size} bytes but was saved with {size}: it was truncated or "
                                  "changed after the save")
    check_pickles(path)
    return path


def load_error(folder: str | Path, err: BaseException) -> BaseException:
    """A learner's load of ``folder`` that failed although ``verify`` passed (a file whose size
    is right but whose state does not fit, e.g. an optimiser state with another number of
    parameter groups), as a ``CheckpointError`` that names the folder and the learner's state
    files. An error that names the folder already is returned as it is."""
    folder = Path(folder)
    cause = getattr(err, "cause", None) or err  # a learner rank's error arrives wrapped by Ray
    if str(folder) in str(cause):
        return err
    files = sorted(folder.rglob("*.pt"))
    named = ", ".join(str(f) for f in files) if files else f"the files under {folder}"
    return CheckpointError(f"checkpoint {folder.parent} could not be restored: the learner's state in {named} does "
                           f"not fit this learner ({type(cause).__name__}: {str(cause).strip()[:300]}); the file is "
                           "damaged or from another model or optimiser, and nothing was restored")


def config_changes(saved: dict, current: dict) -> list[str]:
    """The training options that differ between a checkpoint's config and this run's, as
    "section.option: saved -> current". Options that only lay the run out (``options.LAYOUT``)
    may change; a section read by other algorithms only (``options.OWNER``) changes nothing;
    an option a checkpoint predates ran with its default."""
    saved = upgrade(saved)
    out = []
    algorithms = {saved.get("training", {}).get("algorithm"), current.get("training", {}).get("algorithm")}
    for section, values in current.items():
        owner = OWNER.get(section)
        if owner is not None and owner.isdisjoint(algorithms):
            continue
        for key, value in values.items():
            before = saved.get(section, {}).get(key, DEFAULTS.get(section, {}).get(key))
            if key not in LAYOUT.get(section, ()) and before != value:
                out.append(f"{section}.{key}: {before!r} -> {value!r}")
    return out


def periodic_path(run_dir: str | Path, iteration: int, sft_step: int | None = None) -> Path:
    """iter_000012, or iter_000000_sft_000040 for step 40 of a warm start before iteration 1:
    the names sort in the order they were written."""
    tail = f"_sft_{sft_step:06d}" if sft_step is not None else ""
    return Path(run_dir) / "checkpoints" / f"iter_{iteration:06d}{tail}"


def periodic(run_dir: str | Path) -> list[Path]:
    """The run's complete periodic checkpoints, oldest first."""
    folder = Path(run_dir) / "checkpoints"
    return sorted(p for p in folder.glob("iter_*") if is_complete(p)) if folder.is_dir() else []


def prune(run_dir: str | Path, keep: int) -> None:
    for p in periodic(run_dir)[:-keep]:
        shutil.rmtree(p, ignore_errors=True)
