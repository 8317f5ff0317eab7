"""Each family's tool-call syntax, with and without a reasoning block before it."""

import pytest

from envs.tool_calls import format_assistant_turn, parse_tool_calls, split_reasoning

CALL = {"name": "poi_search", "arguments": {"address": "东涌广场"}}
HERMES = '<tool_call>\n{"name": "poi_search", "arguments": {"address": "东涌广场"}}\n</tool_call>'
LLAMA = '{"name": "poi_search", "parameters": {"address": "东涌广场"}}'
THINK = "<think>\nI need the square's coordinates first.\n</think>\n\n"


@pytest.mark.parametrize("call_text", [HERMES, LLAMA, "<|python_tag|>" + LLAMA])
@pytest.mark.parametrize("thinking", ["", THINK])
def test_each_syntax_parses_with_and_without_thinking(call_text, thinking):
    out = parse_tool_calls(thinking + call_text)
    assert out["tool_calls"] == [CALL] and out["parse_error"] is None and out["content"] == ""
    if thinking:
        assert out["reasoning"] == "I need the square's coordinates first."
    else:
        assert "reasoning" not in out


@pytest.mark.parametrize("syntax,thinking", [("hermes", None), ("hermes", "plan"), ("llama3_json", None),
                                             ("llama3_json", "plan"), ("llama3_json", "")])
def test_format_round_trips_in_each_syntax(syntax, thinking):
    calls = [CALL, {"name": "weather", "arguments": {"city": "广州"}}]
    text = format_assistant_turn("Searching.", calls, syntax, thinking)
    expected = {"content": "Searching.", "tool_calls": calls, "parse_error": None}
    if thinking is not None:
        expected["reasoning"] = thinking
    assert parse_tool_calls(text) == expected


def test_calls_written_while_thinking_are_not_run():
    text = f"<think>\nmaybe {HERMES} or {LLAMA}\n</think>\n\nThe square is in Guangzhou."
    out = parse_tool_calls(text)
    assert out["tool_calls"] == [] and out["content"] == "The square is in Guangzhou." and out["parse_error"] is None
    assert HERMES in out["reasoning"]


def test_think_block_opened_by_the_prompt_and_unclosed_blocks():
    # a template that puts <think> into the generation prompt: the sample starts inside it
    assert parse_tool_calls("the plan\n</think>\n\n" + LLAMA)["tool_calls"] == [CALL]
    out = parse_tool_calls("<think>\nstill thinking when the budget ran out")
    assert out["tool_calls"] == [] and out["content"] == "" and "unclosed <think>" in out["parse_error"]
    assert split_reasoning("no block") == (None, "no block", None)


def test_llama_json_calls_after_prose_and_several_calls():
    out = parse_tool_calls("Let me check both.\n" + LLAMA + "\n" + '{"name": "weather", "parameters": {}}')
    assert out["content"] == "Let me check both."
    assert out["tool_calls"] == [CALL, {"name": "weather", "arguments": {}}]
    tagged = parse_tool_calls("<|python_tag|>" + LLAMA + '; {"name": "weather", "parameters": {}}')
    assert [c["name"] for c in tagged["tool_calls"]] == ["poi_search", "weather"]


@pytest.mark.parametrize("text,needle", [
    ('<|python_tag|>{"name": "a", "parameters": {', "not a JSON tool call"),
    ('<|python_tag|>{"name": "a", "parameters": {}, "extra": 1}', "unknown keys"),
    ('{"name": "a", "parameters": [1]}', "must be a JSON object"),
    ('{"name": 3, "parameters": {}}', "non-empty string"),
])
def test_malformed_llama_calls_give_structured_errors(text, needle):
    out = parse_tool_calls(text)
    assert out["tool_calls"] == [] and needle in out["parse_error"]


@pytest.mark.parametrize("text", [
    '{"name": "Alice", "age": 30}',                      # a JSON answer, not a call
    '{"name": "poi_search", "arguments": {"a": 1}}',     # tag-less Hermes: ChatML models keep it as text
    'The call would be {"name": "x", "parameters": {}} inline.',
])
def test_json_answers_stay_content(text):
    assert parse_tool_calls(text) == {"content": text, "tool_calls": [], "parse_error": None}
