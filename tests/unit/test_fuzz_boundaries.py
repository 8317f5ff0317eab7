"""Fuzzing the boundaries where model output and env values enter the library: the tool-call
parser, each built-in env's ``step``, the RTI verdict parsers and the chat renderer.

Cases come from a seeded ``random.Random``: deep nesting, huge integers, unclosed tags,
random code points and bytes (lone surrogates included), non-list tool calls, huge strings,
plus the explicit attacks. Each boundary must never raise and must return its documented
shape. No wall-clock time is asserted: the big inputs are sized so that a quadratic or
exponential implementation would hang this file for many minutes, where a linear one is
instant.
"""

import copy
import json
import pickle
import random
import warnings

import pytest

import envs
from envs.tool_calls import (
    MAX_ERROR_CHARS,
    MAX_JSON_DEPTH,
    format_tool_call,
    parse_tool_calls,
)
from rti_actors.rti.verdicts import json_objects, parse_json_verdict, parse_validator, parse_verifier
from tests.unit.test_tau2_env import DATA_DIR as TAU2_DATA_DIR

SEED = 20240917
PARSER_CASES = 400
VERDICT_CASES = 400
STEPS_PER_ENV = 24
RENDERER_CASES = 60
TAGS = ("<tool_call>", "</tool_call>", "<think>", "</think>", "<|python_tag|>", "\n{", "<THINK>")
CODE_POINTS = ((0x20, 0x7E), (0x0, 0x1F), (0x80, 0xD7FF), (0xD800, 0xDFFF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF))


# ---- hostile text ------------------------------------------------------------------------------
def _unicode(rng: random.Random, n: int) -> str:
    """Random code points from every range, lone surrogates included."""
    return "".join(chr(rng.randint(*rng.choice(CODE_POINTS))) for _ in range(n))


def _fragment(rng: random.Random, big: bool) -> str:
    kind = rng.randrange(8)
    if kind == 0:  # nesting, closed or not, up to thousands deep
        opener, closer = rng.choice([("[", "]"), ('{"a": ', "}"), ('[{"b": ', "}]"), ("{", "}")])
        depth = rng.choice([rng.randint(1, 40), MAX_JSON_DEPTH + 1, 1000, 5000])
        return opener * depth + ("1" + closer * depth if rng.random() < 0.5 else "")
    if kind == 1:  # past the digit bound and past Python's int-from-str limit
        digits = rng.choice([101, 4301, 6000])
        return rng.choice(["", "-"]) + str(rng.randint(1, 9)) + "".join(rng.choices("0123456789", k=digits))
    if kind == 2:  # runs of tags, mostly unclosed
        return rng.choice(TAGS) * rng.randint(1, 3000 if big else 50)
    if kind == 3:
        return _unicode(rng, rng.randint(0, 300))
    if kind == 4:  # random bytes as a decoder with surrogateescape hands them over
        return rng.randbytes(rng.randint(0, 300)).decode("utf-8", "surrogateescape")
    if kind == 5:  # one character, many times: past the size bound when big
        return rng.choice("x{[\"'\\,;\n") * rng.randint(1000, 120_000 if big else 3000)
    if kind == 6:  # JSON-ish punctuation soup
        return "".join(rng.choices('{}[]":,\\\' \n0123456789truefalsenulTFN-.eE', k=rng.randint(1, 500)))
    return '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'


WRAPS = (
    lambda x: x,
    lambda x: f'<tool_call>{{"name": "f", "arguments": {x}}}</tool_call>',
    lambda x: f'<tool_call>{{"name": "f", "arguments": {json.dumps(x)}}}</tool_call>',  # double-encoded
    lambda x: f'Calling.\n{{"name": "f", "parameters": {x}}}',
    lambda x: f'<|python_tag|>{{"name": "f", "parameters": {x}}}',
    lambda x: f"<think>{x}",
    lambda x: f'{{"is_valid": false, "diagnosis": {x}}}',
    lambda x: f"{{'consistent': True, 'plausible': False, 'reason': {x},}}",
)


def hostile(rng: random.Random, big: bool = True) -> str:
    body = "".join(_fragment(rng, big) for _ in range(rng.randint(1, 3)))
    return rng.choice(WRAPS)(body)


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def assert_turn(out: dict) -> None:
    """The documented shape of ``parse_tool_calls``, and calls an env can copy and encode."""
    assert set(out) <= {"content", "tool_calls", "parse_error", "reasoning"}
    assert isinstance(out["content"], str)
    error = out["parse_error"]
    assert error is None or (isinstance(error, str) and error and len(error) < MAX_ERROR_CHARS + 100)
    for call in out["tool_calls"]:
        assert set(call) == {"name", "arguments"}
        assert isinstance(call["name"], str) and call["name"] and isinstance(call["arguments"], dict)
        assert _depth(call["arguments"]) < MAX_JSON_DEPTH
        json.dumps(copy.deepcopy(call))


