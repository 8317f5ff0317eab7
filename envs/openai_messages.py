"""Chat messages between the OpenAI wire format and the library's own form.

The library's messages (``envs.base``) carry tool calls as ``{"name", "arguments": dict}``
and tool results as ``{"role": "tool", "content"}``. OpenAI's carry them as
``{"id", "type": "function", "function": {"name", "arguments": JSON string}}`` and allow
content as a list of text parts. An agent harness speaks the second; the chat renderer
reads the first. ``from_openai`` refuses, with a ``ValueError`` saying what to change, what
a text-only policy cannot read (images, audio) or what is not a chat message.
"""

from __future__ import annotations

import json
import uuid

ROLES = ("system", "developer", "user", "assistant", "tool")


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def to_openai_call(call: dict, id_: str | None = None) -> dict:
    """A library tool call as an OpenAI one (a fresh id unless given)."""
    return {"id": id_ or call_id(), "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}), ensure_ascii=False)}}


def to_openai(message: dict) -> dict:
    """A library message in OpenAI's form (tool calls with ids and JSON-string arguments)."""
    out = {k: v for k, v in message.items() if k not in ("tool_calls", "reasoning_content")}
    if message.get("tool_calls"):
        out["tool_calls"] = [to_openai_call(c) for c in message["tool_calls"]]
    return out


def _text(content, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(f"{where}: content part of type {kind!r}; this policy reads text parts only "
                                 "({'type': 'text', 'text': ...})")
            parts.append(part["text"])
        return "".join(parts)
    raise ValueError(f"{where}: content must be a string, a list of text parts or null, got {type(content).__name__}")


def _call(call, where: str) -> dict:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ValueError(f"{where}: each tool call must be {{'type': 'function', 'function': {{'name': ..., "
                         "'arguments': '<JSON>'}}")
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: the arguments of {fn['name']!r} are not JSON ({e})") from None
    if not isinstance(args, dict):
        raise ValueError(f"{where}: the arguments of {fn['name']!r} must be a JSON object")
    return {"name": fn["name"], "arguments": args}


def from_openai(message, index: int = 0) -> dict:
    """One OpenAI chat message in the library's form: ``{"role", "content"}`` plus
    ``tool_calls`` on an assistant message and ``name``/``tool_call_id`` on a tool result.
    ``developer`` is read as ``system``."""
    where = f"messages[{index}]"
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        role = message.get("role") if isinstance(message, dict) else None
        raise ValueError(f"{where}: role {role!r}; a message's role is one of {list(ROLES)}")
    role = "system" if message["role"] == "developer" else message["role"]
    out = {"role": role, "content": _text(message.get("content"), where)}
    if role == "assistant" and message.get("tool_calls"):
        if not isinstance(message["tool_calls"], list):
            raise ValueError(f"{where}: tool_calls must be a list")
        out["tool_calls"] = [_call(c, where) for c in message["tool_calls"]]
    if role == "tool":
        for key in ("name", "tool_call_id"):
            if isinstance(message.get(key), str):
                out[key] = message[key]
    return out
