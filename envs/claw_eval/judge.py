"""The judge handed to Claw-Eval graders: upstream's method names over a pluggable backend.

Graders call ``judge.evaluate(task_prompt, conversation, actions_summary, rubric)`` and
``judge.evaluate_actions(task_prompt, artifacts, rubric)`` and read ``.score`` (0-1) and
``.reasoning``; two graders talk to ``judge.client.chat.completions.create(...)`` with
``judge.model_id`` directly. ``ClawJudge`` offers all of these over one function
``ask(prompt) -> reply text``:

    "endpoint"  an OpenAI-compatible server (``judge_endpoint`` = {"base_url", "model",
                "api_key_env", ...}), reached with ``envs.openai_client``
    "fn"        ``judge_fn(prompt) -> str``; the actor graph wires it to a local model
                folder on its own engine actor (``judge="model"``, ``judge_model=...``)
                or to the policy's engines (``judge="policy"``), as for Hard20
    "stub"      a deterministic stand-in that always answers ``judge_stub_score``, for
                tests and oracle checks; its label says it is not a judge
    "none"      no judge: tasks whose grader calls one are refused at ``reset``

Replies are cached by the exact prompt, so the identical episodes a group often holds
cost one call. A call that raises or answers without a readable score is retried a
bounded number of times with a capped backoff; when the attempts run out the failure is
recorded in ``failures`` and ``JudgeUnavailable`` (an ``InfrastructureError``) is raised,
and the grading bridge turns a recorded failure into a grading error even when a grader
catches the exception and falls back to a score of its own.

A judge that answers but never readably (a small local model) is not an outage, and
retrying a deterministic one repeats the same answer: with ``unreadable="zero"``
(``judge_unreadable`` in env_config; opt-in) such a call scores 0, is counted in
``unreadable``, and is reported in the episode's breakdown instead of failing it.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

from envs.base import InfrastructureError
from envs.openai_client import OpenAIChatClient

JUDGES = ("none", "endpoint", "fn", "stub")
UNREADABLE_POLICIES = ("error", "zero")
STUB_LABEL = "stub (deterministic stand-in, not a judge)"

_SCORE_PROMPT = """You are grading the work of an AI assistant on a task it did with tools.

# Task given to the assistant
{task}

# {evidence_title}
{evidence}

# Grading rubric
{rubric}

