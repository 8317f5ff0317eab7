"""The τ² Gymnasium environments end to end: check_env, scripted agents in conversation with
the scripted user, the turn cap, the error limit, bad actions, solo mode and the user-side
orchestration."""

import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the Tau2*-v0 ids)
from envs.tau2 import Tau2AirlineEnv, Tau2RetailEnv, Tau2TelecomEnv
from envs.tool_calls import format_tool_call
from tests.unit.tau2_testdata import DATA_DIR, needs_data

pytestmark = [needs_data,
              pytest.mark.filterwarnings("ignore:τ² env uses the scripted user")]
CLASSES = {"airline": Tau2AirlineEnv, "retail": Tau2RetailEnv, "telecom": Tau2TelecomEnv}


def make(domain, **config):
    return CLASSES[domain]({"data_dir": str(DATA_DIR), "split": "base", **config})


def gold_turns(env, task_id):
    """A scripted agent for a task: the agent's gold actions as tool calls, the user's as
    instructions to the (scripted) user, then a closing message with the facts to tell."""
    criteria = env.data.tasks(env.DOMAIN)[task_id]["evaluation_criteria"]
    turns = []
    for action in criteria["actions"]:
        if action.get("requestor") == "user":
            args = ", ".join(f'{k}="{v}"' for k, v in action["arguments"].items())
            turns.append(f"Please do this on your phone: {action['name']}({args})")
        else:
            turns.append(format_tool_call(action["name"], action["arguments"]))
    closing = " ".join(criteria.get("communicate_info") or [])
    turns.append(f"I have transferred you to a human agent. {closing}" if any(
        a["name"] == "transfer_to_human_agents" for a in criteria["actions"]) else f"All done. {closing}")
    return turns


def play(env, task_id, turns):
    obs, info = env.reset(options={"task_id": task_id})
    assert [m["role"] for m in obs] == ["system", "assistant", "user"]
    result = None
    for turn in turns:
        result = env.step(turn)
        if result[2] or result[3]:
            break
    return result


@pytest.mark.parametrize("domain", ["airline", "retail", "telecom"])
def test_check_env(domain):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(make(domain), skip_render_check=True)


def test_gym_make_and_registry():
    env = gym.make("Tau2Retail-v0", env_config={"data_dir": str(DATA_DIR), "split": "test"})
    obs, info = env.reset(seed=3)
    assert info["user_simulator"] == "scripted (not faithful)"
    assert [t["function"]["name"] for t in info["tools"]][:3] == ["calculate", "cancel_pending_order",
                                                                 "exchange_delivered_order_items"]
    assert info["task_id"] in env.unwrapped.data.split_ids("retail", "test")


@pytest.mark.parametrize("domain,task_ids", [("airline", ["2", "7", "14"]), ("retail", ["0", "20", "64"])])
def test_scripted_agent_with_gold_actions_scores_one(domain, task_ids):
    env = make(domain)
    for task_id in task_ids:
        _, reward, terminated, truncated, info = play(env, task_id, gold_turns(env, task_id))
        assert (reward, terminated, truncated, info["termination_reason"]) == (1.0, True, False, "user_stop"), info


def test_scripted_agent_solves_every_telecom_task_in_conversation():
    env = make("telecom")
    failed = []
    for task_id in env.task_ids("base"):
        _, reward, terminated, _, info = play(env, task_id, gold_turns(env, task_id))
        if not (terminated and reward == 1.0):
            failed.append((task_id, info.get("reward_breakdown")))
    assert failed == []


def test_skipped_or_wrong_write_scores_zero():
    env = make("airline")
    turns = gold_turns(env, "8")  # lookups, then one booking
    book = next(i for i, t in enumerate(turns) if '"book_reservation"' in t)
    _, reward, terminated, _, info = play(env, "8", turns[:book] + turns[book + 1:])
    assert terminated and reward == 0.0 and info["reward_breakdown"]["DB"] == 0.0
    wrong = turns[book].replace('"insurance": "no"', '"insurance": "yes"')
    assert wrong != turns[book]
    _, reward, terminated, _, info = play(env, "8", turns[:book] + [wrong] + turns[book + 1:])
    # a wrong total is refused by the tool, so nothing is booked either way
    assert terminated and reward == 0.0
    extra = format_tool_call("send_certificate", {"user_id": "mia_li_3668", "amount": 100})
    _, reward, terminated, _, info = play(env, "8", turns[:-1] + [extra] + turns[-1:])
    assert terminated and reward == 0.0 and info["reward_breakdown"]["db_match"] == {"agent": False, "user": True}


def test_turn_cap_truncates_with_zero_reward():
    env = make("telecom", max_turns=2)
    task_id = env.task_ids("base")[0]
    _, reward, terminated, truncated, info = play(env, task_id, gold_turns(env, task_id))
    assert (reward, terminated, truncated, info["termination_reason"], info["turns"]) == (0.0, False, True, "max_turns", 2)
    with pytest.raises(RuntimeError):
        env.step("hello")


