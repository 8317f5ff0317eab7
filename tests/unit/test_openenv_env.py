"""OpenEnvToolEnv ("OpenEnv-v0") against real OpenEnv environments (tests/adapter_envs.py),
in this process and served over HTTP on loopback: what the policy sees and the rewards are
what the package itself computes, and a failing environment is an infrastructure failure."""

from __future__ import annotations

import json
import time

import pytest
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import Action

import envs
from envs import InfrastructureError, format_tool_call
from envs.external import RewardRange
from envs.openenv_env import load_tasks
from tests.adapter_envs import (
    BrokenCounter,
    CalcEnvironment,
    CalcObservation,
    CountAction,
    CounterEnvironment,
    CountObservation,
    LoopbackServer,
    SayAction,
    SlowCounter,
    VowelEnvironment,
)

COUNTER = "tests.adapter_envs:CounterEnvironment"
CALC = "tests.adapter_envs:CalcEnvironment"


@pytest.fixture(scope="module")
def servers():
    """Loopback OpenEnv servers of the test environments, by name."""
    apps = {"counter": create_fastapi_app(CounterEnvironment, CountAction, CountObservation, max_concurrent_envs=8),
            "calc": create_fastapi_app(CalcEnvironment, Action, CalcObservation, max_concurrent_envs=8),
            "broken": create_fastapi_app(BrokenCounter, CountAction, CountObservation, max_concurrent_envs=8),
            "slow": create_fastapi_app(SlowCounter, CountAction, CountObservation, max_concurrent_envs=8)}
    running = {name: LoopbackServer(app).__enter__() for name, app in apps.items()}
    yield {name: s.url for name, s in running.items()}
    for s in running.values():
        s.__exit__(None, None, None)


def _make(where: str, servers, server_name: str, target: str, **config):
    env = envs.make_env("OpenEnv-v0", {"env": servers[server_name] if where == "http" else target,
                                       "prompt_field": "prompt", "tasks": 4, **config})
    return env


def _play(env, task_id: str, turns: list[str]):
    obs, info = env.reset(options={"task_id": task_id})
    steps = []
    for turn in turns:
        steps.append(env.step(turn))
        if steps[-1][2] or steps[-1][3]:
            break
    return obs, info, steps


@pytest.mark.parametrize("where", ["inproc", "http"])
def test_counter_episode_is_what_the_environment_computes(where, servers):
    env = _make(where, servers, "counter", COUNTER)
    try:
        amounts = [1, 9, 2, 1]  # 9 breaks the schema: the policy's error, nothing is sent
        obs, info, steps = _play(env, "seed-1", [format_tool_call("step", {"amount": a}) for a in amounts])
    finally:
        env.close()
    # the package's own episode, step by step
    own = CounterEnvironment()
    first = own.reset(seed=1)
    assert obs[-1] == {"role": "user", "content": first.prompt}
    expected_schema = CountAction.model_json_schema()
    expected_schema["properties"].pop("metadata")
    for key in ("title", "description"):
        expected_schema.pop(key)
    assert info["tools"] == [{"type": "function", "function": {
        "name": "step", "description": CountAction.__doc__, "parameters": expected_schema}}]
    sent = [own.step(CountAction(amount=a)) for a in (1, 2, 1)]
    texts = [new[0]["content"] for new, *_ in steps]
    assert texts[1].startswith("Error: invalid arguments for step at amount: 9")
    assert [texts[0], texts[2], texts[3]] == [json.dumps(serialize_observation(o)["observation"]) for o in sent]
    new, reward, terminated, truncated, last = steps[-1]
    assert (reward, terminated, truncated) == (sent[-1].reward, True, False) == (1.0, True, False)
    assert last["reward_breakdown"] == {"raw_reward": 1.0, "steps": 3, "env_done": True, "progress": 1.0}
    assert [r for _, r, *_ in steps[:-1]] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("where", ["inproc", "http"])
def test_each_episode_gets_a_fresh_environment_and_the_rubric_scores_an_overshoot(where, servers):
    env = _make(where, servers, "counter", COUNTER)
    try:
        for _ in range(2):  # a counter carried over would end the second episode at once
            obs, info, steps = _play(env, "seed-0", [format_tool_call("step", {"amount": 2}),
                                                      format_tool_call("step", {"amount": 5})])
            assert json.loads(steps[0][0][0]["content"])["total"] == 2
            assert steps[-1][1:4] == (0.0, True, False)  # 7 overshoots 3: ExactTarget gives 0
    finally:
        env.close()


