"""The learner as a Ray actor that pulls weighted groups from the replay queue."""

from __future__ import annotations

import ray

from rti_actors.groups import to_learner_sample
from rti_actors.learner import Learner


class QueueLearner(Learner):
    def pull_and_update(self, queue, max_groups: int, current_version: int) -> dict:
        groups = ray.get(queue.get.remote(max_groups, current_version))
        samples = [to_learner_sample(t) for g in groups for t in g]
        if not samples:
            return {"skipped": 1, "num_groups": 0}
        metrics = self.update(samples)
        metrics["num_groups"] = len(groups)
        return metrics

    def ping(self) -> bool:
        return True
