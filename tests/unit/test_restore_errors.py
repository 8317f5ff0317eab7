"""A restore whose learner state is damaged in a way ``checkpoints.verify`` cannot see (the
sizes and pickles are fine, the content does not fit) fails naming the checkpoint's folder
and the file, and leaves the learner as it was."""

from collections import Counter
from pathlib import Path

import pytest
import torch

from rti_actors.checkpoints import CheckpointError
from rti_actors.learner import Learner
from rti_actors.updates import Updates


class _Group:
    """The driver's learner group, with the real (torch backend) learner behind ``load``."""

    def __init__(self, learner: Learner):
        self.learner, self.ranks, self.rebuilt = learner, [], 0

    def load(self, path: str) -> int:
        return self.learner.load(path)

    def rebuild(self) -> None:
        self.rebuilt += 1


class _Monitor:
    def replace(self, kind, actors):
        pass


class _Graph:
    def __init__(self, learner):
        self.learner, self.engines, self.queue, self.weight_sync = learner, ["engine"], None, "object_store"


def _updates(group: _Group) -> Updates:
    config = {"training": {}, "fault_tolerance": {"max_restarts": 1}, "learners": {"lora": None}}
    return Updates(_Graph(group), config, _Monitor(), Counter())


def test_an_optimiser_state_with_another_number_of_groups_names_the_folder_and_the_file(tiny_model_path, tmp_path):
    learner = Learner(tiny_model_path, {"lr": 1e-3, "backend": "torch"})
    ckpt = Path(learner.save(str(tmp_path / "ckpt" / "learner"))).parent
    state_file = ckpt / "learner" / "torch_learner.pt"
    state = torch.load(state_file, weights_only=True)
    extra = dict(state["optimizer"]["param_groups"][0], params=[])
    state["optimizer"]["param_groups"].append(extra)  # a second group this learner does not have
    torch.save(state, state_file)

    group = _Group(learner)
    updates = _updates(group)
    with pytest.raises(CheckpointError) as info:
        updates.load(ckpt)
    first = str(info.value).splitlines()[0]
    assert str(ckpt) in first and str(state_file) in first
    assert "different number of parameter groups" in first
    assert group.rebuilt == 1 and updates.learner_step == 0  # the learner put back as it was


def test_an_error_that_names_the_folder_already_is_raised_as_it_is(tiny_model_path, tmp_path):
    learner = Learner(tiny_model_path, {"lr": 1e-3, "backend": "torch"})
    (tmp_path / "ckpt" / "learner").mkdir(parents=True)  # no learner.json: not a checkpoint of this version
    with pytest.raises(FileNotFoundError, match=r"ckpt/learner is not a learner checkpoint"):
        _updates(_Group(learner)).load(tmp_path / "ckpt")
