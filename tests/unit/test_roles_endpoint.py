"""Role actors against an OpenAI-compatible endpoint served on 127.0.0.1 by the test:
good answers are parsed, garbage and timeouts skip the candidate, an unreachable URL fails."""

import time

import pytest

from envs.openai_client import OpenAIChatClient as EndpointClient
from rti_actors.rti.records import CorrectQuery, EpisodeText, ValidateQuery, VerifyQuery
from rti_actors.rti.roles import RoleActor
from tests.fake_openai import serve

MODE = {"value": "good"}


def _answer(path, headers, body):
    prompt = body["messages"][0]["content"]
    if MODE["value"] == "timeout":
        time.sleep(2)
    if MODE["value"] == "garbage":
        text = "I think it is fine?? {not json"
    elif '"is_valid"' in prompt:
        text = '<think>let me see</think>{"is_valid": false, "error_types": ["wrong_tool"], ' \
               '"diagnosis": "searched the wrong city", "suggest_next": "search again with the city"}'
    elif '"consistent"' in prompt:
        text = '```json\n{"consistent": true, "plausible": true, "reason": "ok"}\n```'
    else:
        text = '<tool_call>\n{"name": "poi_search", "arguments": {"address": "X", "region": "Y"}}\n</tool_call>'
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


@pytest.fixture(scope="module")
def endpoint():
    with serve(_answer) as server:
        yield server.base_url


EPISODE = EpisodeText([{"role": "user", "content": "Plan a route"}, {"role": "assistant", "content": "x"}],
                      ["<tool_call>{}</tool_call>"], [], "en")
VERDICT = {"diagnosis": "d", "suggest_next": "s"}
VALIDATE = ValidateQuery(EPISODE, {"gold": "secret"})
CORRECT = CorrectQuery(EPISODE, {"gold": "secret"}, 0, VERDICT)
VERIFY = VerifyQuery(EPISODE.history(0), EPISODE.actions[0], "x", VERDICT, "en", {"answer": "y"})


def test_endpoint_roles_parse_answers(endpoint, tiny_model_path):
    MODE["value"] = "good"
    client = EndpointClient(endpoint, "judge-model", api_key="sk-test-secret")
    client.check()
    assert "sk-test-secret" not in repr(client)
    actor = RoleActor(client, None, tiny_model_path, max_model_len=1024, max_role_tokens=64)
    v = actor.validate([VALIDATE])[0].verdict
    assert v == {"is_valid": False, "error_types": ["wrong_tool"], "diagnosis": "searched the wrong city",
                 "suggest_next": "search again with the city"}
    attempts = actor.correct([CORRECT], attempts=2, temperature=0.8, seeds=[0])[0]
    assert len(attempts) == 2 and all(a.complete for a in attempts)
    eos = actor.policy_tokenizer.eos_token_id
    assert attempts[0].ids[-1] == eos and "poi_search" in actor.policy_tokenizer.decode(attempts[0].ids)
    assert actor.verify([VERIFY])[0] == {"consistent": True, "plausible": True, "reason": "ok"}


def test_garbage_and_timeouts_skip_the_candidate(endpoint, tiny_model_path):
    MODE["value"] = "garbage"
    actor = RoleActor(EndpointClient(endpoint), None, tiny_model_path, max_model_len=1024)
    assert actor.validate([VALIDATE])[0].verdict is None and actor.verify([VERIFY]) == [None]
    MODE["value"] = "timeout"
    slow = RoleActor(EndpointClient(endpoint, timeout=0.5), None, tiny_model_path, max_model_len=1024)
    attempts = slow.correct([CORRECT], attempts=1, temperature=0.8, seeds=[0])[0]
    assert attempts[0].complete is False and attempts[0].error
    MODE["value"] = "good"


def test_unreachable_endpoint_fails_fast():
    with pytest.raises(ValueError, match="unreachable"):
        EndpointClient("http://127.0.0.1:9/v1", timeout=1).check()
