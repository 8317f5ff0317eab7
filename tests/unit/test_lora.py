"""LoRA training (rti_actors/lora.py) on tiny random-weight models: what trains, what is
published (merged weights under the base names), checkpoints, export, and the config checks."""

import json
import multiprocessing as mp
import re
import socket

import pytest
import torch

from rti_actors.config import RTIConfig
from rti_actors.learner import Learner
from rti_actors.lora import check_lora, lora_settings, merge_adapter
from rti_actors.losses import token_logprobs
from rti_actors.options import ConfigError
from tests.samples import make_batch

LORA = {"r": 4}
pytestmark = pytest.mark.usefixtures("isolated_process_group")

LR = 1e-2  # LoRA steps need a far larger lr than full fine-tuning to move measurably


def base_model(path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def frozen(learner) -> dict:
    return {n: p.detach().clone() for n, p in learner.module.named_parameters() if not p.requires_grad}


# ---- the settings ---------------------------------------------------------------------------
@pytest.mark.parametrize("lora, needle", [
    ({"r": 0}, "r must be an integer > 0"), ({"r": -2}, "r must be an integer > 0"),
    ({"r": True}, "r must be an integer > 0"), ({"r": 4.0}, "r must be an integer > 0"),
    ({"alpha": 0}, "alpha must be a number > 0"), ({"alpha": float("nan")}, "alpha must be a number > 0"),
    ({"dropout": 1.0}, r"dropout must be a number in \[0, 1\)"), ({"dropout": -0.1}, "dropout"),
    ({"target_modules": []}, "target_modules must be"), ({"target_modules": "q_proj"}, "target_modules must be"),
    ({"target_modules": ["q_proj", ""]}, "target_modules must be"), ({"rank": 8}, r"unknown key\(s\) \['rank'\]"),
    ([4], "must be None .* or a dict"),
])
def test_check_lora_names_each_bad_value(lora, needle):
    problems = check_lora(lora)
    assert len(problems) == 1 and re.search(needle, problems[0]), problems


def test_lora_defaults_and_zero3():
    assert check_lora(None) == check_lora({}) == check_lora({"target_modules": ("q_proj", "v_proj")}) == []
    assert lora_settings({}) == {"r": 8, "alpha": 16, "target_modules": "all-linear", "dropout": 0.0}
    assert lora_settings({"r": 4, "target_modules": ["v_proj", "q_proj"]})["target_modules"] == ["q_proj", "v_proj"]
    assert lora_settings(None) is None
    (problem,) = check_lora({"r": 8}, zero_stage=3)
    assert "zero_stage=3" in problem and "zero_stage 0, 1 or 2" in problem
    assert check_lora({"r": 8}, zero_stage=2) == []


def _config(**learners) -> RTIConfig:
    return RTIConfig().environment("Navigation-v0").policy(engine="hf").learners(**learners)


def test_validate_rejects_bad_lora_with_what_to_change():
    _config(lora={"r": 16, "alpha": 32, "target_modules": ["q_proj", "v_proj"], "dropout": 0.05}).validate()
    _config(lora={}).validate()
    with pytest.raises(ConfigError, match=r"learners\(lora=\{'r': 0\}\): r must be an integer > 0"):
        _config(lora={"r": 0}).validate()
    with pytest.raises(ConfigError, match=r"learners\(lora=\{'r': 8\}\): LoRA is not supported with zero_stage=3"):
        _config(lora={"r": 8}, zero_stage=3).validate()
    with pytest.raises(ConfigError, match=r"learners\(lora='yes'\): must be None"):
        _config(lora="yes").validate()


def test_build_check_names_targets_the_model_lacks(tiny_model_path):
    from rti_actors.build import _check_lora  # here: the broadcast test's receiver process imports this module

    _check_lora(_config(lora={"target_modules": ["q_proj", "down_proj"]}), tiny_model_path)
    _check_lora(_config(lora=None), tiny_model_path)
    with pytest.raises(ConfigError, match=r"target_modules \['qproj', 'lm_head'\] match no linear layer") as e:
        _check_lora(_config(lora={"target_modules": ["q_proj", "qproj", "lm_head"]}), tiny_model_path)
    # the message names what the model does have
    assert "['down_proj', 'gate_proj', 'k_proj', 'o_proj', 'q_proj', 'up_proj', 'v_proj']" in str(e.value)
    # the tiny model's k_proj is 64 x 128 (one key/value head of 64)
    with pytest.raises(ConfigError, match=r"r=65 is above the full rank 64 of the adapted layer .*k_proj"):
        _check_lora(_config(lora={"r": 65}), tiny_model_path)


def test_learner_refuses_bad_lora(tiny_model_path):
    with pytest.raises(ValueError, match="r must be an integer > 0"):
        Learner("/no/such/model", {"lora": {"r": 0}})  # before any model is read
    with pytest.raises(ValueError, match="zero_stage=3"):
        Learner("/no/such/model", {"lora": {}, "backend": "deepspeed", "zero_stage": 3})
    with pytest.raises(ValueError, match=r"target_modules \['qkv_proj'\] match no linear layer"):
        Learner(tiny_model_path, {"lora": {"target_modules": ["qkv_proj"]}, "backend": "torch"})


# ---- training and publishing --------------------------------------------------------------------
def test_init_publishes_the_base_weights_exactly(tiny_model_path):
    learner = Learner(tiny_model_path, {"backend": "torch", "lora": LORA})
    base = dict(base_model(tiny_model_path).named_parameters())
    weights = learner.get_weights()
    assert list(weights) == list(base)  # names and order, the tied lm_head left out as without LoRA
    assert all(torch.equal(weights[k], base[k].detach()) for k in base)  # B starts at 0: merged == base
    assert learner.weight_meta() == [(k, list(p.shape), str(p.dtype)) for k, p in base.items()]
    assert learner.join_gather() == len(base)


def test_only_adapters_train_and_a_grpo_step_moves_the_merged_weights(tiny_model_path):
    learner = Learner(tiny_model_path, {"lr": LR, "backend": "torch", "lora": LORA})
    trainable = {n for n, p in learner.module.named_parameters() if p.requires_grad}
    # 2 layers x 7 linear layers x (A, B)
    assert len(trainable) == 28 and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    by_id = {id(p): n for n, p in learner.module.named_parameters()}
    assert {by_id[id(p)] for g in learner.optimizer.param_groups for p in g["params"]} == trainable
    before, base = learner.get_weights(), frozen(learner)
    m = learner.update(make_batch(), objective="grpo")
    assert not m["skipped"] and m["grad_norm"] > 0
    assert {by_id[id(p)] for p in learner.optimizer.state} == trainable  # Adam moments for the adapters only
    assert all(torch.equal(p, base[n]) for n, p in frozen(learner).items())
    after = learner.get_weights()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    # every adapted matrix moved; embeddings and norms are not adapted
    assert moved == {k for k in before if k.endswith("_proj.weight")} and len(moved) == 14


def _receive_weights(port, meta, queue):
    from rti_actors.weight_sync import init_group, receive
    pg = init_group("127.0.0.1", port, 1, 2, "gloo", timeout_s=60)
    # numpy, not tensors: a queue passes tensors as shared-memory handles, which die with this process
    queue.put({n: t.numpy().copy() for n, t in receive(pg, meta, "cpu")})


def test_broadcast_sends_the_merged_weights(tiny_model_path):
    learner = Learner(tiny_model_path, {"lr": LR, "backend": "torch", "lora": LORA})
    learner.update(make_batch())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_receive_weights, args=(port, learner.weight_meta(), queue))
    proc.start()
    learner.init_weight_sync("127.0.0.1", port, 2, "gloo")
    assert learner.broadcast_weights() == len(learner.weight_meta())
    got = queue.get(timeout=120)
    proc.join(timeout=30)
    weights = learner.get_weights()
    assert list(got) == list(weights) and all(torch.equal(torch.from_numpy(got[k]), v) for k, v in weights.items())


