"""A trivially learnable single-turn environment for learning-signal tests.

Reward 1 iff the reply starts with ``env_config["target"]`` (a character the test picks
so that the initial policy hits it now and then). A correct policy-gradient update makes
the policy concentrate on it within a few iterations; a sign error would do the opposite."""

from envs import Task, ToolEnv, register_env


class FirstLetterEnv(ToolEnv):
    DEFAULT_CONFIG = {**ToolEnv.DEFAULT_CONFIG, "max_turns": 1, "target": "a", "num_tasks": 4, "canary": None}

    def task_ids(self, split):
        return [f"{split}-{i}" for i in range(self.config["num_tasks"])]

    def load_task(self, task_id):
        return Task(task_id, "You reply.", f"Say anything. ({task_id})", [])

    def compute_reward(self):
        text = self.messages[-1]["content"] if self.messages[-1]["role"] == "assistant" else ""
        ok = text.startswith(self.config["target"])
        return float(ok), {"first_char": text[:1]}

    def reward_evidence(self):
        return {"rule": f"reply starts with {self.config['target']!r}", "canary": self.config["canary"]}

    def oracle_agent(self):
        target = self.config["target"]

        class Reply:
            def act(self, observation):
                return target + " fine answer."
        return Reply()


def make_first_letter(cfg):
    return FirstLetterEnv(cfg)


register_env("FirstLetter-v0", make_first_letter)
