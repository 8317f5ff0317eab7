"""The rule-based Navigation Validator/Corrector on real episodes of the real env.

Failed episodes come from the naive agent (first search hit, nationwide) and from oracle
episodes with one deliberate mistake. A rescue = replay the prefix, execute the corrected
step, continue with a history-reading oracle until the episode ends, and get reward 1.
The continuation trusts the corrected step: after any route it just replies, so a wrong
corrected ``direction`` call is a failed rescue, not something the oracle repairs.
"""

import json

import pytest

import envs
from envs.navigation.agents import NaiveAgent, OracleAgent, run_episode
from envs.navigation.geo import haversine_m, parse_lonlat
from envs.navigation.rules import NavigationRules
from envs.tool_calls import format_tool_call, parse_tool_calls
from rti_actors.rti.verifier_checks import check_corrected_step

RULES = NavigationRules()


def places(evidence):
    names = [w["name"] for w in evidence["waypoints"]]
    order = [names.index(n) for g in evidence["allowed_orders"]["groups"] for n in g]
    return [evidence["origin"]] + [evidence["waypoints"][i] for i in order] + [evidence["destination"]]


def reply(language):
    return "Your route is planned." if language == "en" else "路线已规划好。"


def oracle_next(messages, evidence, language):
    """One oracle turn read off the history alone (no state), as a continuing policy."""
    calls = []
    for m in messages:
        if m["role"] == "assistant":
            calls += m.get("tool_calls") or []
    last = messages[-1]
    if calls and calls[-1]["name"] == "direction" and last["role"] == "tool" and '"distance"' in last["content"]:
        return reply(language)
    wanted = places(evidence)
    found = {}
    for m in messages:
        if m["role"] != "tool":
            continue
        try:
            pois = json.loads(m["content"]).get("pois") or []
        except (json.JSONDecodeError, AttributeError):
            continue
        for poi in pois:
            for i, p in enumerate(wanted):
                if poi["name"] == p["name"] and haversine_m(parse_lonlat(poi["location"]), parse_lonlat(p["location"])) <= 30:
                    found.setdefault(i, poi["location"])
    missing = [i for i in range(len(wanted)) if i not in found]
    if not missing:
        locs = [found[i] for i in range(len(wanted))]
        return format_tool_call("direction", {"origin": locs[0], "destination": locs[-1], "mode": "driving",
                                              "waypoints": ";".join(locs[1:-1])})
    place = wanted[missing[0]]
    tried = [c for c in calls if place["name"] in json.dumps(c["arguments"], ensure_ascii=False)]
    if not any(c["name"] == "poi_search" and c["arguments"].get("region") for c in tried):
        return format_tool_call("poi_search", {"address": place["name"], "region": place["city"]})
    if not any(c["name"] == "around_search" for c in tried):
        return format_tool_call("around_search", {"location": place["location"], "radius": 200, "keyword": place["name"]})
    return reply(language)


def replay(env, task_id, actions):
    """The env after ``actions`` on a fresh reset (episodes are deterministic): its messages."""
    env.reset(options={"task_id": task_id})
    for action in actions:
        env.step(action)
    return list(env.messages)


def intervene(env, task_id, actions, messages, evidence, language):
    """Validate, correct, replay prefix + fix + oracle continuation: (verdict, fix, reward, problems)."""
    verdict = RULES.validate(messages, actions, evidence)
    if verdict is None:
        return None, None, None, None
    fix = RULES.correct(messages, actions, evidence, verdict)
    history = replay(env, task_id, actions[:verdict["step"]])
    is_final = not parse_tool_calls(fix)["tool_calls"]
    problems = check_corrected_step(fix, tool_schemas=env.tool_schemas(), history_messages=history,
                                    is_final=is_final, language=language, facts=env.verifier_facts())
    _, reward, terminated, truncated, _ = env.step(fix)
    while not (terminated or truncated):
        _, reward, terminated, truncated, _ = env.step(oracle_next(env.messages, evidence, language))
    return verdict, fix, reward, problems


@pytest.mark.parametrize("language,split,count", [("zh", "train", 40), ("en", "test", 30)])
def test_naive_failures_are_rescued(language, split, count):
    env = envs.make_env("Navigation-v0", {"split": split, "language": language})
    failed = rescued = direction_fixes = 0
    for task_id in env.task_ids(split)[:count]:
        reward, _, messages = run_episode(env, NaiveAgent, task_id)
        evidence, actions = env.reward_evidence(), list(env.actions)
        if reward == 1.0:
            assert RULES.validate(messages, actions, evidence) is None
            continue
        failed += 1
        verdict, fix, reward, problems = intervene(env, task_id, actions, messages, evidence, language)
        # the naive agent's only derailing step is its route: the turn before its reply
        assert verdict["step"] == len(actions) - 2 and verdict["is_valid"] is False
        assert verdict["error_types"] and verdict["diagnosis"] and verdict["suggest_next"]
        assert problems == [], (task_id, fix, problems)
        call = parse_tool_calls(fix)["tool_calls"][0]
        direction_fixes += call["name"] == "direction"
        if call["name"] == "poi_search":
            assert call["arguments"]["region"] in messages[1]["content"]
        rescued += reward == 1.0
    assert failed >= count // 2
    assert rescued / failed >= 0.9, (rescued, failed, direction_fixes)


