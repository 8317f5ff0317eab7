"""One conformance suite for both engines (transformers and vLLM), on each tiny model.

Every test runs once per chat family's tiny model (``make_tiny_model(family=...)``): SmolLM2's
Llama, the Qwen3 architecture (per-head q/k norms) and a Llama with Llama 3's special tokens
added (an odd-sized vocabulary, eos among the added tokens), because each engine must load
every family the renderer supports. The tiny model's final norm is scaled
(``make_tiny_model(logit_scale=8)``) so the best and second-best greedy tokens are far apart
compared with fp32 rounding differences between engines; ``test_greedy_margin_is_decisive``
checks that margin on the very prompts used. Tolerance for log-probs across engines and between generate and score: 2e-3 (fp32).
"""

import gc

import pytest
import torch

from policies.engines import PromptTooLongError, SamplingParams, StaleWeightsError, make_engine, vllm_available
from tests.conftest import perturbed_model

TOL = 2e-3
PROMPTS = [[1, 520, 9531, 198, 57], [1, 2683, 359, 253, 5356, 5646, 2, 400, 401], [1, 17, 18, 19]]
KINDS = ["hf"] + (["vllm"] if vllm_available() else [])


def _make(kind, path):
    kw = {"dtype": "float32", "max_model_len": 512}
    return make_engine(kind, path, **kw)


@pytest.fixture(scope="module", params=["llama", "qwen3", "llama3"])
def model_path(request, tiny_family_models):
    return tiny_family_models(request.param)


@pytest.fixture(scope="module")
def engines(model_path):
    made = {k: _make(k, model_path) for k in KINDS}
    yield made
    made.clear()
    gc.collect()


def test_vllm_is_installed():
    # CI installs the CPU flavour; a missing vLLM would silently skip half this suite.
    assert vllm_available(), "vLLM is not importable: run scripts/setup.sh"


def test_greedy_margin_is_decisive(engines):
    hf = engines["hf"]
    for p in PROMPTS:
        gen = hf.generate([p], SamplingParams(max_tokens=8, temperature=0))[0]
        seq = p + gen.token_ids
        with torch.no_grad():
            logits = hf.model(torch.tensor([seq])).logits[0, len(p) - 1:-1]
        top2 = logits.topk(2, dim=-1).values
        assert float((top2[:, 0] - top2[:, 1]).min()) > 1e-3  # vs ~1e-6 fp32 engine differences


def test_greedy_generation_identical_across_engines(engines):
    sp = SamplingParams(max_tokens=16, temperature=0)
    outs = {k: e.generate(PROMPTS, sp) for k, e in engines.items()}
    ref = outs["hf"]
    for k, gens in outs.items():
        for a, b in zip(ref, gens):
            assert a.token_ids == b.token_ids, k
            assert len(b.logprobs) == len(b.token_ids)
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < TOL


@pytest.mark.parametrize("kind", KINDS)
def test_score_reproduces_generate_logprobs(engines, kind):
    eng = engines[kind]
    sp = SamplingParams(max_tokens=16, temperature=0.8, seed=7)
    gens = eng.generate(PROMPTS, sp)
    scored = eng.score(PROMPTS, [g.token_ids for g in gens], temperature=0.8)
    for g, s in zip(gens, scored):
        assert len(s) == len(g.token_ids)
        assert max(abs(x - y) for x, y in zip(g.logprobs, s)) < TOL
    # a different temperature gives different log-probs (the temperature is really applied)
    cold = eng.score(PROMPTS, [g.token_ids for g in gens], temperature=0.4)
    assert max(abs(x - y) for x, y in zip(cold[0], scored[0])) > 1e-2


def test_score_identical_across_engines(engines):
    completions = [[400, 401, 402, 2], [9, 10], [198]]
    res = {k: e.score(PROMPTS, completions, temperature=0.8) for k, e in engines.items()}
    for k, r in res.items():
        for a, b in zip(res["hf"], r):
            assert max(abs(x - y) for x, y in zip(a, b)) < TOL, k


