"""Gymnasium multi-turn tool environments and their registry.

``envs`` is model-agnostic: it speaks chat messages and tool calls, never tokens, and never
imports ``policies`` or ``rti_actors``.
"""

from envs.base import InfrastructureError, Task, Tool, ToolEnv, ToolError, play, truncate_text
from envs.registry import get_creator, list_envs, make_env, register_builtin, register_env
from envs.tool_calls import format_assistant_turn, format_tool_call, parse_tool_calls

__all__ = [
    "InfrastructureError", "Task", "Tool", "ToolEnv", "ToolError", "play", "truncate_text",
    "get_creator", "list_envs", "make_env", "register_env", "register_builtin",
    "format_assistant_turn", "format_tool_call", "parse_tool_calls",
]

# Built-in benchmarks, imported lazily on first make.
register_builtin("Navigation-v0", "envs.navigation:NavigationEnv")
register_builtin("Tau2Telecom-v0", "envs.tau2:Tau2TelecomEnv")
register_builtin("Tau2Retail-v0", "envs.tau2:Tau2RetailEnv")
register_builtin("Tau2Airline-v0", "envs.tau2:Tau2AirlineEnv")
register_builtin("Hard20-v0", "envs.hard20:Hard20Env")
register_builtin("ClawEval-v0", "envs.claw_eval:ClawEvalEnv")
register_builtin("Lookup-v0", "envs.lookup:LookupEnv")
# MCP servers (the `mcp` extra): any server's tools, and Navigation served over MCP.
register_builtin("MCP-v0", "envs.mcp:MCPToolEnv")
register_builtin("NavigationMCP-v0", "envs.navigation.mcp_server:NavigationMCPEnv")
# Other packages' environments: OpenEnv (the `openenv` extra) and verifiers tasksets (`verifiers`).
register_builtin("OpenEnv-v0", "envs.openenv_env:OpenEnvToolEnv")
register_builtin("Verifiers-v0", "envs.verifiers_env:VerifiersToolEnv")
