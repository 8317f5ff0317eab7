"""The Verifier's deterministic checks, in both directions: leaks are caught, ordinary
agent text passes."""

import json

import pytest

import envs
from envs.navigation.env import VERIFIER_FACTS as NAV
from envs.tool_calls import format_assistant_turn
from envs.transcript import grounding_text
from rti_actors.rti.verifier_checks import (
    check_corrected_step,
    fake_tool_output,
    forbidden_words,
    tool_call_problems,
    ungrounded_arguments,
    ungrounded_final_answer,
)

# ---- forbidden words -----------------------------------------------------------------------


@pytest.mark.parametrize("text,word", [
    ("According to the reference answer the park is further north.", "reference answer"),
    ("The rubric says the order matters.", "rubric"),
    ("Following the evaluation criteria, I will route via the museum.", "evaluation criteria"),
    ("Unlike my previous draft, this call uses the right origin.", "previous draft"),
    ("On my previous attempt the origin was wrong.", "previous attempt"),
    ("The original step picked the wrong park.", "original step"),
    ("Correction: the destination is the hotel.", "Correction"),
    ("Thanks for the hint, searching again.", "hint"),
    ("Hints: use the city name.", "Hints"),
    ("The gold answer has four stops.", "gold answer"),
    ("This matches the ground truth.", "ground truth"),
    ("The ground-truth route is different.", "ground-truth"),
    ("The expected answer is 12 km.", "expected answer"),
    ("The annotated stop is the other one.", "annotated"),
    ('{"is_valid": false} so I search again', "is_valid"),
    ("The validator's note says to search again.", "validator's"),
])
def test_english_leaks_are_caught(text, word):
    assert f"forbidden word {word!r}" in forbidden_words(text, "en")


@pytest.mark.parametrize("text", [
    "Let me think about which candidate matches the name.",     # think ⊅ hint
    "The Chinthe statues are near the temple.",                 # chinthe
    "The address is correct, and I will correctly order the stops.",
    "I corrected nothing; the golden gate park is on the route.",
    "She ordered the gold watch in size M.",                    # gold as a product colour
    "Your booking reference is ABC123.",                        # reference without answer
    "The expected arrival is 18:00.",                           # expected without answer/output
    "Shinto shrines and hinterland towns.",
    "As in my previous response, the hotel is the last stop.",
])
def test_ordinary_english_passes(text):
    assert forbidden_words(text, "en") == []


@pytest.mark.parametrize("text,word", [
    ("根据参考答案，应该先去博物馆。", "参考答案"), ("标准答案里有四个途经点。", "标准答案"),
    ("按照评分标准重新规划。", "评分标准"), ("原回答的终点错了。", "原回答"), ("纠正一下起点。", "纠正"),
    ("根据提示，我重新搜索。", "提示"), ("更正后的路线如下。", "更正"), ("正确答案是东涌广场。", "正确答案"),
])
def test_chinese_leaks_are_caught(text, word):
    assert f"forbidden word {word!r}" in forbidden_words(text, "zh")
    assert f"forbidden word {word!r}" in forbidden_words(text)  # language unknown: both lists


@pytest.mark.parametrize("text", [
    "如果手机提示无服务，请重启。", "温馨提示：景区周一闭馆。", "听到提示音后挂断。", "页面弹出提示框时点确定。",
    "系统提示密码错误。", "我来查一下东涌广场的准确坐标。", "这几个地点的顺序可以调整。", "为您提供一条参考路线。",
    "地址已经确认正确。",
])
def test_ordinary_chinese_passes(text):
    assert forbidden_words(text, "zh") == []


def test_english_turns_skip_the_chinese_list_but_chinese_turns_check_english():
    assert forbidden_words("Searching 提示广场 now.", "en") == []
    assert forbidden_words("根据hint重新搜索。", "zh") == ["forbidden word 'hint'"]

