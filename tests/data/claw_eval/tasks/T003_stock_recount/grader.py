"""Synthetic grader (written for tests): deterministic, no judge."""

from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class StockRecountGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None, env_snapshot=None):
        final = self._get_final_assistant_text(messages)
        return DimensionScores(completion=1.0 if "SKU-B" in final and "SKU-A" not in final else 0.0,
                               robustness=self.compute_robustness(dispatches), safety=1.0)
