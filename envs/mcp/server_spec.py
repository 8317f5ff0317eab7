"""Where an MCP server is: a command to spawn (stdio) or a streamable-HTTP URL.

``server_spec(value)`` reads ``env_config["server"]`` in any of these forms:

    "http://127.0.0.1:8765/mcp"                       a streamable-HTTP endpoint
    "npx -y @modelcontextprotocol/server-everything"  a command line (split like a shell)
    ["python", "-m", "my_server"]                     a command as argv
    {"command": "python", "args": ["-m", "my_server"], "env": {...}, "cwd": "...", "name": "mine"}
    {"url": "https://host/mcp", "headers": {"Authorization": "..."}, "name": "mine"}

A command must be found now (on ``PATH``, or as a path to an executable): a typo is a
configuration error, better raised when the env is made than retried as a failing episode.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

_COMMAND_KEYS = ("command", "args", "env", "cwd", "name")
_URL_KEYS = ("url", "headers", "name")
_FORMS = ("a URL ('http://host:port/mcp'), a command line string, a list of command arguments, "
          "or a dict with 'command' (and 'args', 'env', 'cwd', 'name') or 'url' (and 'headers', 'name')")


@dataclass(frozen=True)
class ServerSpec:
    name: str                       # how messages name the server
    command: tuple[str, ...] = ()   # argv of a stdio server
    url: str = ""                   # endpoint of a streamable-HTTP server
    env: dict = field(default_factory=dict)      # extra environment of a stdio server
    cwd: str | None = None
    headers: dict = field(default_factory=dict)  # HTTP headers (e.g. authorization)

    @property
    def is_http(self) -> bool:
        return bool(self.url)


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def _public_url(url: str) -> str:
    """The URL without credentials, for messages."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _str_dict(value, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"MCP server {what} must be a dict of strings to strings, got {value!r}")
    return dict(value)


def server_spec(value, name: str | None = None) -> ServerSpec:
    """``env_config["server"]`` as a ``ServerSpec``; ``name`` overrides the derived name."""
    if value is None:
        raise ValueError(f"env_config['server'] is required: {_FORMS}")
    if isinstance(value, str):
        value = {"url": value} if _is_url(value.strip()) else {"command": value}
    elif isinstance(value, (list, tuple)):
        value = {"command": list(value)}
    if not isinstance(value, dict):
        raise ValueError(f"env_config['server'] must be {_FORMS}; got {type(value).__name__}")
    name = name or value.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(f"the MCP server's name must be a non-empty string, got {name!r}")
    if "url" in value:
        return _url_spec(value, name)
    if "command" in value:
        return _command_spec(value, name)
    raise ValueError(f"env_config['server'] dict needs 'command' or 'url'; got keys {sorted(value)}. It must be {_FORMS}")


def _url_spec(value: dict, name: str | None) -> ServerSpec:
    unknown = set(value) - set(_URL_KEYS)
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} in an HTTP MCP server; allowed: {list(_URL_KEYS)}")
    url = value["url"]
    if not isinstance(url, str) or not _is_url(url.strip()):
        raise ValueError(f"MCP server url must start with http:// or https://, got {url!r}")
    url = url.strip()
    return ServerSpec(name=name or _public_url(url), url=url, headers=_str_dict(value.get("headers"), "headers"))


def _command_spec(value: dict, name: str | None) -> ServerSpec:
    unknown = set(value) - set(_COMMAND_KEYS)
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} in a stdio MCP server; allowed: {list(_COMMAND_KEYS)}")
    command = value["command"]
    argv = shlex.split(command) if isinstance(command, str) else command
    args = value.get("args") or []
    if not isinstance(argv, (list, tuple)) or not isinstance(args, (list, tuple)):
        raise ValueError(f"MCP server command must be a string or a list of strings, and args a list; got {value!r}")
    argv = [*argv, *args]
    if not argv or not all(isinstance(a, str) for a in argv) or not argv[0]:
        raise ValueError(f"MCP server command must be a non-empty list of strings, got {argv!r}")
    env, cwd = _str_dict(value.get("env"), "env"), value.get("cwd")
    if cwd is not None and not (isinstance(cwd, (str, os.PathLike)) and os.path.isdir(cwd)):
        raise ValueError(f"MCP server cwd {cwd!r} is not a directory")
    label = " ".join([os.path.basename(argv[0]), *argv[1:]])
    spec = ServerSpec(name=name or (label if len(label) <= 80 else label[:77] + "..."), command=tuple(argv), env=env,
                      cwd=None if cwd is None else os.fspath(cwd))
    _check_executable(spec)
    return spec


def _check_executable(spec: ServerSpec) -> None:
    program = spec.command[0]
    path = spec.env.get("PATH", os.environ.get("PATH", os.defpath))
    if os.sep in program or (os.altsep and os.altsep in program):
        full = program if os.path.isabs(program) or spec.cwd is None else os.path.join(spec.cwd, program)
        found = os.path.isfile(full) and os.access(full, os.X_OK)
    else:
        found = shutil.which(program, path=path) is not None
    if not found:
        raise ValueError(f"MCP server {spec.name!r}: command {program!r} is not an executable "
                         f"{'file' if os.sep in program else 'on PATH'}; install it, or give the full path "
                         "of the server's executable in env_config['server']")