# ---- tool calls -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nav():
    env = envs.make_env("Navigation-v0", {"split": "test", "language": "zh"})
    messages, info = env.reset(options={"task_id": "nav-test-0000"})
    return env, messages, info["tools"]


def call(name, **arguments):
    return format_assistant_turn("", [{"name": name, "arguments": arguments}])


def test_schema_checks(nav):
    _, _, tools = nav
    assert tool_call_problems(call("poi_search", address="东涌广场", region="深圳"), tools) == []
    assert any("unknown tool 'route'" in p for p in tool_call_problems(call("route", origin="1,2"), tools))
    bad = tool_call_problems(call("poi_search", address=3, extra="x"), tools)
    assert any("at address" in p and "not of type 'string'" in p for p in bad)
    assert any("Additional properties" in p for p in bad)
    assert any("'origin' is a required property" in p for p in tool_call_problems(call("direction", destination="1,2"), tools))
    assert any("does not parse" in p for p in tool_call_problems('<tool_call>{"name": "weather", </tool_call>', tools))
    bare = [{"name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                               "required": ["city"]}}]
    assert tool_call_problems(call("weather", city="深圳"), bare) == []
    assert tool_call_problems(call("weather"), bare)

# ---- grounding of arguments ------------------------------------------------------------------


HISTORY = ('帮我规划从A到B的路线。\n{"pois": [{"id": "B0700320F0", "name": "桂园公园", "location": "109.084425,34.268350", '
           '"tel": "029-76997311"}, {"name": "莲花纪念馆", "location": "108.999774,34.335381"}], "price": "54.32"}'
           '\nOrder #W1234567 for mia_li_3668 (mia.li@example.com), flight on May 20th, total 1008292230.')


@pytest.mark.parametrize("arguments", [
    {"origin": "109.084425,34.268350"},
    {"origin": "109.084425, 34.26835"},                    # same pair, other spelling
    {"location": "109.0844,34.2684"},                       # rounded (within 1e-4 degrees)
    {"waypoints": "109.084425,34.268350;108.999774,34.335381"},
    {"id": "B0700320F0"}, {"order_id": "#W1234567"}, {"order_id": "W1234567"}, {"user_id": "mia_li_3668"},
    {"email": "mia.li@example.com"}, {"phone": "029-76997311"}, {"amount": 54.32}, {"item": 1008292230},
    {"radius": 5000}, {"radius": "200"}, {"page": 3}, {"date": "2024-05-20"},
])
def test_grounded_arguments_pass(arguments):
    assert ungrounded_arguments([{"name": "t", "arguments": arguments}], HISTORY, facts=NAV) == []


@pytest.mark.parametrize("arguments,needle", [
    ({"origin": "109.095670,34.321748"}, "coordinate 109.095670,34.321748"),   # only in the evidence
    ({"location": "109.0850,34.2684"}, "coordinate"),                           # ~50 m off: another place
    ({"waypoints": "109.084425,34.268350;109.095670,34.321748"}, "coordinate 109.095670,34.321748"),
    ({"id": "B0700320F1"}, "id 'B0700320F1'"), ({"order_id": "#W7654321"}, "id '#W7654321'"),
    ({"email": "mia.li@example.org"}, "id 'mia.li@example.org'"), ({"amount": 54.33}, "number 54.33"),
    ({"radius": 4321}, "number 4321"), ({"date": "2024-05-21"}, "date 2024-05-21"),
    ({"nested": {"ids": ["B0700320F0", "HAT001"]}}, "id 'HAT001'"),
])
def test_ungrounded_arguments_are_named(arguments, needle):
    problems = ungrounded_arguments([{"name": "t", "arguments": arguments}], HISTORY, facts=NAV)
    assert len(problems) == 1 and needle in problems[0]

# ---- fake tool output ------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    '<tool_response>{"count": "1"}</tool_response>',
    'Observation: the park is at 109.08,34.26',
    '工具返回：{"count": "1"}',
    'The search gave {"status": "1", "pois": [{"name": "桂园公园"}]}, so I route now.',
    'I got {"status": "1", "info": "OK"} back.',
    'The result was "pois": [{"name": "x"',                  # broken JSON still quoting API keys
])
def test_fake_tool_output_is_caught(text):
    assert fake_tool_output(text, facts=NAV)


