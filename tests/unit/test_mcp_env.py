"""MCPToolEnv: Navigation through MCP against the in-process env, and every failure mode.

The faults come from a small stdio server written here with the SDK's low-level ``Server``;
each of its tools misbehaves in one way (an error result, refused arguments, a huge result,
a crash, a hang, a bug). No Ray, no model.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time

import gymnasium
import pytest

pytest.importorskip("mcp")
pytestmark = pytest.mark.timeout(180)  # a regression that hangs fails here instead of blocking the suite

import envs  # noqa: E402  (registers the env ids)
from envs import InfrastructureError, make_env  # noqa: E402
from envs.mcp import MCPSchemaError, MCPToolEnv  # noqa: E402
from envs.mcp.link import TEARDOWN_S  # noqa: E402
from envs.navigation import NaiveAgent, NavigationEnv, OracleAgent, run_episode  # noqa: E402
from envs.navigation.mcp_server import NavigationMCPEnv  # noqa: E402
from envs.tool_calls import format_tool_call  # noqa: E402

FAULT_SERVER = r'''
import os, sys, time
import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
obj = lambda props, req=(): {"type": "object", "properties": props, "required": list(req)}
TOOLS = [types.Tool(name="echo", description="Echo text.", input_schema=obj({"text": {"type": "string"}}, ["text"]))]
TOOLS += [types.Tool(name=n, description=n, input_schema=obj({}))
          for n in ("fail", "refuse", "huge", "pid", "crash", "hang", "broken")]
if MODE == "bad-schema":
    TOOLS.append(types.Tool(name="weird", description="x", input_schema=obj({"n": {"type": "no-such-type"}})))
if MODE == "garbage":
    sys.stdout.write("this is not JSON-RPC\n")
    sys.stdout.flush()

def text(t, error=False):
    return types.CallToolResult(content=[types.TextContent(type="text", text=t)], is_error=error)

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)

async def call_tool(ctx, params):
    name, args = params.name, params.arguments or {}
    if name == "echo":
        return text(args["text"])
    if name == "fail":
        return text("the tool failed on purpose", True)
    if name == "refuse":
        raise MCPError(code=types.INVALID_PARAMS, message="n must be even")
    if name == "huge":
        return text("x" * 200000)
    if name == "pid":
        return text(str(os.getpid()))
    if name == "crash":
        print("crashing on purpose", file=sys.stderr, flush=True)
        os._exit(3)
    if name == "hang":
        time.sleep(600)
    raise RuntimeError("a bug in the server")

async def main():
    server = Server("faulty", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())

anyio.run(main)
'''

# A server speaking JSON-RPC by hand, to break the protocol in ways the SDK's server never would.
RAW_SERVER = r'''
import json, sys, time

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

schema = {"type": "object", "properties": {}}
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, rid = msg.get("method"), msg["id"]
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": n, "inputSchema": schema} for n in ("garble", "bad_result", "rpc_error")]}})
    elif method == "tools/call" and msg["params"]["name"] == "garble":
        sys.stdout.write("{this is not json\n")
        sys.stdout.flush()
        time.sleep(600)
    elif method == "tools/call" and msg["params"]["name"] == "bad_result":
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": "not a list of blocks"}})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "internal trouble"}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
'''

TASKS = [{"task_id": "say-hi", "prompt": "Echo 'hi', then answer hi.", "answer": "hi"},
         {"task_id": "t2", "prompt": "Answer 2.", "answer": "2", "split": "test", "evidence": {"gold": "2"}}]


def _grade(task, episode):
    return float(task["answer"] in episode.answer), {"calls": len(episode.calls)}


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory):
    path = tmp_path_factory.mktemp("mcp") / "fault_server.py"
    path.write_text(FAULT_SERVER)
    return str(path)


def _fault_env(script, mode="ok", **config):
    return MCPToolEnv({"server": {"command": [sys.executable, script, mode], "name": "faulty-test"},
                       "tasks": TASKS, "grader": _grade, "session": "reuse", "timeout_s": 20, **config})


def _call(name, **arguments):
    return format_tool_call(name, arguments)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ---- Navigation: MCP vs in-process --------------------------------------------------------
def _compare(split, language, agents, ids=None, config=None, **mcp_config):
    """Play each task with each agent in both envs (``config`` goes to both); return the
    rewards and how many episodes showed a cut route, asserting equal messages, rewards
    and breakdowns on the way."""
    local = NavigationEnv({"split": split, "language": language, **(config or {})})
    remote = NavigationMCPEnv({"split": split, "language": language, **(config or {}), **mcp_config})
    rewards, cut = [], 0
    try:
        for task_id in ids or local.task_ids(split):
            for agent in agents:
                r_local, i_local, m_local = run_episode(local, agent, task_id)
                r_remote, i_remote, m_remote = run_episode(remote, agent, task_id)
                assert m_remote == m_local, f"{task_id} with {agent.__name__}: the MCP transcript differs"
                assert r_remote == r_local and i_remote["reward_breakdown"] == i_local["reward_breakdown"], task_id
                rewards.append(r_remote)
                cut += any("...[truncated" in m["content"] for m in m_remote if m.get("name") == "direction")
        _, info_local = local.reset(options={"task_id": task_id})
        _, info_remote = remote.reset(options={"task_id": task_id})
        assert info_remote["tools"] == info_local["tools"]
        assert info_remote["demonstration"] == info_local["demonstration"]
    finally:
        remote.close()
    return rewards, cut


def test_navigation_through_mcp_matches_the_in_process_env_on_oracle_episodes():
    rewards, _ = _compare("test", "en", [OracleAgent])
    assert len(rewards) == 150 and rewards == [1.0] * 150


def test_navigation_through_mcp_matches_on_failing_episodes_too():
    # The naive agent falls for the traps: reward-0 episodes must match as well.
    rewards, _ = _compare("test", "zh", [OracleAgent, NaiveAgent], ids=[f"nav-test-{i:04d}" for i in range(25)])
    assert 0.0 in rewards and 1.0 in rewards


def test_navigation_rewards_match_when_route_results_are_cut_for_the_policy():
    # Short results: searches fit, most direction results are truncated in the observation;
    # the grader must still judge the route the server planned, as the in-process env does.
    config = {"page_size": 3, "poi_extensions": "base", "max_tool_output_chars": 1200}
    rewards, cut = _compare("test", "en", [OracleAgent], ids=[f"nav-test-{i:04d}" for i in range(20)], config=config)
    assert rewards == [1.0] * 20 and cut >= 10


def test_navigation_error_observations_match():
    """Bad calls read the same in both envs: schema violations (checked client-side) and
    the tools' own Amap errors (an isError result from the server)."""
    turns = [_call("no_such_tool"),
             _call("direction", origin="116.4,39.9"),                      # missing destination
             _call("direction", origin="not a point", destination="116.4,39.9"),
             _call("weather", city="Atlantis"),
             _call("around_search", location="116.4,39.9", radius=999999),
             "I could not plan it."]
    transcripts, rewards = [], []
    for env in (NavigationEnv({"split": "test"}), NavigationMCPEnv({"split": "test"})):
        env.reset(options={"task_id": "nav-test-0003"})
        for turn in turns:
            _, reward, terminated, _, _ = env.step(turn)
        transcripts.append(env.messages)
        rewards.append(reward)
        assert terminated
        env.close()
    assert transcripts[0] == transcripts[1] and rewards == [0.0, 0.0]
    errors = [m["content"] for m in transcripts[1] if m["role"] == "tool"]
    assert len(errors) == 5 and all(e.startswith("Error:") for e in errors)
    assert "INVALID_PARAMS" in errors[2]


