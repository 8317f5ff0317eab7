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


class _WritesAFile:
    """What a tampered checkpoint would carry: unpickling it calls a function of the
    attacker's choosing (here one that writes a file)."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        import pathlib
        return pathlib.Path.write_text, (pathlib.Path(self.target), "pwned")


def test_verify_refuses_code_in_a_torch_file_without_running_it(tmp_path):
    import torch

    from rti_actors.checkpoints import CheckpointError, check_pickles, verify

    sentinel = tmp_path / "sentinel"
    with atomic_dir(tmp_path / "ckpt", {}) as tmp:
        torch.save({"weights": torch.ones(3)}, tmp / "model.pt")
    assert verify(tmp_path / "ckpt") == tmp_path / "ckpt"  # a sound one passes
    torch.save({"weights": torch.ones(3), "extra": _WritesAFile(sentinel)}, tmp_path / "ckpt" / "model.pt")
    with pytest.raises(CheckpointError, match=r"model\.pt has \d+ bytes"):  # its size gives it away first
        verify(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=r"model\.pt names Python objects.*pathlib"):  # and its content
        check_pickles(tmp_path / "ckpt")
    assert not sentinel.exists()


def test_verify_names_a_truncated_missing_or_corrupt_file(tmp_path):
    from rti_actors.checkpoints import CheckpointError, verify

    with atomic_dir(tmp_path / "ckpt", {}) as tmp:
        (tmp / "learner").mkdir()
        (tmp / "learner" / "shard.bin").write_bytes(b"x" * 100)
        (tmp / "state.json").write_text('{"iteration": 3}')
    ckpt = tmp_path / "ckpt"
    (ckpt / "learner" / "shard.bin").write_bytes(b"x" * 60)
    with pytest.raises(CheckpointError, match=r"shard\.bin has 60 bytes but was saved with 100"):
        verify(ckpt)
    (ckpt / "learner" / "shard.bin").unlink()
    with pytest.raises(CheckpointError, match=r"shard\.bin is missing"):
        verify(ckpt)
    (ckpt / "state.json").write_text('{"iteration": ')
    with pytest.raises(CheckpointError, match=r"state\.json is corrupt"):
        verify(ckpt)


def test_config_changes_name_training_options_and_ignore_the_layout():
    from rti_actors.checkpoints import config_changes
    from rti_actors.config import RTIConfig

    saved = RTIConfig().environment("Navigation-v0").to_dict()
    same_training = (RTIConfig().environment("Navigation-v0").env_runners(num_env_runners=8)
                     .reporting(run_name="other").learners(num_cpus_per_learner=2)).to_dict()
    assert config_changes(saved, same_training) == []
    other = RTIConfig().environment("Navigation-v0").training(lr=1e-3, group_size=4).to_dict()
    assert config_changes(saved, other) == ["training.group_size: 8 -> 4", "training.lr: 1e-06 -> 0.001"]


def test_rti_options_matter_only_to_runs_that_intervene():
    from rti_actors.checkpoints import config_changes
    from rti_actors.config import RTIConfig

    def cfg(algorithm, delta):
        return (RTIConfig().environment("Navigation-v0").training(algorithm=algorithm)
                .interventions(ppl_threshold=delta).to_dict())

    saved = cfg("grpo", 5.0)
    saved["interventions"].pop("candidates_per_wave")  # a checkpoint older than an RTI option
    assert config_changes(saved, cfg("grpo", 3.0)) == []
    rti_saved = cfg("rti", 5.0)
    assert config_changes(rti_saved, cfg("rti", 3.0)) == ["interventions.ppl_threshold: 5.0 -> 3.0"]
    assert "training.algorithm: 'grpo' -> 'rti'" in config_changes(saved, cfg("rti", 5.0))
