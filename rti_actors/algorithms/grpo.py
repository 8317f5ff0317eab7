"""GRPO: group-normalised rewards as advantages, PPO's clipped ratio per token."""

from __future__ import annotations

from rti_actors.algorithms.base import AlgorithmPlugin
from rti_actors.losses import grpo_loss


class GRPO(AlgorithmPlugin):
    name = "grpo"

    @staticmethod
    def loss(logp, batch, settings, normaliser, entropy=None):
        return grpo_loss(logp, batch["blp"], batch["adv"], batch["tw"], batch["mask"], clip_eps=settings["clip_eps"],
                         num_tokens=normaliser)
