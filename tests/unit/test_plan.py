"""The dry-run planner: placement and per-device memory from a config and a model shape."""

import importlib.util
from pathlib import Path

import pytest
from transformers import AutoConfig

from rti_actors import RTIConfig
from rti_actors.plan import ModelShape, engine_gib, format_plan, learner_gib, placement_plan

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "configs" / "paper_qwen3_8b.py"


def _recipe():
    spec = importlib.util.spec_from_file_location("paper_qwen3_8b", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def qwen3_8b():
    return ModelShape.from_hf_config(AutoConfig.for_model("qwen3", **_recipe().QWEN3_8B))


def test_the_shape_counts_qwen3_8b_parameters(qwen3_8b):
    assert 8.1e9 < qwen3_8b.params < 8.3e9  # Qwen3-8B: 8.2 B parameters
    assert (qwen3_8b.layers, qwen3_8b.kv_heads, qwen3_8b.head_dim) == (36, 8, 128)


def test_model_states_follow_the_zero_stage(qwen3_8b):
    gib = qwen3_8b.params / 2**30
    full = learner_gib(qwen3_8b, 1, 0, 1024, False)["model_states"]
    assert full == pytest.approx(16 * gib)  # 16-bit weights and grads, fp32 master and two moments
    assert learner_gib(qwen3_8b, 4, 1, 1024, False)["model_states"] == pytest.approx((2 + 2 + 12 / 4) * gib)
    assert learner_gib(qwen3_8b, 4, 2, 1024, False)["model_states"] == pytest.approx((2 + 2 / 4 + 12 / 4) * gib)
    assert learner_gib(qwen3_8b, 4, 3, 1024, False)["model_states"] == pytest.approx(16 / 4 * gib)
    assert learner_gib(qwen3_8b, 4, 3, 1024, False, offload="optimizer")["model_states"] == pytest.approx(1 * gib)
    ckpt = learner_gib(qwen3_8b, 4, 3, 32768, True)["activations"]
    assert ckpt < learner_gib(qwen3_8b, 4, 3, 32768, False)["activations"] / 10


def test_kv_cache_splits_over_the_tensor_parallel_group(qwen3_8b):
    one, four = engine_gib(qwen3_8b, 1, 32768), engine_gib(qwen3_8b, 4, 32768)
    assert one["kv_cache"] == pytest.approx(2 * 36 * 8 * 128 * 2 * 32768 / 2**30)
    assert four["kv_cache"] == pytest.approx(one["kv_cache"] / 4) and four["weights"] == pytest.approx(one["weights"] / 4)


def test_one_unsharded_learner_for_an_8b_model_does_not_fit_and_says_what_to_change(qwen3_8b):
    cfg = (RTIConfig().policy(max_model_len=32768).env_runners(num_engines=1, num_gpus_per_engine=1)
           .learners(num_gpus_per_learner=1, zero_stage=0).training(micro_batch_tokens=32768))
    plan = placement_plan(cfg, qwen3_8b, gpus_per_node=8, gpu_gib=80)
    assert not plan["fits"] and any("ZeRO stage" in p for p in plan["problems"])
    assert "fits: NO" in format_plan(plan)


def test_too_many_gpus_and_a_tp_size_that_does_not_divide_the_heads_are_problems(qwen3_8b):
    cfg = RTIConfig().env_runners(num_engines=3, num_gpus_per_engine=4).learners(num_gpus_per_learner=1)
    plan = placement_plan(cfg, qwen3_8b, gpus_per_node=8)
    assert any("13 GPUs requested, 8 available" in p for p in plan["problems"])
    assert any("tensor_parallel_size=1 but num_gpus_per_engine=4" in p for p in plan["problems"])


def test_the_paper_recipe_validates_and_its_dry_run_fits_on_8_gpus():
    recipe = _recipe()
    recipe.config().validate(available_cpus=64, available_gpus=8)
    text = recipe.dry_run(recipe.MODEL)
    assert "1 engine(s) x TP 4 = 4 GPUs, learner 4 rank(s) (ZeRO-3) = 4 GPUs; 8 of 8 GPUs" in text
    assert "fits: yes" in text
