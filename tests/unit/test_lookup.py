"""The Lookup-v0 task ladder: splits, grader, oracle, and the rule roles RTI uses."""

import gymnasium as gym
import pytest

import envs
from envs import make_env, play
from envs.lookup import LookupEnv, build_world
from envs.lookup.world import ATTRIBUTES, TIERS
from envs.tool_calls import format_tool_call


def call(pid: str) -> str:
    return format_tool_call("get_person", {"id": pid})


class Scripted:
    def __init__(self, turns):
        self.turns = list(turns)

    def act(self, observation):
        return self.turns.pop(0)


def task(env: LookupEnv, tier: int, split: str = "train") -> str:
    return next(t for t in env.task_ids(split) if env.difficulty(t)["tier"] == tier)


def test_registered_and_made_through_gymnasium():
    assert "Lookup-v0" in envs.list_envs()
    env = gym.make("Lookup-v0", env_config={"tiers": [2], "split": "test"})
    obs, info = env.reset(options={"task_id": env.unwrapped.task_ids("test")[0]})
    assert obs[1]["content"].startswith("What is the ") and [t["function"]["name"] for t in info["tools"]] == ["get_person"]


def test_splits_are_disjoint_by_start_person_and_cover_every_tier():
    world = build_world(0)
    starts = {split: {world.questions[t].start for t in ids} for split, ids in world.ids.items()}
    assert starts["train"] and starts["test"] and not starts["train"] & starts["test"]
    for split in ("train", "test"):
        tiers = {world.questions[t].tier for t in world.ids[split]}
        assert tiers == set(TIERS)
    assert build_world(0).ids == world.ids and build_world(1).ids != world.ids  # seeded


def test_a_tier_k_question_needs_k_distinct_lookups():
    world = build_world(0)
    for tid in world.ids["test"]:
        q = world.questions[tid]
        assert len(q.chain) == q.tier == len(q.links) + 1 and len(set(q.chain)) == q.tier
        for here, link, there in zip(q.chain, q.links, q.chain[1:]):
            assert world.people[here][link] == there
        assert world.people[q.chain[-1]][q.attribute] == q.answer


@pytest.mark.parametrize("split", ["train", "test"])
def test_the_oracle_solves_every_task_in_exactly_tier_plus_one_turns(split):
    env = make_env("Lookup-v0", {"split": split})
    for tid in env.unwrapped.task_ids(split):
        reward, info = play(env, lambda e: e.oracle_agent(), tid)
        assert reward == 1.0 and info["reward_breakdown"]["progress"] == 1.0
        assert info["turns"] == env.unwrapped.difficulty(tid)["tier"] + 1


def test_tiers_config_selects_tasks_and_rejects_unknown_tiers():
    env = LookupEnv({"tiers": [1, 3]})
    assert {env.difficulty(t)["tier"] for t in env.task_ids("train")} == {1, 3}
    for bad in ([], [5], "2", [True]):
        with pytest.raises(ValueError, match="tiers="):
            LookupEnv({"tiers": bad})


def test_grader_wants_the_one_right_value_and_counts_progress():
    env = LookupEnv({"tiers": [2]})
    tid = task(env, 2)
    q = env.world.questions[tid]
    wrong = next(v for v in ATTRIBUTES[q.attribute] if v != q.answer)
    cases = [([call(q.chain[0]), call(q.chain[1]), f"It is {q.answer}."], 1.0, 1.0),
             ([call(q.chain[0]), call(q.chain[1]), f"It is {q.answer.lower()}."], 1.0, 1.0),  # case does not matter
             ([call(q.chain[0]), call(q.chain[1]), f"{q.answer} or {wrong}."], 0.0, 2 / 3),  # hedging fails
             ([call(q.chain[0]), f"It is {wrong}."], 0.0, 1 / 3),
             ([call(q.chain[1]), call(q.chain[0]), f"It is {q.answer}."], 0.0, 1 / 3),  # out of order: 1 in chain order
             ([call(q.chain[0]), f"It is {q.answer}."], 0.0, 1 / 3),  # right by chance is no success
             (["No idea."], 0.0, 0.0)]
    for turns, reward, progress in cases:
        r, info = play(env, Scripted(turns), tid)
        assert (r, info["reward_breakdown"]["progress"]) == pytest.approx((reward, progress)), turns


def test_bad_calls_are_error_observations_and_running_out_of_turns_is_truncation():
    env = LookupEnv({"tiers": [1], "max_turns": 2})
    env.reset(options={"task_id": task(env, 1)})
    obs, reward, terminated, truncated, _ = env.step(call("P000"))
    assert "no person has the id" in obs[0]["content"] and not (terminated or truncated)
    obs, reward, terminated, truncated, info = env.step('<tool_call>{"name": "get_person", "arguments": {}}</tool_call>')
    assert "invalid arguments" in obs[0]["content"] and truncated and reward == 0.0
    assert info["unparsable_turns"] == 0  # a call with bad arguments still parsed
    env.reset(options={"task_id": task(env, 1)})
    obs, _, _, _, info = env.step('<tool_call>{"name": "get_person", "arguments": {"id": "P1"}}')
    assert "could not parse" in obs[0]["content"] and info["unparsable_turns"] == 1 and info["turns"] == 1


