"""VerifiersToolEnv ("Verifiers-v0") against real verifiers tasksets (tests/adapter_envs.py):
tools and results are what verifiers' own toolset server gives, the reward is the task's
rubric on the episode's trace, and a failing grader or tool is an infrastructure failure."""

from __future__ import annotations

import asyncio
import time

import pytest
import verifiers.v1 as vf
from mcp.server.mcpserver import MCPServer

import envs
from envs import InfrastructureError, format_tool_call
from tests.adapter_envs import CalcToolsetConfig, Calculator, SumTask

SUMS = "tests.adapter_envs:SumTaskset"


def _make(**config):
    return envs.make_env("Verifiers-v0", {"taskset": SUMS, "reward_range": [0, 1.5], **config})


def _play(env, task_id: str, turns: list[str]):
    obs, info = env.reset(options={"task_id": task_id})
    steps = []
    for turn in turns:
        steps.append(env.step(turn))
        if steps[-1][2] or steps[-1][3]:
            break
    return obs, info, steps


def _verifiers_server() -> MCPServer:
    """The server verifiers itself builds for the task's toolset."""
    toolset = Calculator(CalcToolsetConfig())
    server = MCPServer(toolset.server_name)
    toolset.register(server)
    return server


def test_episode_tools_results_and_reward_are_verifiers_own():
    env = _make()
    try:
        obs, info, steps = _play(env, "sum-1", [format_tool_call("calculator_add", {"a": 21, "b": 5}),
                                                format_tool_call("calculator_divide", {"a": 1, "b": 0}),
                                                "It is 26."])
        trace = env.last_trace
    finally:
        env.close()
    assert obs == [{"role": "system", "content": envs.verifiers_env.DEFAULT_SYSTEM_PROMPT},
                   {"role": "user", "content": "What is 21 + 5?"}]
    server = _verifiers_server()
    listed = asyncio.run(server.list_tools())
    assert [t["function"]["name"] for t in info["tools"]] == [f"calculator_{t.name}" for t in listed]
    assert [t["function"]["parameters"] for t in info["tools"]] == [t.input_schema for t in listed]
    added = asyncio.run(server.call_tool("add", {"a": 21, "b": 5}))
    with pytest.raises(Exception) as divided:
        asyncio.run(server.call_tool("divide", {"a": 1, "b": 0}))
    assert steps[0][0][0]["content"] == added.content[0].text == "26"
    assert steps[1][0][0]["content"] == f"Error: {divided.value}"  # the tool's failure, shown to the policy
    new, reward, terminated, truncated, info = steps[-1]
    # the rubric: correct (1.0 x 1) + used_a_tool (1.0 x 0.5) = 1.5, the top of reward_range
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["reward_breakdown"]["rewards"] == {"correct": {"score": 1.0, "weight": 1.0},
                                                   "used_a_tool": {"score": 1.0, "weight": 0.5}}
    assert info["reward_breakdown"]["metrics"] == {"turns": 3.0} and info["reward_breakdown"]["raw_reward"] == 1.5
    # the trace the rubric read: what verifiers' scoring hooks see of a rollout
    assert trace.last_reply == "It is 26." and trace.num_turns == 3
    calls = [c for m in trace.assistant_messages for c in m.tool_calls or []]
    assert [c.id for c in calls] == [m.tool_call_id for m in trace.tool_messages] == ["call_1", "call_2"]
    assert [c.name for c in calls] == ["calculator_add", "calculator_divide"]


def test_a_wrong_answer_gets_the_partial_rubric():
    env = _make()
    try:
        _, _, tool_then_wrong = _play(env, "sum-0", [format_tool_call("calculator_add", {"a": 2, "b": 2}), "It is 4."])
        _, _, no_tool = _play(env, "sum-0", ["It is 25."])
    finally:
        env.close()
    assert tool_then_wrong[-1][1] == pytest.approx(0.5 / 1.5)  # used a tool, wrong answer
    assert no_tool[-1][1] == pytest.approx(1.0 / 1.5)          # right answer, no tool
    assert no_tool[-1][4]["reward_breakdown"]["progress"] == pytest.approx(1.0 / 1.5)


def test_splits_are_verifiers_select_configs():
    env = _make(taskset_config={"count": 5}, splits={"train": {"limit": 3}, "test": {"skip": 3}})
    assert env.task_ids("train") == ["sum-0", "sum-1", "sum-2"] and env.task_ids("test") == ["sum-3", "sum-4"]
    env.close()
    with pytest.raises(ValueError, match="splits"):
        _make(splits={"dev": {}})