# ---- oracle episodes with one planted mistake ---------------------------------------------
def oracle_until_route(env, task_id):
    """Run the oracle until it is about to call direction: (its direction args, evidence)."""
    observation, _ = env.reset(options={"task_id": task_id})
    agent = OracleAgent(env.reward_evidence(), env.config["language"])
    while True:
        action = agent.act(observation)
        call = parse_tool_calls(action)["tool_calls"][0]
        if call["name"] == "direction":
            return call["arguments"], env.reward_evidence()
        observation, *_ = env.step(action)


def finish(env, args, language, answer=True):
    env.step(format_tool_call("direction", args))
    if answer and not env.done:
        env.step(reply(language))
    return list(env.actions), list(env.messages)


def rescue(env, args, evidence, language="zh", **kw):
    actions, messages = finish(env, args, language, **kw)
    return intervene(env, evidence["task_id"], actions, messages, evidence, language)


@pytest.fixture(scope="module")
def env():
    return envs.make_env("Navigation-v0", {"split": "test", "language": "zh"})


def pick_task(env, predicate):
    for task_id in env.task_ids("test"):
        evidence = env.benchmark.tasks[task_id].evidence()
        if predicate(evidence):
            return task_id
    raise AssertionError("no such task")


def test_wrong_order_is_reordered_minimally(env):
    task_id = pick_task(env, lambda e: e["level"] == 4 and len(e["waypoints"]) >= 4)
    args, evidence = oracle_until_route(env, task_id)
    points = args["waypoints"].split(";")
    swapped = points[1:2] + points[:1] + points[2:]
    bad = {**args, "waypoints": ";".join(swapped)}
    verdict, fix, reward, problems = rescue(env, bad, evidence)
    assert verdict["error_types"] == ["wrong_order"]
    fixed = parse_tool_calls(fix)["tool_calls"][0]
    assert fixed["arguments"] == {**args, "mode": "driving"}  # the same coordinate strings, reordered
    assert problems == [] and reward == 1.0


def test_wrong_mode_and_grounded_sibling_coordinate(env):
    task_id = pick_task(env, lambda e: len(e["waypoints"]) >= 3)
    args, evidence = oracle_until_route(env, task_id)
    # a coordinate the searches showed that is not the stop (a sibling or namesake)
    gold = {w["location"] for w in evidence["waypoints"]} | {evidence["origin"]["location"], evidence["destination"]["location"]}
    shown = [p["location"] for m in env.messages if m["role"] == "tool"
             for p in json.loads(m["content"]).get("pois", [])]
    other = next(loc for loc in shown if all(haversine_m(parse_lonlat(loc), parse_lonlat(g)) > 30 for g in gold))
    points = args["waypoints"].split(";")
    bad = {**args, "mode": "walking", "waypoints": ";".join([other] + points[1:])}
    verdict, fix, reward, problems = rescue(env, bad, evidence)
    assert set(verdict["error_types"]) == {"wrong_mode", "wrong_waypoint", "missing_waypoint"}
    fixed = parse_tool_calls(fix)["tool_calls"][0]["arguments"]
    assert fixed["mode"] == "driving" and other not in fixed["waypoints"] and points[0] in fixed["waypoints"].split(";")
    assert problems == [] and reward == 1.0


def test_ungrounded_gold_gives_a_city_qualified_search_not_the_coordinate(env):
    task_id = pick_task(env, lambda e: True)
    env.reset(options={"task_id": task_id})
    evidence = env.reward_evidence()
    messages = list(env.messages) + [{"role": "assistant", "content": reply("zh")}]
    verdict = RULES.validate(messages, [reply("zh")], evidence)
    assert verdict["step"] == 0 and verdict["error_types"] == ["answered_without_route"]
    fix = RULES.correct(messages, [reply("zh")], evidence, verdict)
    call = parse_tool_calls(fix)["tool_calls"][0]
    assert call == {"name": "poi_search", "arguments": {"address": evidence["origin"]["name"],
                                                        "region": evidence["city"].removesuffix("市")}}
    assert evidence["origin"]["location"] not in fix


def test_answer_before_route_after_all_searches_gets_the_route(env):
    task_id = pick_task(env, lambda e: e["allowed_orders"]["count"] > 1)
    args, evidence = oracle_until_route(env, task_id)
    env.step(reply("zh"))
    actions, messages = list(env.actions), list(env.messages)
    verdict, fix, reward, problems = intervene(env, task_id, actions, messages, evidence, "zh")
    assert verdict["error_types"] == ["answered_without_route"] and verdict["step"] == len(actions) - 1
    assert parse_tool_calls(fix)["tool_calls"][0]["name"] == "direction"
    assert problems == [] and reward == 1.0


