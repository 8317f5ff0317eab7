"""The offline Navigation tools as an MCP server, and Navigation played through it.

Server (stdio by default, or streamable HTTP)::

    python -m envs.navigation.mcp_server [--world-seed 0] [--page-size 10] [--poi-extensions all]
    python -m envs.navigation.mcp_server --http --port 8765      # http://127.0.0.1:8765/mcp

It serves ``tools.make_tools`` over the offline Amap of the seeded world: the same names,
descriptions, JSON schemas and answers as ``NavigationEnv``. A tool's own error (Amap's
``INVALID_PARAMS``, a failed tool) is a result with ``isError`` and the same text the
in-process env shows after "Error: ".

Client: ``NavigationMCPEnv`` ("NavigationMCP-v0") is ``MCPToolEnv`` on that server with the
generated tasks (``task_rows``) and the Navigation reward (``grade``), which rebuilds the
planned routes from the ``direction`` results the server returned. Offline, it gives the
same observations and rewards as ``NavigationEnv`` (tested on the oracle's episodes).
"""

from __future__ import annotations

import argparse
import json
import sys

from envs.base import ToolError
from envs.mcp import MCPToolEnv
from envs.navigation.agents import OracleAgent
from envs.navigation.amap_offline import OfflineAmap
from envs.navigation.reward import judge
from envs.navigation.tasks import build_benchmark
from envs.navigation.tools import EXTENSIONS, make_tools
from envs.navigation.wording import DEMONSTRATIONS, LANGUAGES, SYSTEM_PROMPTS, request_text

SERVER_NAME = "navigation"


# ---- server ---------------------------------------------------------------------------------
def build_server(world_seed: int = 0, page_size: int = 10, poi_extensions: str = "all"):
    """A low-level MCP ``Server`` with the four Navigation tools over the offline Amap.

    The low-level server, not ``MCPServer``: it lists the tools' JSON schemas exactly as
    ``make_tools`` writes them (a decorated function would get a schema derived from its
    signature), so both envs show the policy the same tools."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    amap = OfflineAmap(build_benchmark(int(world_seed)).world)
    tools = make_tools(amap, lambda route: None, page_size, poi_extensions)
    by_name = {t.name: t for t in tools}
    listing = [types.Tool(name=t.name, description=t.description, input_schema=t.parameters) for t in tools]

    def answer(text: str, error: bool = False):
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx, params):
        tool = by_name.get(params.name)
        if tool is None:
            return answer(f"unknown tool {params.name!r}; available tools: {sorted(by_name)}", True)
        # The same wording as ToolEnv._run_tool, so a failing call reads alike in both envs.
        try:
            out = tool.fn(**(params.arguments or {}))
        except ToolError as e:
            return answer(str(e), True)
        except Exception as e:
            return answer(f"{tool.name} failed: {type(e).__name__}: {e}", True)
        return answer(out if isinstance(out, str) else json.dumps(out, ensure_ascii=False, default=str))

    return Server(SERVER_NAME, on_list_tools=list_tools, on_call_tool=call_tool)


def serve_stdio(server) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    async def run():
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(run)


def serve_http(server, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(server.streamable_http_app(host=host), host=host, port=port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m envs.navigation.mcp_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-seed", type=int, default=0, help="seed of the generated world (default 0)")
    parser.add_argument("--page-size", type=int, default=10, choices=range(1, 11), metavar="1..10",
                        help="POIs per search result (default 10)")
    parser.add_argument("--poi-extensions", default="all", choices=EXTENSIONS, help="POI fields (default all)")
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    server = build_server(args.world_seed, args.page_size, args.poi_extensions)
    if args.http:
        serve_http(server, args.host, args.port)
    else:
        serve_stdio(server)


# ---- client: Navigation through MCP ------------------------------------------------------
def task_rows(language: str = "zh", world_seed: int = 0) -> list[dict]:
    """The generated Navigation tasks (both splits) as ``MCPToolEnv`` task rows; write them
    one JSON object per line to get a tasks file for ``MCP-v0``."""
    if language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}; valid languages: {list(LANGUAGES)}")
    bench = build_benchmark(int(world_seed))
    return [{"task_id": task_id, "split": split, "prompt": request_text(bench.tasks[task_id], language),
             "system_prompt": SYSTEM_PROMPTS[language], "demonstration": DEMONSTRATIONS[language],
             "world_seed": int(world_seed), "evidence": bench.tasks[task_id].evidence()}
            for split, ids in bench.ids.items() for task_id in ids]


def grade(task: dict, episode) -> tuple[float, dict]:
    """The Navigation reward of an ``MCPToolEnv`` episode on a ``task_rows`` task: the
    routes are the successful ``direction`` results in call order (the server answers with
    the mode, origin, destination and waypoints it planned), judged by ``reward.judge``."""
    spec = build_benchmark(int(task["world_seed"])).tasks[task["task_id"]]
    routes = []
    for call in episode.calls:
        if call.name == "direction" and not call.is_error:
            out = json.loads(call.text)
            routes.append({"mode": out["mode"], "origin": out["origin"], "destination": out["destination"],
                           "waypoints": out.get("waypoints", [])})
    return judge(spec, routes)


class NavigationMCPEnv(MCPToolEnv):
    """Navigation played through ``python -m envs.navigation.mcp_server`` (this interpreter).

    env_config: ``language`` and ``world_seed`` as ``NavigationEnv``, ``page_size`` and
    ``poi_extensions`` go to the server, and any ``MCPToolEnv`` key (``server`` to use a
    server started elsewhere, e.g. over HTTP; ``session``; timeouts). The server is stateless
    across calls, so one session serves every episode (``session="reuse"``) by default."""

    DEFAULT_CONFIG = {**MCPToolEnv.DEFAULT_CONFIG, "language": "zh", "world_seed": 0, "page_size": 10,
                      "poi_extensions": "all", "session": "reuse"}

    def __init__(self, env_config: dict | None = None, render_mode: str | None = None, **config):
        cfg = {**self.DEFAULT_CONFIG, **(env_config or {}), **config}
        if cfg["server"] is None:
            cfg["server"] = {"command": [sys.executable, "-m", "envs.navigation.mcp_server",
                                         "--world-seed", str(int(cfg["world_seed"])), "--page-size", str(cfg["page_size"]),
                                         "--poi-extensions", str(cfg["poi_extensions"])],
                             "name": SERVER_NAME}
        if cfg["tasks"] is None:
            cfg["tasks"] = task_rows(cfg["language"], cfg["world_seed"])
        super().__init__(cfg, render_mode)

    def grade(self, task: dict, episode) -> tuple[float, dict]:
        return grade(task, episode)

    def oracle_agent(self):
        return OracleAgent(self.reward_evidence(), self.config["language"])


if __name__ == "__main__":
    main()
