"""The rule-based Validator/Corrector of the lookup env (``LookupEnv.rti_rules()``, used
with ``roles="rules"``).

The only plans that solve a question fetch the chain's people in order and then name the
value, so the Validator walks the turns with the number of chain people fetched so far and
flags the first turn that does not move along that plan:

- a turn that fetches the wrong person (or calls another tool, or cannot be parsed);
- a turn that only fetches people already fetched (it wastes one of the few turns);
- a reply before the last person of the chain was fetched;
- a reply that names a wrong value (or none, or several).

The fix is minimal and uses only what the history shows (every id it writes is in the
question or in a record already fetched, the value in the last record): a wrong id in an
otherwise well-formed call is replaced by the right one, keeping the turn's prose; a wrong
value in a reply is replaced by the right one; anything else becomes the oracle's turn for
that point. Then the policy carries on from the fixed turn.
"""

from __future__ import annotations

import re

from envs.base import RuleVerdict
from envs.lookup.agents import oracle_turn
from envs.lookup.grading import as_turn, looked_up, named_values
from envs.lookup.world import TOOL, subject
from envs.tool_calls import format_assistant_turn


def _walk(actions: list, evidence: dict) -> tuple[int, int, str] | None:
    """(turn index, chain people fetched before it, error kind) of the first off-plan turn."""
    chain = [c.upper() for c in evidence["chain"]]
    fetched = 0
    for step, action in enumerate(actions):
        turn = as_turn(action)
        if turn["parse_error"]:
            return step, fetched, "unparsable_call"
        if turn["tool_calls"]:
            ids = [looked_up(call) for call in turn["tool_calls"]]
            if any(i is None for i in ids):
                return step, fetched, "wrong_tool"
            if fetched < len(chain) and chain[fetched] in ids:
                if any(i not in chain[:fetched + 1] for i in ids):
                    return step, fetched, "wrong_person"
                fetched += 1
                continue
            return step, fetched, "repeated_lookup" if all(i in chain[:fetched] for i in ids) else "wrong_person"
        if fetched < len(chain):
            return step, fetched, "answered_early"
        if named_values(turn["content"], evidence["attribute"]) != [evidence["answer"]]:
            return step, fetched, "wrong_answer"
        return None
    return None


def _subject(evidence: dict, hops: int) -> str:
    return subject(evidence["chain"][0], evidence["links"][:hops])


class LookupRules:
    def validate(self, messages: list[dict], actions: list, evidence: dict) -> RuleVerdict | None:
        found = _walk(actions, evidence)
        if found is None:
            return None
        step, fetched, kind = found
        chain = evidence["chain"]
        if fetched < len(chain):
            want = f"{chain[0]}" if fetched == 0 else f"{_subject(evidence, fetched)}, whose id is in the record of {chain[fetched - 1]}"
            suggest = f"Call get_person for {want}."
        else:
            suggest = f"Reply with the {evidence['attribute']} given in the record of {chain[-1]}."
        diagnosis = {
            "unparsable_call": "the tool call cannot be parsed",
            "wrong_tool": "the turn calls a tool other than get_person, or without an id",
            "wrong_person": "the turn fetches a person who is not next on the chain of the question",
            "repeated_lookup": "the turn fetches again a person already fetched",
            "answered_early": f"the reply comes before {_subject(evidence, len(chain) - 1)} was looked up",
            "wrong_answer": f"the reply does not name the {evidence['attribute']} of {_subject(evidence, len(chain) - 1)}",
        }[kind]
        return {"step": step, "is_valid": False, "error_types": [kind], "diagnosis": diagnosis,
                "suggest_next": suggest}

    def correct(self, messages: list[dict], actions: list, evidence: dict, verdict: RuleVerdict) -> str:
        found = _walk(actions, evidence)
        step, fetched, kind = found if found is not None else (verdict["step"], len(evidence["chain"]), "")
        turn = as_turn(actions[step])
        chain, attribute = evidence["chain"], evidence["attribute"]
        if fetched < len(chain):
            calls = turn["tool_calls"]
            if kind == "wrong_person" and len(calls) == 1 and looked_up(calls[0]) is not None:
                return format_assistant_turn(turn["content"], [{"name": TOOL, "arguments": {"id": chain[fetched]}}])
            return oracle_turn(evidence, fetched, chain[fetched])
        wrong = named_values(turn["content"], attribute)
        if kind == "wrong_answer" and len(wrong) == 1:
            return _replace_word(turn["content"], wrong[0], evidence["answer"])
        return oracle_turn(evidence, fetched, evidence["answer"])


def _replace_word(text: str, old: str, new: str) -> str:
    return re.sub(rf"\b{re.escape(old)}\b", new, text, flags=re.IGNORECASE)


__all__ = ["LookupRules"]
