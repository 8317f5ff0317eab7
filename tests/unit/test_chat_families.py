"""Per-family training templates: append-only over a multi-turn tool episode with thinking,
tool results wrapped once, the family picked from config and tokenizer, and the probe that
refuses a template which rewrites history."""

import json

import pytest
from transformers import AutoTokenizer

from policies.chat import CHAT_FAMILIES, ChatRenderer, ChatTemplateError
from rti_actors.config import RTIConfig
from rti_actors.options import ConfigError

TOOLS = [{"type": "function", "function": {"name": "poi_search", "description": "Search places.",
                                          "parameters": {"type": "object", "properties": {"address": {"type": "string"}}}}}]
RESULT = '{"pois": [{"name": "东涌文化广场", "location": "113.45,22.87"}]}'


def _turns(syntax):
    """(assistant text as the policy would sample it, env messages) in a tool-call syntax."""
    def call(address, extra=None):
        args = {"address": address, **(extra or {})}
        if syntax == "llama3":
            return json.dumps({"name": "poi_search", "parameters": args}, ensure_ascii=False)
        return "<tool_call>\n" + json.dumps({"name": "poi_search", "arguments": args}, ensure_ascii=False) + "\n</tool_call>"

    return [
        ("<think>\nI should search for the square first.\n</think>\n\n" + call("东涌广场"),
         [{"role": "tool", "name": "poi_search", "content": RESULT}]),
        ("<think>\nOne result; check a second spelling too.\n</think>\n\nNo exact match, searching again.\n"
         + call("东涌广场", {"region": "广州"}) + "\n" + call("东涌"),
         [{"role": "tool", "name": "poi_search", "content": "[]"},
          {"role": "tool", "name": "poi_search", "content": RESULT}, {"role": "user", "content": "快点"}]),
        ("<think>\n\n</think>\n\nThe route is ready.", [{"role": "user", "content": "Thanks. And back?"}]),
        ("The same way back.", []),
    ]


def _episode(renderer, turns):
    """Drive a conversation the way an env runner does (generated ids = encoded text + eos)."""
    opening = [{"role": "system", "content": "You plan routes."}, {"role": "user", "content": "去东涌广场"}]
    messages, buf = renderer.begin(opening, TOOLS)
    spans = []
    for text, env_msgs in turns:
        buf.append_context(renderer.generation_prompt_ids(messages))
        gen = renderer.tokenizer.encode(text, add_special_tokens=False) + [renderer.eos_id]
        spans.append((len(buf), gen))
        buf.append_generated(gen, [-0.5] * len(gen))
        buf.append_context(renderer.close_assistant_ids(gen))
        messages.append(renderer.decode_text(renderer.decode_turn(gen)["text"]))
        if env_msgs:
            buf.append_context(renderer.messages_ids(messages, env_msgs))
            messages += env_msgs
    return messages, buf, spans


@pytest.fixture(scope="module")
def tokenizers(tiny_family_models):
    return {f: AutoTokenizer.from_pretrained(tiny_family_models(f)) for f in ("llama", "qwen3", "llama3")}


@pytest.mark.parametrize("model,template,family", [
    ("qwen3", "auto", "qwen3"), ("llama3", "auto", "llama3"), ("llama", "chatml", "chatml"),
    ("llama", "auto", "tokenizer"), ("qwen3", "chatml", "chatml")])
def test_multi_turn_tool_episode_with_thinking_has_no_drift(tokenizers, model, template, family):
    r = ChatRenderer(tokenizers[model], chat_template=template)
    assert r.family.name == family
    syntax = "llama3" if family == "llama3" else "hermes"
    messages, buf, spans = _episode(r, _turns(syntax))
    assert r.drift(messages, buf.ids) is None
    # the generated ids, thinking included, are in the buffer exactly as sampled, and trained
    for start, gen in spans:
        assert buf.ids[start:start + len(gen)] == gen and buf.loss_mask[start:start + len(gen)] == [1] * len(gen)
    assert sum(buf.loss_mask) == sum(len(g) for _, g in spans)
    assert messages[2]["reasoning_content"] == "I should search for the square first."
    assert [c["arguments"]["address"] for c in messages[2]["tool_calls"]] == ["东涌广场"]
    assert len(messages[4]["tool_calls"]) == 2 and messages[4]["content"] == "No exact match, searching again."
    text = r.tokenizer.decode(buf.ids)
    assert text.count("<think>") == 3 and "I should search for the square first." in text


