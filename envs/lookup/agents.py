"""The scripted oracle of the lookup env. It acts only through tool calls in the text
syntax a model writes and reads every id and value from the tool outputs (the evidence
only tells it which links to follow), so its episodes are valid training data.

Before each call after the first it states the link it just read ("The manager of P917 is
P164."), and its answer restates the question: a small model trained on these turns makes
each choice next to the text it depends on."""

from __future__ import annotations

import json

from envs.tool_calls import format_tool_call

TOOL = "get_person"


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


def next_turn(evidence: dict, records: list[dict]) -> str:
    """The oracle's turn after the chain's first ``len(records)`` people were fetched (the
    records in chain order): the next lookup, or the answer."""
    start, links, attribute = evidence["chain"][0], evidence["links"], evidence["attribute"]
    if not records:
        return format_tool_call(TOOL, {"id": start})
    step = len(records)
    subject = start
    for link in links[:step - 1]:
        subject = f"the {link} of {subject}"
    if step <= len(links):
        link, target = links[step - 1], records[-1][links[step - 1]]
        return f"The {link} of {subject} is {target}.\n" + format_tool_call(TOOL, {"id": target})
    return f"The {attribute} of {subject} is {records[-1][attribute]}."


class OracleAgent:
    def __init__(self, evidence: dict):
        self.evidence = evidence
        self.fetched: list[dict] = []

    def act(self, observation: list[dict]) -> str:
        for record in _records(observation):  # observation: the messages reset/step just returned
            if len(self.fetched) < len(self.evidence["chain"]) and record["id"] == self.evidence["chain"][len(self.fetched)]:
                self.fetched.append(record)
        return next_turn(self.evidence, self.fetched)
