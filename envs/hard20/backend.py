"""The shared backend of the mock services: a fixed clock, the audit log, fault injection.

Every service of a task lives on one ``Backend``. A tool call goes through
``Backend.call``: it is numbered, may be answered by an injected fault (HTTP 429/500 or a
timeout, decided by a random stream seeded with the task and the call number, so a replay
of the same calls meets the same faults), runs, and is logged whether it succeeded or not.
Services log each state change separately (``Backend.change``), so the grader can tell a
write that was attempted from one that took effect.

The clock is fixed: the task's "today" at 09:00, advancing one second per call. Nothing
depends on the wall clock, so an episode is a pure function of its task and its actions.
"""

from __future__ import annotations

import copy
import datetime as dt
import random
from typing import Any, Callable

from envs.base import ToolError

# The injected faults, as a service behind an HTTP API would report them. None of them
# applies the request, and each says so, so retrying is always the right recovery.
FAULTS = (
    "HTTP 429 Too Many Requests: rate limit exceeded, the request was not applied; retry",
    "HTTP 500 Internal Server Error: the request was not applied; retry",
    "timeout: the service did not answer within 10 s; the request was not applied; retry",
)


class Backend:
    def __init__(self, today: str, fault_rate: float = 0.0, fault_seed: str = ""):
        if not 0.0 <= fault_rate < 1.0:
            raise ValueError(f"fault_rate must be in [0, 1), got {fault_rate}")
        self.today = today
        self.fault_rate = fault_rate
        self.fault_seed = fault_seed
        self.audit: list[dict] = []
        self.services: dict[str, Any] = {}
        self.calls = 0
        self._start = dt.datetime.fromisoformat(today + "T09:00:00")

    def now(self) -> str:
        return (self._start + dt.timedelta(seconds=self.calls)).isoformat()

    def call(self, service: str, tool: str, kind: str, fn: Callable[..., Any], args: dict) -> Any:
        """Run one tool call: maybe fault, run, log. ``kind`` is "read" or "write"."""
        self.calls += 1
        entry = {"seq": self.calls, "time": self.now(), "service": service, "tool": tool, "kind": kind,
                 "args": copy.deepcopy(args), "ok": False}
        self.audit.append(entry)
        if self.fault_rate and random.Random(f"{self.fault_seed}:{self.calls}").random() < self.fault_rate:
            fault = FAULTS[random.Random(f"{self.fault_seed}:{self.calls}:kind").randrange(len(FAULTS))]
            entry.update(error=fault, injected=True)
            raise ToolError(fault)
        try:
            out = fn(**args)
        except ToolError as e:
            entry["error"] = str(e)
            raise
        except Exception as e:  # recorded, then reported by ToolEnv as an error observation
            entry["error"] = f"{type(e).__name__}: {e}"
            raise
        entry["ok"] = True
        return out

    def change(self, service: str, op: str, record: str, **detail) -> None:
        """Log a state change made by the call now running."""
        self.audit.append({"seq": self.calls, "time": self.now(), "service": service, "change": op,
                           "record": record, **copy.deepcopy(detail)})

    def reject(self, tool: str, args: Any, error: str) -> None:
        """Log a call the environment refused before it reached a service (bad schema, unknown tool)."""
        self.calls += 1
        self.audit.append({"seq": self.calls, "time": self.now(), "service": None, "tool": tool, "kind": "rejected",
                           "args": copy.deepcopy(args), "ok": False, "error": error})

    # ---- views for the grader -----------------------------------------------------------------
    def ok_calls(self, tool: str) -> list[dict]:
        """Arguments of the successful calls of ``tool``, in order."""
        return [e["args"] for e in self.audit if e.get("tool") == tool and e.get("ok")]

    def changes(self, service: str | None = None) -> list[dict]:
        return [e for e in self.audit if "change" in e and (service is None or e["service"] == service)]

    def state(self) -> dict:
        """A JSON-serialisable copy of every service's records."""
        return {name: svc.snapshot() for name, svc in self.services.items()}
