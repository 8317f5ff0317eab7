"""Where an OpenEnv environment runs: in this process, or behind an OpenEnv HTTP server.

Both backends speak the same wire form, the dict OpenEnv's server sends for an
observation (``{"observation": {...fields}, "reward": r, "done": d}``; in-process
observations go through the package's own ``serialize_observation``) and take actions as
the JSON dicts a client sends, read by the package's ``deserialize_action``. So the env
above them cannot tell them apart, and an episode reads the same either way.

``open`` starts a fresh episode on a fresh environment instance (in-process: a new object
from the factory; HTTP: a new websocket session, which the server gives its own
instance), ``step`` sends one action, ``close`` ends it. Every call has a deadline.

Whose fault: an action the environment refuses as invalid (pydantic validation; the
server's ``VALIDATION_ERROR``) is the policy's, ``ToolError``; anything else that goes
wrong (an exception in the environment, a server error, a refused or dropped connection,
a deadline) is the environment's, ``InfrastructureError`` naming it.
"""

from __future__ import annotations

import json
import typing
import urllib.error
import urllib.request

import pydantic
from openenv.core import GenericEnvClient
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.env_server.serialization import deserialize_action, serialize_observation
from openenv.core.env_server.types import Action

from envs.base import InfrastructureError, ToolError
from envs.external import Worker, load_object

#: action classes that mean "this environment's actions are its MCP tools"
_MCP_ACTION_TITLES = ("Action", CallToolAction.__name__, ListToolsAction.__name__)


def _validation_text(error: pydantic.ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in e.get('loc', ())) or 'action'}: {e.get('msg')}" for e in error.errors()[:5]]
    return "; ".join(parts)


class InProcessBackend:
    """An ``openenv`` ``Environment`` made by ``factory()`` (a class or a function), driven
    directly: one fresh instance per episode, as the HTTP server gives each session."""

    def __init__(self, factory, action, label: str, timeout_s: float):
        self.factory = load_object(factory, "env")
        if not callable(self.factory):
            raise ValueError(f"env_config['env'] must be an OpenEnv Environment class or factory, got {factory!r}")
        self.action_cls = load_object(action, "action") if action is not None else None
        self.label, self.timeout_s = label, timeout_s
        self.worker = Worker(f"openenv-{label[:40]}")
        self.env: Environment | None = None
        self.mcp: bool | None = None

    def describe(self) -> tuple[bool, dict | None]:
        """(whether the actions are MCP tools, the action's JSON schema if they are not)."""
        env = self.env or self._make()
        if self.env is None:
            self._close_env(env)
        return self.mcp, None if self.mcp else self.action_cls.model_json_schema()

    def open(self, reset_kwargs: dict) -> dict:
        self.close()
        self.env = self._make()
        obs = self._call(lambda: self.env.reset(**reset_kwargs), "reset")
        return serialize_observation(obs)

    def step(self, action: dict) -> dict:
        if self.env is None:
            raise InfrastructureError(f"OpenEnv env {self.label}: no open episode (the adapter opens one at reset)")
        try:
            typed = deserialize_action(action, Action if self.mcp else self.action_cls)
        except pydantic.ValidationError as e:
            raise ToolError(f"the environment refused the action: {_validation_text(e)}") from None
        return serialize_observation(self._call(lambda: self.env.step(typed), "step"))

    def close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            self._close_env(env)

    def shutdown(self) -> None:
        self.close()
        self.worker.close()

    # ---- internals ---------------------------------------------------------------------------
    def _make(self) -> Environment:
        env = self._call(self.factory, "construction")
        if not isinstance(env, Environment):
            raise ValueError(f"OpenEnv env {self.label}: the factory returned a {type(env).__name__}, not an "
                             "openenv Environment")
        if self.mcp is None:
            self.mcp = isinstance(env, MCPEnvironment)
            if not self.mcp and self.action_cls is None:
                hint = typing.get_type_hints(type(env).step).get("action")
                self.action_cls = hint if isinstance(hint, type) and issubclass(hint, Action) else None
            if not self.mcp and (self.action_cls is None or self.action_cls is Action):
                raise ValueError(f"OpenEnv env {self.label}: cannot tell its Action class from {type(env).__name__}.step's "
                                 "annotation; give it as env_config['action'] = 'package.module:MyAction'")
        return env

    def _call(self, fn, what: str):
        try:
            return self.worker.call(fn, self.timeout_s, f"OpenEnv env {self.label}: {what}")
        except InfrastructureError:
            raise
        except Exception as e:  # the environment's own failure: never the policy's
            raise InfrastructureError(f"OpenEnv env {self.label}: {what} raised {type(e).__name__}: {e}") from e

    def _close_env(self, env: Environment) -> None:
        try:
            self._call(env.close, "close")
        except InfrastructureError:
            pass  # a failed cleanup loses nothing: the next episode makes a new instance


