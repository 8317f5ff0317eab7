"""LUFFY: a teacher's successful traces take k places in each group (``rti_actors.luffy``);
the learner trains their tokens with the shaped objective, the policy's with the clip."""

from __future__ import annotations

import ray

from rti_actors.algorithms.base import AlgorithmPlugin
from rti_actors.config import ConfigError, teacher_problems
from rti_actors.losses import luffy_loss
from rti_actors.luffy import Teacher, teacher_metrics


class LUFFY(AlgorithmPlugin):
    name = "luffy"
    loss_stats = ("kl_tokens", "teacher_tokens", "shaped_sum")  # its KL is over on-policy tokens

    @staticmethod
    def loss(logp, batch, settings, normaliser, entropy=None):
        return luffy_loss(logp, batch["blp"], batch["adv"], batch["tw"], batch["mask"], batch["off"],
                          clip_eps=settings["clip_eps"], gamma=settings["luffy_gamma"], num_tokens=normaliser)

    @classmethod
    def validate(cls, config, ok) -> list[str]:
        if ok("teacher", "source", "traces_per_group") and ok("training", "group_size"):
            return teacher_problems(config["teacher"], config["training"]["group_size"])
        return []

    @classmethod
    def episodes_per_task(cls, config) -> int:
        return config["training"]["group_size"] - config["teacher"]["traces_per_group"]

    def start_actors(self, graph) -> dict[str, list]:
        c = self.config
        if c["teacher"]["source"] == "oracle" and not ray.get(graph.runners[0].has_oracle.remote()):
            raise ConfigError(f"teacher(source='oracle') needs an environment with a scripted oracle_agent(); "
                              f"{c['environment']['env']!r} has none: give teacher(source=<a demonstrations JSONL>) "
                              "instead")
        return {}

    def setup(self, driver) -> None:
        self.teacher = Teacher(self.config, driver.runners, driver.renderer)

    def extra_trajectories(self, driver, launch) -> tuple[list, dict]:
        with driver.timed("teacher"):
            return self.teacher.traces(launch.specs, driver.version)

    def transform_groups(self, driver, groups: list) -> tuple[list, dict]:
        return groups, teacher_metrics(groups)