Score how well the assistant met the rubric, from 0.0 (not at all) to 1.0 (fully).
Answer with JSON only: {{"score": <number from 0 to 1>, "reasoning": "<one or two sentences>"}}"""


@dataclass(frozen=True)
class JudgeVerdict:
    """What graders read from a judge call."""

    score: float
    reasoning: str


class JudgeUnavailable(InfrastructureError):
    """The judge could not give a verdict within the allowed attempts."""


def parse_score(reply: str) -> JudgeVerdict | None:
    """A verdict from a reply holding ``{"score": x, ...}`` (possibly fenced or inside
    prose), the score clamped to [0, 1]; None when no score can be read."""
    text = reply or ""
    for match in re.finditer(r"\{[^{}]*\}", text):
        try:
            data = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and isinstance(data.get("score"), (int, float)) and not isinstance(
                data.get("score"), bool):
            return JudgeVerdict(min(1.0, max(0.0, float(data["score"]))), str(data.get("reasoning", "")))
    bare = re.search(r'"score"\s*:\s*(-?[0-9]+(?:\.[0-9]+)?)', text)
    if bare:
        return JudgeVerdict(min(1.0, max(0.0, float(bare.group(1)))), "")
    return None


class ClawJudge:
    def __init__(self, ask: Callable[[str], str], label: str, *, attempts: int = 3, backoff_s: float = 1.0,
                 max_backoff_s: float = 8.0, cache_size: int = 20000, sleep: Callable[[float], None] = time.sleep,
                 unreadable: str = "error"):
        if not callable(ask):
            raise TypeError("the judge backend must be callable as ask(prompt: str) -> str")
        if attempts < 1:
            raise ValueError(f"judge attempts must be at least 1, got {attempts}")
        if unreadable not in UNREADABLE_POLICIES:
            raise ValueError(f"judge_unreadable must be one of {UNREADABLE_POLICIES}, got {unreadable!r}")
        self.unreadable_policy = unreadable
        self.unreadable = 0          # calls scored 0 for an unreadable reply (unreadable="zero")
        self.ask, self.label, self.model_id = ask, label, label
        self.attempts, self.backoff_s, self.max_backoff_s, self.sleep = attempts, backoff_s, max_backoff_s, sleep
        self.cache: OrderedDict[str, str] = OrderedDict()
        self.cache_size = cache_size
        self.calls = 0               # backend calls made (cache hits excluded)
        self.failures: list[str] = []  # one entry per call that ran out of attempts
        self.client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=self._create)))

    # ---- upstream's surface ----------------------------------------------------------------------
    def evaluate(self, task_prompt: str, conversation: str, actions_summary: str, rubric: str) -> JudgeVerdict:
        evidence = f"{conversation}\n\n# Actions taken\n{actions_summary or '(none recorded)'}"
        return self._verdict(_SCORE_PROMPT.format(task=task_prompt, evidence_title="Conversation",
                                                  evidence=evidence, rubric=rubric))

    def evaluate_actions(self, task_prompt: str, artifacts: str, rubric: str) -> JudgeVerdict:
        return self._verdict(_SCORE_PROMPT.format(task=task_prompt, evidence_title="What the assistant did "
                                                  "(server-side records)", evidence=artifacts, rubric=rubric))

    def _create(self, model: str | None = None, messages: list[dict] | None = None, **_ignored):
        """``client.chat.completions.create``: the messages' text as one prompt; the
        reply comes back in the OpenAI response shape graders index into."""
        prompt = "\n\n".join(str(m.get("content", "")) for m in messages or [])
        reply = self._reply(prompt, accept=lambda text: bool(text.strip()))
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=reply))])

    # ---- cache, retries ----------------------------------------------------------------------------
    def _verdict(self, prompt: str) -> JudgeVerdict:
        reply = self._reply(prompt, accept=lambda text: parse_score(text) is not None)
        verdict = parse_score(reply)
        return verdict if verdict is not None else JudgeVerdict(0.0, "unreadable judge reply, scored 0")

    def _keep(self, key: str, reply: str) -> str:
        self.cache[key] = reply
        if len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        return reply

    def _reply(self, prompt: str, accept: Callable[[str], bool]) -> str:
        key = hashlib.sha256(prompt.encode()).hexdigest()
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        last, reply = "no attempt", None
        for attempt in range(self.attempts):
            if attempt:
                self.sleep(min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s))
            self.calls += 1
            try:
                reply = self.ask(prompt)
            except Exception as exc:  # noqa: BLE001 - any backend failure is retried, then reported
                last, reply = f"{type(exc).__name__}: {exc}", None
                continue
            if isinstance(reply, str) and accept(reply):
                return self._keep(key, reply)
            last = f"unreadable reply: {str(reply)[:200]!r}"
        if self.unreadable_policy == "zero" and isinstance(reply, str):
            self.unreadable += 1  # the last attempt answered, just not readably
            return self._keep(key, reply)
        message = f"judge {self.label} gave no verdict in {self.attempts} attempts ({last})"
        self.failures.append(message)
        raise JudgeUnavailable(message)


def make_judge(config: dict) -> ClawJudge | None:
    """The judge an env_config asks for (see the module docstring); None for "none"."""
    kind = config.get("judge", "none")
    if kind not in JUDGES:
        raise ValueError(f"unknown judge {kind!r} for ClawEvalEnv; valid judges: {list(JUDGES)} (the actor graph "
                         "turns 'policy' and 'model' into 'fn')")
    retry = {"attempts": int(config.get("judge_attempts", 3)), "backoff_s": float(config.get("judge_backoff_s", 1.0)),
             "unreadable": config.get("judge_unreadable", "error")}
    if kind == "none":
        return None
    if kind == "stub":
        score = float(config.get("judge_stub_score", 1.0))
        reply = json.dumps({"score": score, "reasoning": "stub verdict"})
        return ClawJudge(lambda prompt: reply, STUB_LABEL, **retry)
    if kind == "endpoint":
        endpoint = config.get("judge_endpoint") or {}
        client = OpenAIChatClient(**{"max_tokens": 512, "purpose": "judge endpoint", **endpoint})
        return ClawJudge(client, f"endpoint:{client.model}", **retry)
    if not callable(config.get("judge_fn")):
        raise ValueError("judge='fn' needs env_config['judge_fn'](prompt: str) -> str")
    return ClawJudge(config["judge_fn"], f"fn:{config.get('judge_name') or 'custom'}", **retry)
