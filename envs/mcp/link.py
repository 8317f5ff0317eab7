"""One MCP server connection, driven from synchronous code.

The env API is synchronous, the SDK async (anyio). A link runs an asyncio event loop in a
daemon thread of its own. Each session lives in one task on that loop, because anyio
needs a task group left by the task that entered it; the task runs the requests sent to
it one at a time, and the caller waits for each with a deadline.

Whose fault: a server that does not answer in time, dies, breaks its stream or answers
outside the protocol fails the *environment*: the session is torn down (the server
process is stopped) and ``InfrastructureError`` names the server, so the episode is
retried on a fresh session and never scored. A ``tools/call`` refused as invalid params is
the *policy's* call: ``ToolError``, shown to the policy like a tool's own error result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import tempfile
import threading
from contextlib import AsyncExitStack
from typing import Any, Awaitable, Callable, NoReturn

import anyio
import httpx2
import mcp_types as types
import pydantic
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from envs.base import InfrastructureError, ToolError
from envs.mcp.server_spec import ServerSpec

#: longest a torn-down session may take to stop its server (the SDK's stdio shutdown waits
#: 2 s for an exit after closing stdin, then 2 s after SIGTERM before SIGKILL)
TEARDOWN_S = 10.0
#: tools/list pages read before a listing is taken as endless
MAX_PAGES = 100
_STDERR_TAIL = 600

Request = Callable[[Client], Awaitable[Any]]


def describe(error: BaseException) -> str:
    """An exception in one line; a group by its leaves (the SDK's task groups raise them)."""
    group = getattr(error, "exceptions", None)
    if isinstance(group, (list, tuple)) and group:
        return "; ".join(describe(e) for e in group)
    if isinstance(error, MCPError):
        return f"MCP error {error.code}: {error.message}"
    if isinstance(error, pydantic.ValidationError) and error.errors():  # a malformed answer
        first = error.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "the top level"
        return (f"{error.title} is malformed at {where}: {first.get('msg')} "
                f"(got {str(first.get('input'))[:200]!r})")
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _fault_text(fault: Exception) -> str:
    """What was wrong and the offending text (pydantic keeps it in ``errors()``)."""
    if isinstance(fault, pydantic.ValidationError) and fault.errors():
        first = fault.errors()[0]
        return f"{first.get('msg')}: {str(first.get('input'))[:200]!r}"
    return describe(fault).splitlines()[0][:300]


class ProtocolFault(Exception):
    """The server sent something that is not an MCP message."""


class _Session:
    """One MCP session: a task on the link's loop that owns the ``Client`` and runs requests."""

    def __init__(self, spec: ServerSpec):
        self.spec = spec
        self.jobs: asyncio.Queue | None = None
        self.scope: anyio.CancelScope | None = None
        self.stopping = False
        self.alive = True
        self.finished = threading.Event()
        self.server_name: str | None = None
        self.error: BaseException | None = None  # what ended the session, if not a stop
        self.fault: Exception | None = None      # a message from the server that broke the protocol
        self.job_scope: anyio.CancelScope | None = None
        self.stderr = None if spec.is_http else tempfile.TemporaryFile()

    # ---- on the loop --------------------------------------------------------------------
    async def _client(self, stack: AsyncExitStack) -> Client:
        spec = self.spec
        if spec.is_http and spec.headers:  # else the transport makes its own client
            http = await stack.enter_async_context(httpx2.AsyncClient(headers=spec.headers,
                                                                      timeout=httpx2.Timeout(30.0, read=300.0)))
            transport = streamable_http_client(spec.url, http_client=http)
        elif spec.is_http:
            transport = streamable_http_client(spec.url)
        else:
            params = StdioServerParameters(command=spec.command[0], args=list(spec.command[1:]), env=spec.env or None,
                                           cwd=spec.cwd)
            transport = stdio_client(params, errlog=self.stderr)
        return await stack.enter_async_context(Client(transport, cache=None, message_handler=self._on_message))

    async def _on_message(self, message) -> None:
        """The SDK hands a line it cannot parse to this handler and reads on; here it ends
        the session, and cuts short the request in flight (it would wait for nothing)."""
        if isinstance(message, Exception) and self.fault is None:
            self.fault = message
            if self.job_scope is not None:
                self.job_scope.cancel()

    def _fault_error(self) -> ProtocolFault:
        if not isinstance(self.fault, ValueError):  # a transport's own failure, not a bad line
            return ProtocolFault(f"broke the connection ({describe(self.fault)})")
        hint = "" if self.spec.is_http else "; a stdio server must write only MCP messages to stdout (log to stderr)"
        return ProtocolFault(f"sent a message that is not valid MCP ({_fault_text(self.fault)}){hint}")

    async def _run(self, client: Client, fn: Request, done: concurrent.futures.Future) -> None:
        if self.fault is None:
            with anyio.CancelScope() as self.job_scope:
                try:
                    result = await fn(client)
                except Exception as e:
                    _settle(done, error=e)
                else:
                    _settle(done, result=result)
            self.job_scope = None
        if self.fault is not None:
            _settle(done, error=self._fault_error())
            raise self._fault_error()

    async def serve(self, ready: concurrent.futures.Future) -> None:
        current = None
        try:
            with anyio.CancelScope() as self.scope:
                if self.stopping:
                    self.scope.cancel()
                self.jobs = asyncio.Queue()
                async with AsyncExitStack() as stack:
                    client = await self._client(stack)
                    info = client.server_info
                    self.server_name = info.name if info is not None else None
                    _settle(ready, result=None)
                    while True:
                        current = await self.jobs.get()
                        await self._run(client, *current)
                        current = None
        except BaseException as e:  # the session is over; whoever waits learns why
            self.error = e
        finally:
            self.alive = False
            closed = self.ended()
            _settle(ready, error=closed)
            if current is not None:
                _settle(current[1], error=closed)
            while self.jobs is not None and not self.jobs.empty():
                _settle(self.jobs.get_nowait()[1], error=closed)
            self.finished.set()

    def submit(self, fn: Request, done: concurrent.futures.Future) -> None:
        if self.alive and self.jobs is not None:
            self.jobs.put_nowait((fn, done))
        else:
            _settle(done, error=self.ended())

    def ended(self) -> ConnectionError:
        return ConnectionError("the session ended" + (f" ({describe(self.error)})" if self.error else ""))

    def stop(self) -> None:
        self.stopping = True
        if self.scope is not None:
            self.scope.cancel()

    # ---- anywhere -----------------------------------------------------------------------
    def stderr_tail(self) -> str:
        """The end of what the server wrote to stderr (pread: the child shares the offset)."""
        if self.stderr is None or self.stderr.closed:
            return ""
        fd = self.stderr.fileno()
        size = os.fstat(fd).st_size
        tail = os.pread(fd, _STDERR_TAIL, max(size - _STDERR_TAIL, 0))
        return tail.decode("utf-8", "replace").strip()


def _settle(future: concurrent.futures.Future, result=None, error: BaseException | None = None) -> None:
    if future.done():
        return
    try:
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    except concurrent.futures.InvalidStateError:  # cancelled by a caller that gave up
        pass


class MCPLink:
    """A server connection for one env: ``open`` a fresh session, ``list_tools``,
    ``call_tool``, ``close``. Every wait is bounded (``timeout_s`` per request,
    ``connect_timeout_s`` to start and shake hands)."""

    def __init__(self, spec: ServerSpec, timeout_s: float = 30.0, connect_timeout_s: float = 60.0):
        self.spec = spec
        self.timeout_s, self.connect_timeout_s = float(timeout_s), float(connect_timeout_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: _Session | None = None
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        """The server as messages name it: its configured name, and its own if different."""
        own = self._session.server_name if self._session is not None else None
        return repr(self.spec.name) + (f" (server {own!r})" if own and own != self.spec.name else "")

    @property
    def connected(self) -> bool:
        return self._session is not None and self._session.alive

    def open(self) -> None:
        """Start a fresh session (closing any old one)."""
        self.close_session()
        session = _Session(self.spec)
        ready: concurrent.futures.Future = concurrent.futures.Future()
        asyncio.run_coroutine_threadsafe(session.serve(ready), self._running_loop())
        self._session = session
        try:
            ready.result(self.connect_timeout_s)
        except concurrent.futures.TimeoutError:
            self._fail(f"did not start and answer the MCP handshake within connect_timeout_s={self.connect_timeout_s:g} s")
        except Exception as e:
            self._fail("could not be started or connected", e)

    def list_tools(self) -> list[types.Tool]:
        async def fetch(client: Client) -> list[types.Tool]:
            tools, cursor = [], None
            for _ in range(MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools += page.tools
                cursor = page.next_cursor
                if cursor is None:
                    return tools
            raise RuntimeError(f"tools/list still had more pages after {MAX_PAGES}")

        return self._request(fetch, "tools/list")

    def call_tool(self, name: str, arguments: dict) -> types.CallToolResult:
        """The server's result (``is_error`` included); ``ToolError`` when the server refuses
        the arguments as invalid params; ``InfrastructureError`` for anything else."""
        async def call(client: Client) -> types.CallToolResult:
            return await client.call_tool(name, arguments)

        return self._request(call, f"tools/call {name!r}", refused_is_policy=True)

    def _request(self, fn: Request, what: str, refused_is_policy: bool = False):
        session = self._session
        if session is None or not session.alive:
            raise InfrastructureError(f"MCP server {self.label}: no open session for {what} (the env opens one at reset)")
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(session.submit, fn, done)
        try:
            return done.result(self.timeout_s)
        except concurrent.futures.TimeoutError:
            done.cancel()
            self._fail(f"did not answer {what} within timeout_s={self.timeout_s:g} s")
        except MCPError as e:
            if refused_is_policy and e.code == types.INVALID_PARAMS:
                raise ToolError(f"the server refused the arguments: {e.message}") from None
            self._fail(f"answered {what} with an error", e)
        except Exception as e:
            self._fail(f"failed on {what}", e)

    def _fail(self, what: str, error: BaseException | None = None) -> NoReturn:
        label = self.label
        stderr = self._session.stderr_tail() if self._session is not None else ""
        self.close_session()
        message = f"MCP server {label} {what}"
        if error is not None:
            message += f": {describe(error)}"
        if stderr:
            message += f"; the end of its stderr: {stderr!r}"
        raise InfrastructureError(message) from error

    def close_session(self) -> None:
        """Stop the session and its server (bounded by ``TEARDOWN_S``)."""
        session, self._session = self._session, None
        if session is None:
            return
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(session.stop)
            if threading.current_thread() is not self._thread:
                session.finished.wait(TEARDOWN_S)
        if session.stderr is not None and session.finished.is_set():
            session.stderr.close()

    def close(self) -> None:
        """Close the session and stop the loop's thread. Safe to call more than once."""
        self.close_session()
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None and thread is not threading.current_thread():
            thread.join(TEARDOWN_S)
            if not thread.is_alive():
                loop.close()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name=f"mcp-{self.spec.name[:40]}",
                                                daemon=True)
                self._thread.start()
            return self._loop