@pytest.mark.parametrize("text", [
    call("poi_search", address="桂园公园"),
    format_assistant_turn("I will check the status of the route.", [{"name": "direction", "arguments": {"origin": "1,2", "destination": "3,4"}}]),
    "My observation is that the two parks share a name.",
    'I will search {"address": "桂园公园"} next.',
])
def test_ordinary_turns_are_not_fake_output(text):
    assert fake_tool_output(text, facts=NAV) == []

# ---- final answers ---------------------------------------------------------------------------


ROUTE = {"distance": "12345", "duration": "5100", "taxi_cost": "38"}
ROUTE_HISTORY = '从汉庭酒店(九龙古镇店)出发，去西安民俗博物馆和桂园公园。\n' + json.dumps(ROUTE)


@pytest.mark.parametrize("text", [
    "路线已规划好：全程约12.3公里，预计85分钟。祝旅途愉快！",
    "全程约12.3公里，大约1小时25分钟，打车约38元。",
    "途经西安民俗博物馆和桂园公园，从您入住的酒店出发，下一站是“桂园公园”。",
    "Your driving route is planned: about 12.3 km, roughly 85 minutes. Have a good trip!",
    'The "fastest" route takes 1.4 hours.',
])
def test_grounded_final_answers_pass(text):
    assert ungrounded_final_answer(text, ROUTE_HISTORY, facts=NAV) == []


@pytest.mark.parametrize("text,needle", [
    ("全程约15.8公里，预计85分钟。", "number 15.8"),
    ("终点是长安博物馆。", "长安博物馆"),
    ("下一站是“大雁塔”。", "大雁塔"),
    ('Then visit "Lotus Pond".', "Lotus Pond"),
    ("The museum is at 109.095670,34.321748.", "coordinate"),
])
def test_ungrounded_final_answers_fail(text, needle):
    problems = ungrounded_final_answer(text, ROUTE_HISTORY, facts=NAV)
    assert problems and any(needle in p for p in problems)

# ---- everything together ---------------------------------------------------------------------


def test_check_corrected_step_uses_only_user_and_tool_messages(nav):
    env, messages, tools = nav
    history = list(messages)
    system_only = "121.414703,31.064218"
    history[0] = {**history[0], "content": history[0]["content"] + system_only}  # not a grounding source
    history.append({"role": "assistant", "content": f"maybe {system_only}"})     # nor is the agent's text
    step = call("direction", origin=system_only, destination=system_only)
    facts = env.verifier_facts()
    problems = check_corrected_step(step, tool_schemas=tools, history_messages=history, is_final=False, language="zh",
                                    facts=facts)
    assert sum("coordinate 121.414703,31.064218" in p for p in problems) == 2
    history.append({"role": "tool", "content": json.dumps({"pois": [{"location": system_only}]})})
    assert check_corrected_step(step, tool_schemas=tools, history_messages=history, is_final=False, facts=facts) == []
    assert system_only in grounding_text(history) and "出行规划助手" not in grounding_text(history)