def test_route_without_reply_gets_a_grounded_final_answer():
    task_env = envs.make_env("Navigation-v0", {"split": "test", "language": "en"})
    args, evidence = oracle_until_route(task_env, "nav-test-0005")
    turns = task_env.turns
    short = envs.make_env("Navigation-v0", {"split": "test", "language": "en", "max_turns": turns + 2})
    args, evidence = oracle_until_route(short, "nav-test-0005")
    short.step(format_tool_call("direction", args))
    short.step(format_tool_call("weather", {"city": evidence["city"]}))  # truncated: never replied
    assert short.done and not short.messages[-1]["content"].startswith("Your")
    actions, messages = list(short.actions), list(short.messages)
    verdict, fix, reward, problems = intervene(short, "nav-test-0005", actions, messages, evidence, "en")
    assert verdict["error_types"] == ["no_final_answer"] and verdict["step"] == len(actions) - 1
    assert fix.startswith("Your driving route is planned: about ") and "<tool_call>" not in fix
    assert problems == [] and reward == 1.0


def test_successful_and_later_fixed_episodes_have_no_derailing_step(env):
    task_id = pick_task(env, lambda e: len(e["waypoints"]) >= 3)
    args, evidence = oracle_until_route(env, task_id)
    wrong = {**args, "origin": args["destination"]}
    env.step(format_tool_call("direction", wrong))
    actions, messages = finish(env, args, "zh")           # wrong route, then the right one, then a reply
    assert RULES.validate(messages, actions, evidence) is None
    # right, then wrong: the later wrong call is the one judged, so it is the derailing step
    args, evidence = oracle_until_route(env, task_id)
    env.step(format_tool_call("direction", args))
    actions, messages = finish(env, wrong, "zh")
    verdict = RULES.validate(messages, actions, evidence)
    assert verdict["step"] == len(actions) - 2 and "wrong_origin" in verdict["error_types"]
    # the Validator reads the turns as written; dict actions work the same
    as_dicts = [parse_tool_calls(a) if isinstance(a, str) else a for a in actions]
    assert RULES.validate(messages, as_dicts, evidence) == verdict


def test_correct_rejects_a_step_outside_the_episode(env):
    task_id = pick_task(env, lambda e: True)
    env.reset(options={"task_id": task_id})
    with pytest.raises(ValueError, match="outside"):
        RULES.correct(list(env.messages), [], env.reward_evidence(), {"step": 3, "error_types": ["wrong_order"]})


def test_minimal_edit_keeps_prose_and_other_calls(env):
    task_id = pick_task(env, lambda e: e["level"] == 4 and len(e["waypoints"]) >= 3)
    args, evidence = oracle_until_route(env, task_id)
    points = args["waypoints"].split(";")
    bad = {k: v for k, v in args.items() if k != "mode"}
    bad["waypoints"] = ";".join(points[::-1])
    turn = ("好的，现在规划路线。\n" + format_tool_call("weather", {"city": evidence["city"]}) + "\n"
            + format_tool_call("direction", bad) + "\n" + format_tool_call("direction", bad))
    env.step(turn)
    env.step(reply("zh"))
    actions, messages = list(env.actions), list(env.messages)
    verdict = RULES.validate(messages, actions, evidence)
    assert verdict["error_types"] == ["wrong_order"] and verdict["step"] == len(actions) - 2
    fixed = parse_tool_calls(RULES.correct(messages, actions, evidence, verdict))
    assert fixed["content"] == "好的，现在规划路线。"
    assert fixed["tool_calls"] == [{"name": "weather", "arguments": {"city": evidence["city"]}},
                                   {"name": "direction", "arguments": {**bad, "waypoints": args["waypoints"]}}]


def test_a_worked_example_in_the_messages_is_not_a_step():
    # in the actor graph the messages are those the policy saw: the env's worked example (an
    # assistant turn) sits before the request; steps must still index the episode's turns
    env = envs.make_env("Navigation-v0", {"split": "test", "language": "en"})
    task_id = next(t for t in env.task_ids("test") if run_episode(env, NaiveAgent, t)[0] == 0.0)
    _, info = env.reset(options={"task_id": task_id})
    reward, _, messages = run_episode(env, NaiveAgent, task_id)
    evidence, actions = env.reward_evidence(), list(env.actions)
    seen = messages[:1] + info["demonstration"] + messages[1:]
    plain, shown = RULES.validate(messages, actions, evidence), RULES.validate(seen, actions, evidence)
    assert shown == plain and shown["step"] == len(actions) - 2
    assert RULES.correct(seen, actions, evidence, shown) == RULES.correct(messages, actions, evidence, plain)
