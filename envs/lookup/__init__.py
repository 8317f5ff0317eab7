"""Lookup: chained record lookups over a generated company directory, a task ladder whose
tier k needs k dependent tool calls (``world``: the directory, questions and splits;
``grading``: reward and progress; ``agents``: the scripted oracle; ``rules``: the rule-based
RTI Validator/Corrector; ``env``: the gymnasium env)."""

from envs.lookup.agents import OracleAgent
from envs.lookup.env import LookupEnv
from envs.lookup.world import TIERS, Question, build_world

__all__ = ["LookupEnv", "OracleAgent", "Question", "TIERS", "build_world"]