def test_sft_loss_falls(tiny_model_path):
    learner = Learner(tiny_model_path, {"lr": 1e-6, "backend": "torch", "lora": LORA})
    batch = make_batch(seed=1)
    losses = [learner.update(batch, objective="sft", lr=LR)["loss"] for _ in range(6)]
    assert losses[-1] < 0.7 * losses[0], losses


def test_gradient_checkpointing_gives_the_adapters_the_same_update(tiny_model_path):
    plain = Learner(tiny_model_path, {"lr": LR, "backend": "torch", "lora": LORA})
    ckpt = Learner(tiny_model_path, {"lr": LR, "backend": "torch", "lora": LORA, "gradient_checkpointing": True})
    a, b = plain.update(make_batch()), ckpt.update(make_batch())
    assert b["grad_norm"] > 0 and b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)
    wa, wb = plain.get_weights(), ckpt.get_weights()
    assert all(torch.allclose(wa[k], wb[k], rtol=0, atol=1e-6) for k in wa)


def _sequence_logprobs(model, sample, temperature):
    ids = torch.tensor([sample["ids"]])
    with torch.no_grad():
        return token_logprobs(model(input_ids=ids).logits, ids, temperature)[0]


def test_export_hf_is_a_plain_merged_model(tiny_model_path, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    # fp32: the merged model's log-probs are compared exactly with the training forward's
    learner = Learner(tiny_model_path, {"lr": LR, "backend": "torch", "lora": LORA, "dtype": "float32"})
    for seed in range(2):
        learner.update(make_batch(seed))
    out = learner.export_hf(str(tmp_path / "hf"))
    assert not (tmp_path / "hf" / "adapter_config.json").exists()  # transformers must not see a peft folder
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert type(exported).__name__ == "LlamaForCausalLM"
    weights, named = learner.get_weights(), dict(exported.named_parameters())
    assert list(named) == list(weights) and all(torch.equal(named[k].detach(), v) for k, v in weights.items())
    ids = torch.tensor([make_batch(5, n=1)[0]["ids"]])
    with torch.no_grad():
        own = learner.module(input_ids=ids).logits
        assert torch.allclose(exported(input_ids=ids).logits, own, rtol=0, atol=1e-4)
        # the adapter kept beside it, on the base model, is the same policy
        adapted = PeftModel.from_pretrained(base_model(tiny_model_path), str(tmp_path / "hf" / "adapter"))
        assert torch.allclose(adapted(input_ids=ids).logits, own, rtol=0, atol=1e-4)
    # and merging it onto the base folder rebuilds the exported weights bit for bit
    rebuilt = merge_adapter(tiny_model_path, str(tmp_path / "hf" / "adapter"), str(tmp_path / "rebuilt"))
    rebuilt_named = dict(AutoModelForCausalLM.from_pretrained(rebuilt, dtype=torch.float32).named_parameters())
    assert list(rebuilt_named) == list(weights)
    assert all(torch.equal(rebuilt_named[k].detach(), v) for k, v in weights.items())
    # the learner's training forward is the merged model's: on its log-probs the ratio is 1
    sample = make_batch(6, n=1)[0]
    lp = _sequence_logprobs(exported, sample, learner.config["temperature"])
    m = learner.update([{**sample, "behaviour_logprobs": (lp * torch.tensor(sample["loss_mask"])).tolist(),
                         "advantage": 1.0}], lr=0.0)
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and m["clip_frac"] == 0.0
    # exporting left the adapters trainable
    assert sum(p.requires_grad for p in learner.module.parameters()) == 28


def test_qwen3_publishes_under_its_base_names(tiny_family_models):
    path = tiny_family_models("qwen3")
    learner = Learner(path, {"lr": LR, "backend": "torch", "lora": {"r": 2, "target_modules": ["q_proj", "v_proj"]}})
    base = dict(base_model(path).named_parameters())
    learner.update(make_batch())
    weights = learner.get_weights()
    assert list(weights) == list(base) and all(weights[k].shape == base[k].shape for k in base)
    moved = {k for k in base if not torch.equal(weights[k], base[k].detach())}
    assert moved == {k for k in base if k.endswith(("q_proj.weight", "v_proj.weight"))}


# ---- checkpoints --------------------------------------------------------------------------------
@pytest.mark.parametrize("backend, zero_stage", [
    ("torch", 0), ("deepspeed", 0), ("deepspeed", 2)])
def test_save_load_continues_exactly_and_holds_the_adapters_only(tiny_model_path, tmp_path, backend, zero_stage):
    config = {"lr": LR, "backend": backend, "zero_stage": zero_stage, "seed": 7, "lora": LORA}
    a = Learner(tiny_model_path, config)
    a.update(make_batch(seed=4))
    a.save(tmp_path / "ckpt")
    ma = a.update(make_batch(seed=5))
    b = Learner(tiny_model_path, config)
    assert b.load(tmp_path / "ckpt") == 1
    mb = b.update(make_batch(seed=5))
    assert mb["step"] == ma["step"] == 2 and mb["loss"] == ma["loss"] and mb["grad_norm"] == ma["grad_norm"]
    wa, wb = a.get_weights(), b.get_weights()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert json.loads((tmp_path / "ckpt" / "learner.json").read_text())["lora"] == lora_settings(LORA)
    if backend == "torch":
        saved = torch.load(tmp_path / "ckpt" / "torch_learner.pt", weights_only=True)["model"]
    else:
        saved = torch.load(next((tmp_path / "ckpt").rglob("*model_states.pt")), weights_only=False)["module"]
    # no frozen base matrix is in it (a tied lm_head may stay in DeepSpeed's: it filters by
    # named_parameters, which lists a tied weight under the embedding's name only)
    assert not any(".base_layer." in k for k in saved)
    assert sum(".lora_" in k for k in saved) == 28
    # and the adapters' optimiser state came back: a fresh learner's same step differs
    c = Learner(tiny_model_path, config)
    c.update(make_batch(seed=5))
    assert not all(torch.equal(wa[k], v) for k, v in c.get_weights().items())


def test_load_refuses_other_lora_settings(tiny_model_path, tmp_path):
    Learner(tiny_model_path, {"backend": "torch", "lora": LORA}).save(tmp_path / "lora")
    Learner(tiny_model_path, {"backend": "torch"}).save(tmp_path / "full")
    with pytest.raises(ValueError, match=r"saved with lora=\{'r': 4, .*this learner has lora=\{'r': 8"):
        Learner(tiny_model_path, {"backend": "torch", "lora": {"r": 8}}).load(tmp_path / "lora")
    with pytest.raises(ValueError, match="saved with lora=None"):
        Learner(tiny_model_path, {"backend": "torch", "lora": LORA}).load(tmp_path / "full")
    with pytest.raises(ValueError, match="this learner has lora=None"):
        Learner(tiny_model_path, {"backend": "torch"}).load(tmp_path / "lora")
    # the same settings spelt out in full are the same settings
    explicit = {"r": 4, "alpha": 8, "target_modules": "all-linear", "dropout": 0.0}
    assert Learner(tiny_model_path, {"backend": "torch", "lora": explicit}).load(tmp_path / "lora") == 0