@pytest.mark.parametrize("where", ["inproc", "http"])
def test_mcp_environment_offers_its_tools_and_submit_ends_the_episode(where, servers):
    env = _make(where, servers, "calc", CALC)
    try:
        turns = [format_tool_call("add", {"a": 11, "b": 7}), format_tool_call("divide", {"a": 1, "b": 0}),
                 format_tool_call("nope", {}), format_tool_call("submit", {"answer": 18})]
        obs, info, steps = _play(env, "seed-1", turns)
        _, _, wrong = _play(env, "seed-1", [format_tool_call("submit", {"answer": 17}) + format_tool_call("add", {"a": 1, "b": 1})])
    finally:
        env.close()
    own = CalcEnvironment()
    assert obs[-1]["content"] == own.reset(seed=1).prompt
    listed = own.step(ListToolsAction()).tools
    assert [t["function"]["name"] for t in info["tools"]] == [t.name for t in listed]
    assert [t["function"]["parameters"] for t in info["tools"]] == [t.input_schema for t in listed]
    added = own.step(CallToolAction(tool_name="add", arguments={"a": 11, "b": 7}))
    divided = own.step(CallToolAction(tool_name="divide", arguments={"a": 1, "b": 0}))
    texts = [new[0]["content"] for new, *_ in steps]
    assert texts[0] == added.result.content[0].text == "18"
    assert texts[1] == f"Error: {divided.error.message}"  # the tool's failure, shown to the policy
    assert texts[2].startswith("Error: unknown tool 'nope'")
    assert steps[-1][1:4] == (1.0, True, False)
    # a wrong answer: the rubric's 0; the call after it in the same turn is not sent
    new, reward, terminated, _, last = wrong[-1]
    assert (reward, terminated) == (0.0, True)
    assert new[1]["content"] == "Error: the episode is over; this call was not sent"
    assert last["reward_breakdown"]["steps"] == 1


def test_a_plain_reply_ends_the_episode_with_the_last_reward():
    env = envs.make_env("OpenEnv-v0", {"env": COUNTER, "prompt_field": "prompt", "tasks": 2})
    _, _, steps = _play(env, "seed-1", [format_tool_call("step", {"amount": 1}), "I give up."])
    assert steps[-1][1:4] == (0.0, True, False)
    assert steps[-1][4]["reward_breakdown"] == {"raw_reward": 0.0, "steps": 1, "env_done": False, "progress": 0.0}
    env.close()


def test_text_action_sends_the_reply_to_a_chat_environment():
    env = envs.make_env("OpenEnv-v0", {"env": "tests.adapter_envs:VowelEnvironment", "text_action": "message",
                                       "prompt_field": "prompt", "tasks": 2})
    try:
        results = {word: _play(env, "seed-0", [word])[2][-1] for word in ("apple", "banana")}
    finally:
        env.close()
    own = VowelEnvironment()
    for word, (new, reward, terminated, _, info) in results.items():
        assert reward == own.step(SayAction(message=word)).reward and terminated
    assert results["apple"][1] == 1.0 and results["banana"][1] == 0.0


class QuarterPerStep(CounterEnvironment):
    """Every step earns 0.25, so the last reward and the sum differ."""

    def step(self, action: CountAction, timeout_s=None, **kwargs) -> CountObservation:
        obs = super().step(action)
        obs.reward = 0.25
        return obs


@pytest.mark.parametrize("mode, expected", [("last", 0.25), ("sum", 0.5)])
def test_reward_is_the_last_step_s_or_the_sum(mode, expected):
    env = envs.make_env("OpenEnv-v0", {"env": QuarterPerStep, "tasks": 1, "reward": mode})
    _, _, steps = _play(env, "seed-0", [format_tool_call("step", {"amount": 1})] * 2 + ["stop"])
    assert steps[-1][1] == expected and steps[-1][4]["reward_breakdown"]["steps"] == 2
    env.close()


def test_registered_and_listed():
    assert {"OpenEnv-v0", "Verifiers-v0"} <= set(envs.list_envs())


def test_reward_range_maps_onto_zero_one_and_refuses_what_is_outside():
    wide = envs.make_env("OpenEnv-v0", {"env": COUNTER, "tasks": 1, "reward_range": [-1, 1], "reward": "sum"})
    _, _, steps = _play(wide, "seed-0", [format_tool_call("step", {"amount": 3})])
    assert steps[-1][1] == 1.0 and steps[-1][4]["reward_breakdown"]["raw_reward"] == 1.0
    _, _, steps = _play(wide, "seed-0", ["no tool"])
    assert steps[-1][1] == 0.5  # raw 0 is the middle of [-1, 1]
    narrow = envs.make_env("OpenEnv-v0", {"env": COUNTER, "tasks": 1, "reward_range": [0, 0.5]})
    narrow.reset(options={"task_id": "seed-0"})
    with pytest.raises(ValueError, match=r"outside reward_range \[0, 0.5\]"):
        narrow.step(format_tool_call("step", {"amount": 3}))
    for bad in ([1, 1], [0], "x", [0, float("inf")]):
        with pytest.raises(ValueError, match="reward_range"):
            RewardRange(bad, "test")
    for env in (wide, narrow):
        env.close()


