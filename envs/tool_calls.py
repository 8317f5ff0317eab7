"""The text syntax of tool calls inside an assistant turn.

An assistant turn is free text in which tool calls are written in one of two syntaxes,
the ones the supported model families are trained on:

* ``hermes`` (ChatML models, Qwen): each call is
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
* ``llama3_json`` (Llama 3.x): the turn ends with one JSON object per call,
  ``{"name": ..., "parameters": {...}}``, optionally after ``<|python_tag|>``.

A turn may open with a reasoning block, ``<think>...</think>`` (Qwen3 and other thinking
models). The parser reads past it: calls written while thinking are not run, and the
reasoning is returned apart from the content, so an environment grades the answer, not
the thoughts. The policy's token buffer keeps the block exactly as sampled either way.

This module owns that syntax: ``parse_tool_calls`` turns text into ``{content, tool_calls,
parse_error}`` (plus ``reasoning`` when the turn had a block) and ``format_assistant_turn``
writes a turn back in exactly the form the parser reads (the RTI Corrector must emit the
policy's own format, and the chat renderer re-renders recorded turns with it).

It lives in ``envs`` because environments speak tool calls (envs are model-agnostic and
never see tokens; docs/ARCHITECTURE.md, Dependency direction); ``policies`` imports it to
render turns. The parser does not know which model wrote a turn, so it accepts both
syntaxes. Parsing never raises: a malformed call becomes a ``parse_error`` string that the
environment shows to the agent as an error observation.
"""

from __future__ import annotations

import json
import re
from typing import Any

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
PYTHON_TAG = "<|python_tag|>"
SYNTAXES = ("hermes", "llama3_json")
_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)" + re.escape(CLOSE_TAG), re.DOTALL)
_ALLOWED_KEYS = ("name", "arguments")
_JSON = json.JSONDecoder()


def _check_call(obj: Any, args_key: str, allowed: tuple[str, ...]) -> tuple[dict | None, str | None]:
    """Validate one decoded call object; the result always names its arguments ``arguments``."""
    if not isinstance(obj, dict):
        return None, f"tool call must be a JSON object with 'name' and '{args_key}', got {type(obj).__name__}"
    unknown = set(obj) - set(allowed)
    if unknown:
        keys = ", ".join(repr(k) for k in allowed[:-1]) + f" and {allowed[-1]!r}"
        return None, f"tool call has unknown keys {sorted(unknown)}; allowed keys are {keys}"
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None, "tool call 'name' must be a non-empty string"
    args = obj.get(args_key, obj.get("arguments", {}))
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None, f"tool call '{args_key}' of {name!r} is a string that is not JSON"
    if not isinstance(args, dict):
        return None, f"tool call '{args_key}' of {name!r} must be a JSON object"
    return {"name": name, "arguments": args}, None


def _parse_one(body: str) -> tuple[dict | None, str | None]:
    """Parse the JSON body of one ``<tool_call>`` block into ``{"name", "arguments"}``."""
    body = body.strip()
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return None, f"tool call is not valid JSON ({e.msg} at char {e.pos}): {body[:200]!r}"
    return _check_call(obj, "arguments", _ALLOWED_KEYS)


def split_reasoning(text: str) -> tuple[str | None, str, str | None]:
    """``(reasoning, rest, error)`` of a turn that may open with ``<think>...</think>``.

    ``reasoning`` is None when the turn has no block. A ``</think>`` with no opening tag
    counts too: some templates put ``<think>`` into the generation prompt, so the sampled
    text starts inside the block. An unclosed block is all reasoning, with an error."""
    lead = text.lstrip()
    if lead.startswith(THINK_OPEN):
        inner = lead[len(THINK_OPEN):]
        if THINK_CLOSE not in inner:
            return inner.strip(), "", f"unclosed {THINK_OPEN}: end the reasoning with {THINK_CLOSE} before answering"
        reasoning, rest = inner.split(THINK_CLOSE, 1)
        return reasoning.strip(), rest, None
    if THINK_CLOSE in text and THINK_OPEN not in text:
        reasoning, rest = text.split(THINK_CLOSE, 1)
        return reasoning.strip(), rest, None
    return None, text, None


