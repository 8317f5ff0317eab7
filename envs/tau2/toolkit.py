"""A τ² toolkit: a mutable database plus the named functions that read and change it.

Each domain subclasses ``Toolkit`` and marks its methods with ``@tool`` (exposed to an LLM,
in the domain's exposure order) or ``@helper`` (initialisation helpers and assertion
functions that tasks call by name but no LLM sees). Databases are plain JSON-native
dicts in canonical form (dates as strings, enums as their values, optional fields present
as ``None``), so the state fingerprint is one ``json.dumps`` and a fresh copy is one
``json.loads``.

Tools signal failures by raising; the environment turns the exception text into a
τ²-style ``Error: ...`` tool message.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable

from envs.base import Tool, ToolError

# The integer texts upstream's lax int fields accept: ASCII digits, a sign, single
# underscores between digits and a fraction of zeros ("+1_000.00").
_INT_TEXT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?")
_CALC_CHARS = set("0123456789+-*/(). ")
# Bounds that keep every expression to milliseconds: a length (for the parser), a nesting
# depth (for the evaluator's recursion) and the size of a power's result (an int result
# past a float's 1024 bits ends in an overflow anyway; past these it would take minutes).
_CALC_MAX_CHARS = 1000
_CALC_MAX_DEPTH = 200
_CALC_MAX_BITS = 10_000


@dataclass(frozen=True)
class ToolSpec:
    """What ``@tool`` records about a method: its type and its LLM-facing schema."""

    kind: str  # read | write | generic
    description: str
    params: dict  # argument name -> (JSON schema dict, one-line description)


def tool(kind: str, description: str, **params: tuple[dict | str, str]) -> Callable:
    """Mark a toolkit method as an LLM tool. ``params``: name -> (type or schema, description)."""

    def mark(fn):
        fn.__tau2_tool__ = ToolSpec(kind, description, params)
        return fn

    return mark


def helper(fn):
    """Mark a toolkit method as an environment function (initialisation or assertion)."""
    fn.__tau2_helper__ = True
    return fn


def fingerprint(state: Any) -> str:
    """First 12 hex digits of the sha256 of the canonical JSON (sorted keys), τ²'s state form."""
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:12]


def render_result(value: Any) -> str:
    """A tool's return value as the tool-message text: strings verbatim, the rest as JSON.

    Tools that upstream return plain dicts with numbers stringify those numbers themselves
    (upstream renders bare numbers inside plain dicts as strings), so records (whose numbers stay native) and plain dicts both dump as-is.
    """
    if isinstance(value, str):
        return value
    return json.dumps(value)


class Toolkit:
    """Base class of the per-domain toolkits. ``TOOL_ORDER`` is the exposure order."""

    TOOL_ORDER: tuple[str, ...] = ()

    def __init__(self, db: dict):
        self.db = db

    # ---- introspection ------------------------------------------------------------------
    def has_tool(self, name: str) -> bool:
        return name in self.TOOL_ORDER

    def has_function(self, name: str) -> bool:
        fn = getattr(type(self), name, None) if isinstance(name, str) and not name.startswith("_") else None
        return fn is not None and (hasattr(fn, "__tau2_tool__") or hasattr(fn, "__tau2_helper__"))

    def tool_spec(self, name: str) -> ToolSpec:
        return getattr(type(self), name).__tau2_tool__

    def llm_tools(self) -> list[Tool]:
        """The tools as ``envs.base.Tool`` records (schema + bound callable), in order."""
        return [Tool(name, self.tool_spec(name).description, self.parameters(name), getattr(self, name))
                for name in self.TOOL_ORDER]

    def parameters(self, name: str) -> dict:
        """The JSON schema of a tool's arguments; arguments without a default are required."""
        spec = self.tool_spec(name)
        sig = inspect.signature(getattr(type(self), name))
        props, required = {}, []
        for arg, param in sig.parameters.items():
            if arg == "self":
                continue
            schema, desc = spec.params[arg]
            schema = {"type": schema} if isinstance(schema, str) else dict(schema)
            props[arg] = {**schema, "description": desc}
            if param.default is inspect.Parameter.empty:
                required.append(arg)
        return {"type": "object", "properties": props, "required": required}

    # ---- calling ---------------------------------------------------------------------------
    def call(self, name: str, arguments: dict) -> Any:
        """Call a tool or helper with keyword arguments, unvalidated, as upstream does (no schema check or type coercion)."""
        if not self.has_function(name):
            raise ToolError(f"Tool '{name}' not found.")
        return getattr(self, name)(**arguments)


    # ---- the two tools every domain shares ------------------------------------------------
    @tool("generic", "Calculate the result of an arithmetic expression.",
          expression=("string", "The expression, e.g. '2 * (3 + 4)'; digits, + - * / ( ) . and spaces only."))
    def calculate(self, expression: str) -> str:
        if not isinstance(expression, str) or any(c not in _CALC_CHARS for c in expression):
            raise ToolError("Invalid characters in expression")
        if len(expression) > _CALC_MAX_CHARS:
            raise ToolError(f"Expression too long: at most {_CALC_MAX_CHARS} characters")
        return str(round(float(_arithmetic(ast.parse(expression.strip(), mode="eval").body)), 2))

    @tool("generic", "Transfer the user to a human agent, with a summary of the issue. Only when the "
          "request cannot be handled within the policy, or the user explicitly asks for a human.",
          summary=("string", "A summary of the user's issue."))
    def transfer_to_human_agents(self, summary: str) -> str:
        return "Transfer successful"


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _arithmetic(node: ast.AST, depth: int = 0):
    """Evaluate the parsed expression with Python's own operators (so results and error
    texts equal upstream's ``eval``), refusing powers that could take minutes to compute
    (``9**9**9``, ``((9**999)**999)**999``): upstream would hang there, an RL rollout must not."""
    if depth > _CALC_MAX_DEPTH:
        raise ToolError(f"Expression too deeply nested: at most {_CALC_MAX_DEPTH} levels")
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_arithmetic(node.operand, depth + 1))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _arithmetic(node.left, depth + 1), _arithmetic(node.right, depth + 1)
        if isinstance(node.op, ast.Pow) and _huge_power(left, right):
            raise ToolError("Exponent too large")
        return _BINARY[type(node.op)](left, right)
    raise ToolError("Invalid expression")


