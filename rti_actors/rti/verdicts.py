"""Parsing the JSON verdicts the policy writes when it plays Validator or Verifier.

A small model rarely writes clean JSON: it thinks first (``<think>...</think>``), wraps the
object in a code fence or in prose, writes Python literals (``True``, single quotes,
trailing commas), or shows an example object before its real answer. The parser drops
think blocks, finds every balanced ``{...}`` outside strings, repairs what can be repaired
without guessing, and returns the LAST object that has the required keys. A trailing
object that never closes means the answer was cut off: then nothing is returned, because
an earlier object may be an example rather than the verdict (an unparsable verdict counts
as "valid" and the candidate is skipped; docs/ALGORITHM.md, Validator).

Parsing never raises and its work is linear in the text: each object is decoded with the
tool-call parser's bounds (``envs.tool_calls.BoundedJSONDecoder``), so an object that is
nested too deeply, holds a huge number or is longer than ``MAX_JSON_CHARS`` counts as no
verdict rather than aborting an iteration.
"""

from __future__ import annotations

import json
import re

from envs.tool_calls import MAX_JSON_CHARS, BoundedJSONDecoder

_OPEN_THINK = re.compile(r"<think>", re.IGNORECASE)
_CLOSE_THINK = re.compile(r"</think>", re.IGNORECASE)
_SPECIAL = re.compile(r"""[{}"'\\]""")  # the characters _objects acts on
_LITERAL = re.compile(r"(True|False|None)\b")
_BEFORE_CLOSER = re.compile(r"\s*[}\]]")  # what makes a comma trailing
_JSON = BoundedJSONDecoder(strict=False)  # strict=False: a raw newline inside a string is common and harmless
_TRUE_WORDS = {"true", "yes", "y", "1", "valid", "pass", "passed", "ok", "是", "对", "正确", "有效", "通过"}
_FALSE_WORDS = {"false", "no", "n", "0", "invalid", "fail", "failed", "否", "不", "错误", "无效", "不通过"}


def _drop_thinking(text: str) -> str | None:
    """Text without think blocks; None when a think block never closes (cut-off output).

    Blocks are found left to right with plain searches: a lazy ``<think>.*?</think>``
    pattern re-scans the whole tail after every unclosed ``<think>`` (quadratic)."""
    kept, i = [], 0
    while (o := _OPEN_THINK.search(text, i)) and (c := _CLOSE_THINK.search(text, o.end())):
        kept.append(text[i:o.start()])
        i = c.end()
    text = "".join(kept) + text[i:]
    closes = [m.end() for m in _CLOSE_THINK.finditer(text)]
    if closes:  # the template opened the block inside the prompt
        text = text[closes[-1]:]
    o = _OPEN_THINK.search(text)
    if o:
        head = text[:o.start()]
        return head if "{" in head else None
    return text


def _objects(text: str) -> tuple[list[str], bool]:
    """Top-level balanced ``{...}`` spans (quote-aware), and whether one is left open."""
    spans, depth, start, quote, escaped = [], 0, -1, "", -1
    for m in _SPECIAL.finditer(text):  # only these characters change the state
        i, ch = m.start(), m.group()
        if quote:
            if i == escaped:  # the character after a backslash
                continue
            if ch == "\\":
                escaped = i + 1
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'" and depth > 0:
            # An apostrophe inside a bare word (don't) is prose, not a string opener.
            if ch == "'" and i > 0 and text[i - 1].isalnum():
                continue
            quote = ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start:i + 1])
    return spans, depth > 0


def _to_json(src: str) -> str:
    """Rewrite Python-ish object syntax as JSON: single- or curly-quoted strings,
    True/False/None, trailing commas, // comments, full-width ：and ，(Chinese prompts).
    Only what is outside strings changes."""
    out, i, n = [], 0, len(src)
    while i < n:
        ch = src[i]
        if ch in "\"'“":
            close = "”" if ch == "“" else ch
            j, buf = i + 1, []
            while j < n and src[j] != close:
                if src[j] == "\\" and j + 1 < n:
                    buf.append(src[j:j + 2])
                    j += 2
                    continue
                buf.append('\\"' if src[j] == '"' else src[j])
                j += 1
            body = "".join(buf)
            if ch == "'":
                body = body.replace("\\'", "'")
            out.append('"' + body + '"')
            i = j + 1
            continue
        m = _LITERAL.match(src, i) if ch in "TFN" else None
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            out.append({"True": "true", "False": "false", "None": "null"}[m.group(1)])
            i += len(m.group(1))
            continue
        if ch == "/" and src[i + 1:i + 2] == "/":
            i = src.find("\n", i)
            i = n if i < 0 else i
            continue
        ch = {"：": ":", "，": ","}.get(ch, ch)
        if ch == "," and _BEFORE_CLOSER.match(src, i + 1):
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _load(span: str):
    if len(span) > MAX_JSON_CHARS:  # past the decoder's bound: not worth repairing either
        return None
    for candidate in (span, None):
        try:  # ValueError: not JSON, or past the decoder's bounds
            return _JSON.decode(candidate if candidate is not None else _to_json(span))
        except ValueError:
            continue
    return None


