"""The judge handed to Claw-Eval graders: upstream's surface, reading scores, cache,
bounded retries, the backends (a local test server for "endpoint"), and its use by a
task's grader through ClawEvalEnv."""

from pathlib import Path

import pytest

from envs.claw_eval import ClawEvalEnv
from envs.claw_eval.judge import STUB_LABEL, ClawJudge, JudgeUnavailable, make_judge, parse_score
from tests.fake_openai import serve

SYNTHETIC = Path(__file__).resolve().parents[1] / "data" / "claw_eval"


def test_parse_score():
    assert parse_score('{"score": 0.4, "reasoning": "half"}').score == 0.4
    assert parse_score('```json\n{"score": 1, "reasoning": "ok"}\n```').reasoning == "ok"
    assert parse_score('Verdict: {"score": 1.7}').score == 1.0  # clamped
    assert parse_score('{"score": "high"} then "score": 0.25').score == 0.25
    assert parse_score("looks good") is None and parse_score('{"score": true}') is None


def test_cache_and_upstream_method_names():
    prompts = []

    def ask(prompt):
        prompts.append(prompt)
        return '{"score": 0.8, "reasoning": "fine"}'

    judge = ClawJudge(ask, "fn:test")
    first = judge.evaluate("task", "[USER]: hi", "gmail: 1 call", "rubric A")
    assert (first.score, first.reasoning) == (0.8, "fine")
    assert judge.evaluate("task", "[USER]: hi", "gmail: 1 call", "rubric A") == first
    assert judge.calls == 1  # the identical prompt is served from the cache
    assert judge.evaluate_actions("task", "[gmail] /gmail/send", "rubric B").score == 0.8 and judge.calls == 2
    assert "rubric A" in prompts[0] and "gmail: 1 call" in prompts[0] and "/gmail/send" in prompts[1]
    raw = judge.client.chat.completions.create(model=judge.model_id, messages=[{"role": "user", "content": "classify"}],
                                               temperature=0.0, max_tokens=10)
    assert raw.choices[0].message.content.startswith('{"score"') and prompts[-1] == "classify"


def test_bounded_retries_with_capped_backoff():
    replies = iter([RuntimeError("503"), "no score here", '{"score": 0.3}'])
    sleeps = []

    def ask(prompt):
        r = next(replies)
        if isinstance(r, Exception):
            raise r
        return r

    judge = ClawJudge(ask, "fn:flaky", attempts=3, backoff_s=2.0, max_backoff_s=3.0, sleep=sleeps.append)
    assert judge.evaluate("t", "c", "", "r").score == 0.3
    assert sleeps == [2.0, 3.0] and judge.calls == 3 and judge.failures == []

    dead = ClawJudge(lambda p: (_ for _ in ()).throw(ConnectionError("down")), "fn:dead", attempts=4,
                     backoff_s=1.0, max_backoff_s=1.5, sleep=sleeps.append)
    with pytest.raises(JudgeUnavailable, match="4 attempts.*down"):
        dead.evaluate("t", "c", "", "r")
    assert dead.calls == 4 and len(dead.failures) == 1 and sleeps[2:] == [1.0, 1.5, 1.5]


def test_make_judge_backends_and_errors():
    assert make_judge({}) is None and make_judge({"judge": "none"}) is None
    stub = make_judge({"judge": "stub", "judge_stub_score": 0.25})
    assert stub.label == STUB_LABEL and stub.evaluate("t", "c", "a", "r").score == 0.25
    assert make_judge({"judge": "fn", "judge_fn": lambda p: '{"score": 1}', "judge_name": "policy"}).label == "fn:policy"
    with pytest.raises(ValueError, match="judge_fn"):
        make_judge({"judge": "fn"})
    with pytest.raises(ValueError, match="unknown judge"):
        make_judge({"judge": "gpt"})
    with pytest.raises(ValueError, match="attempts"):
        make_judge({"judge": "stub", "judge_attempts": 0})


def test_endpoint_judge_grades_a_task_through_the_env():
    reply = {"choices": [{"message": {"content": '{"score": 0.5, "reasoning": "partly"}'}}]}
    with serve(lambda path, headers, body: reply) as judge:
        env = ClawEvalEnv({"data_dir": str(SYNTHETIC), "split": "all", "judge": "endpoint",
                           "judge_endpoint": {"base_url": judge.base_url, "model": "judge-m", "api_key_env": None}})
        env.reset(options={"task_id": "T001zh_parcel_desk"})
        env.step('<tool_call>{"name": "helpdesk_list_tickets", "arguments": {}}</tool_call>')
        _, reward, done, _, info = env.step("PK-1：退款。PK-2：补发标签。")
        assert done and info["judge"] == "endpoint:judge-m"
        assert info["reward_breakdown"]["completion"] == pytest.approx(0.6 + 0.4 * 0.5)
        path, _, body = judge.seen[-1]
        prompt = body["messages"][0]["content"]
        assert path == "/v1/chat/completions" and body["model"] == "judge-m" and body["temperature"] == 0.0
        # the grader hands the judge user and assistant text only, as upstream's do
        assert "PK-1：退款" in prompt and "helpdesk_list_tickets" not in prompt


def test_unreadable_replies_fail_by_default_and_score_zero_when_asked():
    strict = ClawJudge(lambda p: "I think it is fine", "fn:tiny", attempts=2, sleep=lambda s: None)
    with pytest.raises(JudgeUnavailable, match="unreadable reply"):
        strict.evaluate("t", "c", "", "r")
    lenient = ClawJudge(lambda p: "I think it is fine", "fn:tiny", attempts=2, sleep=lambda s: None,
                        unreadable="zero")
    assert lenient.evaluate("t", "c", "", "r").score == 0.0 and lenient.unreadable == 1 and lenient.failures == []
    assert lenient.evaluate("t", "c", "", "r").score == 0.0 and lenient.calls == 2  # cached, not re-asked
    replies = iter(["garbled", ConnectionError("down")])

    def flaky(prompt):
        r = next(replies)
        if isinstance(r, Exception):
            raise r
        return r

    # an outage on the last attempt is still an outage, whatever came before
    with pytest.raises(JudgeUnavailable, match="down"):
        ClawJudge(flaky, "fn:x", attempts=2, sleep=lambda s: None, unreadable="zero").evaluate("t", "c", "", "r")
    with pytest.raises(ValueError, match="judge_unreadable"):
        make_judge({"judge": "stub", "judge_unreadable": "ignore"})


def test_unreadable_zero_is_reported_in_the_breakdown():
    env = ClawEvalEnv({"data_dir": str(SYNTHETIC), "split": "all", "judge": "fn", "judge_fn": lambda p: "yes",
                       "judge_unreadable": "zero", "judge_backoff_s": 0.0})
    env.reset(options={"task_id": "T002_parcel_desk"})
    *_, info = env.step("PK-1 and PK-2: refund.")
    b = info["reward_breakdown"]
    assert b["judge_unreadable"] == 1 and b["completion"] == pytest.approx(0.6)
