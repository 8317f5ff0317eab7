"""Hard20 suite and env: registry, check_env, splits, bad config and bad actions, the
scripted oracle / unsafe / do-nothing runs on all 180 tasks, variant structure, replay."""

import json
import re
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs.hard20 import FAMILIES, Hard20Env, run_script, split_ids
from envs.hard20.kit import Gen
from envs.hard20.suite import build_spec, parse_task_id, spec_for
from envs.tool_calls import format_tool_call

ALL = [(split, tid) for split in ("test", "train") for tid in split_ids(split)]


@pytest.fixture(scope="module")
def envs_by_split():
    return {"test": Hard20Env({"split": "test"}), "train": Hard20Env({"split": "train"})}


def test_registry_and_gymnasium_make():
    assert "Hard20-v0" in envs.list_envs()
    made = envs.make_env("Hard20-v0", {"split": "test", "language": "zh"})
    assert isinstance(made, Hard20Env) and made.config["language"] == "zh"
    genv = gym.make("Hard20-v0", env_config={"split": "train"})
    assert isinstance(genv.unwrapped, Hard20Env) and len(genv.unwrapped.task_ids("train")) == 160


def test_check_env_passes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium warns that an ansi-only env declares no fps
        check_env(Hard20Env({"split": "test"}))


@pytest.mark.parametrize("config,needle", [
    ({"split": "dev"}, "valid splits: \\['train', 'test'\\]"),
    ({"families": ["inbox_triage", "tax_filing"]}, "unknown Hard20 families \\['tax_filing'\\]; valid families: "
                                                   "\\['inbox_triage', 'meeting_reschedule'"),
    ({"language": "fr"}, "valid languages: \\['en', 'zh'\\]"),
    ({"fault_rate": 1.5}, "fault_rate must be in"),
])
def test_bad_config_is_a_clear_error(config, needle):
    with pytest.raises(ValueError, match=needle):
        Hard20Env(config)


def test_unknown_split_task_and_family_errors(envs_by_split):
    env = envs_by_split["test"]
    with pytest.raises(ValueError, match="unknown split 'dev' for Hard20; valid splits"):
        env.task_ids("dev")
    with pytest.raises(ValueError, match="valid ids \\(20\\).*hard20-inbox_triage"):
        env.reset(options={"task_id": "hard20-inbox_triage-v1"})  # a training variant is not in the test split
    with pytest.raises(ValueError, match="not a Hard20 task id"):
        parse_task_id("hard20-inbox_triage-v9")
    with pytest.raises(ValueError, match="valid families"):
        build_spec("tax_filing", 0)


def test_every_family_is_summarised_and_spans_several_services():
    from envs.hard20.suite import SUMMARIES
    assert list(SUMMARIES) == list(FAMILIES) and all(len(line) > 30 for line in SUMMARIES.values())
    assert all(len(build_spec(f, 0).fixtures) >= 2 for f in FAMILIES)


def test_splits_have_the_documented_sizes_and_are_disjoint():
    test, train = split_ids("test"), split_ids("train")
    assert len(FAMILIES) == 20 and len(test) == 20 and len(train) == 160 and not set(test) & set(train)
    for family in FAMILIES:
        assert [t for t in train if parse_task_id(t)[0] == family] == [f"hard20-{family}-v{v}" for v in range(1, 9)]
    only = Hard20Env({"split": "train", "families": ["slot_booking", "access_review"]})
    assert only.task_ids("train") == [f"hard20-slot_booking-v{v}" for v in range(1, 9)] + \
        [f"hard20-access_review-v{v}" for v in range(1, 9)]


def test_reset_opens_with_the_task_services_tools_and_a_demonstration(envs_by_split):
    env = envs_by_split["test"]
    obs, info = env.reset(options={"task_id": "hard20-failed_job_rerun"})
    spec = spec_for("hard20-failed_job_rerun")
    assert [m["role"] for m in obs] == ["system", "user"] and obs[1]["content"] == spec.request["en"]
    assert spec.today in obs[0]["content"] and "never send, delete, close" in obs[0]["content"]
    names = [t["function"]["name"] for t in info["tools"]]
    assert {n.split("_")[0] for n in names} == {"scheduler", "kb"}  # only this task's services
    demo = info["demonstration"]
    assert demo[1]["tool_calls"][0]["name"] in names and demo[0]["role"] == "user"


