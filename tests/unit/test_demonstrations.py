"""Demonstration records: recording scripted episodes, the JSONL format, and tokenisation
into learner samples (only the assistant's tokens carry loss)."""

import json

import pytest
import torch

from envs import format_assistant_turn, make_env
from policies.chat import ChatRenderer
from rti_actors import demonstrations
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


GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}], "reward": 1.0}


def _line(**changes) -> str:
    return json.dumps({**GOOD, **changes})


def _with_message(**fields) -> str:
    return _line(messages=[GOOD["messages"][0], {"role": "assistant", "content": "ok", **fields}])


# (what line 3 of the file holds, after a good line and a blank one; what the error must say)
BAD_LINES = {
    "string reward": (_line(reward="1.0"), r"reward='1.0' must be a finite number"),
    "NaN reward": (_line(reward=1.0).replace("1.0", "NaN"), r"reward=nan must be a finite number"),
    "infinite reward": (_line(reward=1.0).replace("1.0", "-Infinity"), r"reward=-inf must be a finite number"),
    "boolean reward": (_line(reward=True), r"reward=True must be a finite number"),
    "tool_calls not a list": (_with_message(tool_calls={"name": "f", "arguments": {}}),
                              r"messages\[1\]: 'tool_calls' must be a list, got dict"),
    "tool call without a name": (_with_message(tool_calls=[{"arguments": {}}]),
                                 r"messages\[1\]: tool_calls\[0\] must be \{\"name\""),
    "tool call arguments as a list": (_with_message(tool_calls=[{"name": "f", "arguments": [1]}]),
                                      r"tool_calls\[0\] must be"),
    "content a number": (_with_message(content=42), r"messages\[1\]: 'content' must be a string \(or null\), got int"),
    "content a list of parts": (_with_message(content=[{"type": "text", "text": "ok"}]),
                                r"'content' must be a string \(or null\), got list"),
    "a list, not an object": ("[1, 2]", r"a demonstration is a JSON object with a 'messages' list, got list"),
    "a string, not an object": ('"hello"', r"a JSON object .* got str"),
    "not JSON": ("{'messages': []}", r"not valid JSON .*each line must be one JSON object"),
    "negative num_context_messages": (_line(num_context_messages=-1), r"num_context_messages=-1 must be null .* "
                                      r"or an integer from 1 to 1"),
    "fractional num_context_messages": (_line(num_context_messages=1.5), r"num_context_messages=1.5 must be null"),
    "num_context_messages past the end": (_line(num_context_messages=2), r"num_context_messages=2 must be null"),
    "tools not a list": (_line(tools={"name": "f"}), r"'tools' must be a list \(or null\), got dict"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_bad_line_names_the_file_and_line(case, tmp_path):
    line, needle = BAD_LINES[case]
    path = tmp_path / "demos.jsonl"
    path.write_text(_line() + "\n\n" + line + "\n" + _line() + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"demos\.jsonl:3: .*{needle}"):
        read_jsonl(path)


def test_invalid_utf8_names_the_file_and_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes((_line() + "\n").encode() + json.dumps({**GOOD, "task_id": "caf\u00e9"}, ensure_ascii=False).encode("latin-1") + b"\n")
    with pytest.raises(ValueError, match=r"latin1\.jsonl:2: not valid UTF-8 .*save the file as UTF-8"):
        read_jsonl(path)
    path.write_bytes(b"\xef\xbb\xbf" + (_line() + "\r\n").encode())  # a BOM and Windows line ends are fine
    assert read_jsonl(path) == [GOOD]


def test_bad_records_given_as_a_list_are_named_too():
    with pytest.raises(ValueError, match=r"demonstration 1: reward=nan"):
        demonstrations.reaching([GOOD, {**GOOD, "reward": float("nan")}], 1.0)
    with pytest.raises(ValueError, match=r"record: num_context_messages=-1 must be null"):
        check_record({**GOOD, "num_context_messages": -1})
    assert demonstrations.reaching([GOOD, {**GOOD, "reward": None}], 1.0) == [GOOD]  # no reward counts as 0


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


def test_fuzzed_files_load_or_name_the_file_and_line(tmp_path):
    # seeded: random bytes, random JSON values, valid records with one field mutated, deep
    # nesting and huge numbers; every file either loads or fails with its name and a line
    import random

    rng = random.Random(7)
    junk = [None, True, -1, 1e309, float("nan"), "x", [], {}, [1, "a"], {"role": 3}, "\ud800", 10**50]
    mutations = ["reward", "messages", "tool_calls", "content", "role", "num_context_messages", "tools"]

    def line() -> bytes:
        kind = rng.randrange(5)
        if kind == 0:
            return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        if kind == 1:
            return json.dumps(rng.choice(junk)).encode()
        if kind == 2:
            return (b"[" * rng.randrange(500, 3000)) + b"1" + (b"]" * rng.randrange(500, 3000))
        if kind == 3:
            return b'{"reward": ' + b"9" * rng.randrange(4000, 6000) + b', "messages": []}'
        record = json.loads(json.dumps(GOOD))
        key = rng.choice(mutations)
        if key in ("reward", "messages", "tools", "num_context_messages"):
            record[key] = rng.choice(junk)
        else:
            record["messages"][1][key] = rng.choice(junk)
        return json.dumps(record).encode(errors="surrogatepass")

    cases = 0
    for i in range(300):
        lines = [json.dumps(GOOD).encode()] * rng.randrange(3) + [line()]
        path = tmp_path / f"f{i}.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        try:
            read_jsonl(path)
        except ValueError as e:
            assert f"{path}:{len(lines)}" in str(e), str(e)[:300]
        cases += 1
    assert cases == 300