def _huge_power(base, exponent) -> bool:
    """An exponent past 1000 on a base past ±1, or an int power of more than ``_CALC_MAX_BITS`` bits."""
    if abs(exponent) > 1000 and abs(base) > 1:
        return True
    return isinstance(base, int) and isinstance(exponent, int) and exponent * base.bit_length() > _CALC_MAX_BITS


def _coerce(value: Any, kind: str) -> Any:
    """Lax scalar validation in the spirit of upstream's typed records."""
    if kind == "str" and isinstance(value, str):
        return value
    if kind == "int":
        if isinstance(value, int):  # a bool too: upstream's lax int fields take True as 1
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
            return int(value.strip().split(".")[0])
    if kind == "float" and not isinstance(value, bool) and isinstance(value, (int, float)):
        return float(value)
    raise ValueError(f"Input should be a valid {'string' if kind == 'str' else kind}")


def make_record(model: str, value: Any, fields: dict[str, str]) -> dict:
    """Build a typed record (fields in order) from an argument object; extra keys are ignored.

    Raises ``ToolError`` with a validation message naming the record and the bad field.
    """
    if not isinstance(value, dict):
        raise ToolError(f"1 validation error for {model}\n  Input should be an object, got {type(value).__name__}")
    out = {}
    for name, kind in fields.items():
        if name not in value:
            raise ToolError(f"1 validation error for {model}\n{name}\n  Field required")
        try:
            out[name] = _coerce(value[name], kind)
        except ValueError as e:
            raise ToolError(f"1 validation error for {model}\n{name}\n  {e}") from None
    return out


def make_records(model: str, values: Any, fields: dict[str, str]) -> list[dict]:
    if not isinstance(values, list):
        raise ToolError(f"1 validation error for {model}\n  Input should be a list of objects")
    return [make_record(model, v, fields) for v in values]


def check_literal(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ToolError(f"1 validation error\n{name}\n  Input should be " + " or ".join(repr(a) for a in allowed))
    return value


REQUIRED = object()  # marks a schema field without a default


def conform(value: Any, kind: Any, where: str = "value") -> Any:
    """Bring a loaded value into canonical form for ``kind`` (used for the TOML databases).

    ``kind`` is ``"str" | "int" | "float" | "bool" | "date" | "datetime" | "any"``, or
    ``("opt", kind)``, ``("list", kind)``, ``("map", kind)``, ``("record", fields)`` where
    ``fields`` is a tuple of ``(name, kind, default)``; unknown record keys are rejected,
    missing ones take their default. Dates render ``YYYY-MM-DD`` and datetimes
    ``YYYY-MM-DD HH:MM:SS``, as upstream's state hash does.
    """
    if isinstance(kind, tuple):
        tag, inner = kind
        if tag == "opt":
            return None if value is None else conform(value, inner, where)
        if tag == "list":
            return [conform(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
        if tag == "map":
            return {k: conform(v, inner, f"{where}.{k}") for k, v in value.items()}
        unknown = set(value) - {f[0] for f in inner}
        if unknown:
            raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
        out = {}
        for name, sub, default in inner:
            if name in value:
                out[name] = conform(value[name], sub, f"{where}.{name}")
            elif default is REQUIRED:
                raise ValueError(f"{where}: field {name!r} is required")
            else:
                out[name] = conform(default, sub, f"{where}.{name}") if default is not None else None
        return out
    if kind == "float":
        return float(value)
    if kind == "date":
        return str(value)[:10]
    if kind == "datetime":
        text = str(value).replace("T", " ")
        return text if len(text) > 10 else text + " 00:00:00"
    return value