def _rules_fix(env, tid, turns):
    """Play ``turns``; the rules' verdict and fixed turn for the episode."""
    reward, _ = play(env, Scripted(turns), tid)
    assert reward == 0.0
    e = env.unwrapped
    rules, evidence = e.rti_rules(), e.reward_evidence()
    verdict = rules.validate(e.messages, e.actions, evidence)
    return verdict, rules.correct(e.messages, e.actions, evidence, verdict)


def _continue_with_oracle(env, tid, kept, fixed):
    """Replay the turns before the fix, the fix, then the oracle to the end: the reward."""
    e = env.unwrapped
    oracle = None
    obs, _ = env.reset(options={"task_id": tid})
    seen = list(obs)
    for turn in kept + [fixed]:
        obs, reward, done, truncated, _ = env.step(turn)
        seen += obs
        if done or truncated:
            return reward
    oracle = e.oracle_agent()
    oracle.act(seen)  # let it read every record so far
    while True:
        obs, reward, done, truncated, _ = env.step(oracle.act(obs))
        if done or truncated:
            return reward


@pytest.mark.parametrize("kind", ["answered_early", "wrong_person", "repeated_lookup", "wrong_answer",
                                  "unparsable_call", "wrong_tool"])
def test_rules_find_the_first_off_plan_turn_and_fix_it_from_the_history(kind):
    env = make_env("Lookup-v0", {"tiers": [3]})
    e = env.unwrapped
    tid = task(e, 3)
    q = e.world.questions[tid]
    wrong = next(v for v in ATTRIBUTES[q.attribute] if v != q.answer)
    stranger = next(p for p in e.world.people if p not in q.chain)
    turns, step = {
        "answered_early": ([call(q.chain[0]), f"The answer is {wrong}."], 1),
        "wrong_person": ([call(q.chain[0]), "Next.\n" + call(stranger), "Done."], 1),
        "repeated_lookup": ([call(q.chain[0]), call(q.chain[0]), "Done."], 1),
        "wrong_answer": ([call(q.chain[0]), call(q.chain[1]), call(q.chain[2]), f"It is {wrong}."], 3),
        "unparsable_call": ([call(q.chain[0]), '<tool_call>{"name": </tool_call>', "Done."], 1),
        "wrong_tool": ([call(q.chain[0]), format_tool_call("search", {"q": "x"}), "Done."], 1),
    }[kind]
    verdict, fixed = _rules_fix(env, tid, turns)
    assert verdict["step"] == step and verdict["error_types"] == [kind] and not verdict["is_valid"]
    assert q.answer not in verdict["suggest_next"] + verdict["diagnosis"]  # the hint never gives the answer away
    history = "\n".join(m["content"] for m in e.messages[:2 + 2 * step])  # system, user, turns and results before it
    if kind == "wrong_answer":
        assert fixed == f"It is {q.answer}."  # the minimal edit: the value replaced, the wording kept
    else:
        assert q.chain[step] in fixed and q.chain[step] in history  # an id the history shows
    if kind == "wrong_person":
        assert fixed.startswith("Next.")  # the turn's own prose is kept
    assert _continue_with_oracle(env, tid, turns[:step], fixed) == 1.0


def test_rules_have_no_verdict_on_a_successful_or_on_plan_episode():
    env = make_env("Lookup-v0", {"tiers": [2], "max_turns": 2})
    e = env.unwrapped
    tid = task(e, 2)
    q = e.world.questions[tid]
    play(env, Scripted([call(q.chain[0]), call(q.chain[1])]), tid)  # on plan, out of turns
    assert e.rti_rules().validate(e.messages, e.actions, e.reward_evidence()) is None


def test_example_trains_on_its_tiers_and_evaluates_every_tier_asked_for(monkeypatch):
    from tests.conftest import example_config

    config = example_config("lookup", ["--tiers", "2,3", "--eval-tiers", "1,2,3", "--algorithm", "rti",
                                       "--roles", "rules"], monkeypatch)
    assert config["environment"]["env_config"]["tiers"] == [1, 2, 3]  # the env holds what is evaluated
    train = config["training"]["task_ids"]
    world = build_world(0)
    assert train and {world.questions[t].tier for t in train} == {2, 3}
    assert all(t in world.ids["train"] for t in train)
    assert config["training"]["algorithm"] == "rti" and config["interventions"]["roles"] == "rules"
    config.validate()
