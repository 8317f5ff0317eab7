"""AEPO: each group grown as a tree at the tool calls where the policy was unsure, within
the group budget (``rti_actors.aepo``); the loss weighs advantages by token entropy and
keeps a gradient where the clip would drop it."""

from __future__ import annotations

from rti_actors.aepo import AepoSettings, EntropyBalancedRollout
from rti_actors.algorithms.base import AlgorithmPlugin
from rti_actors.losses import aepo_loss


class AEPO(AlgorithmPlugin):
    name = "aepo"
    with_entropy = True  # from the same logits as the log-probs
    loss_stats = ("entropy_sum", "preserved")  # the loss tokens' entropy, and where the clip kept a gradient
    panels = (("aepo/global_rollouts", "aepo/branches"), ("aepo/branch_rate",), ("learner/entropy_mean",))

    @staticmethod
    def progress(m: dict) -> str:
        # how each group was grown: independent rollouts vs branches at uncertain tool calls
        if "aepo/branches" not in m:
            return ""
        return (f"  aepo: {m['aepo/global_rollouts']:.1f} global + {m['aepo/branches']} branches "
                f"({m['aepo/branch_rate']:.2f} of {m['aepo/decisions']} decisions) in {m['aepo/branch_rounds']} rounds")

    @staticmethod
    def loss(logp, batch, settings, normaliser, entropy=None):
        return aepo_loss(logp, batch["blp"], batch["adv"], batch["tw"], batch["mask"], entropy,
                         clip_eps=settings["clip_eps"], advantage_weight=settings["aepo_advantage_weight"],
                         entropy_clip=settings["aepo_entropy_clip"], num_tokens=normaliser, seq=batch["seq"])

    @classmethod
    def validate(cls, config, ok) -> list[str]:
        if ok("aepo", "initial_rollouts") and ok("training", "group_size", "max_policy_lag"):
            return aepo_problems(config["aepo"], config["training"])
        return []

    def setup(self, driver) -> None:
        settings = AepoSettings.from_config(self.config, len(driver.renderer.tokenizer))
        self.brancher = EntropyBalancedRollout(settings, lambda specs: driver.play(specs), driver.rollouts.play_branches)

    def sample(self, driver) -> tuple[list, object, dict]:
        # global rollouts, then branches in rounds: never launched ahead of the update
        tasks = driver.pick_tasks(self.config["training"]["tasks_per_iteration"])
        trajectories, metrics = self.brancher.rollout(tasks, driver.iteration)
        return trajectories, None, metrics


def aepo_problems(ae: dict, t: dict) -> list[str]:
    """AEPO's budget against the group's, and its rounds against asynchronous sampling."""
    problems = []
    m, g = ae["initial_rollouts"], t["group_size"]
    if m is not None and m > g:
        problems.append(f"aepo(initial_rollouts={m}) is more than the group budget training(group_size={g}): the "
                        "global rollouts and the branches share G; lower it (G gives GRPO's rollout) or raise group_size")
    if t["max_policy_lag"] > 0:
        problems.append(f"training(algorithm='aepo') with max_policy_lag={t['max_policy_lag']}: AEPO's branches are "
                        "played in rounds after the global rollouts of the same iteration, so the next iteration "
                        "cannot start early; use max_policy_lag=0")
    return problems
