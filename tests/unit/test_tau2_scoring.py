"""τ² reward computation: gating, the do-nothing baseline, replay equality, wrong writes and
the ACTION / COMMUNICATE matching rules. Self-consistency over every
task lives with the other oracles in test_tau2_oracles.py (which runs first and fills the gold-state
cache this file reuses)."""

import pytest

from envs.tau2.data import Tau2Data
from envs.tau2.domains import build_environment
from envs.tau2.environment import Tau2Environment
from envs.tau2.evaluator import action_met, communicate_met, evaluate, pass_hat_k, reward_basis
from envs.tau2.judge import LLMJudge
from tests.unit.tau2_testdata import DATA_DIR, needs_data, telecom_base_tasks

pytestmark = needs_data

GREETING = {"role": "assistant", "content": "Hi! How can I help you today?", "tool_calls": []}
AIRLINE_DO_NOTHING = {0, 1, 4, 5, 6, 10, 13, 26, 28, 31, 34, 36, 41, 43, 45, 46, 47, 48, 49}
RETAIL_DO_NOTHING = {10, 12, 25, 50, 57, 65, 105}


@pytest.fixture(scope="module")
def data():
    return Tau2Data(DATA_DIR)


def gold_trajectory(data: Tau2Data, domain: str, task: dict) -> tuple[Tau2Environment, list[dict]]:
    """The gold actions as agent/user tool calls on a live env (as in test_tau2_oracles)."""
    env = build_environment(data, domain)
    env.initialise(task)
    trajectory = [dict(GREETING)]
    criteria = task["evaluation_criteria"]
    for action in criteria["actions"]:
        requestor = action.get("requestor") or "assistant"
        call = {"id": action["action_id"], "name": action["name"], "arguments": action["arguments"],
                "requestor": requestor}
        trajectory.append({"role": requestor, "content": None, "tool_calls": [call]})
        trajectory.append(env.execute(call, requestor))
    if criteria.get("communicate_info"):
        trajectory.append({"role": "assistant", "content": " ".join(criteria["communicate_info"]), "tool_calls": []})
    return env, trajectory


def test_do_nothing_baseline(data):
    # The greeting alone, then the user stops: 19 airline and 7 retail tasks, no telecom.
    for domain, expected in (("airline", AIRLINE_DO_NOTHING), ("retail", RETAIL_DO_NOTHING)):
        fresh = build_environment(data, domain)  # evaluation does not change an idle env
        passed = {int(tid) for tid, task in data.tasks(domain).items()
                  if evaluate(data, domain, task, [dict(GREETING)], "user_stop", fresh)[0] == 1.0}
        assert passed == expected
    transfer_assertions_alone = 0
    for task in telecom_base_tasks(data):
        env = build_environment(data, "telecom")
        env.initialise(task)
        reward, breakdown = evaluate(data, "telecom", task, [dict(GREETING)], "user_stop", env)
        assert reward == 0.0
        transfer_assertions_alone += breakdown.get("ACTION") == 0.0 and breakdown["ENV_ASSERTION"] == 1.0
    assert transfer_assertions_alone == 20


@pytest.mark.parametrize("reason", ["max_steps", "too_many_errors", "agent_error", "user_error", "max_turns"])
def test_only_stops_are_rewarded(data, reason):
    task = data.tasks("airline")["0"]
    reward, breakdown = evaluate(data, "airline", task, [dict(GREETING)], reason, build_environment(data, "airline"))
    assert reward == 0.0 and breakdown["gated"]


def test_replay_reproduces_outputs_and_state(data):
    # Re-executing a trajectory's calls on a fresh env reproduces it.
    cases = [("telecom", t) for t in list(data.tasks("telecom"))[:40]] + [("airline", "8"), ("retail", "20")]
    for domain, task_id in cases:
        task = data.tasks(domain)[task_id]
        live, trajectory = gold_trajectory(data, domain, task)
        replay = build_environment(data, domain)
        replay.initialise(task)
        for message, result in zip(trajectory[1::2], trajectory[2::2]):
            if message.get("tool_calls"):
                call = message["tool_calls"][0]
                assert replay.execute(call, call["requestor"])["content"] == result["content"]
        replay.sync()
        assert replay.fingerprints() == live.fingerprints()


def test_wrong_or_missing_write_scores_zero(data):
    task = data.tasks("airline")["2"]  # a booking task
    env, trajectory = gold_trajectory(data, "airline", task)
    assert evaluate(data, "airline", task, trajectory, "user_stop", env)[0] == 1.0
    call = {"id": "x", "name": "send_certificate", "arguments": {"user_id": "mia_li_3668", "amount": 50},
            "requestor": "assistant"}
    trajectory += [{"role": "assistant", "content": None, "tool_calls": [call]}, env.execute(call)]
    reward, breakdown = evaluate(data, "airline", task, trajectory, "user_stop", env)
    assert reward == 0.0 and breakdown["DB"] == 0.0
    skipped = build_environment(data, "airline")  # nothing booked at all
    assert evaluate(data, "airline", task, [dict(GREETING)], "user_stop", skipped)[0] == 0.0


