"""The scripted oracle of the lookup env. It acts only through tool calls in the text
syntax a model writes and reads every id and value from the tool outputs (the evidence
only tells it which links to follow), so its episodes are valid training data.

Before each call after the first it states the link it just read ("The manager of P917 is
P164."), and its answer restates the question: a small model trained on these turns makes
each choice next to the text it depends on."""

from __future__ import annotations

import json

from envs.lookup.world import TOOL, subject
from envs.tool_calls import format_tool_call


def _records(observation: list[dict]) -> list[dict]:
    out = []
    for m in observation:
        if m["role"] == "tool" and m.get("name") == TOOL:
            try:
                record = json.loads(m["content"])
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "id" in record:
                out.append(record)
    return out


def oracle_turn(evidence: dict, fetched: int, value: str) -> str:
    """The oracle's turn once the chain's first ``fetched`` people were fetched: the lookup of
    ``value`` (the next person's id), or, with the whole chain fetched, the answer ``value``.
    The rule-based Corrector writes its fixes with it too."""
    start, links = evidence["chain"][0], evidence["links"]
    if fetched == 0:
        return format_tool_call(TOOL, {"id": value})
    field = links[fetched - 1] if fetched <= len(links) else evidence["attribute"]
    said = f"The {field} of {subject(start, links[:fetched - 1])} is {value}."
    return said + "\n" + format_tool_call(TOOL, {"id": value}) if fetched <= len(links) else said


class OracleAgent:
    def __init__(self, evidence: dict):
        self.evidence = evidence
        self.fetched: list[dict] = []

    def act(self, observation: list[dict]) -> str:
        for record in _records(observation):  # observation: the messages reset/step just returned
            if len(self.fetched) < len(self.evidence["chain"]) and record["id"] == self.evidence["chain"][len(self.fetched)]:
                self.fetched.append(record)
        step = len(self.fetched)
        if step == 0:
            return oracle_turn(self.evidence, 0, self.evidence["chain"][0])
        links = self.evidence["links"]
        field = links[step - 1] if step <= len(links) else self.evidence["attribute"]
        return oracle_turn(self.evidence, step, self.fetched[-1][field])  # read off the last record