def _norm(key: str) -> str:
    return re.sub(r"[^0-9a-z]", "", str(key).lower())


def _match(obj, required: dict[str, type]) -> dict | None:
    """``obj`` (or the last nested dict inside it) with every required key of the right
    type, keys renamed to their canonical spelling (isValid, "is-valid" -> is_valid)."""
    if not isinstance(obj, dict):
        return None
    found = {}
    by_norm = {_norm(k): k for k in obj}
    for key, typ in required.items():
        src = by_norm.get(_norm(key))
        value = obj.get(src) if src is not None else None
        if src is None or not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            found = None
            break
        found[key] = src
    if found is not None:
        out = {k: v for k, v in obj.items() if k not in found.values()}
        out.update({key: obj[src] for key, src in found.items()})
        return out
    for value in reversed(list(obj.values())):  # {"verdict": {...}} wrappers
        inner = _match(value, required)
        if inner is not None:
            return inner
    return None


def json_objects(text: str) -> tuple[list, bool]:
    """Every top-level ``{...}`` in ``text``, loaded (repaired where possible; None where
    not), and whether an object is left open at the end. Also used by the Verifier's
    fake-tool-output check."""
    spans, left_open = _objects(text)
    return [_load(span) for span in spans], left_open


def parse_json_verdict(text: str, required: dict[str, type]) -> dict | None:
    """The last JSON object in ``text`` that has every key of ``required`` with a value of
    that type (a type or a tuple of types), or None. See the module docstring for what is
    tolerated."""
    if not isinstance(text, str):
        return None
    body = _drop_thinking(text)
    if body is None:
        return None
    objects, left_open = json_objects(body)
    if left_open:
        return None
    for obj in reversed(objects):
        hit = _match(obj, required)
        if hit is not None:
            return hit
    return None


def _as_bool(value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().strip(".!").lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


def _as_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    return json.dumps(value, ensure_ascii=False)


def _as_list(value) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):  # "wrong_poi, wrong_order"
        return [part.strip() for part in re.split(r"[,;，；]", value) if part.strip()]
    if isinstance(value, (list, tuple)):
        return [_as_text(v) for v in value if _as_text(v)]
    return [_as_text(value)]


_FLAG = (bool, str, int, float)


def parse_validator(text: str) -> dict | None:
    """``{"is_valid": bool, "error_types": [str], "diagnosis": str, "suggest_next": str}``
    or None when there is no object with an interpretable ``is_valid``."""
    obj = parse_json_verdict(text, {"is_valid": _FLAG})
    if obj is None:
        return None
    valid = _as_bool(obj["is_valid"])
    if valid is None:
        return None
    by_norm = {_norm(k): v for k, v in obj.items()}
    return {"is_valid": valid,
            "error_types": _as_list(by_norm.get("errortypes")),
            "diagnosis": _as_text(by_norm.get("diagnosis")),
            "suggest_next": _as_text(by_norm.get("suggestnext"))}


def parse_verifier(text: str) -> dict | None:
    """``{"consistent": bool, "plausible": bool, "reason": str}`` or None when either flag
    is missing or not interpretable as a yes/no."""
    obj = parse_json_verdict(text, {"consistent": _FLAG, "plausible": _FLAG})
    if obj is None:
        return None
    consistent, plausible = _as_bool(obj["consistent"]), _as_bool(obj["plausible"])
    if consistent is None or plausible is None:
        return None
    reason = next((v for k, v in obj.items() if _norm(k) in ("reason", "reasons", "explanation")), "")
    return {"consistent": consistent, "plausible": plausible, "reason": _as_text(reason)}
