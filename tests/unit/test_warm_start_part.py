"""A kept warm-start part: its record, read from a hand-made run directory, and its bf16
adapter, which rebuilds the same policy folder on every machine."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from warm_start_part import keep_adapter, part_record  # noqa: E402


def test_part_record_sums_the_steps_and_every_calls_seconds(tmp_path):
    run = tmp_path / "stage1b"
    run.mkdir()
    steps = [{"kind": "sft", "step": k, "loss": 2.0 - k / 2, "num_tokens": 9000 + k} for k in (1, 2, 3)]
    rows = [{"kind": "eval", "step": 0}, *steps]  # only the SFT steps count
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "config.json").write_text(json.dumps({"learners": {"lora": {"r": 8}}, "sft": {"lr": 2e-4},
                                                 "policy": {"model": "runs/x/stage1a-policy"}}))
    seconds = tmp_path / "stage1b.seconds"
    seconds.write_text("1200\n2400\n")  # a call cut short, then the resumed one
    r = part_record(run, seconds, "stage1b 32 32 4 2")
    assert r["demonstrations"] == {"first": 32, "count": 32, "max_waypoints": 4}
    assert (r["steps"], r["trained_tokens"], r["wall_seconds"]) == (3, 27006, 3600)
    assert (r["loss_first"], r["loss_last"]) == (1.5, 0.5)
    assert r["start_policy"] == "stage1a-policy" and r["learner"] == {"lora": {"r": 8}}


def test_a_kept_adapter_rebuilds_one_policy_close_to_the_trained_one(tiny_model_path, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rti_actors.lora import merge_adapter

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)  # a trained adapter's delta is not 0
    model.save_pretrained(tmp_path / "trained")
    keep_adapter(tmp_path / "trained", tmp_path / "kept")

    from safetensors.torch import load_file
    assert {v.dtype for v in load_file(tmp_path / "kept" / "adapter_model.safetensors").values()} == {torch.bfloat16}

    def weights(folder):
        return {k: v.detach() for k, v in AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).named_parameters()}

    a = weights(merge_adapter(tiny_model_path, str(tmp_path / "kept"), str(tmp_path / "a")))
    b = weights(merge_adapter(tiny_model_path, str(tmp_path / "kept"), str(tmp_path / "b")))
    exact = weights(merge_adapter(tiny_model_path, str(tmp_path / "trained"), str(tmp_path / "exact")))
    base = weights(tiny_model_path)
    assert all(torch.equal(a[k], b[k]) for k in a)  # the same bits from the same kept adapter
    moved = [k for k in a if not torch.equal(exact[k], base[k])]
    assert moved and all(torch.allclose(a[k], exact[k], rtol=0, atol=1e-3) for k in a)  # bf16 rounding only


def _checkpoint(run, name, saved_at, complete=True):
    from rti_actors.checkpoints import MARKER
    path = run / "checkpoints" / name
    path.mkdir(parents=True)
    (path / "adapter.pt").write_bytes(name.encode())
    if complete:
        (path / MARKER).write_text(json.dumps({"saved_at": saved_at}))


def test_progress_of_a_part_cut_short_is_kept_and_restored_on_another_machine(tmp_path):
    from warm_start_part import keep_part, keep_progress, restore_progress

    run, seconds, kept = tmp_path / "a" / "stage1c", tmp_path / "a" / "stage1c.seconds", tmp_path / "kept" / "stage1c"
    _checkpoint(run, "iter_000000_sft_000004", saved_at=1000)
    _checkpoint(run, "iter_000000_sft_000008", saved_at=1900)
    _checkpoint(run, "iter_000000_sft_000012", saved_at=2800, complete=False)  # killed mid-save
    (run / "metrics.jsonl").write_text('{"kind": "sft", "step": 8, "loss": 0.3, "num_tokens": 9000}\n')
    seconds.write_text("500\n")  # an earlier call that finished
    seconds.with_suffix(".started").write_text("1000")  # the call that was killed
    assert keep_progress(run, seconds, kept) == "iter_000000_sft_000008"
    assert seconds.read_text().split() == ["500", "900"]  # counted up to the kept checkpoint
    assert keep_progress(run, seconds, kept) == "iter_000000_sft_000008"  # again: counted once
    assert seconds.read_text().split() == ["500", "900"]

    fresh, fresh_seconds = tmp_path / "b" / "stage1c", tmp_path / "b" / "stage1c.seconds"
    assert restore_progress(fresh, fresh_seconds, kept) == "iter_000000_sft_000008"
    assert [p.name for p in (fresh / "checkpoints").iterdir()] == ["iter_000000_sft_000008"]
    assert (fresh / "checkpoints" / "iter_000000_sft_000008" / "adapter.pt").read_bytes() == b"iter_000000_sft_000008"
    assert (fresh / "metrics.jsonl").read_text() == (run / "metrics.jsonl").read_text()
    assert fresh_seconds.read_text().split() == ["500", "900"]
    assert restore_progress(tmp_path / "c" / "stage1d", tmp_path / "c" / "x.seconds", tmp_path / "kept" / "stage1d") is None

    # the finished part: its adapter and record kept, its progress dropped
    import torch
    from safetensors.torch import save_file
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    save_file({"w": torch.ones(2)}, adapter / "adapter_model.safetensors")
    (adapter / "adapter_config.json").write_text("{}")
    (fresh / "config.json").write_text(json.dumps({"learners": {}, "sft": {}, "policy": {"model": "p/stage1b-policy"}}))
    keep_part(fresh, fresh_seconds, "stage1c 48 24 4 2", adapter, kept)
    assert not (kept / "progress").exists() and json.loads((kept / "part.json").read_text())["wall_seconds"] == 1400
