"""Incremental chat rendering: the append-only buffer equals a from-scratch render."""

import pytest

from policies.chat import ChatRenderer, ChatTemplateError, TokenBuffer

TOOLS = [{"type": "function", "function": {"name": "poi_search", "description": "Search places.",
                                          "parameters": {"type": "object", "properties": {"address": {"type": "string"}}}}}]


def _episode(renderer, turns):
    """Drive a conversation the way an env runner does: env messages are rendered, the
    'generated' assistant ids are encoded text plus eos (standing in for engine output)."""
    opening = [{"role": "system", "content": "You plan routes."}, {"role": "user", "content": "去东涌广场"}]
    messages, buf = renderer.begin(opening, TOOLS)
    for assistant_text, env_msgs in turns:
        buf.append_context(renderer.generation_prompt_ids(messages))
        gen = renderer.tokenizer.encode(assistant_text, add_special_tokens=False) + [renderer.eos_id]
        buf.append_generated(gen, [-0.5] * len(gen))
        buf.append_context(renderer.close_assistant_ids(gen))
        turn = renderer.decode_turn(gen)
        messages.append({"role": "assistant", "content": turn["content"], **({"tool_calls": turn["tool_calls"]} if turn["tool_calls"] else {})})
        if env_msgs:
            buf.append_context(renderer.messages_ids(messages, env_msgs))
            messages += env_msgs
    return messages, buf


def test_multi_turn_tool_conversation_has_no_drift(tokenizer):
    r = ChatRenderer(tokenizer)
    turns = [
        ('<tool_call>\n{"name": "poi_search", "arguments": {"address": "东涌广场"}}\n</tool_call>',
         [{"role": "tool", "name": "poi_search", "content": '{"pois": [{"name": "东涌文化广场", "location": "113.45,22.87"}]}'}]),
        ('No exact match, searching again.\n<tool_call>\n{"name": "poi_search", "arguments": {"address": "东涌广场", "region": "广州"}}\n</tool_call>',
         [{"role": "tool", "name": "poi_search", "content": "[]"}, {"role": "user", "content": "快点"}]),
        ("The route is ready.", []),
    ]
    messages, buf = _episode(r, turns)
    assert r.drift(messages, buf.ids) is None
    assert len(buf.ids) == len(buf.loss_mask) == len(buf.logprobs) == len(buf.token_weight)
    # only the generated assistant ids are trainable, and each turn ends with eos
    trained = [t for t, m in zip(buf.ids, buf.loss_mask) if m]
    assert trained.count(r.eos_id) == 3
    text = tokenizer.decode(trained)
    assert "东涌文化广场" not in text and "You plan routes" not in text and "poi_search" in text


def test_tools_go_into_the_system_prompt(tokenizer):
    r = ChatRenderer(tokenizer)
    messages, buf = r.begin([{"role": "user", "content": "hi"}], TOOLS)
    assert messages[0]["role"] == "system" and '"poi_search"' in messages[0]["content"]
    assert "<tool_call>" in tokenizer.decode(buf.ids)
    assert buf.loss_mask == [0] * len(buf.ids)


def test_drift_is_reported(tokenizer):
    r = ChatRenderer(tokenizer)
    messages, buf = _episode(r, [("hello", [])])
    bad = list(buf.ids)
    bad[5] = bad[5] + 1
    d = r.drift(messages, bad)
    assert d is not None and d["index"] == 5


def test_invalid_code_points_become_replacement_characters(tokenizer):
    # A lone surrogate would make the tokenizer raise; the renderer replaces it with U+FFFD.
    r = ChatRenderer(tokenizer)
    messages, _ = r.begin([{"role": "user", "content": "hi \ud800"}])
    ids = r.messages_ids(messages, [{"role": "tool", "name": "x", "content": "bad \udfff result"}])
    assert "bad \ufffd result" in tokenizer.decode(ids)


def test_truncated_generation_is_closed_with_eos(tokenizer):
    r = ChatRenderer(tokenizer)
    gen = tokenizer.encode("cut mid", add_special_tokens=False)
    assert r.close_assistant_ids(gen)[0] == r.eos_id
    assert r.close_assistant_ids(gen + [r.eos_id])[0] != r.eos_id


def test_no_template_and_no_fallback_is_an_error(tokenizer):
    import copy
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        ChatRenderer(tok, fallback_template=None)
    ChatRenderer(tok)  # ChatML fallback works


def test_token_buffer_rejects_mismatched_logprobs():
    with pytest.raises(ValueError):
        TokenBuffer().append_generated([1, 2], [0.1])