def test_navigation_over_streamable_http():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "envs.navigation.mcp_server", "--http", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"
        rewards, _ = _compare("test", "en", [OracleAgent], ids=["nav-test-0000", "nav-test-0007"], server=url)
        assert rewards == [1.0, 1.0]

        env = NavigationMCPEnv({"split": "test", "language": "en", "server": url, "timeout_s": 5})
        env.reset(options={"task_id": "nav-test-0000"})
        proc.kill()
        proc.wait()
        start = time.monotonic()
        with pytest.raises(InfrastructureError, match="127.0.0.1"):
            env.step(_call("weather", city="北京"))
        assert time.monotonic() - start < 5 + TEARDOWN_S
        env.close()
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


# ---- the policy's faults: error observations ------------------------------------------------
def test_tool_errors_and_refused_arguments_are_error_observations(fault_server):
    env = _fault_env(fault_server)
    obs, info = env.reset(options={"task_id": "say-hi"})
    assert {t["function"]["name"] for t in info["tools"]} >= {"echo", "fail", "refuse"}
    new, _, done, _, _ = env.step(_call("fail"))
    assert new[0]["content"] == "Error: the tool failed on purpose" and not done
    new, _, done, _, _ = env.step(_call("refuse"))
    assert new[0]["content"] == "Error: the server refused the arguments: n must be even" and not done
    new, _, _, _, _ = env.step(_call("echo"))                      # schema violation, never sent
    assert new[0]["content"].startswith("Error: invalid arguments for echo")
    new, _, _, _, _ = env.step(_call("echo", text="hi"))           # the session is still fine
    assert new[0]["content"] == "hi"
    _, reward, done, _, info = env.step("hi")
    assert done and reward == 1.0 and info["reward_breakdown"] == {"calls": 3, "progress": 1.0}
    assert [(c.name, c.is_error) for c in env.calls] == [("fail", True), ("refuse", True), ("echo", False)]
    env.close()