@pytest.mark.parametrize("model", ["qwen3", "llama3", "llama"])
def test_tool_results_are_wrapped_once(tokenizers, model):
    r = ChatRenderer(tokenizers[model])
    messages, buf, _ = _episode(r, _turns("llama3" if model == "llama3" else "hermes"))
    text = r.render_text(messages)
    tools = sum(m["role"] == "tool" for m in messages)
    if model == "llama3":
        assert text.count("<|start_header_id|>ipython<|end_header_id|>\n\n" + RESULT + "<|eot_id|>") == 2
        assert "<tool_response>" not in text
    else:
        assert text.count("<tool_response>") == tools == 3
        assert "<tool_response>\n<tool_response>" not in text


def test_a_template_with_its_own_tool_role_wraps_tool_results_itself(tokenizers):
    own = ("{% for m in messages %}{% if m['role'] == 'tool' %}{{ '<|im_start|>user\n<tool_response>\n' + m['content'] "
           "+ '\n</tool_response><|im_end|>\n' }}{% else %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] "
           "+ '<|im_end|>\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    r = ChatRenderer(tokenizers["qwen3"], chat_template=own)
    assert r.family.name == "custom" and r.tool_role == "tool"
    messages, buf, _ = _episode(r, _turns("hermes"))
    assert r.drift(messages, buf.ids) is None
    assert r.render_text(messages).count("<tool_response>") == 3


def test_family_is_chosen_from_model_type_and_tokens(tokenizers):
    qwen, llama3, smol = tokenizers["qwen3"], tokenizers["llama3"], tokenizers["llama"]
    for model_type in ("qwen3", "qwen3_moe", "qwen3_5", "qwen3_5_moe"):
        assert ChatRenderer(qwen, model_type=model_type).family.name == "qwen3"
    assert ChatRenderer(llama3, model_type="llama").family.name == "llama3"
    # a Llama with SmolLM2's ChatML tokenizer is no Llama 3: its own template, as before
    assert ChatRenderer(smol, model_type="llama").family.name == "tokenizer"
    # without a known model_type the tokens decide
    assert ChatRenderer(qwen, model_type="qwen2").family.name == "qwen3"
    assert ChatRenderer(llama3, model_type="mystery").family.name == "llama3"


def test_explicit_family_needs_its_tokens_and_unknown_names_are_refused(tokenizers):
    with pytest.raises(ChatTemplateError, match=r"needs the tokens \['<\|begin_of_text\|>'"):
        ChatRenderer(tokenizers["llama"], chat_template="llama3")
    with pytest.raises(ChatTemplateError, match="'chatml', 'qwen3', 'llama3'"):
        ChatRenderer(tokenizers["qwen3"], chat_template="qwen")


# Qwen3's serving behaviour, written out: earlier assistant turns lose their <think> block
# once a later user turn (tool results are user turns) follows them.
DROPS_THINKING = (
    "{% set ns = namespace(last=-1) %}{% for m in messages %}{% if m['role'] == 'user' %}{% set ns.last = loop.index0 %}"
    "{% endif %}{% endfor %}{% for m in messages %}{% set content = m['content'] %}"
    "{% if m['role'] == 'assistant' and loop.index0 < ns.last and '</think>' in content %}"
    "{% set content = content.split('</think>')[-1].lstrip('\n') %}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + content + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_probe_refuses_a_template_that_drops_earlier_thinking(tokenizers):
    with pytest.raises(ChatTemplateError, match="not append-only") as e:
        ChatRenderer(tokenizers["qwen3"], chat_template=DROPS_THINKING)
    assert "policy(chat_template='qwen3')" in str(e.value) and "policy(chat_template=...)" in str(e.value)


CHATML_LIKE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def test_build_turns_the_probe_error_into_a_config_error(tiny_family_models):
    from rti_actors.build import _renderer

    policy = {"model": "tiny-qwen3", "fallback_chat_template": "chatml", "chat_template": DROPS_THINKING}
    with pytest.raises(ConfigError, match=r"tiny-qwen3.*not append-only.*chat_template='qwen3'"):
        _renderer(tiny_family_models("qwen3"), policy)
    assert _renderer(tiny_family_models("qwen3"), {**policy, "chat_template": "auto"}).family.name == "qwen3"


@pytest.mark.parametrize("value,ok", [("auto", True), ("qwen3", True), ("llama3", True), ("chatml", True),
                                      (CHATML_LIKE, True), ("qwen", False), ("", False), (None, False)])
def test_chat_template_option_is_validated(value, ok):
    cfg = RTIConfig().environment("Navigation-v0").policy(chat_template=value)
    if ok:
        cfg.validate(available_cpus=2)
    else:
        with pytest.raises(ConfigError, match=r"chat_template=.*'chatml', 'qwen3', 'llama3'"):
            cfg.validate(available_cpus=2)
    assert set(CHAT_FAMILIES) == {"chatml", "qwen3", "llama3"}
