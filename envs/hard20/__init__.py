"""Hard20: twenty hard multi-service office/ops task families (one of the RTI paper's
benchmarks), in the style of Claw-Eval, written for this project, with in-process mock services.

Layout: the fixed clock, audit log and fault injection (``backend``); the twelve mock
services (``service``, ``services_people``, ``services_business``, ``services_ops``,
``services``); the vocabulary families are written in (``kit``); the families
(``families_comms``, ``families_finance``, ``families_support``, ``families_ops``); the
suite and its splits (``suite``); the Claw-Eval score (``grading``); the pluggable rubric
judge (``judge``); prompts (``wording``); scripted agents (``agents``); the env (``env``).

    import gymnasium as gym, envs
    env = gym.make("Hard20-v0", env_config={"split": "test", "language": "en"})
    obs, info = env.reset(options={"task_id": "hard20-inbox_triage"})
    obs, reward, terminated, truncated, info = env.step('<tool_call>{"name": "kb_search", '
                                                        '"arguments": {"query": "inbox"}}</tool_call>')
"""

from envs.hard20.agents import run_script
from envs.hard20.env import Hard20Env
from envs.hard20.grading import PASS_THRESHOLD, claw_score, grade
from envs.hard20.judge import RubricJudge
from envs.hard20.suite import FAMILIES, NUM_VARIANTS, SUMMARIES, build_spec, split_ids

__all__ = ["Hard20Env", "run_script", "grade", "claw_score", "PASS_THRESHOLD", "RubricJudge",
           "FAMILIES", "NUM_VARIANTS", "SUMMARIES", "build_spec", "split_ids"]