def test_huge_results_are_truncated_with_a_note(fault_server):
    env = _fault_env(fault_server, max_tool_output_chars=1000)
    env.reset(options={"task_id": "say-hi"})
    new, *_ = env.step(_call("huge"))
    assert len(new[0]["content"]) <= 1000 and "truncated" in new[0]["content"]
    assert len(env.calls[0].text) == 200000          # the grader sees it whole
    env.close()


# ---- the environment's faults: infrastructure failures ------------------------------------
def test_a_server_that_crashes_mid_episode_is_an_infrastructure_failure(fault_server):
    env = _fault_env(fault_server)
    env.reset(options={"task_id": "say-hi"})
    start = time.monotonic()
    with pytest.raises(InfrastructureError, match="faulty-test") as failure:
        env.step(_call("crash"))
    assert time.monotonic() - start < 20 and "crashing on purpose" in str(failure.value)
    env.reset(options={"task_id": "say-hi"})          # a fresh session serves the retry
    new, *_ = env.step(_call("echo", text="again"))
    assert new[0]["content"] == "again"
    env.close()


def test_a_hanging_server_fails_within_the_timeout_and_is_stopped(fault_server):
    env = _fault_env(fault_server, timeout_s=1.0)
    env.reset(options={"task_id": "say-hi"})
    env.step(_call("pid"))
    pid = int(env.calls[0].text)
    start = time.monotonic()
    with pytest.raises(InfrastructureError, match=r"'faulty-test'.*timeout_s=1"):
        env.step(_call("hang"))
    assert time.monotonic() - start < 1.0 + TEARDOWN_S
    assert not _alive(pid)
    env.close()


def test_a_server_that_never_answers_the_handshake_times_out():
    env = MCPToolEnv({"server": [sys.executable, "-c", "import time; time.sleep(600)"], "tasks": TASKS,
                      "grader": _grade, "connect_timeout_s": 1.0})
    start = time.monotonic()
    with pytest.raises(InfrastructureError, match="handshake within connect_timeout_s=1"):
        env.reset(options={"task_id": "say-hi"})
    assert time.monotonic() - start < 1.0 + TEARDOWN_S
    env.close()


def test_a_server_bug_is_an_infrastructure_failure(fault_server):
    env = _fault_env(fault_server)
    env.reset(options={"task_id": "say-hi"})
    with pytest.raises(InfrastructureError, match=r"'faulty-test'.*answered tools/call 'broken' with an error.*a bug in the server"):
        env.step(_call("broken"))
    env.close()


def test_stdout_that_is_not_mcp_is_an_infrastructure_failure(fault_server):
    env = _fault_env(fault_server, "garbage")
    with pytest.raises(InfrastructureError, match="'faulty-test'.*not valid MCP.*this is not JSON-RPC"):
        env.reset(options={"task_id": "say-hi"})
    env.close()


@pytest.mark.parametrize("tool,message", [("garble", "not valid MCP"), ("bad_result", "malformed at content"),
                                          ("rpc_error", "internal trouble")])
def test_protocol_errors_are_infrastructure_failures_without_waiting(tmp_path, tool, message):
    script = tmp_path / "raw_server.py"
    script.write_text(RAW_SERVER)
    env = MCPToolEnv({"server": [sys.executable, str(script)], "tasks": TASKS, "grader": _grade, "timeout_s": 30})
    _, info = env.reset(options={"task_id": "say-hi"})
    assert len(info["tools"]) == 3
    start = time.monotonic()
    with pytest.raises(InfrastructureError, match=f"python.* {tool!r}.*{message}"):
        env.step(_call(tool))
    assert time.monotonic() - start < TEARDOWN_S      # never waits for the 30 s timeout
    env.close()


