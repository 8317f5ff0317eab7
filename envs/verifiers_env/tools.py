"""A task's verifiers toolsets, hosted in this process.

verifiers serves each ``vf.Toolset`` as an MCP server (``MCPServer`` from the ``mcp`` SDK,
filled by ``Toolset.register``) and its chat harness names a tool ``<server>_<tool>``
(bare when the toolset has no ``server_name``). Here the same server object is built and
called directly, with no transport: ``list_tools`` gives the schemas, ``call_tool`` the
results, and the policy sees the names and the text verifiers' harness would show.

A task-scoped toolset is made fresh per episode (``setup`` then ``setup_task(task)``, as
its per-rollout server would); a taskset-scoped one once per env (``setup``), as its
shared server would. Whose fault: a tool that raises or is called with bad arguments gives
an error result the policy reads (what verifiers' server returns); a tool that hangs past
``timeout_s`` or a toolset whose setup fails is the environment's failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import verifiers.v1 as vf
from mcp import MCPError
from mcp.server.mcpserver import MCPServer

from envs.base import InfrastructureError, ToolError


@dataclass
class HostedTool:
    name: str            # as the policy calls it: <server>_<tool>
    description: str
    parameters: dict
    server: MCPServer
    raw_name: str        # as the server knows it


def result_text(result) -> str:
    """A ``CallToolResult``'s content as chat text: text blocks joined, others as JSON."""
    parts = []
    for block in getattr(result, "content", None) or []:
        if getattr(block, "type", None) == "text":
            parts.append(block.text)
        else:
            parts.append(json.dumps(block.model_dump(mode="json", exclude_none=True), ensure_ascii=False))
    return "\n".join(parts)


async def _server(toolset: vf.Toolset, task: vf.Task | None) -> MCPServer:
    await toolset.setup()
    if task is not None:
        await toolset.setup_task(task)
    server = MCPServer(toolset.server_name or type(toolset).__name__)
    toolset.register(server)
    return server


async def _listing(servers: list[tuple[vf.Toolset, MCPServer]]) -> list[HostedTool]:
    tools: dict[str, HostedTool] = {}
    for toolset, server in servers:
        for tool in await server.list_tools():
            name = f"{toolset.server_name}_{tool.name}" if toolset.server_name else tool.name
            if name in tools:
                raise ValueError(f"two verifiers tools are named {name!r}; give a toolset a distinct TOOL_PREFIX")
            tools[name] = HostedTool(name, tool.description or "", dict(tool.input_schema), server, tool.name)
    return list(tools.values())


class ToolHost:
    """The tools of one episode. Async methods run on the env's worker loop."""

    def __init__(self, shared: list[vf.Toolset]):
        self.shared = shared
        self._shared_servers: list[tuple[vf.Toolset, MCPServer]] | None = None
        self.tools: dict[str, HostedTool] = {}

    async def open(self, task: vf.Task, label: str) -> list[HostedTool]:
        """Set up the task's toolsets (and, once, the shared ones) and list their tools."""
        try:
            if self._shared_servers is None:
                self._shared_servers = [(t, await _server(t, None)) for t in self.shared]
            own = [(t, await _server(t, task)) for t in task.toolsets(task.config)]
            listing = await _listing(self._shared_servers + own)
        except ValueError:
            raise
        except Exception as e:  # a toolset that cannot start: the environment failed
            raise InfrastructureError(f"verifiers {label}: setting up the toolsets raised {type(e).__name__}: {e}") from e
        self.tools = {t.name: t for t in listing}
        return listing

    async def call(self, name: str, arguments: dict) -> str:
        tool = self.tools[name]
        try:
            result = await tool.server.call_tool(tool.raw_name, arguments)
        except MCPError as e:  # a protocol error, not a tool's own: verifiers' harness would fail too
            raise InfrastructureError(f"verifiers tool {name!r} answered with an MCP error {e.code}: {e.message}") from e
        except Exception as e:  # what verifiers' server turns into an error result
            raise ToolError(str(e)) from None
        if not hasattr(result, "content"):  # an InputRequiredResult: the tool asks the client for input
            raise InfrastructureError(f"verifiers tool {name!r} asked for input ({type(result).__name__}), which "
                                      "an in-process episode cannot give")
        text = result_text(result)
        if result.is_error:
            raise ToolError(text)
        return text


__all__ = ["ToolHost", "HostedTool", "result_text"]
