"""What every mock service shares: records by id, tool declarations, argument checks.

A service declares its tools as ``ToolDef`` rows (name, read/write, description, JSON-schema
properties, required names, method). ``Service.tools()`` turns them into ``envs.base.Tool``
objects whose calls go through the backend (audit log, faults). Methods raise ``ToolError``
with a message the agent can act on (the ids that do exist, the format expected), which
``ToolEnv`` turns into an error observation.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass

from envs.base import Tool, ToolError
from envs.hard20.backend import Backend

STR = {"type": "string"}
INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}
DATE = {"type": "string", "description": "YYYY-MM-DD"}
STR_LIST = {"type": "array", "items": {"type": "string"}}


def enum(*values: str) -> dict:
    return {"type": "string", "enum": list(values)}


@dataclass(frozen=True)
class ToolDef:
    name: str
    kind: str  # "read" | "write"
    description: str
    properties: dict
    required: tuple = ()
    method: str = ""


class Service:
    name = ""
    noun = "record"  # for error messages: "no ticket with id ..."
    TOOLS: tuple[ToolDef, ...] = ()

    def __init__(self, backend: Backend, records: list[dict]):
        self.backend = backend
        self.records: dict[str, dict] = {}
        for r in records:
            if r["id"] in self.records:
                raise ValueError(f"duplicate {self.noun} id {r['id']!r} in {self.name} fixtures")
            self.records[r["id"]] = copy.deepcopy(r)
        self._serial = 0
        backend.services[self.name] = self

    def tools(self) -> list[Tool]:
        out = []
        for d in self.TOOLS:
            params = {"type": "object", "properties": d.properties, "required": list(d.required),
                      "additionalProperties": False}
            out.append(Tool(d.name, d.description, params, self._bind(d)))
        return out

    def _bind(self, d: ToolDef):
        method = getattr(self, d.method or d.name.split("_", 1)[1])

        def run(**args):
            return self.backend.call(self.name, d.name, d.kind, method, args)

        return run

    # ---- helpers for the services ---------------------------------------------------------------
    def get(self, rid: str) -> dict:
        if rid not in self.records:
            known = sorted(self.records)
            shown = ", ".join(known[:8]) + (" ..." if len(known) > 8 else "")
            raise ToolError(f"no {self.noun} with id {rid!r} in {self.name}; existing ids: {shown or 'none'}")
        return self.records[rid]

    def new_id(self, prefix: str) -> str:
        self._serial += 1
        return f"{prefix}-n{self._serial}"

    def add(self, record: dict) -> dict:
        self.records[record["id"]] = record
        self.backend.change(self.name, "create", record["id"], after=record)
        return record

    def snapshot(self) -> dict:
        return copy.deepcopy(self.records)


def brief(record: dict, keys: tuple[str, ...]) -> dict:
    """A list row: only the fields a listing shows (tool outputs stay small)."""
    return {k: record[k] for k in keys if k in record}


def check_date(value: str, field: str = "date") -> str:
    try:
        dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise ToolError(f"{field} must be a date written YYYY-MM-DD, got {value!r}") from None
    return value


def check_time(value: str, field: str) -> str:
    try:
        dt.time.fromisoformat(value)
    except (TypeError, ValueError):
        raise ToolError(f"{field} must be a time written HH:MM, got {value!r}") from None
    if len(value) != 5:
        raise ToolError(f"{field} must be a time written HH:MM, got {value!r}")
    return value


def matches(record: dict, query: str, fields: tuple[str, ...]) -> bool:
    """Case-insensitive: every word of the query occurs in one of the fields."""
    text = " ".join(str(record.get(f, "")) for f in fields).casefold()
    return all(word in text for word in query.casefold().split())