@pytest.mark.parametrize("kind", KINDS)
def test_scores_with_a_cached_prefix_equal_cold_scores(engines, kind):
    # a long shared context (vLLM's prefix cache works in blocks), warmed by a generation,
    # two completions after it, and an exact repeat whose completion is cached too
    context = (PROMPTS[1] * 50)[:400]
    completions = [[400, 401, 402, 2, 9, 10, 11, 12], [9, 10, 198]]
    eng = engines[kind]
    eng.generate([context], SamplingParams(max_tokens=4, temperature=0))
    warm = eng.score([context, context], completions, temperature=0.8)
    repeat = eng.score([context], completions[:1], temperature=0.8)
    cold = engines["hf"].score([context, context], completions, temperature=0.8)
    for a, b in zip(warm + repeat, cold + cold[:1]):
        assert len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) < TOL


@pytest.mark.parametrize("kind", KINDS)
def test_batched_equals_one_by_one(engines, kind):
    eng = engines[kind]
    sp = SamplingParams(max_tokens=10, temperature=0)
    batched = eng.generate(PROMPTS, sp)
    single = [eng.generate([p], sp)[0] for p in PROMPTS]
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]
    comps = [g.token_ids for g in batched]
    sb = eng.score(PROMPTS, comps, 1.0)
    ss = [eng.score([p], [c], 1.0)[0] for p, c in zip(PROMPTS, comps)]
    for a, b in zip(sb, ss):
        assert max(abs(x - y) for x, y in zip(a, b)) < TOL


@pytest.mark.parametrize("kind", KINDS)
def test_seeded_sampling_is_reproducible(engines, kind):
    eng = engines[kind]
    sp = SamplingParams(max_tokens=12, temperature=1.0, seed=11)
    assert [g.token_ids for g in eng.generate(PROMPTS, sp)] == [g.token_ids for g in eng.generate(PROMPTS, sp)]


@pytest.mark.parametrize("kind", KINDS)
def test_prompt_longer_than_context_is_a_clear_error(engines, kind):
    with pytest.raises(PromptTooLongError, match="exceeds the context"):
        engines[kind].generate([[1] * 600], SamplingParams(max_tokens=4))
    with pytest.raises(PromptTooLongError):
        engines[kind].score([[1] * 500], [[2] * 100])


def assert_installed(eng, version: int, before: list, sp) -> list:
    """After ``update_weights(..., version)``: the engine and each new generation carry the
    version, greedy outputs changed from ``before``, and the same version again is refused.
    Returns the new generations."""
    assert eng.version == version
    after = eng.generate(PROMPTS, sp)
    assert all(g.version == version for g in after)
    assert [g.token_ids for g in after] != [g.token_ids for g in before]
    with pytest.raises(StaleWeightsError):
        eng.update_weights({}, version=version)
    return after


@pytest.mark.parametrize("kind", KINDS)
def test_update_weights_matches_fresh_engine(engines, kind, model_path, tmp_path):
    model = perturbed_model(model_path, tmp_path)

    eng = engines[kind]
    sp = SamplingParams(max_tokens=12, temperature=0)
    before = eng.generate(PROMPTS, sp)
    version = eng.version + 1
    eng.update_weights({n: p.detach().clone() for n, p in model.named_parameters()}, version=version)
    after = assert_installed(eng, version, before, sp)

    fresh = make_engine("hf", str(tmp_path), dtype="float32", max_model_len=512)
    ref = fresh.generate(PROMPTS, sp)
    assert [g.token_ids for g in after] == [g.token_ids for g in ref]
    comps = [g.token_ids for g in ref]
    for a, b in zip(eng.score(PROMPTS, comps, 0.8), fresh.score(PROMPTS, comps, 0.8)):
        assert max(abs(x - y) for x, y in zip(a, b)) < TOL


@pytest.mark.parametrize("kind", KINDS)
def test_json_schema_output_is_one_object_of_the_schema(engines, kind):
    # a random tiny model writes noise; under the schema it can only write a verdict
    import json

    import jsonschema

    from rti_actors.rti.roles import VALIDATOR_SCHEMA, VERIFIER_SCHEMA

    for schema in (VALIDATOR_SCHEMA, VERIFIER_SCHEMA):
        # the bounds on every string and list let the object close within this many tokens
        sp = SamplingParams(max_tokens=1000, temperature=1.0, json_schema=schema)
        for gen in engines[kind].generate(PROMPTS, sp, seeds=[1, 2, 3]):
            text = engines["hf"].tokenizer.decode(gen.token_ids, skip_special_tokens=True)
            assert gen.finish_reason == "stop", text
            # raw control characters inside strings pass the grammar; the verdict parser reads
            # JSON non-strictly for that reason
            jsonschema.validate(json.loads(text, strict=False), json.loads(schema))