def test_user_tool_called_by_agent_is_a_counted_error():
    env = make("telecom", max_errors=4)
    env.reset(options={"task_id": env.task_ids("base")[0]})
    obs, reward, terminated, _, info = env.step(format_tool_call("toggle_airplane_mode", {}))
    assert obs == [{"role": "tool", "name": "toggle_airplane_mode", "tool_call_id": "call_1_0",
                    "content": "Error: Tool 'toggle_airplane_mode' not found."}]
    assert info["num_errors"] == 1 and not terminated
    obs, *_ = env.step('<tool_call>{"name": "get_customer_by_id", "arguments": {"customer_id": </tool_call>')
    assert obs[0]["content"].startswith("Error: could not parse your tool call")
    obs, *_ = env.step(format_tool_call("get_customer_by_id", {"customer": "C1001"}))
    assert "unexpected keyword argument" in obs[0]["content"]
    _, reward, terminated, truncated, info = env.step(format_tool_call("run_speed_test", {}))
    assert (reward, terminated, info["termination_reason"]) == (0.0, True, "too_many_errors")


def test_empty_agent_message_is_an_agent_error():
    env = make("retail")
    env.reset(options={"task_id": "0"})
    _, reward, terminated, _, info = env.step("   ")
    assert terminated and reward == 0.0 and info["termination_reason"] == "agent_error"


def test_max_steps_quirk_overrides_a_stop():
    # Greeting reply = step 1; the agent's text = 2; the user's stop = 3 -> recorded as max_steps.
    env = make("airline", max_steps=3)
    env.reset(options={"task_id": "0"})
    _, reward, terminated, truncated, info = env.step("Goodbye.")
    assert (reward, truncated, info["termination_reason"]) == (0.0, True, "max_steps")


def test_user_tool_calls_are_hidden_from_the_agent():
    env = make("telecom")
    task_id = env.task_ids("base")[0]
    env.reset(options={"task_id": task_id})
    obs, *_ = env.step("Please run check_status_bar and tell me what you see")
    assert [m["role"] for m in obs] == ["user"] and "check_status_bar: Status Bar:" in obs[0]["content"]
    roles = [(m["role"], bool(m.get("tool_calls"))) for m in env.trajectory]
    assert ("user", True) in roles and any(m["role"] == "tool" and m["requestor"] == "user" for m in env.trajectory)
    assert all(m["role"] != "tool" for m in env.messages[1:] if m.get("tool_call_id", "").startswith("user_"))


def test_solo_mode():
    env = make("telecom", solo=True)
    task_id = next(t for t in env.task_ids("base") if "overdue_bill_suspension" in t and "lock" not in t
                   and "contract" not in t)
    obs, info = env.reset(options={"task_id": task_id})
    assert [m["role"] for m in obs] == ["system"] and "<ticket>" in obs[0]["content"]
    names = [t["function"]["name"] for t in info["tools"]]
    assert "toggle_airplane_mode" in names and "refuel_data" in names and names[-1] == "done"
    criteria = env.data.tasks("telecom")[task_id]["evaluation_criteria"]
    for action in criteria["actions"]:  # user-side gold actions are called by the agent itself
        obs, *_ = env.step(format_tool_call(action["name"], action["arguments"]))
        assert not obs[0]["content"].startswith("Error"), obs
    _, reward, terminated, _, info = env.step(format_tool_call("done", {}))
    assert (reward, terminated, info["termination_reason"]) == (1.0, True, "agent_stop")
    env.reset(options={"task_id": task_id})
    _, reward, terminated, _, info = env.step("I fixed it.")
    assert (reward, terminated, info["termination_reason"]) == (0.0, True, "agent_error")
    with pytest.raises(ValueError, match="solo"):
        make("airline", solo=True)


def test_reward_evidence():
    env = make("telecom")
    task_id = next(t for t in env.task_ids("base") if "lock_sim_card_pin" in t)
    env.reset(options={"task_id": task_id})
    evidence = env.reward_evidence()
    assert evidence["reward_basis"] == ["ENV_ASSERTION", "ACTION"]
    assert evidence["gold_actions"][0]["name"] == "transfer_to_human_agents"
    assert evidence["env_assertions"][0]["func_name"] == "assert_service_status"
    airline = make("airline")
    airline.reset(options={"task_id": "3"})
    assert airline.reward_evidence()["communicate_info"] == ["4"]
    assert airline.reward_evidence()["reward_basis"] == ["DB", "COMMUNICATE"]


def test_unknown_task_and_config_errors():
    env = make("airline")
    with pytest.raises(ValueError, match="unknown task id"):
        env.reset(options={"task_id": "999"})
    with pytest.raises(ValueError, match="user_chat_fn"):
        make("airline", user="llm")
    with pytest.raises(ValueError, match="env_config\\['user'\\]"):
        make("airline", user="gpt")


def test_telecom_policy_variants():
    manual = make("telecom")
    manual.reset(options={"task_id": manual.task_ids("base")[0]})
    prompt = manual.messages[0]["content"]
    assert prompt.startswith("<instructions>\nYou are a customer service agent")
    assert "\n</instructions>\n<policy>\n<main_policy>\n" in prompt and prompt.endswith("</tech_support_policy>\n</policy>")
    assert manual.data.text("domains/telecom/tech_support_manual.md") in prompt
    workflow = make("telecom", tech_support="workflow")
    workflow.reset(options={"task_id": workflow.task_ids("base")[0]})
    assert workflow.data.text("domains/telecom/tech_support_workflow.md") in workflow.messages[0]["content"]
    airline = make("airline")
    airline.reset(options={"task_id": "0"})
    assert airline.messages[0]["content"].endswith(airline.data.text("domains/airline/policy.md") + "\n</policy>")