@pytest.mark.parametrize("case", ["inproc-raises", "http-raises", "http-down", "inproc-hangs", "http-hangs"])
def test_a_failing_environment_is_an_infrastructure_failure_in_bounded_time(case, servers):
    where, what = case.split("-")
    target = {"raises": "tests.adapter_envs:BrokenCounter", "hangs": "tests.adapter_envs:SlowCounter"}.get(what)
    url = {"raises": servers["broken"], "hangs": servers["slow"], "down": "http://127.0.0.1:9"}[what]
    env = envs.make_env("OpenEnv-v0", {"env": url if where == "http" else target, "tasks": 2,
                                       "timeout_s": 1.0, "connect_timeout_s": 2.0})
    start = time.monotonic()
    try:
        with pytest.raises(InfrastructureError) as raised:
            env.reset(options={"task_id": "seed-0"})
            env.step(format_tool_call("step", {"amount": 1}))
        assert time.monotonic() - start < 15
        expected = {"raises": "the counter broke", "hangs": "within", "down": "failed"}[what]
        assert expected in str(raised.value) and (url if where == "http" else "BrokenCounter" if what == "raises"
                                                  else "SlowCounter") in str(raised.value)
        if case == "inproc-hangs":  # the stuck env refuses at once; the runner replaces it
            start = time.monotonic()
            with pytest.raises(InfrastructureError, match="never returned"):
                env.reset(options={"task_id": "seed-0"})
            assert time.monotonic() - start < 1
    finally:
        env.close()


def test_tasks_config_forms():
    rows, ids = load_tasks({"train": 3, "test": 2}, ("train", "test"))
    assert ids == {"train": ["seed-0", "seed-1", "seed-2"], "test": ["seed-3", "seed-4"]}
    assert rows["seed-4"]["reset"] == {"seed": 4}
    rows, ids = load_tasks([{"task_id": "a", "reset": {"seed": 7}, "prompt": "hi", "evidence": {"gold": 1}},
                            {"task_id": "b", "split": "test"}], ("train", "test"))
    assert ids == {"train": ["a"], "test": ["b"]}
    for bad, match in ((["x"], "must be a dict"), ([{"task_id": "a"}, {"task_id": "a"}], "duplicate"),
                       ([{"task_id": "a", "split": "dev"}], "split"), ({"valid": 3}, "unknown splits"),
                       ([{"task_id": "a", "reset": 3}], "reset"), ([{"task_id": "a", "extra": 1}], "unknown keys")):
        with pytest.raises(ValueError, match=match):
            load_tasks(bad, ("train", "test"))


def test_config_errors_say_what_to_change():
    with pytest.raises(ValueError, match="needs env_config\\['env'\\]"):
        envs.make_env("OpenEnv-v0", {})
    with pytest.raises(ValueError, match="cannot be loaded"):
        envs.make_env("OpenEnv-v0", {"env": "tests.adapter_envs:NoSuchEnv"})
    with pytest.raises(ValueError, match="mode"):
        envs.make_env("OpenEnv-v0", {"env": COUNTER, "mode": "tools"})
    env = envs.make_env("OpenEnv-v0", {"env": COUNTER, "mode": "mcp", "tasks": 1})
    with pytest.raises(ValueError, match="its actions are a typed Action"):
        env.reset(options={"task_id": "seed-0"})

    class Unannotated(CounterEnvironment):
        def step(self, action, timeout_s=None, **kwargs):
            return super().step(action)

    env = envs.make_env("OpenEnv-v0", {"env": Unannotated, "tasks": 1})
    with pytest.raises(ValueError, match="env_config\\['action'\\]"):
        env.reset(options={"task_id": "seed-0"})
    env = envs.make_env("OpenEnv-v0", {"env": Unannotated, "action": "tests.adapter_envs:CountAction", "tasks": 1})
    assert env.reset(options={"task_id": "seed-0"})[1]["tools"][0]["function"]["name"] == "step"


def test_no_rule_roles_and_evidence_from_the_task_row():
    env = envs.make_env("OpenEnv-v0", {"env": COUNTER, "tasks": [{"task_id": "t", "reset": {"seed": 2},
                                                                  "prompt": "Count to 5.", "evidence": {"target": 5}}]})
    obs, _ = env.reset(options={"task_id": "t"})
    assert obs[-1]["content"] == "Count to 5."
    assert env.rti_rules() is None and env.reward_evidence() == {"target": 5}
    env.close()
