"""The learner as a Ray actor that pulls weighted groups from the replay queue."""

from __future__ import annotations

import ray

from rti_actors.groups import is_learnable, to_learner_sample
from rti_actors.learner import Learner


class QueueLearner(Learner):
    def pull_and_update(self, queue, max_groups: int, current_version: int, skip_zero_variance: bool = True) -> dict:
        """Pull up to ``max_groups`` groups and take one optimiser step on them.

        With ``skip_zero_variance`` a group whose rewards are all equal is not sent through
        the model: its advantages are all 0, so its only effect on the token-mean loss would
        be to dilute the other groups' gradient, and on a CPU its forward/backward is most of
        the step (most groups of a weak policy fail entirely)."""
        groups = ray.get(queue.get.remote(max_groups, current_version))
        kept = [g for g in groups if is_learnable(g)] if skip_zero_variance else groups
        samples = [to_learner_sample(t) for g in kept for t in g]
        if not samples:
            return {"skipped": True, "num_groups": len(groups), "num_groups_trained": 0, "num_samples": 0}
        metrics = self.update(samples)
        metrics.update(num_groups=len(groups), num_groups_trained=len(kept))
        return metrics

    def ping(self) -> bool:
        return True
