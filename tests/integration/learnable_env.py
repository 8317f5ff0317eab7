"""A trivially learnable single-turn environment for learning-signal tests.

Reward 1 iff the reply starts with ``env_config["target"]`` (a character the test picks
so that the initial policy hits it now and then). A correct policy-gradient update makes
the policy concentrate on it within a few iterations; a sign error would do the opposite."""

import os
import time
import uuid
from pathlib import Path

from envs import InfrastructureError, Task, Tool, ToolEnv, register_env

# A kill test sets these: the episode after the first HOLD_AFTER of the run (counted across
# every env process through files in HOLD_DIR) blocks in reset, so the run is surely stuck
# mid-iteration when it is killed, however fast the earlier iterations went.
HOLD_DIR, HOLD_AFTER = "RTI_TEST_HOLD_DIR", "RTI_TEST_HOLD_AFTER_EPISODES"


def _hold_if_asked() -> None:
    folder = os.environ.get(HOLD_DIR)
    if not folder:
        return
    (Path(folder) / uuid.uuid4().hex).touch()
    if len(list(Path(folder).iterdir())) > int(os.environ[HOLD_AFTER]):
        while True:
            time.sleep(1)


class FirstLetterEnv(ToolEnv):
    DEFAULT_CONFIG = {**ToolEnv.DEFAULT_CONFIG, "max_turns": 1, "target": "a", "num_tasks": 4, "canary": None,
                      "nan_reward_task": None}  # this task's grader returns NaN

    def task_ids(self, split):
        return [f"{split}-{i}" for i in range(self.config["num_tasks"])]

    def load_task(self, task_id):
        _hold_if_asked()
        return Task(task_id, "You reply.", f"Say anything. ({task_id})", [])

    def compute_reward(self):
        text = self.messages[-1]["content"] if self.messages[-1]["role"] == "assistant" else ""
        ok = text.startswith(self.config["target"])
        if self.task.task_id == self.config["nan_reward_task"]:
            return float("nan"), {"first_char": text[:1]}
        return float(ok), {"first_char": text[:1]}

    def reward_evidence(self):
        return {"rule": f"reply starts with {self.config['target']!r}", "canary": self.config["canary"]}

    def oracle_agent(self):
        target = self.config["target"]

        class Reply:
            def act(self, observation):
                return target + " fine answer."
        return Reply()


CALLS = {"backend": 0}  # per process: fresh envs of one runner share it


class FailingEnv(ToolEnv):
    """Task "grader-down": the grader always crashes. Task "flaky": the first reset of the
    process finds the backend down, the retry works. Task "bug": ``step`` has a bug. Task
    "ok": a plain one-turn task whose reply always scores 0."""

    DEFAULT_CONFIG = {**ToolEnv.DEFAULT_CONFIG, "max_turns": 1}

    def task_ids(self, split):
        return ["ok", "grader-down", "flaky", "bug"]

    def load_task(self, task_id):
        if task_id == "flaky":
            CALLS["backend"] += 1
            if CALLS["backend"] == 1:
                raise InfrastructureError("backend unreachable")
        lookup = Tool("lookup", "Looks something up.", {"type": "object", "properties": {}}, lambda: "x")
        return Task(task_id, "You reply.", "Say anything.", [lookup])

    def step(self, action):
        if self.task.task_id == "bug":
            raise KeyError("a bug in the env")
        return super().step(action)

    def compute_reward(self):
        if self.task.task_id == "grader-down":
            raise InfrastructureError("the judge did not answer")
        return 0.0, {"progress": 0.0}

    def reward_evidence(self):
        return {}


class BadValuesEnv(ToolEnv):
    """Tasks whose env returns what no reward is ("nan", "inf", "text", "none", "numpy" is a
    legal numpy float), and "flood": a tool result far longer than any context."""

    DEFAULT_CONFIG = {**ToolEnv.DEFAULT_CONFIG, "max_turns": 2}
    REWARDS = {"nan": float("nan"), "inf": float("-inf"), "text": "one", "none": None}

    def task_ids(self, split):
        return ["nan", "inf", "text", "none", "numpy", "flood"]

    def load_task(self, task_id):
        return Task(task_id, "You reply.", "Say anything.", [])

    def step(self, action):
        if self.task.task_id == "flood":  # every reply is answered with ~2 MB of text
            self.messages.append({"role": "assistant", "content": str(action)})
            return [{"role": "user", "content": "x " * 1_000_000}], 0.0, False, False, {}
        return super().step(action)

    def compute_reward(self):
        import numpy as np
        if self.task.task_id == "numpy":
            return np.float32(0.5), {}
        return self.REWARDS.get(self.task.task_id, 0.0), {}


def make_first_letter(cfg):
    return FirstLetterEnv(cfg)


register_env("FirstLetter-v0", make_first_letter)
register_env("Failing-v0", FailingEnv)
register_env("BadValues-v0", BadValuesEnv)
