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
environment shows to the agent as an error observation. The work is linear in the text and
the JSON it decodes is bounded (``BoundedJSONDecoder``), so no model output can stall the
parser or hand the environment a value it cannot copy, encode or validate.
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
_ALLOWED_KEYS = ("name", "arguments")

# Bounds on the JSON of one call. Tool arguments are small and shallow; past these a value is
# an attack or a runaway generation, on which json raises (RecursionError when deep, ValueError
# on an int past Python's digit limit, and int() is quadratic where that limit is lifted) and
# the env recurses per level (deepcopy, jsonschema, pickling for Ray).
MAX_JSON_CHARS = 100_000
MAX_JSON_DEPTH = 32
MAX_JSON_DIGITS = 100
MAX_ERROR_CHARS = 4000  # a parse_error is shown to the agent: keep the observation small
# A JSON string (closed or not: an unclosed one runs to the end, so the scan stays linear)
# or a bracket; what the depth scan steps through.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


def _bounded_int(digits: str) -> int:
    n = len(digits.lstrip("-"))
    if n > MAX_JSON_DIGITS:
        raise ValueError(f"has a number of {n} digits; write numbers of at most {MAX_JSON_DIGITS} digits "
                         "(longer ones as strings)")
    return int(digits)


class BoundedJSONDecoder(json.JSONDecoder):
    """``json.JSONDecoder`` that refuses, with a ``ValueError`` saying what to change, an
    object or array longer than ``MAX_JSON_CHARS`` characters or nested deeper than
    ``MAX_JSON_DEPTH`` levels, and an integer of more than ``MAX_JSON_DIGITS`` digits. Use
    it for any JSON a model wrote: ``json.loads(text, cls=BoundedJSONDecoder)`` or an
    instance's ``decode``/``raw_decode``. The positions in its errors about an object or
    array count from where that value starts."""

    def __init__(self, **kwargs):
        super().__init__(parse_int=_bounded_int, **kwargs)

    def raw_decode(self, s, idx=0):
        if s[idx:idx + 1] not in ("[", "{"):
            return super().raw_decode(s, idx)
        # Decode the container alone: a JSONDecodeError counts the lines from the start of
        # its string, which would make each error in a long text cost the text's length.
        end = _container_end(s, idx)
        value, n = super().raw_decode(s[idx:end])
        return value, idx + n


def _container_end(s: str, idx: int) -> int:
    """Where the object or array opening at ``s[idx]`` ends (past its closing bracket; the
    end of ``s`` when it never closes). ValueError past the size or depth bound."""
    stop, depth = min(len(s), idx + MAX_JSON_CHARS), 0
    for m in _JSON_TOKEN.finditer(s, idx, stop):
        ch = s[m.start()]
        depth += (ch in "[{") - (ch in "]}")
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"nests deeper than {MAX_JSON_DEPTH} levels; flatten it")
        if depth == 0:
            return m.end()
    if stop < len(s):
        raise ValueError(f"is longer than {MAX_JSON_CHARS} characters; pass less data per call")
    return len(s)