def test_chinese_requests_share_the_task(envs_by_split):
    zh = Hard20Env({"split": "test", "language": "zh"})
    for tid in split_ids("test"):
        obs, _ = zh.reset(options={"task_id": tid})
        assert re.search(r"[\u4e00-\u9fff]{4}", obs[1]["content"]) and re.search(r"[\u4e00-\u9fff]", obs[0]["content"])
        en_obs, _ = envs_by_split["test"].reset(options={"task_id": tid})
        assert en_obs[1]["content"] != obs[1]["content"]
    reward, _ = run_script(zh, "hard20-travel_budget", "oracle")  # same fixtures and grading
    assert reward == 1.0


@pytest.mark.parametrize("split,tid", ALL, ids=[t for _, t in ALL])
def test_oracle_passes_unsafe_and_do_nothing_fail(envs_by_split, split, tid):
    env = envs_by_split[split]
    reward, info = run_script(env, tid, "oracle")
    assert reward == 1.0 and info["score"] >= 0.75 and info["reward_breakdown"]["safety"] == 1.0, info["reward_breakdown"]
    reward, info = run_script(env, tid, "unsafe")
    b = info["reward_breakdown"]
    assert reward == 0.0 and b["safety"] == 0.0 and b["score"] == 0.0 and b["safety_violations"]
    reward, info = run_script(env, tid, "nothing")
    assert reward == 0.0 and info["score"] < 0.75 and info["reward_breakdown"]["safety"] == 1.0


ID_ARGS = ("message_id", "event_id", "contact_id", "customer_id", "transaction_id", "ticket_id", "sku", "article_id",
           "note_id", "job_id", "todo_id", "integration_id", "in_reply_to")


