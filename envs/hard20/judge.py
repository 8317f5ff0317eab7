"""The rubric judge: pluggable, cached, and optional.

``RubricJudge(judge_fn, label)`` asks ``judge_fn(prompt) -> str`` one question per rubric
item and reads a JSON verdict. The actor graph wires ``judge_fn`` to an engine actor (a
local model folder, or the policy's own engine); ``envs.openai_client.OpenAIChatClient``
reaches any OpenAI-compatible ``/chat/completions`` server with the standard library only.

Without a judge (``judge_fn=None``, the default) every rubric item is scored by its
deterministic fallback (keyword and state tests written with the item), and the label says
so. A judge that raises or answers something unreadable is not trusted on that item
either: the fallback decides it and the breakdown counts it in ``judge_fallbacks``, so a
weak judge (e.g. a 135M policy) can only cost the rubric share of completion.

The prompt shows the English request whatever the episode's language (the rubric items
are English too), so one verdict serves both. Verdicts are cached by the exact prompt (task, item, answer and actions), so the G
identical trajectories a group often contains cost one judge call.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from typing import Callable

from envs.hard20.kit import Outcome, Spec
from envs.openai_client import OpenAIChatClient

PROMPT = """You are grading an AI assistant that worked on an office task with tools.

Task given to the assistant:
{request}

What the assistant changed (successful write actions, in order):
{writes}

The assistant's final answer:
{answer}

Criterion: {item}

Does the assistant's work meet the criterion? Reply with JSON only: {{"pass": true}} or {{"pass": false}}."""


def writes_summary(outcome: Outcome, max_chars: int = 3000) -> str:
    lines = [f"- {e['tool']}({json.dumps(e['args'], ensure_ascii=False, sort_keys=True)})"
             for e in outcome.backend.audit if e.get("kind") == "write" and e.get("ok")]
    text = "\n".join(lines) or "(none)"
    return text if len(text) <= max_chars else text[:max_chars] + "\n...(more)"


def parse_verdict(reply: str) -> bool | None:
    """True/False from a JSON ``{"pass": ...}`` (or a bare PASS/FAIL); None if unreadable."""
    for match in re.finditer(r"\{[^{}]*\}", reply or ""):
        try:
            value = json.loads(match.group(0)).get("pass")
        except (json.JSONDecodeError, AttributeError):
            continue
        if isinstance(value, bool):
            return value
    words = set(re.findall(r"[a-z]+", (reply or "").casefold()))
    if ("pass" in words) != ("fail" in words):
        return "pass" in words
    return None


class RubricJudge:
    def __init__(self, judge_fn: Callable[[str], str] | None = None, label: str | None = None,
                 cache_size: int = 20000):
        if judge_fn is not None and not callable(judge_fn):
            raise TypeError("judge_fn must be callable as judge_fn(prompt: str) -> str")
        self.judge_fn = judge_fn
        self.label = "none (deterministic rubric fallback)" if judge_fn is None else (label or "fn")
        self.cache: OrderedDict[str, bool] = OrderedDict()
        self.cache_size = cache_size
        self.calls = 0

    def verdicts(self, spec: Spec, outcome: Outcome) -> list[dict]:
        out = []
        for r in spec.rubric:
            verdict, source = None, "fallback"
            if self.judge_fn is not None:
                verdict = self._ask(PROMPT.format(request=spec.request["en"], writes=writes_summary(outcome),
                                                  answer=outcome.answer or "(empty)", item=r.item))
                source = "judge" if verdict is not None else "fallback (judge unreadable)"
            if verdict is None:
                try:
                    verdict = bool(r.fallback(outcome))
                except Exception:  # see grading._safely: a fallback bug scores the item False
                    verdict = False
            out.append({"item": r.item, "weight": r.weight, "passed": verdict, "source": source})
        return out

    def _ask(self, prompt: str) -> bool | None:
        key = hashlib.sha256(prompt.encode()).hexdigest()
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        self.calls += 1
        try:
            verdict = parse_verdict(self.judge_fn(prompt))
        except Exception:  # an unreachable judge must not kill the episode
            return None
        if verdict is not None:
            self.cache[key] = verdict
            if len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        return verdict


JUDGES = ("none", "endpoint", "fn")


def make_judge(config: dict) -> RubricJudge:
    """The judge an env_config asks for (see ``env.py``)."""
    kind = config.get("judge", "none")
    if kind not in JUDGES:
        raise ValueError(f"unknown judge {kind!r} for Hard20Env; valid judges: {list(JUDGES)}")
    if kind == "none":
        return RubricJudge(None)
    if kind == "endpoint":
        endpoint = config.get("judge_endpoint") or {}
        client = OpenAIChatClient(**{"max_tokens": 64, "purpose": "judge endpoint", **endpoint})
        return RubricJudge(client, f"endpoint:{client.model}")
    if not callable(config.get("judge_fn")):
        raise ValueError("judge='fn' needs env_config['judge_fn'](prompt: str) -> str")
    return RubricJudge(config["judge_fn"], f"fn:{config.get('judge_name') or 'custom'}")
