"""The text syntax of tool calls inside an assistant turn.

An assistant turn is free text in which each tool call is written as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the Hermes / Qwen
convention, which small instruct models follow well). This module owns that syntax:
``parse_tool_calls`` turns text into ``{content, tool_calls, parse_error}`` and
``format_tool_calls`` writes calls back in exactly the form the parser reads (the RTI
Corrector must emit the policy's own format).

It lives in ``envs`` because environments speak tool calls (envs are model-agnostic and
never see tokens; docs/ARCHITECTURE.md, Dependency direction); ``policies`` imports it to
render turns. Parsing
never raises: a malformed call becomes a ``parse_error`` string that the environment shows
to the agent as an error observation.
"""

from __future__ import annotations

import json
import re
from typing import Any

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)" + re.escape(CLOSE_TAG), re.DOTALL)
_ALLOWED_KEYS = {"name", "arguments"}


def _parse_one(body: str) -> tuple[dict | None, str | None]:
    """Parse the JSON body of one ``<tool_call>`` block into ``{"name", "arguments"}``."""
    body = body.strip()
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return None, f"tool call is not valid JSON ({e.msg} at char {e.pos}): {body[:200]!r}"
    if not isinstance(obj, dict):
        return None, f"tool call must be a JSON object with 'name' and 'arguments', got {type(obj).__name__}"
    unknown = set(obj) - _ALLOWED_KEYS
    if unknown:
        return None, f"tool call has unknown keys {sorted(unknown)}; allowed keys are 'name' and 'arguments'"
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None, "tool call 'name' must be a non-empty string"
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None, f"tool call 'arguments' of {name!r} is a string that is not JSON"
    if not isinstance(args, dict):
        return None, f"tool call 'arguments' of {name!r} must be a JSON object"
    return {"name": name, "arguments": args}, None


def parse_tool_calls(text: str) -> dict[str, Any]:
    """Split an assistant turn into ``{"content", "tool_calls", "parse_error"}``.

    ``content`` is the text outside the tool-call blocks (stripped); ``tool_calls`` the
    well-formed calls in order; ``parse_error`` is None or a message naming every
    malformed block (bad JSON, unknown keys, non-string name, unclosed tag). Several calls
    in one turn are valid.
    """
    calls: list[dict] = []
    errors: list[str] = []
    for m in _BLOCK.finditer(text):
        call, err = _parse_one(m.group(1))
        if err:
            errors.append(err)
        else:
            calls.append(call)
    rest = _BLOCK.sub("", text)
    if OPEN_TAG in rest:
        errors.append(f"unclosed {OPEN_TAG}: every call must end with {CLOSE_TAG}")
        rest = rest.split(OPEN_TAG, 1)[0]
    elif CLOSE_TAG in rest:
        errors.append(f"{CLOSE_TAG} without a matching {OPEN_TAG}")
        rest = rest.replace(CLOSE_TAG, "")
    return {
        "content": rest.strip(),
        "tool_calls": calls,
        "parse_error": "; ".join(errors) if errors else None,
    }


def format_tool_call(name: str, arguments: dict) -> str:
    """One call in the exact syntax ``parse_tool_calls`` reads."""
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{OPEN_TAG}\n{payload}\n{CLOSE_TAG}"


def format_assistant_turn(content: str, tool_calls: list[dict]) -> str:
    """An assistant turn's text: optional prose, then one block per call."""
    parts = [content.strip()] if content and content.strip() else []
    parts += [format_tool_call(c["name"], c.get("arguments", {})) for c in tool_calls]
    return "\n".join(parts)
