"""MCP tool servers as environments: ``MCPToolEnv`` ("MCP-v0").

Any MCP server (a stdio command or a streamable-HTTP URL) becomes a multi-turn tool env
through the official ``mcp`` SDK (``pip install 'rti_actors[mcp]'``): its ``tools/list``
is what the policy may call, its ``tools/call`` results are the observations, and the
tasks and reward are the user's (a JSON-lines file and a grader, or a subclass).

Modules: ``server_spec`` (where the server is), ``tasks`` (task rows, grader),
``schemas`` (tool checks, results as text), ``link`` (the sync-to-async bridge and whose
fault a failure is), ``env`` (the gymnasium env). See docs/MCP.md.
"""

try:
    import mcp  # noqa: F401
except ImportError as e:  # an optional extra: say how to get it
    raise ImportError("MCPToolEnv needs the official MCP SDK: pip install 'rti_actors[mcp]' (mcp>=2.0)") from e

from envs.mcp.env import DEFAULT_SYSTEM_PROMPT, MCPEpisode, MCPToolEnv, ToolCallRecord
from envs.mcp.link import MCPLink
from envs.mcp.schemas import MCPSchemaError
from envs.mcp.server_spec import ServerSpec, server_spec

__all__ = ["MCPToolEnv", "MCPEpisode", "ToolCallRecord", "DEFAULT_SYSTEM_PROMPT", "MCPLink", "MCPSchemaError",
           "ServerSpec", "server_spec"]
