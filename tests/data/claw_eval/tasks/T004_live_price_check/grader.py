"""Synthetic grader (written for tests): judge only."""

from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class LivePriceGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None, env_snapshot=None):
        verdict = judge.evaluate(task.prompt.text, self.format_conversation(messages), "", task.judge_rubric)
        return DimensionScores(completion=verdict.score, robustness=1.0, safety=1.0)
