"""User simulators: the scenario text, the LLM user's role-flipped history (driven by a
scripted chat function), the OpenAI-compatible endpoint client against a local HTTP
server, and the scripted user's rules."""

import pytest

from envs.tau2 import LLMUser, OpenAIChatClient, Tau2TelecomEnv
from envs.tau2.data import Tau2Data
from envs.tau2.users import ScriptedUser, UserContext, is_stop, render_scenario
from envs.tool_calls import format_tool_call
from tests.fake_openai import serve
from tests.unit.tau2_testdata import DATA_DIR, needs_data


@needs_data
def test_scenario_rendering_matches_upstream():
    scenario = Tau2Data(DATA_DIR).tasks("airline")["0"]["user_scenario"]
    text = render_scenario(scenario)
    assert text.startswith("Instructions:\n\tDomain: airline\n\tReason for call:\n\t\tYou want to cancel reservation "
                           "EHGLP3. \n\n\t\tIt may be more than 24 hours")
    assert "\n\tKnown info:\n\t\tYou are Emma Kim.\n\t\tYour user id is emma_kim_9957.\n\tTask instructions:\n\t\t" in text
    persona = render_scenario({"persona": "Calm.\nPolite.", "instructions": "Just ask."})
    assert persona == "Persona:\n\tCalm.\n\tPolite.\nInstructions:\n\tJust ask."


def test_stop_tokens():
    assert is_stop({"content": "thanks ###STOP###", "tool_calls": []})
    assert is_stop({"content": "###TRANSFER###"}) and is_stop({"content": "###OUT-OF-SCOPE###"})
    assert not is_stop({"content": "###STOP###", "tool_calls": [{"name": "x"}]})  # a tool call is not a stop
    assert not is_stop({"content": "stop"})


class ScriptedChat:
    """A chat function that answers from a list and records what it was sent."""

    def __init__(self, replies):
        self.replies, self.calls = list(replies), []

    def __call__(self, messages):
        self.calls.append([dict(m) for m in messages])
        return self.replies.pop(0)


@needs_data
def test_llm_user_role_flipping_and_hidden_phone_calls():
    chat = ScriptedChat(["My phone has no internet.",
                         format_tool_call("check_status_bar", {}),
                         "It shows airplane mode. ###STOP###"])
    env = Tau2TelecomEnv({"data_dir": str(DATA_DIR), "split": "base", "user": "llm", "user_chat_fn": chat})
    task_id = env.task_ids("base")[0]
    obs, info = env.reset(options={"task_id": task_id})
    assert info["user_simulator"] == "llm" and obs[-1] == {"role": "user", "content": "My phone has no internet."}
    system, greeting = chat.calls[0]
    guidelines = env.data.text("user_simulator/simulation_guidelines_tools.md")
    scenario = render_scenario(env.data.tasks("telecom")[task_id]["user_scenario"])
    assert system["role"] == "system"
    assert system["content"].startswith(f"{guidelines}\n\n<scenario>\n{scenario}\n</scenario>")
    assert "<tools>" in system["content"] and '"name": "toggle_airplane_mode"' in system["content"]
    assert greeting == {"role": "user", "content": "Hi! How can I help you today?"}

    obs, reward, terminated, _, info = env.step("What does your status bar show?")
    assert obs == [{"role": "user", "content": "It shows airplane mode. ###STOP###"}]  # the call stays hidden
    assert terminated and info["termination_reason"] == "user_stop" and reward == 0.0  # nothing was fixed
    flipped = chat.calls[2]
    assert [m["role"] for m in flipped] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert flipped[3]["content"] == "What does your status bar show?"
    assert flipped[4]["content"].startswith("<tool_call>") and "check_status_bar" in flipped[4]["content"]
    assert flipped[5]["content"].startswith("<tool_response>\nStatus Bar: ✈️ Airplane Mode")
    user_calls = [c for m in env.trajectory if m["role"] == "user" for c in m.get("tool_calls") or []]
    assert user_calls[0]["requestor"] == "user" and user_calls[0]["name"] == "check_status_bar"


@needs_data
def test_failing_or_empty_llm_user_ends_with_user_error():
    def broken(messages):
        raise ConnectionError("endpoint down")

    env = Tau2TelecomEnv({"data_dir": str(DATA_DIR), "split": "base", "user": "llm", "user_chat_fn": broken})
    env.reset(options={"task_id": env.task_ids("base")[0]})
    _, reward, terminated, _, info = env.step("hello")
    assert terminated and reward == 0.0 and info["termination_reason"] == "user_error"
    assert "endpoint down" in info["user_error"]
    chat = ScriptedChat(["hi", ""])
    env = Tau2TelecomEnv({"data_dir": str(DATA_DIR), "split": "base", "user": LLMUser(chat)})
    env.reset(options={"task_id": env.task_ids("base")[0]})
    assert env.step("hello")[4]["termination_reason"] == "user_error"


