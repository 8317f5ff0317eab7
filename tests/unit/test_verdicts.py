"""Role-output parsing: think blocks, fences, prose, Python literals, several objects,
truncation, and the typed Validator / Verifier helpers."""

import pytest

from rti_actors.rti.verdicts import parse_json_verdict, parse_validator, parse_verifier

REQ = {"is_valid": bool}


@pytest.mark.parametrize("text", [
    '{"is_valid": false}',
    '<think>The step uses {"is_valid": true} as an example... no.</think>\n{"is_valid": false}',
    'Okay.</think>{"is_valid": false}',  # template opened the think block in the prompt
    '```json\n{"is_valid": false}\n```',
    'Here is my verdict:\n{"is_valid": false}\nThat is all.',
    "{'is_valid': False,}",
    '{"is_valid": False, "error_types": ["wrong_poi",],}',
    'Example: {"is_valid": true}. My answer: {"is_valid": false}',
    '{"verdict": {"isValid": false}}',
    '{"is_valid"： false，"diagnosis"： "起点错了"，}',           # full-width punctuation
    '{“is_valid”: false, “diagnosis”: “选错了地点”}',              # curly quotes
    '{\n  "is_valid": false, // the origin is wrong\n  "diagnosis": "see http://x.y/z"\n}',
    '{"is_valid": false, "diagnosis": "line one\nline two"}',  # raw newline inside a string
])
def test_recovers_the_verdict(text):
    out = parse_json_verdict(text, REQ)
    assert out is not None and out["is_valid"] is False


@pytest.mark.parametrize("text", [
    "",
    "The step is fine.",
    '{"is_valid": fal',                                   # cut off
    'Example: {"is_valid": true}. Verdict: {"is_valid": false, "diag',  # real answer cut off
    '<think>I think {"is_valid": false} but let me check',  # never left the think block
    '{"error_types": []}',                                # required key missing
    '{"is_valid": "maybe"}',                              # wrong type for a strict bool
    "[1, 2, 3]",
    '{"is_valid": false, "x": ' + "[" * 2000 + "]" * 2000 + "}",  # past the nesting bound
    '{"is_valid": false, "x": ' + "9" * 5000 + "}",                 # past the digit bound
])
def test_broken_or_partial_gives_none(text):
    assert parse_json_verdict(text, REQ) is None


def test_last_object_with_the_required_keys_wins_and_other_keys_survive():
    text = '{"is_valid": true, "n": 1} then {"note": "x"} then {"is_valid": false, "n": 2} {"unrelated": 1}'
    assert parse_json_verdict(text, REQ) == {"is_valid": False, "n": 2}


def test_single_quotes_with_inner_double_quotes_and_apostrophes():
    text = "{'diagnosis': 'the name \"东涌广场\" was not searched', 'is_valid': False}"
    assert parse_json_verdict(text, REQ)["diagnosis"] == 'the name "东涌广场" was not searched'
    text = '{"diagnosis": "don\'t stop", "is_valid": true}'
    assert parse_json_verdict(text, REQ)["diagnosis"] == "don't stop"


def test_tuple_of_types_and_bool_is_not_an_int():
    assert parse_json_verdict('{"k": 3}', {"k": (int, str)}) == {"k": 3}
    assert parse_json_verdict('{"k": true}', {"k": int}) is None


@pytest.mark.parametrize("raw,expected", [
    ('"false"', False), ('"No"', False), ('"否"', False), ("0", False),
    ('"true"', True), ('"yes"', True), ("1", True), ("true", True),
])
def test_validator_coerces_flags(raw, expected):
    out = parse_validator('{"is_valid": %s}' % raw)
    assert out == {"is_valid": expected, "error_types": [], "diagnosis": "", "suggest_next": ""}


def test_validator_full_and_coerced_fields():
    text = ('<think>step 3 picked 东涌文化广场</think>```json\n{"is_valid": "false", "error_types": "wrong_poi, wrong_city",'
            ' "diagnosis": "picked the wrong candidate", "suggestNext": "search with the city"}\n```')
    assert parse_validator(text) == {"is_valid": False, "error_types": ["wrong_poi", "wrong_city"],
                                     "diagnosis": "picked the wrong candidate", "suggest_next": "search with the city"}
    out = parse_validator('{"is_valid": false, "error_types": ["a", 7, null, ""], "diagnosis": {"why": 1}}')
    assert out["error_types"] == ["a", "7"] and out["diagnosis"] == '{"why": 1}'


@pytest.mark.parametrize("text", ['{"is_valid": "perhaps"}', '{"is_valid": 2}', "not json", '{"diagnosis": "x"}'])
def test_validator_uninterpretable_flag_is_none(text):
    assert parse_validator(text) is None


def test_verifier():
    assert parse_verifier('{"consistent": true, "plausible": "no", "reason": "too long"}') == \
        {"consistent": True, "plausible": False, "reason": "too long"}
    assert parse_verifier("{'consistent': True, 'plausible': True}") == {"consistent": True, "plausible": True, "reason": ""}
    assert parse_verifier('{"consistent": true}') is None
    assert parse_verifier('{"consistent": "unsure", "plausible": true}') is None