# ---- the tool-call parser ----------------------------------------------------------------------
def test_parser_fuzz():
    rng = random.Random(SEED)
    for _ in range(PARSER_CASES):
        assert_turn(parse_tool_calls(hostile(rng)))


@pytest.mark.parametrize("text,needle", [
    ('<tool_call>{"name": "f", "arguments": ' + "[" * 1000 + "]" * 1000 + "}</tool_call>", "deeper than"),
    ('<tool_call>{"name": "f", "arguments": {"x": ' + "9" * 5000 + "}}</tool_call>", "5000 digits"),
    ('<tool_call>{"name": "f", "arguments": "' + '{\\"x\\": ' * 100 + "1" + "}" * 100 + '"}</tool_call>', "deeper than"),
    ('<tool_call>{"name": "f", "arguments": {"x": "' + "y" * 200_000 + '"}}</tool_call>', "longer than"),
    ("<|python_tag|>" + '{"name": "f", "parameters": ' * 5000, "deeper than"),
    ("<tool_call>x" * 50_000, "unclosed <tool_call>"),  # a lazy regex: ~10 minutes
    ("<tool_call>{bad}</tool_call>" * 5000, "more characters"),  # the error stays small
])
def test_parser_refuses_hostile_calls_with_an_error(text, needle):
    out = parse_tool_calls(text)
    assert_turn(out)
    assert out["tool_calls"] == [] and needle in out["parse_error"]


def test_parser_work_is_linear_in_the_turn():
    # Each would take many minutes if every tag or line re-read the rest of the turn.
    out = parse_tool_calls("<think>" * 50_000 + "x")
    assert_turn(out)
    assert "unclosed <think>" in out["parse_error"]
    calls = '\n{"name": "f", "parameters": {}}' * 20_000
    assert_turn(out := parse_tool_calls(calls + "\nthe end"))
    assert out["tool_calls"] == [] and out["content"].endswith("the end")
    assert len(parse_tool_calls("Calling." + calls)["tool_calls"]) == 20_000
    assert_turn(parse_tool_calls('\n{"a":' * 3000 + "1"))  # each line opens inside the one before


# ---- each built-in env's step ------------------------------------------------------------------
def _cycle():
    cyc: dict = {}
    cyc["self"] = cyc
    return cyc


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _bad_calls(rng: random.Random):
    return rng.choice([
        "add", 5, None, {"name": "f"}, [1, "x", None], [{"name": 7}], [{"name": "f", "arguments": [1]}],
        [{"name": "f", "arguments": {"x": _nested(5000)}}], [{"name": "f", "arguments": _cycle()}],
        [{"name": "f", "arguments": {"x": {1, 2}}}], [{"name": "f", "arguments": {"x": 10 ** 5000}}],
        [{"name": hostile(rng, big=False), "arguments": {}}],
    ])


def _actions(rng: random.Random, tool_names: list[str]):
    """Hostile turns: text, dict actions with bad tool calls, and real tools with junk arguments."""
    for _ in range(STEPS_PER_ENV):
        roll = rng.random()
        if roll < 0.45:
            yield hostile(rng, big=rng.random() < 0.3)
        elif roll < 0.7:
            yield {"content": rng.choice(["", "hi", hostile(rng, big=False), 5]), "tool_calls": _bad_calls(rng)}
        else:
            args = {rng.choice(["expression", "user_id", "x", "query"]): rng.choice(
                [hostile(rng, big=False), _unicode(rng, 50), 10 ** 50, [[[]]], None])}
            yield format_tool_call(rng.choice(tool_names), args)


TAU2 = pytest.mark.skipif(not (TAU2_DATA_DIR / "domains").is_dir(), reason=f"τ² data not found at {TAU2_DATA_DIR}")
ENVS = [
    pytest.param("Navigation-v0", {"split": "test"}, id="navigation"),
    pytest.param("Hard20-v0", {"split": "test"}, id="hard20"),
    *[pytest.param(name, {"data_dir": str(TAU2_DATA_DIR), "split": "base"}, id=name, marks=TAU2)
      for name in ("Tau2Telecom-v0", "Tau2Retail-v0", "Tau2Airline-v0")],
]
EXPLICIT_ACTIONS = [
    ('<tool_call>{"name": "f", "arguments": ' + "[" * 1000 + "]" * 1000 + "}</tool_call>", "deeper than"),
    ('<tool_call>{"name": "f", "arguments": {"x": ' + "9" * 5000 + "}}</tool_call>", "5000 digits"),
    ("<tool_call>x" * 5000, "unclosed"),
    ({"content": "", "tool_calls": "f"}, "must be a list"),
    ({"content": "", "tool_calls": [1]}, "must be an object"),
    ({"content": 5, "tool_calls": []}, "'content' must be a string"),
]


