"""Atomic checkpoint folders: a save killed at any point leaves one whole checkpoint."""

import pytest

from rti_actors.checkpoints import MARKER, atomic_dir, periodic, periodic_path, prune, resolve


def _save(path, value: str, fail: bool = False):
    with atomic_dir(path, {"value": value}) as tmp:
        (tmp / "weights").write_text(value)
        if fail:
            raise KeyboardInterrupt  # killed halfway through writing
        (tmp / "state").write_text(value)


def _read(path) -> tuple[str, str]:
    p = resolve(path)
    return (p / "weights").read_text(), (p / "state").read_text()


def test_a_save_interrupted_over_an_old_checkpoint_leaves_the_old_one_whole(tmp_path):
    ckpt = tmp_path / "ckpt"
    _save(ckpt, "iter1")
    with pytest.raises(KeyboardInterrupt):
        _save(ckpt, "iter3", fail=True)
    assert _read(ckpt) == ("iter1", "iter1")  # never iteration 1 with iteration 3's weights
    _save(ckpt, "iter3")  # the next save cleans the leftover up
    assert _read(ckpt) == ("iter3", "iter3") and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_save_killed_between_its_renames_still_resolves(tmp_path):
    ckpt = tmp_path / "ckpt"
    _save(ckpt, "old")
    # killed after moving the old one aside, before moving the new one in
    new = tmp_path / ".ckpt.partial"
    _save(tmp_path / "staging", "new")
    (tmp_path / "staging").rename(new)
    ckpt.rename(tmp_path / ".ckpt.old")
    assert _read(ckpt) == ("new", "new")
    # killed before the new one was whole: the old one set aside is used
    (new / MARKER).unlink()
    assert _read(ckpt) == ("old", "old")


def test_incomplete_or_missing_checkpoints_are_refused(tmp_path):
    (tmp_path / "half").mkdir()
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        resolve(tmp_path / "half")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        resolve(tmp_path / "none")


def test_periodic_checkpoints_are_listed_in_order_and_pruned(tmp_path):
    for it in (2, 10, 4, 6):
        _save(periodic_path(tmp_path, it), str(it))
    (periodic_path(tmp_path, 8)).mkdir()  # a save that never finished
    assert [p.name for p in periodic(tmp_path)] == ["iter_000002", "iter_000004", "iter_000006", "iter_000010"]
    prune(tmp_path, keep=2)
    assert [p.name for p in periodic(tmp_path)] == ["iter_000006", "iter_000010"]
