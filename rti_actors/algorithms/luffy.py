"""LUFFY: a teacher's successful traces take k places in each group (``rti_actors.luffy``);
the learner trains their tokens with the shaped objective, the policy's with the clip."""

from __future__ import annotations

from pathlib import Path

from rti_actors.algorithms.base import AlgorithmPlugin
from rti_actors.losses import luffy_loss
from rti_actors.luffy import Teacher, teacher_metrics
from rti_actors.options import ConfigError, shown


class LUFFY(AlgorithmPlugin):
    name = "luffy"
    loss_stats = ("kl_tokens", "teacher_tokens", "shaped_sum")  # its KL is over on-policy tokens

    @staticmethod
    def loss(logp, batch, settings, normaliser, entropy=None):
        return luffy_loss(logp, batch["blp"], batch["adv"], batch["tw"], batch["mask"], batch["off"],
                          clip_eps=settings["clip_eps"], gamma=settings["luffy_gamma"], num_tokens=normaliser)

    @classmethod
    def validate(cls, config, ok) -> list[str]:
        if ok("luffy", "source", "traces_per_group") and ok("training", "group_size"):
            return luffy_problems(config["luffy"], config["training"]["group_size"])
        return []

    @classmethod
    def episodes_per_task(cls, config) -> int:
        return config["training"]["group_size"] - config["luffy"]["traces_per_group"]

    def start_actors(self, graph) -> dict[str, list]:
        c = self.config
        if c["luffy"]["source"] == "oracle" and not graph.runners.call("has_oracle"):
            raise ConfigError(f"luffy(source='oracle') needs an environment with a scripted oracle_agent(); "
                              f"{c['environment']['env']!r} has none: give luffy(source=<a demonstrations JSONL>) "
                              "instead")
        return {}

    def setup(self, driver) -> None:
        self.teacher = Teacher(self.config, driver.runners, driver.renderer)

    def extra_trajectories(self, driver, launch) -> tuple[list, dict]:
        with driver.timed("teacher"):
            return self.teacher.traces(launch.specs, driver.version)

    def transform_groups(self, driver, groups: list) -> tuple[list, dict]:
        return groups, teacher_metrics(groups)


def luffy_problems(te: dict, group_size: int) -> list[str]:
    """LUFFY's teacher: a source that exists and room for on-policy samples in each group (the
    env's oracle is build's check: it needs the env)."""
    problems = []
    k, source = te["traces_per_group"], te["source"]
    if k >= group_size:
        problems.append(f"luffy(traces_per_group={k}) takes that many of each group's training(group_size="
                        f"{group_size}) samples, leaving none on-policy: lower it or raise group_size")
    if source != "oracle" and not Path(source).expanduser().is_file():
        problems.append(f"luffy(source={shown(str(source))}): no such file; give 'oracle' (the env's scripted "
                        "oracle_agent) or the path of a demonstrations JSONL (rti_actors.demonstrations)")
    return problems