@pytest.mark.parametrize("name,config", ENVS)
def test_env_step_fuzz(name, config):
    rng = random.Random(SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = envs.make_env(name, config)
        ids = env.task_ids(config["split"])
        tools = [t["function"]["name"] for t in env.reset(options={"task_id": ids[0]})[1]["tools"]]
        explicit = list(EXPLICIT_ACTIONS)
        if "calculate" in tools:
            explicit.append((format_tool_call("calculate", {"expression": "((9**999)**999)**999"}), "Exponent too large"))
        episodes = 0
        for k, action in enumerate([a for a, _ in explicit] + list(_actions(rng, tools))):
            obs, reward, terminated, truncated, info = env.step(action)
            assert isinstance(obs, list) and all(isinstance(m["content"], str) for m in obs)
            assert isinstance(reward, float) and isinstance(info, dict)
            pickle.dumps((obs, info, env.unwrapped.messages))  # what an env runner ships
            if k < len(explicit):
                assert any(m["content"].startswith("Error:") and explicit[k][1] in m["content"] for m in obs), obs
            if terminated or truncated:
                episodes += 1
                env.reset(options={"task_id": ids[episodes % len(ids)]})


# ---- the verdict parsers -----------------------------------------------------------------------
def assert_verdicts(text: str) -> None:
    v = parse_validator(text)
    assert v is None or (set(v) == {"is_valid", "error_types", "diagnosis", "suggest_next"}
                         and isinstance(v["is_valid"], bool) and isinstance(v["error_types"], list))
    f = parse_verifier(text)
    assert f is None or (set(f) == {"consistent", "plausible", "reason"} and isinstance(f["reason"], str))
    j = parse_json_verdict(text, {"is_valid": (bool, str)})
    assert j is None or isinstance(j, dict)
    objects, left_open = json_objects(text)
    assert isinstance(objects, list) and isinstance(left_open, bool)


def test_verdict_parsers_fuzz():
    rng = random.Random(SEED + 1)
    for _ in range(VERDICT_CASES):
        assert_verdicts(hostile(rng, big=rng.random() < 0.1))


@pytest.mark.parametrize("text", [
    '{"is_valid": false, "x": ' + "[" * 5000 + "]" * 5000 + "}",
    '{"is_valid": false, "x": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}",
    '{"is_valid": false, "x": ' + "9" * 5000 + "}",
    "<think>" * 50_000 + '{"is_valid": false}',  # a lazy regex: ~10 minutes
    "{'is_valid': False, 'x': [" + "1," * 500_000 + "]}",  # slicing per character: hours
    '{"consistent": true, "plausible": true, "reason": ' + "[" * 5000 + "}",
])
def test_verdict_parsers_give_no_verdict_on_hostile_objects(text):
    assert_verdicts(text)
    assert parse_validator(text) is None and parse_verifier(text) is None


# ---- the chat renderer -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def renderer():
    from transformers import AutoTokenizer

    from policies.chat import ChatRenderer
    from policies.models import DEFAULT_MODEL, load_model

    return ChatRenderer(AutoTokenizer.from_pretrained(load_model(DEFAULT_MODEL)), chat_template="chatml")


def test_renderer_fuzz(renderer):
    rng = random.Random(SEED + 2)
    opening = [{"role": "system", "content": hostile(rng, big=False)}, {"role": "user", "content": "\ud800 hi"}]
    messages, buf = renderer.begin(opening, [{"type": "function", "function": {"name": _unicode(rng, 20)}}])
    for _ in range(RENDERER_CASES):
        new = [{"role": rng.choice(["tool", "user"]), "name": "f", "content": hostile(rng, big=False)[:3000]}]
        buf.append_context(renderer.messages_ids(messages, new))
        messages += new
    assert all(isinstance(i, int) for i in buf.ids)
    assert renderer.drift(messages, buf.ids) is None  # one sanitiser for the incremental and full renders
    text = renderer.tokenizer.decode(buf.ids)
    assert "\ufffd hi" in text and not any("\ud800" <= ch <= "\udfff" for ch in text)