def test_check_corrected_step_combines_checks(nav):
    _, messages, tools = nav
    leak = format_assistant_turn("根据参考答案重新搜索。", [{"name": "poi_search", "arguments": {"address": "x", "bogus": 1}}])
    problems = check_corrected_step(leak, tool_schemas=tools, history_messages=messages, is_final=False)
    assert any("参考答案" in p for p in problems) and any("Additional properties" in p for p in problems)
    final_with_call = call("weather", city="深圳")
    assert "a corrected final answer must not call tools" in check_corrected_step(
        final_with_call, tool_schemas=tools, history_messages=messages, is_final=True)
    assert check_corrected_step("  ", tool_schemas=tools, history_messages=messages, is_final=True) == ["the corrected step is empty"]
    assert check_corrected_step("Observation: done", tool_schemas=tools, history_messages=messages, is_final=True)
    # a term the user or a tool already used is conversation, not a leak
    said = messages + [{"role": "tool", "content": "手机提示：请输入验证码"}]
    assert check_corrected_step("好的，我看到提示了。", tool_schemas=tools, history_messages=said, is_final=True) == []
    assert check_corrected_step("好的，我看到提示了。", tool_schemas=tools, history_messages=messages, is_final=True)


def test_a_rich_answer_after_a_real_oracle_episode(nav):
    """Every place by name, the route's numbers converted, common words that end like place
    names (驾车路线, 城市道路, 市区): grounded. One invented place or distance: not."""
    from envs.navigation.agents import OracleAgent, run_episode
    env, _, _ = nav
    reward, _, messages = run_episode(env, OracleAgent, "nav-test-0007")
    assert reward == 1.0
    evidence, route = env.reward_evidence(), json.loads(messages[-2]["content"])
    history = grounding_text(messages[:-1])
    km, minutes = int(route["distance"]) / 1000, int(route["duration"]) // 60
    stops = "、".join(w["name"] for w in evidence["waypoints"])
    answer = (f"已为您规划好驾车路线：从{evidence['origin']['name']}出发，依次经过{stops}，最后到达"
              f"{evidence['destination']['name']}。全程约{km:.1f}公里，预计{minutes}分钟。市区路况良好，城市道路畅通，祝您旅途愉快！")
    assert ungrounded_final_answer(answer, history, facts=NAV) == []
    invented = answer.replace(evidence["waypoints"][0]["name"], "长安碑林博物馆")
    assert any("碑林博物馆" in p for p in ungrounded_final_answer(invented, history, facts=NAV))
    assert any(f"number {km + 7:.1f}" in p
               for p in ungrounded_final_answer(answer.replace(f"{km:.1f}", f"{km + 7:.1f}"), history, facts=NAV))


def test_think_blocks_are_checked_too():
    assert ungrounded_final_answer("<think>the museum is really at 109.095670,34.321748</think>全程约12.3公里。",
                                   ROUTE_HISTORY)
    assert forbidden_words("<think>the rubric wants two stops</think>OK", "en") == ["forbidden word 'rubric'"]


def test_free_numbers_are_configurable():
    args = [{"name": "around_search", "arguments": {"radius": 5000, "limit": 25}}]
    assert [p for p in ungrounded_arguments(args, "") if "number" in p] == [
        "argument around_search.limit: number 25 does not appear in the user request or any earlier tool output"]
    assert ungrounded_arguments(args, "", free_numbers={25, 5000}) == []
    assert len(ungrounded_arguments(args, "", free_numbers=set())) == 2


def test_env_facts_decide_result_keys_and_coordinate_tolerance(nav):
    """Amap's result keys and its rounding tolerance are Navigation's facts; an env that
    does not declare them (the base ``ToolEnv``) gets neither."""
    env, _, _ = nav
    assert env.verifier_facts() == NAV
    assert fake_tool_output('The search gave {"pois": [{"name": "x"}]}.') == []
    assert fake_tool_output('The search gave {"pois": [{"name": "x"}]}.', facts=NAV)
    assert fake_tool_output('I got {"status": "1", "info": "OK"} back.')  # envelope keys are generic
    rounded = [{"name": "t", "arguments": {"location": "109.0844,34.2684"}}]
    assert ungrounded_arguments(rounded, HISTORY, facts=NAV) == []
    assert ungrounded_arguments(rounded, HISTORY) and ungrounded_arguments(rounded, HISTORY, facts=None)
