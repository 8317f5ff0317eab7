"""Reading an episode of the lookup env: which chain records it fetched, what it answered,
and the reward with its partial progress. The env's grader and its RTI rules share these."""

from __future__ import annotations

import re

from envs.lookup.world import ATTRIBUTES, TOOL, Question
from envs.tool_calls import parse_tool_calls, turn_from_dict


def as_turn(action) -> dict:
    """An assistant turn as ``step`` read it: text is parsed, a dict is checked."""
    return turn_from_dict(action) if isinstance(action, dict) else parse_tool_calls(str(action))


def looked_up(call: dict) -> str | None:
    """The id a ``get_person`` call asks for, or None for any other call."""
    args = call.get("arguments")
    if call.get("name") != TOOL or not isinstance(args, dict) or not isinstance(args.get("id"), str):
        return None
    return args["id"].strip().upper()


def named_values(text: str, attribute: str) -> list[str]:
    """The values of ``attribute`` that ``text`` names, as whole words, in vocabulary order."""
    low = text.lower()
    return [v for v in ATTRIBUTES[attribute] if re.search(rf"\b{re.escape(v.lower())}\b", low)]


def answer_is_right(text: str, question: Question) -> bool:
    """The reply names the right value and no other value of that attribute."""
    return named_values(text, question.attribute) == [question.answer]


def chain_progress(actions: list, question: Question) -> int:
    """How many of the chain's people the episode fetched, in chain order: person i counts
    once person i - 1 was fetched at the same turn or before."""
    fetched = 0
    for action in actions:
        for call in as_turn(action)["tool_calls"]:
            if fetched < len(question.chain) and looked_up(call) == question.chain[fetched]:
                fetched += 1
    return fetched


def grade(actions: list, final_text: str | None, question: Question) -> tuple[float, dict]:
    """(reward, breakdown): reward 1 when the final reply is right and the episode fetched
    the whole chain (a value that is right by chance, read off the wrong record, is no
    success: with a dozen values per attribute that happens about once in ten); progress
    counts the chain records fetched and the right answer, out of tier + 1."""
    fetched = chain_progress(actions, question)
    right = final_text is not None and fetched == question.tier and answer_is_right(final_text, question)
    return float(right), {"progress": (fetched + right) / (question.tier + 1), "fetched": fetched,
                          "answered": final_text is not None, "correct": right, "tier": question.tier}