def test_a_trace_stop_hook_ends_the_episode_and_max_turns_is_scored():
    env = _make(taskset="tests.adapter_envs:StoppingSumTaskset")
    two_calls = format_tool_call("calculator_add", {"a": 1, "b": 1}) + format_tool_call("calculator_add", {"a": 2, "b": 2})
    _, _, steps = _play(env, "sum-0", [format_tool_call("calculator_add", {"a": 1, "b": 1}), two_calls, "never sent"])
    env.close()
    assert len(steps) == 2 and steps[-1][2:4] == (True, False)
    assert steps[-1][4]["reward_breakdown"]["stop_condition"] == "two_tool_results"
    env = _make(max_turns=2)
    _, _, steps = _play(env, "sum-0", [format_tool_call("calculator_add", {"a": 1, "b": 1})] * 3)
    env.close()
    new, reward, terminated, truncated, info = steps[-1]
    assert len(steps) == 2 and (terminated, truncated) == (False, True)
    assert info["reward_breakdown"]["stop_condition"] == "max_turns" and reward == pytest.approx(0.5 / 1.5)


def test_a_messages_prompt_opens_the_episode_with_its_messages():
    class ChatTaskset(vf.Taskset[SumTask, vf.TasksetConfig]):
        def load(self):
            prompt = [vf.UserMessage(content="Hi."), vf.AssistantMessage(content="Hello!"),
                      vf.UserMessage(content="What is 1 + 1?")]
            data = SumTask.data_type()(id="chat", prompt=prompt, answer="2", system_prompt="Be brief.")
            yield SumTask(data, self.config.task)

    env = envs.make_env("Verifiers-v0", {"taskset": ChatTaskset, "reward_range": [0, 1.5]})
    obs, _ = env.reset(options={"task_id": "chat"})
    assert obs == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."},
                   {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "What is 1 + 1?"}]
    *_, (new, reward, terminated, _, info) = _play(env, "chat", ["2"])[2]
    assert reward == pytest.approx(1 / 1.5) and not env.last_trace.nodes[2].sampled  # prompt turns are not sampled
    env.close()


def test_failing_grader_or_hung_tool_is_an_infrastructure_failure():
    env = _make(taskset="tests.adapter_envs:BrokenScoringTaskset")
    env.reset(options={"task_id": "sum-0"})
    with pytest.raises(InfrastructureError, match="scoring of task 'sum-0' raised .*the grader broke"):
        env.step("It is 20.")
    env.close()
    env = _make(timeout_s=0.5)
    env.reset(options={"task_id": "sum-0"})
    start = time.monotonic()
    with pytest.raises(InfrastructureError, match="tool 'calculator_wait' did not finish within 0.5 s"):
        env.step(format_tool_call("calculator_wait", {"seconds": 30}))
    assert time.monotonic() - start < 5
    _, _, steps = _play(env, "sum-0", ["It is 25."])  # cancelled on its loop: the env is still usable
    assert steps[-1][1] == pytest.approx(1 / 1.5)
    env.close()


def test_what_cannot_run_in_process_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="NEEDS_CONTAINER is set"):
        _make(taskset="tests.adapter_envs:ContainerTaskset")

    class SyncRewardTask(SumTask):
        @vf.reward
        def correct(self, task, trace) -> float:
            return 1.0

    class StatefulState(vf.State):
        count: int = 0

    class StatefulToolset(vf.Toolset[CalcToolsetConfig, StatefulState]):
        @vf.tool
        async def bump(self) -> int:
            """Count."""
            return 1

    class StatefulTask(SumTask):
        @classmethod
        def toolsets(cls, config):
            return [StatefulToolset(CalcToolsetConfig())]

    for task_cls, match in ((SyncRewardTask, "declare them 'async def'"), (StatefulTask, "state channel")):
        class Tasks(vf.Taskset[task_cls, vf.TasksetConfig]):
            def load(self, cls=task_cls):
                yield cls(SumTask.data_type()(id="t", prompt="?", answer="1"), self.config.task)

        with pytest.raises(ValueError, match=match):
            envs.make_env("Verifiers-v0", {"taskset": Tasks})
    with pytest.raises(ValueError, match="needs env_config\\['taskset'\\]"):
        envs.make_env("Verifiers-v0", {})
    with pytest.raises(ValueError, match="not a verifiers Taskset"):
        envs.make_env("Verifiers-v0", {"taskset": "tests.adapter_envs:SumTask"})


def test_no_rule_roles_and_evidence_is_the_task_data_without_its_prompt():
    env = _make()
    env.reset(options={"task_id": "sum-2"})
    evidence = env.reward_evidence()
    assert env.rti_rules() is None
    assert evidence["answer"] == "27" and evidence["id"] == "sum-2" and "prompt" not in evidence
    env.close()


def test_a_taskset_id_loads_the_way_verifiers_loads_it(tmp_path, monkeypatch):
    # a taskset id is an installed package exporting its Taskset (and its config) via __all__
    (tmp_path / "vf_sums_taskset.py").write_text("from tests.adapter_envs import SumTaskset\n__all__ = ['SumTaskset']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    env = _make(taskset="vf_sums_taskset", taskset_config={"count": 2})
    assert env.task_ids("train") == ["sum-0", "sum-1"] and env.label == "vf_sums_taskset"
    env.close()
    with pytest.raises(ModuleNotFoundError, match="taskset 'no_such_taskset' not found"):
        _make(taskset="no_such_taskset")
