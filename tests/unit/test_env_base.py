"""The ToolEnv base class and the registry, on a small calculator environment."""

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from envs import Task, Tool, ToolEnv, ToolError, make_env, register_env, truncate_text


class CalcEnv(ToolEnv):
    """Add two numbers with a tool, then answer with the sum."""

    TASKS = {"t0": (2, 3), "t1": (10, 32), "t2": (7, 8)}

    def task_ids(self, split):
        return sorted(self.TASKS)

    def load_task(self, task_id):
        a, b = self.TASKS[task_id]

        def add(x: int, y: int):
            if x < 0:
                raise ToolError("x must be non-negative")
            if x == 999:
                raise RuntimeError("boom")
            return {"sum": x + y}

        tool = Tool("add", "Add two integers.", {
            "type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"], "additionalProperties": False}, add)
        return Task(task_id, "You are a calculator.", f"What is {a} + {b}?", [tool], {"answer": a + b})

    def compute_reward(self):
        last = self.messages[-1]["content"] if self.messages[-1]["role"] == "assistant" else ""
        ok = str(self.task.data["answer"]) in last
        return float(ok), {"answer_found": ok}

    def reward_evidence(self):
        return {"answer": self.task.data["answer"]}


def make_calc(cfg):
    return CalcEnv(cfg)


def test_solved_episode_gets_reward_one():
    env = CalcEnv({})
    obs, info = env.reset(options={"task_id": "t1"})
    assert [m["role"] for m in obs] == ["system", "user"]
    assert info["tools"][0]["function"]["name"] == "add"
    obs, r, term, trunc, info = env.step('<tool_call>{"name": "add", "arguments": {"x": 10, "y": 32}}</tool_call>')
    assert (r, term, trunc) == (0.0, False, False)
    assert obs[0]["role"] == "tool" and '"sum": 42' in obs[0]["content"]
    obs, r, term, trunc, info = env.step("The answer is 42.")
    assert (r, term, trunc) == (1.0, True, False)
    assert info["reward_breakdown"] == {"answer_found": True}


def test_wrong_answer_gets_zero():
    env = CalcEnv({})
    env.reset(options={"task_id": "t0"})
    _, r, term, _, _ = env.step("It is 6.")
    assert term and r == 0.0


@pytest.mark.parametrize("action,needle", [
    ('<tool_call>{"name": "add", "arguments": {"x": 1,}}</tool_call>', "not valid JSON"),
    ('<tool_call>{"name": "add", "arguments": {"x": 1, "y": 2}}', "unclosed"),
    ('<tool_call>{"name": "mul", "arguments": {"x": 1, "y": 2}}</tool_call>', "unknown tool"),
    ('<tool_call>{"name": "add", "arguments": {"x": "one", "y": 2}}</tool_call>', "invalid arguments"),
    ('<tool_call>{"name": "add", "arguments": {"x": 1}}</tool_call>', "invalid arguments"),
    ('<tool_call>{"name": "add", "arguments": {"x": -1, "y": 2}}</tool_call>', "x must be non-negative"),
    ('<tool_call>{"name": "add", "arguments": {"x": 999, "y": 2}}</tool_call>', "RuntimeError: boom"),
    ('<tool_call>{"name": 5, "arguments": {}}</tool_call>', "must be a non-empty string"),
    ('<tool_call>{"name": "add", "args": {}}</tool_call>', "unknown keys"),
    ('<tool_call>{"name": "add", "arguments": {"x": 1, "y": 2, "pad": "' + "x" * 5000 + '"}}</tool_call>', "limit is"),
    ('<tool_call>{"name": "add", "arguments": {"x": ' + "9" * 5000 + ', "y": 2}}</tool_call>', "digits"),
    ({"content": "", "tool_calls": "add"}, "must be a list"),
    ({"content": "", "tool_calls": [["add"]]}, "must be an object"),
])
def test_bad_actions_become_error_observations(action, needle):
    env = CalcEnv({})
    env.reset(options={"task_id": "t0"})
    obs, r, term, trunc, _ = env.step(action)
    assert not term and r == 0.0
    assert any(needle in m["content"] for m in obs), obs
    # the agent can recover afterwards
    obs, r, term, _, _ = env.step('<tool_call>{"name": "add", "arguments": {"x": 2, "y": 3}}</tool_call>')
    assert '"sum": 5' in obs[0]["content"]


def test_turn_limit_truncates():
    env = CalcEnv({"max_turns": 2})
    env.reset(options={"task_id": "t0"})
    call = '<tool_call>{"name": "add", "arguments": {"x": 2, "y": 3}}</tool_call>'
    assert env.step(call)[3] is False
    _, r, term, trunc, _ = env.step(call)
    assert trunc and not term and r == 0.0


def test_unknown_task_and_split_errors_list_valid_values():
    with pytest.raises(ValueError, match="valid splits"):
        CalcEnv({"split": "dev"})
    env = CalcEnv({})
    with pytest.raises(ValueError, match="valid ids"):
        env.reset(options={"task_id": "nope"})


def test_truncate_keeps_head_and_tail():
    text = "HEAD" + "x" * 10000 + "TAIL"
    out = truncate_text(text, 200)
    assert out.startswith("HEAD") and out.endswith("TAIL") and len(out) <= 200
    assert truncate_text("short", 200) == "short"


def test_registry_round_trip_and_gymnasium_make():
    register_env("CalcTest-v0", make_calc)
    env = make_env("CalcTest-v0", {"max_turns": 3})
    assert isinstance(env, CalcEnv) and env.config["max_turns"] == 3
    genv = gym.make("CalcTest-v0", env_config={"max_turns": 4})
    assert genv.unwrapped.config["max_turns"] == 4
    with pytest.raises(ValueError, match="registered:.*CalcTest-v0"):
        make_env("NoSuchEnv-v0")


def test_check_env():
    register_env("CalcTest-v0", make_calc)
    check_env(gym.make("CalcTest-v0").unwrapped)


def test_optional_rti_hooks_have_generic_defaults():
    env = CalcEnv({})
    assert env.rti_rules() is None
    facts = env.verifier_facts()
    assert facts["tool_output_keys"] == [] and facts["coordinate_tolerance_deg"] == 0.0
    facts["tool_output_weak_keys"].append("sum")  # a copy: the default stays as it was
    assert "sum" not in CalcEnv({}).verifier_facts()["tool_output_weak_keys"]


def test_finite_number_accepts_real_numbers_only():
    import numpy as np

    from envs.base import finite_number

    assert [finite_number(v) for v in (1, 0.5, True, np.float32(0.25), np.int64(2))] == [1.0, 0.5, 1.0, 0.25, 2.0]
    assert [finite_number(v) for v in (float("nan"), float("inf"), -float("inf"), "1.0", b"1", None, [1], 10**400)] \
        == [None] * 8