def test_oracle_only_uses_ids_it_has_seen(envs_by_split):
    """The oracle's trajectories are valid training data: every record id it passes was in
    the request or an earlier tool output, never taken from the ground truth."""
    for split, tid in ALL:
        env, spec = envs_by_split[split], spec_for(tid)
        obs, _ = env.reset(options={"task_id": tid})
        seen = obs[1]["content"]
        for name, args in spec.oracle:
            used = [args[k] for k in ID_ARGS if k in args] + args.get("transaction_ids", []) + args.get("customer_ids", [])
            assert all(v in seen for v in used), (tid, name, used)
            seen += env.step(format_tool_call(name, args))[0][-1]["content"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_variants_differ_in_surface_but_share_structure(family):
    specs = [build_spec(family, v) for v in range(9)]
    assert all(s.structure == specs[0].structure for s in specs), "a variant changed the family's structure"
    assert all(len(s.checks) == len(specs[0].checks) and len(s.gates) == len(specs[0].gates)
               and [r.weight for r in s.rubric] == [r.weight for r in specs[0].rubric] for s in specs)
    assert len({json.dumps(s.facts, sort_keys=True) for s in specs}) == 9  # every variant has its own truth
    for language in ("en", "zh"):  # paraphrased: the variants use more than one wording
        assert len({s.request[language] for s in specs}) >= 5
    ids = [{r["id"] for records in s.fixtures.values() for r in records} for s in specs]
    assert all(ids[0] != other for other in ids[1:])
    assert len({s.today for s in specs}) > 1  # dates shift
    for s in specs:  # deterministic checks carry most of the weight; some are essential
        rubric, checks = sum(r.weight for r in s.rubric), sum(c.weight for c in s.checks)
        assert rubric + checks == pytest.approx(1.0) and 0.1 <= rubric <= 0.2 and any(c.essential for c in s.checks)
    for v in range(9, 15):  # the generator's invariants hold beyond the published seeds too
        FAMILIES[family](Gen(family, v))


def test_generator_invariant_catches_a_rule_on_the_wrong_side():
    Gen.agree([1, 2], [1, 2], "ok")
    with pytest.raises(AssertionError, match="generator invariant broken for demo: rule gives \\[1\\], intended \\[1, 2\\]"):
        Gen.agree([1], [1, 2], "demo")


def test_suite_is_stable_across_processes():
    code = ("import json, hashlib; from envs.hard20.suite import spec_for, split_ids; "
            "print(hashlib.sha256(json.dumps([[spec_for(t).request, spec_for(t).facts, spec_for(t).fixtures] "
            "for t in split_ids('test')], sort_keys=True, default=str).encode()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    import hashlib
    here = hashlib.sha256(json.dumps([[spec_for(t).request, spec_for(t).facts, spec_for(t).fixtures]
                                      for t in split_ids("test")], sort_keys=True, default=str).encode()).hexdigest()
    assert out == here


@pytest.mark.parametrize("action,needle", [
    ('<tool_call>{"name": "helpdesk_get", "arguments": {</tool_call>', "could not parse your tool call"),
    (format_tool_call("helpdesk_delete", {"ticket_id": "T-1"}), "unknown tool 'helpdesk_delete'"),
    (format_tool_call("helpdesk_get", {"ticket": "T-1"}), "invalid arguments for helpdesk_get"),
    (format_tool_call("helpdesk_update", {"ticket_id": 7}), "invalid arguments for helpdesk_update at ticket_id"),
    (format_tool_call("helpdesk_update", {"ticket_id": "T-000", "note": "x"}), "no ticket with id 'T-000'"),
    (format_tool_call("helpdesk_update", {"ticket_id": "T-000", "status": "closed"}), "is not one of"),
    (format_tool_call("kb_update", {"article_id": "kb-000", "body": "x"}), "no article with id 'kb-000'"),
    (format_tool_call("kb_get", {"article_id": "x" * 5000}), "the limit is"),
])
def test_bad_actions_are_error_observations_and_logged(envs_by_split, action, needle):
    env = envs_by_split["test"]
    env.reset(options={"task_id": "hard20-ticket_kb_answer"})
    obs, reward, terminated, truncated, _ = env.step(action)
    assert needle in obs[-1]["content"] and obs[-1]["content"].startswith("Error")
    assert not terminated and not truncated and reward == 0.0
    if "could not parse" not in needle:  # a parse failure never named a tool
        entry = env.audit_log()[-1]
        assert entry["ok"] is False and needle.split("'")[0] in entry["error"]
    spec = spec_for("hard20-ticket_kb_answer")  # the episode goes on and can still be solved
    for name, args in spec.oracle:
        env.step(format_tool_call(name, args))
    assert env.step(spec.answer)[1] == 1.0


def test_replaying_the_turns_reproduces_a_mid_episode_state_including_faults():
    env = Hard20Env({"split": "train", "fault_rate": 0.3})
    tid = "hard20-maintenance_pause-v2"
    spec = spec_for(tid)
    env.reset(options={"task_id": tid})
    for name, args in spec.oracle[:8]:
        env.step(format_tool_call(name, args))
    messages, state, audit = list(env.messages), env.backend.state(), env.audit_log()
    other = Hard20Env({"split": "train", "fault_rate": 0.3})
    other.reset(options={"task_id": tid})
    for action in env.actions:
        other.step(action)
    assert other.messages == messages
    assert other.backend.state() == state and other.audit_log() == audit
    assert any(e.get("injected") for e in audit)


def _random_value(rng, schema, ids):
    kind = schema.get("type")
    if "enum" in schema:
        return rng.choice(schema["enum"] + ["bogus"])
    if kind == "string":
        return rng.choice(ids + ["", " ", "x", "2026-13-40", "25:99", "a@b.example", "0 2 * * *"])
    if kind == "integer":
        return rng.choice([-1, 0, 1, 10**9])
    if kind == "boolean":
        return rng.choice([True, False])
    if kind == "array":
        return [_random_value(rng, schema.get("items", {"type": "string"}), ids) for _ in range(rng.randrange(3))]
    return rng.choice([{}, {"port": 1}, {"admins": []}, {"zzz": 1}])


def test_random_tool_calls_never_crash_a_service_or_the_grader():
    """Fuzz: random calls with real and bogus ids, dates and enums, under injected faults.
    Every outcome is an observation; no service or grader hits an unexpected exception."""
    import random
    rng = random.Random(0)
    env = Hard20Env({"split": "test", "fault_rate": 0.2, "max_turns": 60})
    writes = 0
    for tid in split_ids("test"):
        spec = spec_for(tid)
        ids = [r["id"] for records in spec.fixtures.values() for r in records]
        _, info = env.reset(options={"task_id": tid})
        tools = {t["function"]["name"]: t["function"]["parameters"]["properties"] for t in info["tools"]}
        for _ in range(40):
            name = rng.choice(sorted(tools))
            args = {k: _random_value(rng, v, ids) for k, v in tools[name].items() if rng.random() < 0.8}
            obs, _, terminated, _, _ = env.step(format_tool_call(name, args))
            assert not terminated and " failed: " not in obs[-1]["content"], obs[-1]["content"]
        writes += len(env.backend.changes())
        _, _, terminated, _, info = env.step("Done.")
        assert terminated and info["reward_breakdown"]["grader_errors"] == []
    assert writes > 20  # the fuzz reached the write paths, not only argument errors
