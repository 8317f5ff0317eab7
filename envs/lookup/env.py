"""``LookupEnv`` ("Lookup-v0"): chained record lookups with a difficulty knob.

    env = gymnasium.make("Lookup-v0", env_config={"tiers": [1, 2], "split": "train"})
    obs, info = env.reset(options={"task_id": "lookup-t2-train-P117"})

A question of tier k ("What is the team of the mentor of the manager of P917?") needs k
``get_person`` calls, each following an id from the record before, then a reply that
names the value. Tier 1 is a single lookup; every further tier adds one link to follow.
That makes a ladder a 135M policy can climb: after a short warm start on tier 1 it answers
some tier-1 questions (mixed groups, so GRPO has signal) and almost no tier-3 or tier-4
ones (all-fail groups, where only RTI produces a learning signal).

env_config (besides the ``ToolEnv`` defaults: split, max_turns, output truncation, ...):
    tiers       the tiers whose questions make up the splits (default all: 1, 2, 3, 4)
    world_seed  seed of the directory, the questions and the splits (default 0)

Reward is 1 when the episode fetched every record of the chain and its final reply names
the right value and no other value of that attribute, else 0; ``reward_breakdown["progress"]`` counts the chain records fetched in
order and the right answer, out of tier + 1. An episode is a deterministic function of its
config, task id and assistant turns. ``oracle_agent()`` solves every task;
``rti_rules()`` is a rule-based Validator/Corrector (``rules.py``).
"""

from __future__ import annotations

import copy

from envs.base import Task, Tool, ToolEnv, ToolError, VerifierFacts
from envs.lookup.agents import OracleAgent
from envs.lookup.grading import as_turn, grade
from envs.lookup.rules import LookupRules
from envs.lookup.world import TIERS, TOOL, build_world

SYSTEM_PROMPT = ("You answer questions about the people in a company directory. Call get_person with a "
                 "person's id to read their record; a record gives the ids of their manager and mentor. "
                 "Follow the links one call at a time, then reply with the answer in one sentence.")
VERIFIER_FACTS: VerifierFacts = {"tool_output_keys": ["manager", "mentor"],
                                 "tool_output_weak_keys": ["id", "name", "city", "team"],
                                 "coordinate_tolerance_deg": 0.0}


def _tiers(value) -> tuple[int, ...]:
    tiers = (value,) if isinstance(value, int) else tuple(value or ())
    if not tiers or any(not isinstance(t, int) or isinstance(t, bool) or t not in TIERS for t in tiers):
        raise ValueError(f"tiers={value!r}: give a tier or a list of tiers from {list(TIERS)}")
    return tuple(sorted(set(tiers)))


class LookupEnv(ToolEnv):
    DEFAULT_CONFIG = {**ToolEnv.DEFAULT_CONFIG, "max_turns": 6, "tiers": list(TIERS), "world_seed": 0}

    def __init__(self, env_config: dict | None = None, render_mode: str | None = None):
        super().__init__(env_config, render_mode)
        self.tiers = _tiers(self.config["tiers"])
        self.world = build_world(int(self.config["world_seed"]))

    # ---- ToolEnv hooks --------------------------------------------------------------------
    def task_ids(self, split: str) -> list[str]:
        return [t for t in self.world.ids[split] if self.world.questions[t].tier in self.tiers]

    def load_task(self, task_id: str) -> Task:
        question = self.world.questions[task_id]
        tool = Tool(TOOL, "Read the directory record of the person with this id.",
                    {"type": "object", "properties": {"id": {"type": "string", "description": "a person id, e.g. P123"}},
                     "required": ["id"], "additionalProperties": False}, self._get_person)
        return Task(task_id, SYSTEM_PROMPT, question.text(), [tool], {"question": question})

    def _get_person(self, id: str) -> dict:  # noqa: A002 - the schema's argument name
        record = self.world.record(id.strip().upper())
        if record is None:
            raise ToolError(f"no person has the id {id!r}; ids look like P123")
        return record

    def compute_reward(self) -> tuple[float, dict]:
        final = as_turn(self.actions[-1]) if self.actions else None
        text = final["content"] if final is not None and not final["tool_calls"] and not final["parse_error"] else None
        return grade(self.actions, text, self.task.data["question"])

    def reward_evidence(self) -> dict:
        if self.task is None:
            raise RuntimeError("call reset() before reward_evidence()")
        q = self.task.data["question"]
        return {"question": q.text(), "chain": list(q.chain), "links": list(q.links),
                "attribute": q.attribute, "answer": q.answer, "tier": q.tier}

    def oracle_agent(self):
        return OracleAgent(self.reward_evidence())

    def rti_rules(self):
        return LookupRules()

    def verifier_facts(self) -> VerifierFacts:
        return copy.deepcopy(VERIFIER_FACTS)

    def difficulty(self, task_id: str) -> dict:
        """A task's tier: the number of lookups it needs."""
        return {"tier": self.world.questions[task_id].tier}