class ServerError(RuntimeError):
    """An error message from an OpenEnv server (its ``WSErrorResponse``), with its code."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{message} (code {code})")
        self.code = code


class _Client(GenericEnvClient):
    """The package's generic websocket client, with the server's error code kept."""

    async def _send_and_receive(self, message: dict) -> dict:
        await self._send(message)
        response = await self._receive()
        if response.get("type") == "error":
            data = response.get("data") or {}
            raise ServerError(str(data.get("code", "UNKNOWN")), str(data.get("message", "unknown error")))
        return response


class HTTPBackend:
    """An OpenEnv server at ``base_url``: ``GET /schema`` for the action, and one websocket
    session (``/ws``) per episode, so the server keeps each episode's state apart."""

    def __init__(self, base_url: str, label: str, timeout_s: float, connect_timeout_s: float):
        self.base_url = base_url.rstrip("/")
        self.label, self.timeout_s, self.connect_timeout_s = label, timeout_s, connect_timeout_s
        self.worker = Worker(f"openenv-{label[:40]}")
        self.client: _Client | None = None
        self._schema: dict | None = None

    def describe(self) -> tuple[bool, dict | None]:
        if self._schema is None:
            self._schema = self._get_schema()
        mcp = self._schema.get("title") in _MCP_ACTION_TITLES
        return mcp, None if mcp else self._schema

    def open(self, reset_kwargs: dict) -> dict:
        self.close()
        self.client = _Client(base_url=self.base_url, connect_timeout_s=self.connect_timeout_s,
                              message_timeout_s=self.timeout_s)
        return self._run(lambda: self.client.reset(**reset_kwargs), "reset")

    def step(self, action: dict) -> dict:
        if self.client is None:
            raise InfrastructureError(f"OpenEnv server {self.label}: no open session (the adapter opens one at reset)")
        return self._run(lambda: self.client.step(action), "step")

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None and self.worker.stuck is None:
            try:
                self.worker.run(client.close, self.connect_timeout_s, f"OpenEnv server {self.label}: close")
            except Exception:
                pass  # the session is dropped either way; the server reaps it on disconnect

    def _drop(self) -> None:
        self.close()

    def shutdown(self) -> None:
        self.close()
        self.worker.close()

    # ---- internals ---------------------------------------------------------------------------
    def _run(self, make_coro, what: str) -> dict:
        try:
            result = self.worker.run(make_coro, self.timeout_s + self.connect_timeout_s,
                                     f"OpenEnv server {self.label}: {what}")
        except ServerError as e:
            if e.code == "VALIDATION_ERROR":
                raise ToolError(f"the environment refused the action: {e}") from None
            self._drop()  # a failed session is not reused
            hint = "; raise the server's max_concurrent_envs" if e.code == "CAPACITY_REACHED" else ""
            raise InfrastructureError(f"OpenEnv server {self.label}: {what} failed: {e}{hint}") from e
        except InfrastructureError:
            self._drop()
            raise
        except Exception as e:  # refused, dropped or malformed: the server's failure
            self._drop()
            raise InfrastructureError(f"OpenEnv server {self.label}: {what} failed: {type(e).__name__}: {e}") from e
        return {"observation": result.observation if isinstance(result.observation, dict) else {},
                "reward": result.reward, "done": bool(result.done)}

    def _get_schema(self) -> dict:
        scheme, rest = self.base_url.split("://", 1)
        url = f"{ {'ws': 'http', 'wss': 'https'}.get(scheme, scheme)}://{rest}/schema"
        try:
            with urllib.request.urlopen(url, timeout=self.connect_timeout_s) as response:
                body = json.loads(response.read(2_000_000))
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise InfrastructureError(f"OpenEnv server {self.label}: GET {url} failed: {type(e).__name__}: {e}") from e
        action = body.get("action") if isinstance(body, dict) else None
        if not isinstance(action, dict):
            raise InfrastructureError(f"OpenEnv server {self.label}: GET {url} has no 'action' schema; is it an "
                                      "OpenEnv server?")
        return action


__all__ = ["InProcessBackend", "HTTPBackend", "ServerError"]
