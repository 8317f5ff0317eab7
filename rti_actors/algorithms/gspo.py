"""GSPO: GRPO's advantages with a clipped, length-normalised sequence ratio."""

from __future__ import annotations

from rti_actors.algorithms.base import AlgorithmPlugin
from rti_actors.losses import gspo_loss


class GSPO(AlgorithmPlugin):
    name = "gspo"
    normaliser = "sequences"

    @staticmethod
    def loss(logp, batch, settings, normaliser, entropy=None):
        return gspo_loss(logp, batch["blp"], batch["adv"], batch["tw"], batch["mask"],
                         clip_eps=settings["gspo_clip_eps"], num_sequences=normaliser, seq=batch["seq"])
