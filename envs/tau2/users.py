"""User simulators behind one interface, the τ² scenario text and the stop tokens.

A simulator sees only what the τ² user sees: the agent's text messages and
the results of its own tool calls. ``respond`` gets the messages addressed to the user
since its last turn and returns ``{"content": str | None, "tool_calls": [{"name",
"arguments"}]}``. Implementations: ``LLMUser`` (llm_user.py, the faithful one) and
``ScriptedUser`` below (deterministic, for tests and smoke runs; NOT faithful to τ²).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field

STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")


def is_stop(message: dict) -> bool:
    """A user message without tool calls whose text holds a stop token (it ends the episode)."""
    return not message.get("tool_calls") and any(t in (message.get("content") or "") for t in STOP_TOKENS)


def _indent(text: str) -> str:
    return textwrap.indent(text, "\t")


def render_instructions(instructions) -> str:
    if isinstance(instructions, str):
        return instructions
    parts = [f"Domain: {instructions['domain']}", "Reason for call:", _indent(instructions["reason_for_call"])]
    if instructions.get("known_info") is not None:
        parts += ["Known info:", _indent(instructions["known_info"])]
    if instructions.get("unknown_info") is not None:
        parts += ["Unknown info:", _indent(instructions["unknown_info"])]
    parts += ["Task instructions:", _indent(instructions["task_instructions"])]
    return "\n".join(parts)


def render_scenario(scenario: dict) -> str:
    """``str(user_scenario)`` exactly as upstream renders it into the user's system prompt."""
    lines = []
    if scenario.get("persona") is not None:
        lines += ["Persona:", _indent(scenario["persona"])]
    lines += ["Instructions:", _indent(render_instructions(scenario["instructions"]))]
    return "\n".join(lines)


def user_system_prompt(guidelines: str, scenario: dict) -> str:
    return f"{guidelines}\n\n<scenario>\n{render_scenario(scenario)}\n</scenario>"


@dataclass
class UserContext:
    """What a simulator is given at the start of an episode."""

    domain: str
    task: dict  # the raw τ² task (scenario, ids); a faithful simulator reads only the scenario
    system_prompt: str  # guidelines + scenario
    tools: list = field(default_factory=list)  # envs.base.Tool records of the user's phone (telecom)


class UserSimulator:
    """Interface. ``faithful`` says whether the simulator follows τ²'s protocol."""

    name = "user"
    faithful = False

    def reset(self, ctx: UserContext) -> None:
        raise NotImplementedError

    def respond(self, incoming: list[dict]) -> dict:
        """``incoming``: ``{"role": "assistant", "content"}`` (the agent's text) or
        ``{"role": "tool", "id", "name", "content", "error"}`` (results of own calls)."""
        raise NotImplementedError


_CALL = re.compile(r"\b([a-z_]+)\s*(\([^()]*\))?")


class ScriptedUser(UserSimulator):
    """A deterministic stand-in user, built from the task scenario. NOT faithful to τ².

    Rules, in order, for each agent message:
    1. a reply to its own tool calls reports the tool outputs verbatim;
    2. the agent's text names user tools (``toggle_airplane_mode`` or
       ``grant_app_permission(app_name="messaging", permission="sms")``): call them, in
       the order they appear, with the literal keyword arguments given;
    3. the agent mentions a transfer to a human: ``###TRANSFER###``;
    4. the agent asks a question (``?``): answer with the scenario's known info and consent;
    5. otherwise, or after ``max_turns`` replies: ``###STOP###``.
    The opening message states the reason for the call and the known info.
    """

    name = "scripted"
    faithful = False

    def __init__(self, max_turns: int = 12):
        self.max_turns = max_turns

    def reset(self, ctx: UserContext) -> None:
        instructions = ctx.task["user_scenario"]["instructions"]
        if isinstance(instructions, str):
            self.reason, self.known = instructions, ""
        else:
            self.reason = instructions["reason_for_call"].strip()
            self.known = (instructions.get("known_info") or "").strip()
        # The scenario speaks to the user ("You are ..."); say it in the first person.
        for you, me in (("You are", "I am"), ("Your", "My"), ("You want", "I want"), ("You ", "I ")):
            self.reason = self.reason.replace(you, me)
            self.known = self.known.replace(you, me)
        self.tool_names = {t.name for t in ctx.tools}
        self.turns = 0

    def respond(self, incoming: list[dict]) -> dict:
        self.turns += 1
        results = [m for m in incoming if m["role"] == "tool"]
        if results:
            return {"content": "\n".join(f"{m['name']}: {m['content']}" for m in results), "tool_calls": []}
        text = "\n".join(m.get("content") or "" for m in incoming)
        if self.turns == 1:
            return {"content": f"Hi. {self.reason} {self.known}".strip(), "tool_calls": []}
        calls = self._requested_calls(text)
        if calls:
            return {"content": None, "tool_calls": calls}
        if "transfer" in text.lower():
            return {"content": "###TRANSFER###", "tool_calls": []}
        if "?" in text and self.turns <= self.max_turns:
            return {"content": f"{self.known} Yes, please go ahead.".strip(), "tool_calls": []}
        return {"content": "Thank you, that is all. ###STOP###", "tool_calls": []}

    def _requested_calls(self, text: str) -> list[dict]:
        calls = []
        for m in _CALL.finditer(text):
            if m.group(1) not in self.tool_names:
                continue
            calls.append({"name": m.group(1), "arguments": _literal_kwargs(m.group(2) or "")})
        return calls


def _literal_kwargs(parens: str) -> dict:
    """``(a="x", b=true)`` -> ``{"a": "x", "b": True}``; anything unparsable gives ``{}``."""
    if not parens:
        return {}
    source = parens.replace("true", "True").replace("false", "False").replace("null", "None")
    try:
        call = ast.parse("f" + source, mode="eval").body
        return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    except (SyntaxError, ValueError):
        return {}
