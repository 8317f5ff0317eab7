"""The optional NL-assertion judge (τ²'s NL_ASSERTION component). No paper-era task is scored with
NL_ASSERTION, so nothing uses it by default; pass ``LLMJudge(chat_fn)`` as
``env_config["nl_judge"]`` for task files that are.

The judge reads the whole conversation as ``role: content`` lines plus the expected
outcomes and must answer JSON ``{"results": [{"expectedOutcome", "reasoning",
"metExpectation"}]}``. An answer that cannot be read counts every outcome as unmet.
"""

from __future__ import annotations

import json
from typing import Callable

JUDGE_INSTRUCTIONS = (
    "You grade a customer-service conversation between an agent and a user. For each expected outcome, "
    "decide from the conversation alone whether it was met. Reply with JSON only, in the form "
    '{"results": [{"expectedOutcome": <the outcome>, "reasoning": <one or two sentences>, '
    '"metExpectation": true or false}]}, one result per expected outcome, in the given order.')


def conversation_text(trajectory: list[dict]) -> str:
    return "\n".join(f"{m['role']}: {m.get('content') or ''}" for m in trajectory)


class LLMJudge:
    def __init__(self, chat_fn: Callable[[list[dict]], str]):
        self.chat_fn = chat_fn

    def __call__(self, trajectory: list[dict], assertions: list[str]) -> list[bool]:
        prompt = (f"<conversation>\n{conversation_text(trajectory)}\n</conversation>\n"
                  f"<expected_outcomes>\n{json.dumps(assertions)}\n</expected_outcomes>")
        reply = self.chat_fn([{"role": "system", "content": JUDGE_INSTRUCTIONS}, {"role": "user", "content": prompt}])
        try:
            body = reply[reply.index("{"): reply.rindex("}") + 1]
            results = json.loads(body)["results"]
            met = [r.get("metExpectation") is True for r in results]
        except (ValueError, KeyError, TypeError, AttributeError):
            return [False] * len(assertions)
        return met if len(met) == len(assertions) else [False] * len(assertions)
