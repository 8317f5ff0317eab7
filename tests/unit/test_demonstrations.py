"""Demonstration records: recording scripted episodes, the JSONL format, and tokenisation
into learner samples (only the assistant's tokens carry loss)."""

import json

import pytest
import torch

from envs import format_assistant_turn, make_env
from policies.chat import ChatRenderer
from rti_actors.demonstrations import check_record, from_trajectory, read_jsonl, record_agent, to_sample, write_jsonl
from rti_actors.losses import sft_loss
from rti_actors.trajectory import Trajectory


@pytest.fixture(scope="module")
def renderer(tokenizer):
    return ChatRenderer(tokenizer)


@pytest.fixture(scope="module")
def nav_records():
    env = make_env("Navigation-v0", {"split": "train", "language": "en"}).unwrapped
    ids = [t for t in env.task_ids("train") if env.difficulty(t)["waypoints"] == 3][:2]
    return record_agent("Navigation-v0", {"language": "en"}, ids)


def test_oracle_records_solve_their_tasks(nav_records):
    assert [r["reward"] for r in nav_records] == [1.0, 1.0]
    r = nav_records[0]
    assert r["env"] == "Navigation-v0" and r["split"] == "train" and r["source"] == "oracle"
    assert r["tools"] and r["demonstration"]  # the context the renderer adds
    roles = [m["role"] for m in r["messages"]]
    assert roles[:2] == ["system", "user"] and roles[-1] == "assistant" and "tool" in roles


def test_hard20_oracle_records_pass():
    env = make_env("Hard20-v0", {"split": "train"}).unwrapped
    records = record_agent("Hard20-v0", {}, env.task_ids("train")[:2])
    assert [r["reward"] for r in records] == [1.0, 1.0]


def test_jsonl_round_trip_and_reward_filter(nav_records, tmp_path):
    failed = {**nav_records[1], "reward": 0.0}
    path = write_jsonl(tmp_path / "d.jsonl", [nav_records[0], failed])
    back = read_jsonl(path)
    assert back == [json.loads(json.dumps(nav_records[0], ensure_ascii=False)), json.loads(json.dumps(failed))]
    assert [r["task_id"] for r in read_jsonl(path, min_reward=1.0)] == [nav_records[0]["task_id"]]
    write_jsonl(path, [nav_records[1]], append=True)
    assert len(read_jsonl(path)) == 3


def test_bad_records_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="non-empty 'messages'"):
        check_record({"messages": []})
    with pytest.raises(ValueError, match="no assistant turn"):
        check_record({"messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(ValueError, match="role"):
        check_record({"messages": [{"role": "robot", "content": "hi"}]})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_jsonl(bad)


def _spans(mask):
    spans, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def test_only_assistant_turns_carry_loss(nav_records, renderer, tokenizer):
    r = nav_records[0]
    s = to_sample(renderer, r)
    assert len(s["ids"]) == len(s["loss_mask"]) == len(s["behaviour_logprobs"]) == len(s["token_weight"])
    assert renderer.drift(s["messages"], s["ids"]) is None  # same ids as rendering from scratch
    spans = _spans(s["loss_mask"])
    turns = [m for m in r["messages"] if m["role"] == "assistant"]
    assert len(spans) == len(turns)
    for (a, b), turn in zip(spans, turns):
        ids = s["ids"][a:b]
        assert ids[-1] == renderer.eos_id  # the model learns to end its turn
        assert tokenizer.decode(ids[:-1]) == format_assistant_turn(turn["content"], turn.get("tool_calls") or [])
    trained = tokenizer.decode([i for i, m in zip(s["ids"], s["loss_mask"]) if m])
    assert "<tool_response>" not in trained and r["messages"][1]["content"][:30] not in trained


def test_rollout_records_tokenise_like_raw_records(nav_records, renderer):
    # a library rollout keeps the messages as the policy saw them (schemas and example
    # inside) and no tools: it must tokenise to the same ids as the raw record
    raw = to_sample(renderer, nav_records[0])
    turns = [m for m in nav_records[0]["messages"] if m["role"] == "assistant"]
    seen = from_trajectory(Trajectory("t", 0, reward=1.0, messages=raw["messages"], actions=turns), "Navigation-v0")
    assert seen["num_context_messages"] == 4  # system (with schemas), the example exchange (2), the request
    again = to_sample(renderer, seen)
    assert again["ids"] == raw["ids"] and again["loss_mask"] == raw["loss_mask"]


def test_sft_loss_ignores_unmasked_positions_and_matches_hand_computation():
    logp = torch.tensor([[0.0, -1.0, -2.0, -0.5], [0.0, -3.0, -0.25, -4.0]])
    mask = torch.tensor([[0, 1, 0, 1], [0, 0, 1, 0]], dtype=torch.bool)
    tw = torch.ones_like(logp)
    loss, stats = sft_loss(logp, tw, mask)
    assert loss.item() == pytest.approx((1.0 + 0.5 + 0.25) / 3)
    assert stats["loss_tokens"] == 3
    changed = torch.where(mask, logp, torch.full_like(logp, -50.0))
    assert sft_loss(changed, tw, mask)[0].item() == pytest.approx(loss.item())
    assert sft_loss(logp, tw, mask, num_tokens=6)[0].item() == pytest.approx(loss.item() / 2)