def _pids(env, episodes):
    seen = []
    for _ in range(episodes):
        env.reset(options={"task_id": "say-hi"})
        env.step(_call("pid"))
        seen.append(int(env.calls[-1].text))
        env.step("done")
    return seen


def test_a_fresh_server_per_episode_and_none_left_after_close(fault_server):
    env = _fault_env(fault_server, session="episode")
    first, second = _pids(env, 2)
    assert first != second and not _alive(first)          # stopped when its episode ended
    env.close()
    assert not _alive(second)


def test_a_reused_session_that_died_between_episodes_is_reopened(fault_server):
    env = _fault_env(fault_server, session="reuse")
    first, again = _pids(env, 2)
    assert first == again
    os.kill(first, signal.SIGKILL)
    (fresh,) = _pids(env, 1)
    assert fresh != first
    env.close()
    assert not _alive(fresh)


def test_an_env_dropped_without_close_stops_its_server(fault_server):
    env = _fault_env(fault_server, session="reuse")
    (pid,) = _pids(env, 1)
    del env
    gc.collect()
    assert not _alive(pid)


# ---- configuration errors ---------------------------------------------------------------------
def test_a_malformed_tool_schema_is_a_clear_error_naming_the_tool(fault_server):
    env = _fault_env(fault_server, "bad-schema")
    with pytest.raises(MCPSchemaError, match=r"'faulty-test'.*tool 'weird'.*not a valid JSON Schema"):
        env.reset(options={"task_id": "say-hi"})
    env.close()
    env = _fault_env(fault_server, "bad-schema", tools=["echo"])   # leaving it out works
    _, info = env.reset(options={"task_id": "say-hi"})
    assert [t["function"]["name"] for t in info["tools"]] == ["echo"]
    env.close()


def test_a_missing_command_is_a_clear_error_at_construction():
    with pytest.raises(ValueError, match="no-such-mcp-server-xyz.*not an executable on PATH"):
        MCPToolEnv({"server": "no-such-mcp-server-xyz --stdio", "tasks": TASKS, "grader": _grade})


@pytest.mark.parametrize("config,message", [
    ({"server": None}, "server'] is required"),
    ({"server": {"url": "ftp://x"}}, "must start with http"),
    ({"server": {"command": "python", "port": 1}}, "unknown keys"),
    ({"tasks": [{"task_id": "a"}]}, "'prompt' must be a non-empty string"),
    ({"tasks": TASKS + TASKS[:1]}, "duplicate task id"),
    ({"tasks": "/no/such/tasks.jsonl"}, "cannot read the tasks file"),
    ({"grader": None}, "needs env_config\\['grader'\\]"),
    ({"grader": "no.such.module:grade"}, "cannot load the grader"),
    ({"session": "forever"}, "session"),
    ({"timeout_s": 0}, "positive number"),
])
def test_bad_configuration_is_a_clear_error(config, message):
    base = {"server": [sys.executable, "-c", "pass"], "tasks": TASKS, "grader": _grade}
    with pytest.raises(ValueError, match=message):
        MCPToolEnv({**base, **config})


def test_tasks_file_registry_and_evidence(fault_server, tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in TASKS) + "\n")
    server = {"command": [sys.executable, fault_server], "name": "faulty-test"}
    env = gymnasium.make("MCP-v0", server=server, tasks=str(path), grader=_grade)
    assert "MCP-v0" in envs.list_envs() and "NavigationMCP-v0" in envs.list_envs()
    assert env.unwrapped.task_ids("test") == ["t2"] and env.unwrapped.task_ids("train") == ["say-hi"]
    env.unwrapped.config["split"] = "test"
    env.reset(options={"task_id": "t2"})
    assert env.unwrapped.reward_evidence() == {"gold": "2"}
    _, reward, done, _, _ = env.step("The answer is 2.")
    assert done and reward == 1.0
    env.close()
    nav = make_env("NavigationMCP-v0", {"split": "test", "language": "en"})
    assert isinstance(nav, NavigationMCPEnv) and len(nav.task_ids("test")) == 150
    nav.close()