_JSON = BoundedJSONDecoder()
_SEPARATORS = re.compile(r"[\s;]*")  # between Llama calls


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
            args = _JSON.decode(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None, f"tool call '{args_key}' of {name!r} is a string that is not JSON"
        except ValueError as e:
            return None, f"tool call '{args_key}' of {name!r} {e}"
    if not isinstance(args, dict):
        return None, f"tool call '{args_key}' of {name!r} must be a JSON object"
    return {"name": name, "arguments": args}, None


def _parse_one(body: str) -> tuple[dict | None, str | None]:
    """Parse the JSON body of one ``<tool_call>`` block into ``{"name", "arguments"}``."""
    body = body.strip()
    try:
        obj = _JSON.decode(body)
    except json.JSONDecodeError as e:
        return None, f"tool call is not valid JSON ({e.msg} at char {e.pos}): {body[:200]!r}"
    except ValueError as e:
        return None, f"tool call JSON {e}"
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


def _decode_objects(text: str) -> list:
    """All of ``text`` as JSON values separated by whitespace or ';' (ValueError if it is not)."""
    values, i = [], _SEPARATORS.match(text).end()
    while i < len(text):
        value, i = _JSON.raw_decode(text, i)
        values.append(value)
        i = _SEPARATORS.match(text, i).end()
    return values


def _llama_tail(text: str, start: int) -> tuple[list | None, int]:
    """The JSON values from ``start`` to the end of ``text`` when every one is a Llama call
    (else None), and where the last value read whole ends."""
    values, read = [], start
    while True:
        i = _SEPARATORS.match(text, read).end()
        if i == len(text):
            return values, read
        try:
            value, end = _JSON.raw_decode(text, i)
        except ValueError:
            return None, read
        if not (isinstance(value, dict) and "name" in value and "parameters" in value):
            return None, end
        values.append(value)
        read = end


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
        try:
            values = _decode_objects(body)
        except json.JSONDecodeError:
            values = []
        except ValueError as e:
            return prose, [], [f"the JSON after {PYTHON_TAG} {e}"]
        if not values:
            return prose, [], [f"the text after {PYTHON_TAG} is not a JSON tool call: {body.strip()[:200]!r}"]
        return (prose, *_checked(values, ("name", "parameters", "arguments")))
    starts = ([0] if text.lstrip().startswith("{") else []) + [m.start() + 1 for m in re.finditer(r"\n\{", text)]
    resume = 0
    for start in starts:
        # A start before `resume` lies inside JSON read from an earlier start: it ends the
        # same way or, nested in a value, cannot begin a call list. Skipping it keeps the
        # search linear (a long run of calls with a bad last line is read once, not per line).
        if start < resume:
            continue
        values, resume = _llama_tail(text, start)
        if values:
            return (text[:start], *_checked(values, ("name", "parameters")))
    return None


def _joined(errors: list[str]) -> str | None:
    """The errors as one ``parse_error``, cut to ``MAX_ERROR_CHARS``."""
    error = "; ".join(errors)
    if len(error) > MAX_ERROR_CHARS:
        error = error[:MAX_ERROR_CHARS] + f"... ({len(error) - MAX_ERROR_CHARS} more characters)"
    return error or None


def _blocks(text: str) -> tuple[list[str], str, bool]:
    """``(bodies, rest, unclosed)``: the bodies of the ``<tool_call>`` blocks, the text
    outside them (cut at an unclosed tag) and whether a tag is left unclosed. With
    ``str.find`` and no regex: a lazy pattern re-scans the whole tail after every unclosed
    tag, which made thousands of them take seconds."""
    bodies, outside, i = [], [], 0
    while (j := text.find(OPEN_TAG, i)) >= 0:
        outside.append(text[i:j])
        k = text.find(CLOSE_TAG, j + len(OPEN_TAG))
        if k < 0:
            return bodies, "".join(outside), True
        bodies.append(text[j + len(OPEN_TAG):k])
        i = k + len(CLOSE_TAG)
    outside.append(text[i:])
    return bodies, "".join(outside), False


def parse_tool_calls(text: str) -> dict[str, Any]:
    """Split an assistant turn into ``{"content", "tool_calls", "parse_error"}``.

    ``content`` is the text outside the reasoning block and the tool calls (stripped);
    ``tool_calls`` the well-formed calls in order, each ``{"name", "arguments"}`` whatever
    the syntax; ``parse_error`` is None or a message naming every malformed call (bad
    JSON, unknown keys, non-string name, unclosed tag, JSON past the bounds above), cut to
    ``MAX_ERROR_CHARS``. Several calls in one turn are
    valid. When the turn opens with ``<think>...</think>``, the key ``reasoning`` holds
    the block's text (stripped; "" for an empty block); it is absent otherwise.
    """
    reasoning, text, think_error = split_reasoning(text)
    calls: list[dict] = []
    errors: list[str] = [think_error] if think_error else []
    bodies, rest, unclosed = _blocks(text)
    for body in bodies:
        call, err = _parse_one(body)
        if err:
            errors.append(err)
        else:
            calls.append(call)
    if unclosed:
        errors.append(f"unclosed {OPEN_TAG}: every call must end with {CLOSE_TAG}")
    elif CLOSE_TAG in rest:
        errors.append(f"{CLOSE_TAG} without a matching {OPEN_TAG}")
        rest = rest.replace(CLOSE_TAG, "")
    elif not calls and OPEN_TAG not in text:
        found = _llama_calls(rest)
        if found is not None:
            rest, calls, more = found
            errors += more
    out = {"content": rest.strip(), "tool_calls": calls, "parse_error": _joined(errors)}
    if reasoning is not None:
        out["reasoning"] = reasoning
    return out


def turn_from_dict(action: dict) -> dict[str, Any]:
    """A turn given as a dict, ``{"content", "tool_calls"}`` (optionally ``parse_error``),
    checked as strictly as text and returned in ``parse_tool_calls``' form: a call that is
    not an object with a non-empty string ``name`` and JSON ``arguments`` within the bounds
    above becomes part of ``parse_error``, as does a ``content`` that is not a string or
    ``tool_calls`` that is not a list. Never raises."""
    errors = []
    given = action.get("parse_error")
    if given is not None:
        errors.append(given if isinstance(given, str) else f"'parse_error' must be a string, got {type(given).__name__}")
    content = action.get("content")
    if content is not None and not isinstance(content, str):
        errors.append(f"'content' must be a string, got {type(content).__name__}")
        content = None
    raw = action.get("tool_calls")
    if raw is not None and not isinstance(raw, list):
        errors.append(f"'tool_calls' must be a list of {{'name': ..., 'arguments': {{...}}}} objects, got {type(raw).__name__}")
        raw = None
    calls = []
    for item in raw or []:
        call, err = _dict_call(item)
        if err:
            errors.append(err)
        else:
            calls.append(call)
    return {"content": content or "", "tool_calls": calls, "parse_error": _joined(errors)}


def _dict_call(item: Any) -> tuple[dict | None, str | None]:
    if not isinstance(item, dict):
        return None, f"each tool call must be an object with 'name' and 'arguments', got {type(item).__name__}"
    # A JSON round trip applies the text path's bounds and refuses what is not JSON data (a
    # cycle, a set): the env copies, encodes and validates the arguments later.
    try:
        text = json.dumps({"name": item.get("name"), "arguments": item.get("arguments", {})})
    except (TypeError, ValueError, RecursionError) as e:
        return None, f"tool call name and arguments must be JSON data ({type(e).__name__}: {e})"
    try:
        obj = _JSON.decode(text)
    except ValueError as e:
        return None, f"tool call JSON {e}"
    return _check_call(obj, "arguments", _ALLOWED_KEYS)


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