def test_openai_client_against_a_local_server():
    reply = {"choices": [{"message": {"content": "Sure.", "tool_calls": [
        {"type": "function", "function": {"name": "check_sim_status", "arguments": "{}"}}]}}]}
    with serve(lambda path, headers, body: reply) as endpoint:
        client = OpenAIChatClient(endpoint.base_url, "big-model", api_key="sk-secret")
        assert "sk-secret" not in repr(client)
        text = client([{"role": "user", "content": "hi"}])
        assert text == 'Sure.\n' + format_tool_call("check_sim_status", {})
        path, headers, body = endpoint.seen[-1]
        assert path == "/v1/chat/completions" and headers.get("Authorization") == "Bearer sk-secret"
        assert body == {"model": "big-model", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.0}
        bad = OpenAIChatClient("http://127.0.0.1:1/v1", "m", api_key=None, api_key_env="RTI_TEST_NO_SUCH_KEY", timeout=2)
        with pytest.raises(RuntimeError, match="unreachable") as err:
            bad([{"role": "user", "content": "hi"}])
        assert "sk-" not in str(err.value)


class _Tool:
    def __init__(self, name):
        self.name = name


def test_scripted_user_rules():
    task = {"user_scenario": {"persona": None, "instructions": {
        "domain": "telecom", "reason_for_call": "Your phone has no service.", "known_info": "You are John Smith.",
        "task_instructions": "x"}}}
    user = ScriptedUser(max_turns=3)
    user.reset(UserContext("telecom", task, "", [_Tool("toggle_data"), _Tool("grant_app_permission")]))
    assert user.respond([{"role": "assistant", "content": "Hi!"}])["content"] == "Hi. My phone has no service. I am John Smith."
    reply = user.respond([{"role": "assistant", "content":
                           'Run toggle_data, then grant_app_permission(app_name="messaging", permission="sms").'}])
    assert reply == {"content": None, "tool_calls": [
        {"name": "toggle_data", "arguments": {}},
        {"name": "grant_app_permission", "arguments": {"app_name": "messaging", "permission": "sms"}}]}
    reply = user.respond([{"role": "tool", "name": "toggle_data", "content": "Mobile Data is now ON."}])
    assert reply["content"] == "toggle_data: Mobile Data is now ON."
    # a fourth reply exceeds max_turns=3, so even a question ends the conversation
    assert "###STOP###" in user.respond([{"role": "assistant", "content": "Can I do anything else?"}])["content"]
    fresh = ScriptedUser()
    fresh.reset(UserContext("telecom", task, "", []))
    fresh.respond([{"role": "assistant", "content": "Hi!"}])
    assert "Yes, please go ahead." in fresh.respond([{"role": "assistant", "content": "May I check your line?"}])["content"]
    assert fresh.respond([{"role": "assistant", "content": "I will transfer you."}])["content"] == "###TRANSFER###"
    assert "###STOP###" in fresh.respond([{"role": "assistant", "content": "Your line is fixed."}])["content"]


@needs_data
def test_user_acting_or_stopping_before_the_first_agent_turn():
    chat = ScriptedChat([format_tool_call("check_status_bar", {}), "I see no signal bars. Help?"])
    env = Tau2TelecomEnv({"data_dir": str(DATA_DIR), "split": "base", "user": LLMUser(chat)})
    obs, _ = env.reset(options={"task_id": env.task_ids("base")[0]})
    assert obs[-1] == {"role": "user", "content": "I see no signal bars. Help?"}
    assert [m["role"] for m in env.trajectory] == ["assistant", "user", "tool", "user"]
    env = Tau2TelecomEnv({"data_dir": str(DATA_DIR), "split": "base", "user": LLMUser(ScriptedChat(["###STOP###"]))})
    obs, _ = env.reset(options={"task_id": env.task_ids("base")[0]})
    assert obs[-1]["content"] == "###STOP###"
    # The episode is already over: the next step ends it without running the action.
    obs, reward, terminated, _, info = env.step("Hello?")
    assert (obs, reward, terminated, info["termination_reason"]) == ([], 0.0, True, "user_stop")
