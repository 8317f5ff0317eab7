"""In-process stand-ins for Claw-Eval's mock HTTP services.

Upstream runs each service as a FastAPI server on a port. Here a service is a Python
object that owns its own copy of the fixtures, so every env instance has isolated state
and no port is opened. The HTTP semantics graders depend on are kept:

- request bodies are validated server-side by pydantic models, as upstream's are: a
  missing or ill-typed field is a 422, unknown fields are ignored;
- an unknown route is a 404, a handler that throws is a 500;
- each successful call is logged (``endpoint``, ``request_body``, ``response_body``,
  ``timestamp``) and ``audit()`` returns upstream's shape: ``calls`` plus the service's
  action lists.

``ServiceHost`` routes a task's tool calls to its services, injects seeded faults, and
records a ``Dispatch`` (with its status) per call, which is what upstream's robustness
score reads.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, ClassVar

from pydantic import BaseModel, ValidationError

from envs.base import InfrastructureError
from envs.claw_eval.tasks import ClawTask

#: upstream's fault mix when a fault fires (``mock_services/_base.py``): rate limit,
#: server error, or a slow but correct answer
FAULT_KINDS = ("rate_limit", "server_error", "slow")
FAULT_WEIGHTS = (0.35, 0.35, 0.30)
DEFAULT_FROZEN_START = datetime(2026, 3, 2, 9, 0, 0, tzinfo=timezone.utc)


class Clock:
    """``"frozen"``: a fixed start advancing one second per tool call, so an episode is a
    pure function of its actions; ``"wall"``: the real UTC time, and the services that
    shift fixture dates against it upstream (gmail, calendar) do so (upstream's behaviour).

    A frozen clock built without ``start`` takes the task's anchor (see
    ``MockService.frozen_anchor``) when ``ServiceHost`` builds the services, else
    ``DEFAULT_FROZEN_START``."""

    def __init__(self, mode: str = "frozen", start: datetime | None = None):
        if mode not in ("frozen", "wall"):
            raise ValueError(f"clock mode must be 'frozen' or 'wall', got {mode!r}")
        self.mode, self.ticks = mode, 0
        self.start = start or DEFAULT_FROZEN_START
        self.anchored = start is not None

    def anchor(self, start: datetime) -> None:
        """Set the frozen start from the fixtures, unless the caller fixed one."""
        if not self.anchored:
            self.start, self.anchored = start, True

    @property
    def wall(self) -> bool:
        return self.mode == "wall"

    def now(self) -> datetime:
        if self.mode == "wall":
            return datetime.now(timezone.utc)
        return self.start + timedelta(seconds=self.ticks)

    def iso(self) -> str:
        return self.now().isoformat()

    def tick(self) -> None:
        self.ticks += 1


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any


class HTTPError(Exception):
    """Raised by a handler for an HTTP error answer (FastAPI's ``HTTPException``): the
    reply is ``{"detail": detail}`` with ``status``, and the call is not logged, as
    upstream raises before its log line."""

    def __init__(self, status: int, detail: Any):
        super().__init__(f"HTTP {status}: {detail}")
        self.status, self.detail = status, detail


def missing(kind: str, key: str) -> dict:
    """Upstream answers a missing record with 200 and an ``error`` key, not a 404."""
    return {"error": f"{kind} {key} not found"}


def parse_instant(text: str) -> datetime:
    """An ISO-8601 instant as the fixtures write it (``Z`` or an offset)."""
    return datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def format_instant(when: datetime) -> str:
    """The form upstream's date shift writes back into fixtures."""
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def route(path: str, model: type[BaseModel] | None = None, fix: str | None = None) -> Callable:
    """Mark a ``MockService`` method as the handler of ``POST path``; ``model`` validates
    the body (an absent or empty body means the model's defaults, as upstream). A route
    with ``fix`` does not exist upstream: it is served only when that opt-in fix is on."""
    def mark(fn: Callable) -> Callable:
        fn._route = (path, model, fix)
        return fn
    return mark


class MockService:
    """One service's state. Subclasses set ``module`` (upstream's folder name) and
    ``fixture_var`` (the env variable naming its fixture file), implement ``load`` and
    add ``@route`` handlers that return the response body.

    ``paths`` holds every fixture variable of the task's service block resolved against
    the data dir (a service reading two files, like web, finds its second there), ``env``
    the whole env block (OCR_FILENAME, DOCUMENTS_BASE_DIR, ...), ``data_dir`` the copy's
    root, which upstream's servers take as their working directory."""

    module: ClassVar[str] = ""
    fixture_var: ClassVar[str] = ""

    def __init__(self, name: str, fixture_path: Path | None, clock: Clock, *,
                 paths: dict[str, Path] | None = None, env: dict[str, str] | None = None,
                 data_dir: Path | None = None, fixes: frozenset[str] = frozenset()):
        self.name, self.clock = name, clock
        self.paths, self.env = dict(paths or {}), dict(env or {})
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.calls: list[dict] = []
        self.routes: dict[str, tuple[Callable, type[BaseModel] | None]] = {}
        for klass in reversed(type(self).__mro__):
            for attr in vars(klass).values():
                if hasattr(attr, "_route"):
                    path, model, fix = attr._route
                    if fix is None or fix in fixes:
                        self.routes[path] = (attr, model)
        self.load(self.read(fixture_path))

    def read(self, fixture_path: Path | None) -> Any:
        """The fixture content handed to ``load`` (JSON by default; None without a file)."""
        return json.loads(fixture_path.read_text(encoding="utf-8")) if fixture_path else None

    def load(self, data: Any) -> None:
        raise NotImplementedError

    def frozen_anchor(self) -> datetime | None:
        """Where a frozen clock should start for this service's fixtures, or None when the
        service does not read the clock against its records."""
        return None

    def log_entry(self, path: str, request: Any, response: Any) -> dict:
        """The audit record of a successful call (upstream's shape; a few services log
        less, and override this)."""
        return {"endpoint": path, "request_body": request, "response_body": copy.deepcopy(response),
                "timestamp": self.clock.iso()}

    def actions(self) -> dict[str, list]:
        """The service's action lists for the audit (e.g. ``{"orders": [...]}``)."""
        return {}

    def audit(self) -> dict:
        return copy.deepcopy({"calls": self.calls, **self.actions()})

    def handle(self, path: str, body: Any) -> Reply:
        entry = self.routes.get(path)
        if entry is None:
            return Reply(404, {"detail": "Not Found"})
        fn, model = entry
        request: Any = body
        if model is not None:
            try:
                request = model.model_validate({} if body is None else body)
            except ValidationError as exc:
                # via json with ASCII escapes: an input holding a lone surrogate or an
                # exotic object still yields a JSON-safe detail list
                detail = json.loads(json.dumps(exc.errors(include_url=False), default=str))
                for d in detail:
                    d["loc"] = ["body", *d.get("loc", [])]
                return Reply(422, {"detail": detail})
        try:
            out = fn(self, request)
        except HTTPError as exc:
            return Reply(exc.status, {"detail": exc.detail})
        except InfrastructureError:  # the host is broken (a missing library), not the call
            raise
        except Exception:  # upstream's server answers a handler crash with a bare 500
            return Reply(500, {"detail": "Internal Server Error"})
        logged = request.model_dump() if isinstance(request, BaseModel) else copy.deepcopy(request)
        self.calls.append(self.log_entry(path, logged, out))
        return Reply(200, out)


@dataclass(frozen=True)
class Dispatch:
    """One tool call as upstream's trace records it (``ToolDispatch``)."""

    tool_name: str
    service: str
    path: str
    request_body: Any
    status: int
    body: Any
    fault: str | None = None  # the injected fault kind, if one fired
    url: str = ""             # the endpoint's URL as task.yaml writes it ("" for an unknown tool)

    @property
    def is_error(self) -> bool:
        return self.status >= 400


class ServiceHost:
    """The services of one task for one episode: builds them from the fixtures in
    ``data_dir``, routes tool calls and injects faults. Faults are drawn from
    ``Random(f"{fault_seed}:{task_id}:{call index}")`` so a replay meets the same ones.

    ``own_fixtures`` (off by default, for parity) is the opt-in fix for services that
    task.yaml gives no fixture path: upstream then loads its built-in default (another
    task's file, often the Chinese twin's); with the fix, a file of the same name in this
    task's own ``fixtures/<module>/`` is used when there is one."""

    def __init__(self, task: ClawTask, data_dir: Path, registry: dict[str, type[MockService]], *,
                 clock: Clock | None = None, fault_rate: float = 0.0, fault_seed: int = 0,
                 own_fixtures: bool = False, fixes: frozenset[str] = frozenset()):
        if not 0.0 <= fault_rate < 1.0:
            raise ValueError(f"fault_rate must be in [0, 1), got {fault_rate}")
        self.task, self.clock = task, clock or Clock()
        self.fault_rate, self.fault_seed = fault_rate, fault_seed
        self.services: dict[str, MockService] = {}
        for spec in task.services:
            cls = registry.get(spec.module)
            if cls is None:
                raise ValueError(f"task {task.task_id}: no in-process implementation of service module "
                                 f"{spec.module!r} (have {sorted(registry)})")
            paths = {}
            for var, rel in spec.fixtures.items():
                path = Path(data_dir) / rel
                if own_fixtures and var in spec.defaulted:
                    own = task.folder / "fixtures" / spec.module / path.name
                    path = own if own.is_file() else path
                paths[var] = path
            self.services[spec.name] = cls(spec.name, paths.get(cls.fixture_var), self.clock, paths=paths,
                                           env=spec.env or {}, data_dir=Path(data_dir), fixes=frozenset(fixes))
        anchors = [a for a in (s.frozen_anchor() for s in self.services.values()) if a is not None]
        if anchors and self.clock.mode == "frozen":
            self.clock.anchor(max(anchors))
        self.ports = {s.name: s.port for s in task.services}
        self.dispatches: list[Dispatch] = []

    def _fault(self) -> str | None:
        if self.fault_rate <= 0.0:
            return None
        rng = random.Random(f"{self.fault_seed}:{self.task.task_id}:{len(self.dispatches)}")
        if rng.random() >= self.fault_rate:
            return None
        return rng.choices(FAULT_KINDS, weights=FAULT_WEIGHTS, k=1)[0]

    def call(self, tool_name: str, arguments: Any) -> Dispatch:
        endpoint = self.task.endpoint(tool_name)
        if endpoint is None or endpoint.service not in self.services:
            # upstream's dispatcher records an unknown tool as a 404 without any request
            d = Dispatch(tool_name, "", "", arguments, 404, {"error": f"unknown tool '{tool_name}'"})
        else:
            fault = self._fault()
            if fault == "rate_limit":
                reply = Reply(429, {"error": "rate_limit_exceeded", "message": "Too many requests. Please retry "
                                    "after a short delay.", "retry_after_seconds": 2})
            elif fault == "server_error":
                reply = Reply(500, {"error": "internal_server_error",
                                    "message": "An unexpected error occurred. Please try again."})
            else:  # no fault, or "slow": the real answer (the delay itself is not simulated)
                reply = self.services[endpoint.service].handle(endpoint.path, arguments)
            url = f"http://localhost:{self.ports.get(endpoint.service, 0)}{endpoint.path}"
            d = Dispatch(tool_name, endpoint.service, endpoint.path, arguments, reply.status, reply.body, fault, url)
        self.dispatches.append(d)
        self.clock.tick()
        return d

    def audit_data(self) -> dict[str, dict]:
        """Every service's audit, keyed by the task's service name (the grader's input)."""
        return {name: svc.audit() for name, svc in self.services.items()}
