"""The tool-call text syntax: parsing never raises, formatting round-trips."""

import pytest

from envs.tool_calls import format_assistant_turn, format_tool_call, parse_tool_calls, turn_from_dict


def test_single_and_multiple_calls():
    text = ('Let me look.\n<tool_call>{"name": "poi_search", "arguments": {"address": "东涌广场"}}</tool_call>'
            '<tool_call>\n{"name": "weather", "arguments": {"city": "广州"}}\n</tool_call>')
    out = parse_tool_calls(text)
    assert out["parse_error"] is None
    assert out["content"] == "Let me look."
    assert out["tool_calls"] == [{"name": "poi_search", "arguments": {"address": "东涌广场"}},
                                 {"name": "weather", "arguments": {"city": "广州"}}]


def test_plain_text_has_no_calls():
    assert parse_tool_calls("The route is 12 km.") == {"content": "The route is 12 km.", "tool_calls": [], "parse_error": None}


@pytest.mark.parametrize("text,needle", [
    ('<tool_call>{"name": "a", "arguments": {"x": }}</tool_call>', "not valid JSON"),
    ('<tool_call>{"name": "a", "arguments": {}, "extra": 1}</tool_call>', "unknown keys"),
    ('<tool_call>{"name": ["a"], "arguments": {}}</tool_call>', "non-empty string"),
    ('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', "must be a JSON object"),
    ('<tool_call>[1, 2]</tool_call>', "must be a JSON object"),
    ('hello <tool_call>{"name": "a", "arguments": {}}', "unclosed"),
    ('hello {"name": "a"}</tool_call>', "without a matching"),
    ('<tool_call>{"name": "a", "arguments": {"x": ' + "[" * 40 + "]" * 40 + '}}</tool_call>', "deeper than 32 levels"),
    ('<tool_call>{"name": "a", "arguments": {"x": ' + "9" * 5000 + '}}</tool_call>', "at most 100 digits"),
    ('<tool_call>{"name": "a", "arguments": {"x": "' + "y" * 100_000 + '"}}</tool_call>', "longer than 100000"),
    ('<tool_call>{"name": "a", "arguments": "[' + "9" * 200 + ']"}</tool_call>', "at most 100 digits"),
])
def test_malformed_calls_give_structured_errors(text, needle):
    out = parse_tool_calls(text)
    assert out["parse_error"] and needle in out["parse_error"]
    assert out["tool_calls"] == []


def test_good_call_survives_a_bad_neighbour():
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{bad}</tool_call>'
    out = parse_tool_calls(text)
    assert out["tool_calls"] == [{"name": "a", "arguments": {}}]
    assert "not valid JSON" in out["parse_error"]


def test_string_encoded_arguments_are_accepted():
    out = parse_tool_calls('<tool_call>{"name": "a", "arguments": "{\\"k\\": 1}"}</tool_call>')
    assert out["tool_calls"] == [{"name": "a", "arguments": {"k": 1}}]


def test_format_round_trips():
    calls = [{"name": "direction", "arguments": {"origin": "113.1,23.2", "destination": "113.3,23.1"}},
             {"name": "weather", "arguments": {"city": "深圳"}}]
    text = format_assistant_turn("On it.", calls)
    assert parse_tool_calls(text) == {"content": "On it.", "tool_calls": calls, "parse_error": None}
    assert parse_tool_calls(format_tool_call("x", {}))["tool_calls"] == [{"name": "x", "arguments": {}}]


def test_dict_turns_are_checked_like_text():
    good = {"content": "On it.", "tool_calls": [{"name": "a", "arguments": {"k": 1}}]}
    assert turn_from_dict(good) == {"content": "On it.", "tool_calls": [{"name": "a", "arguments": {"k": 1}}],
                                    "parse_error": None}
    for action, needle in [({"content": "", "tool_calls": "a"}, "must be a list"),
                           ({"content": "", "tool_calls": [1]}, "must be an object"),
                           ({"content": 5}, "'content' must be a string"),
                           ({"content": "", "tool_calls": [{"name": "a", "arguments": {"x": {1}}}]}, "JSON data")]:
        out = turn_from_dict(action)
        assert out["tool_calls"] == [] and needle in out["parse_error"], out