def _decode_objects(text: str) -> list | None:
    """All of ``text`` as JSON values separated by whitespace or ';', or None."""
    values, i, n = [], 0, len(text)
    while True:
        while i < n and (text[i].isspace() or text[i] == ";"):
            i += 1
        if i == n:
            return values or None
        try:
            value, i = _JSON.raw_decode(text, i)
        except json.JSONDecodeError:
            return None
        values.append(value)


def _checked(values: list, allowed: tuple[str, ...]) -> tuple[list[dict], list[str]]:
    calls, errors = [], []
    for v in values:
        call, err = _check_call(v, "parameters", allowed)
        if err:
            errors.append(err)
        else:
            calls.append(call)
    return calls, errors


def _llama_calls(text: str) -> tuple[str, list[dict], list[str]] | None:
    """Llama 3.x JSON calls at the end of a turn: ``(prose, calls, errors)``, or None when
    the turn has none.

    After ``<|python_tag|>`` everything must be calls (errors are reported). Without the
    tag, the calls are the turn's last lines and must use Llama's ``parameters`` key: a
    ChatML model's plain JSON answer (or a tag-less Hermes object) stays plain content."""
    if PYTHON_TAG in text:
        prose, body = text.split(PYTHON_TAG, 1)
        values = _decode_objects(body)
        if values is None:
            return prose, [], [f"the text after {PYTHON_TAG} is not a JSON tool call: {body.strip()[:200]!r}"]
        return (prose, *_checked(values, ("name", "parameters", "arguments")))
    starts = ([0] if text.lstrip().startswith("{") else []) + [m.start() + 1 for m in re.finditer(r"\n\{", text)]
    for start in starts:
        values = _decode_objects(text[start:])
        if not values or not all(isinstance(v, dict) and "name" in v and "parameters" in v for v in values):
            continue
        return (text[:start], *_checked(values, ("name", "parameters")))
    return None


def parse_tool_calls(text: str) -> dict[str, Any]:
    """Split an assistant turn into ``{"content", "tool_calls", "parse_error"}``.

    ``content`` is the text outside the reasoning block and the tool calls (stripped);
    ``tool_calls`` the well-formed calls in order, each ``{"name", "arguments"}`` whatever
    the syntax; ``parse_error`` is None or a message naming every malformed call (bad
    JSON, unknown keys, non-string name, unclosed tag). Several calls in one turn are
    valid. When the turn opens with ``<think>...</think>``, the key ``reasoning`` holds
    the block's text (stripped; "" for an empty block); it is absent otherwise.
    """
    reasoning, text, think_error = split_reasoning(text)
    calls: list[dict] = []
    errors: list[str] = [think_error] if think_error else []
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
    elif not calls and OPEN_TAG not in text:
        found = _llama_calls(rest)
        if found is not None:
            rest, calls, more = found
            errors += more
    out = {
        "content": rest.strip(),
        "tool_calls": calls,
        "parse_error": "; ".join(errors) if errors else None,
    }
    if reasoning is not None:
        out["reasoning"] = reasoning
    return out


def format_tool_call(name: str, arguments: dict, syntax: str = "hermes") -> str:
    """One call in the exact syntax ``parse_tool_calls`` reads."""
    if syntax == "llama3_json":
        return json.dumps({"name": name, "parameters": arguments}, ensure_ascii=False)
    if syntax != "hermes":
        raise ValueError(f"unknown tool-call syntax {syntax!r}; known: {list(SYNTAXES)}")
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{OPEN_TAG}\n{payload}\n{CLOSE_TAG}"


def format_reasoning(reasoning: str) -> str:
    """A reasoning block as thinking models write it (Qwen3's layout)."""
    return f"{THINK_OPEN}\n{reasoning.strip()}\n{THINK_CLOSE}\n\n"


def format_assistant_turn(content: str, tool_calls: list[dict], syntax: str = "hermes",
                          reasoning: str | None = None) -> str:
    """An assistant turn's text: optional reasoning block, optional prose, then one call
    per line (a Hermes block each, or a Llama JSON object each)."""
    parts = [content.strip()] if content and content.strip() else []
    parts += [format_tool_call(c["name"], c.get("arguments", {}), syntax) for c in tool_calls]
    text = "\n".join(parts)
    return text if reasoning is None else format_reasoning(reasoning) + text