def test_communicate_rules():
    said = [{"role": "assistant", "content": "Your refund is $1,628 in TOTAL.", "tool_calls": []},
            {"role": "user", "content": "so 44 then", "tool_calls": []}]
    assert communicate_met(said, "1628") and communicate_met(said, "total")
    assert not communicate_met(said, "1,628")  # commas are removed from the content only
    assert not communicate_met(said, "44")  # user messages do not count


def test_action_matching_rules():
    def calls(*pairs):
        return [{"role": "assistant", "content": None,
                 "tool_calls": [{"id": "1", "name": n, "arguments": a, "requestor": "assistant"}]} for n, a in pairs]

    gold = {"name": "refuel_data", "arguments": {"customer_id": "C1001", "gb_amount": 2.0}, "compare_args": None}
    assert action_met(calls(("refuel_data", {"customer_id": "C1001", "gb_amount": 2.0})), gold)
    assert not action_met(calls(("refuel_data", {"customer_id": "C1001", "gb_amount": 3.0})), gold)
    assert action_met(calls(("refuel_data", {"customer_id": "C1001"})), gold)  # keys of the call are compared
    transfer = {"name": "transfer_to_human_agents", "arguments": {"summary": "x"}, "compare_args": []}
    assert action_met(calls(("transfer_to_human_agents", {"summary": "anything"})), transfer)
    assert not action_met(calls(("get_customer_by_id", {})), transfer)
    restricted = {"name": "enable_roaming", "arguments": {"customer_id": "C1001", "line_id": "L1002"},
                  "compare_args": ["line_id"]}
    assert action_met(calls(("enable_roaming", {"customer_id": "C9", "line_id": "L1002"})), restricted)


def test_nl_assertions_go_through_the_optional_judge(data):
    task = {"id": "nl", "evaluation_criteria": {"reward_basis": ["NL_ASSERTION"], "nl_assertions": ["a", "b"]}}
    env = build_environment(data, "retail")
    seen = []

    def judge(trajectory, assertions):
        seen.append((len(trajectory), assertions))
        return [True, "refund" in trajectory[-1]["content"]]

    said = [dict(GREETING), {"role": "assistant", "content": "Your refund is on its way.", "tool_calls": []}]
    assert evaluate(data, "retail", task, said, "user_stop", env, judge)[0] == 1.0
    assert evaluate(data, "retail", task, said[:1], "user_stop", env, judge)[0] == 0.0
    assert seen[0] == (2, ["a", "b"])
    with pytest.raises(ValueError, match="nl_judge"):
        evaluate(data, "retail", task, said, "user_stop", env)


def test_llm_judge_reads_json_and_fails_closed():
    sent = []

    def chat(messages):
        sent.append(messages)
        return 'Sure: {"results": [{"expectedOutcome": "a", "reasoning": "r", "metExpectation": true}, ' \
               '{"expectedOutcome": "b", "reasoning": "r", "metExpectation": false}]}'

    said = [dict(GREETING), {"role": "user", "content": "bye", "tool_calls": []}]
    assert LLMJudge(chat)(said, ["a", "b"]) == [True, False]
    assert "assistant: Hi! How can I help you today?\nuser: bye" in sent[0][1]["content"]
    assert LLMJudge(lambda m: "no idea")(said, ["a", "b"]) == [False, False]
    assert LLMJudge(lambda m: '{"results": [{"metExpectation": true}]}')(said, ["a", "b"]) == [False, False]


def test_pass_hat_k():
    rewards = {"t1": [1.0, 1.0, 0.0, 1.0], "t2": [0.0, 0.0, 0.0, 1.0]}
    assert pass_hat_k(rewards, 1) == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert pass_hat_k(rewards, 2) == pytest.approx((3 / 6 + 0) / 2)
    with pytest.raises(ValueError, match="fewer than k"):
        pass_hat_k(rewards, 5)


def test_an_empty_reward_basis_scores_one(data):
    # Only an absent key means DB and COMMUNICATE; an empty basis is a product of nothing, as upstream's.
    task = dict(data.tasks("airline")["2"])
    said = [dict(GREETING)]
    idle = build_environment(data, "airline")
    assert evaluate(data, "airline", task, said, "user_stop", idle)[0] == 0.0  # the DB check fails
    task["evaluation_criteria"] = {**task["evaluation_criteria"], "reward_basis": []}
    reward, breakdown = evaluate(data, "airline", task, said, "user_stop", idle)
    assert reward == 1.0 and breakdown["reward_basis"] == [] and breakdown["progress"] == 1.0
    assert evaluate(data, "airline", task, said, "max_steps", idle)[0] == 0.0  # the gate still applies
    assert reward_basis({}) == ["DB", "COMMUNICATE"] and reward_basis({"reward_basis": []}) == []  # env's evidence too
