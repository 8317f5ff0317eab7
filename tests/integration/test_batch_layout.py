"""Shared prefixes and packed rows change how the learner lays a batch out, never the result.

Each layout takes one step from the same weights on the same group-shaped batch (samples
that open with a common prompt, right-padded rows, an RTI continuation whose own opening is
longer than the group's, a sample with no shared opening), and the loss, the gradient norm
and the updated weights must equal the padded, unshared step within float tolerance.
"""

import random
from pathlib import Path

import pytest
import torch

from rti_actors.batch_layout import Segment, plan, shared_prefixes
from rti_actors.learner import Learner

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("isolated_process_group")]

LR = 1e-3


def group_batch(seed: int = 0, prompt: int = 48, members: int = 5) -> list[dict]:
    """A group: ``members`` samples sharing a ``prompt``-token opening (turns of assistant
    tokens with loss and tool output without), one of them an RTI-style continuation that
    repeats a sibling's first turn; plus one unrelated sample."""
    rng = random.Random(seed)
    opening = [rng.randrange(200, 5000) for _ in range(prompt)]

    def turns(n_turns: int) -> tuple[list[int], list[int]]:
        ids, mask = [], []
        for _ in range(n_turns):
            a, o = rng.randrange(3, 12), rng.randrange(2, 9)
            ids += [rng.randrange(200, 5000) for _ in range(a + o)]
            mask += [1] * a + [0] * o
        return ids, mask

    seqs = []
    for i in range(members):
        ids, mask = turns(rng.randrange(1, 4))
        seqs.append((opening + ids, [0] * prompt + mask))
    first_ids, first_mask = seqs[0]
    more_ids, more_mask = turns(2)  # continues the first sample's whole trajectory
    seqs.append((first_ids + more_ids, first_mask + more_mask))
    other_ids, other_mask = turns(3)
    seqs.append(([7] * 10 + other_ids, [0] * 10 + other_mask))
    samples = []
    for i, (ids, mask) in enumerate(seqs):
        samples.append({"ids": ids, "loss_mask": mask,
                        "behaviour_logprobs": [-rng.uniform(5, 12) if m else 0.0 for m in mask],
                        "token_weight": [rng.uniform(0.8, 1.6) if m else 1.0 for m in mask],
                        "advantage": rng.uniform(-1.5, 1.5), "policy_version": 0})
    return samples


def test_plan_shares_the_longest_opening_without_loss_and_packs_within_the_budget():
    samples = group_batch()
    ids, masks = [s["ids"] for s in samples], [s["loss_mask"] for s in samples]
    clusters = shared_prefixes(ids, masks, min_shared=16)
    shared = [c for c in clusters if c[0]]
    assert len(shared) == 1 and shared[0][1] == [0, 1, 2, 3, 4, 5]
    # the opening is 48 prompt tokens; the position before the first loss token stays out
    assert shared[0][0] == 47
    assert [c for c in clusters if not c[0]] == [(0, [6])]
    layout = plan(ids, masks, budget=64, pack=True, share=True, min_shared=16)
    seen = sorted(s.sample for c in layout.clusters for r in c.rows for line in r.lines for s in line)
    assert seen == list(range(len(samples)))
    for c in layout.clusters:
        for r in c.rows:
            assert len(r.lines) == 1
            assert r.tokens <= 64 or len(r.lines[0]) == 1  # a longer segment goes alone
            for s in r.lines[0]:
                assert s.start == len(c.prefix) and s.length == len(ids[s.sample]) - s.start
    stats = plan(ids, masks, budget=64, pack=True, share=True, min_shared=16).stats([len(i) for i in ids])
    assert stats["padding_frac"] == 0.0 and stats["prefix_clusters"] == 1 and stats["unshared_samples"] == 1
    assert stats["prefix_tokens_saved"] == 47 * 5
    padded = plan(ids, masks, budget=400)
    assert padded.stats([len(i) for i in ids])["padding_frac"] > 0
    assert all(len(r.lines) * r.width <= 400 for c in padded.clusters for r in c.rows)


def test_no_common_opening_runs_unshared():
    ids = [[1, 2, 3] + list(range(10, 60)), [4, 5, 6] + list(range(10, 60))]
    masks = [[0] * 40 + [1] * 13] * 2
    layout = plan(ids, masks, budget=1000, share=True, min_shared=8)
    assert [c.prefix for c in layout.clusters] == [[]]
    assert layout.stats([53, 53])["unshared_samples"] == 2


LAYOUTS = {"padded": {"pack_sequences": False, "share_prefix": False},
           "packed": {"pack_sequences": True, "share_prefix": False},
           "shared": {"pack_sequences": False, "share_prefix": True},
           "shared+packed": {"pack_sequences": True, "share_prefix": True},
           "auto": {}}  # the default: this group's opening is worth sharing, the unrelated sample is padded


def one_step(path: str, samples: list[dict], algorithm: str, layout: dict, backend: str = "torch",
             objective: str | None = None, **extra) -> tuple[dict, dict]:
    learner = Learner(path, {"dtype": "float32", "backend": backend, "lr": LR, "micro_batch_tokens": 200, "algorithm": algorithm,
                             "seed": 0, **layout, **extra})
    metrics = learner.update(samples, objective=objective)
    return metrics, {k: v.clone() for k, v in learner.get_weights().items()}


def assert_same_step(a: tuple[dict, dict], b: tuple[dict, dict], rtol: float = 1e-4) -> None:
    (ma, wa), (mb, wb) = a, b
    assert ma["loss"] == pytest.approx(mb["loss"], rel=rtol, abs=1e-6)
    assert ma["grad_norm"] == pytest.approx(mb["grad_norm"], rel=rtol)
    assert ma["num_tokens"] == mb["num_tokens"]
    # Adam's first step moves a weight by lr * g / (|g| + eps), so where a gradient entry is
    # within a few eps of 0, float noise in the sum order moves a sizeable part of a step
    # (a few percent has been seen under ZeRO-2): the worst entry is held to a quarter of a step, and a
    # layout that is really wrong shows in the mean, held to 0.1 % of a step
    diffs = torch.cat([(wa[k] - wb[k]).abs().flatten() for k in wa])
    assert float(diffs.max()) < 0.25 * LR and float(diffs.mean()) < 1e-3 * LR, (float(diffs.max()), float(diffs.mean()))


@pytest.mark.parametrize("algorithm", ["grpo", "gspo"])
@pytest.mark.parametrize("layout", ["packed", "shared", "shared+packed", "auto"])
def test_layouts_give_the_padded_step(tiny_model_path, algorithm, layout):
    samples = group_batch()
    base = one_step(tiny_model_path, samples, algorithm, LAYOUTS["padded"])
    other = one_step(tiny_model_path, samples, algorithm, LAYOUTS[layout])
    assert_same_step(base, other)
    m = other[0]
    if "shared" in layout or layout == "auto":
        assert m["prefix_clusters"] == 1 and m["unshared_samples"] == 1
    if "packed" in layout:
        assert m["padding_frac"] == 0.0
    assert base[0]["padding_frac"] > 0


def test_shared_prefix_is_exact_for_sft_under_deepspeed_with_checkpointing(tiny_family_models):
    path = tiny_family_models("qwen3")
    samples = group_batch(seed=3)
    extra = {"gradient_checkpointing": True}
    base = one_step(path, samples, "grpo", LAYOUTS["padded"], backend="deepspeed", objective="sft", **extra)
    other = one_step(path, samples, "grpo", LAYOUTS["shared+packed"], backend="deepspeed", objective="sft", **extra)
    assert_same_step(base, other)
    assert other[0]["prefix_clusters"] == 1


def test_segment_attention_matches_transformers_sdpa(tiny_model_path):
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([[5, 17, 300, 41, 9, 77, 1000, 12]])
    ref = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation="sdpa").eval()
    ours = Learner(tiny_model_path, {"dtype": "float32", "backend": "torch"}).module.eval()
    with torch.no_grad():
        a = ref(input_ids=ids).logits
        b = ours(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-5)
    assert Segment(0, 0, 8).length == 8


def test_two_groups_with_a_common_system_prompt_stay_two_clusters():
    system = list(range(100, 160))
    a = [system + [1] * 20 + [9] * 10 for _ in range(3)]
    b = [system + [2] * 30 + [9] * 10 for _ in range(2)]
    masks = [[0] * 80 + [1] * 10] * 3 + [[0] * 90 + [1] * 10] * 2
    clusters = shared_prefixes(a + b, masks, min_shared=16)
    assert clusters == [(79, [0, 1, 2]), (89, [3, 4])]


def test_sliding_window_models_keep_transformers_attention_and_refuse_the_layouts(tmp_path, tiny_model_path):
    from transformers import AutoConfig, MistralConfig, Qwen3Config

    from rti_actors.batch_layout import has_sliding_window
    assert has_sliding_window(MistralConfig(sliding_window=64))
    assert not has_sliding_window(Qwen3Config(use_sliding_window=False, sliding_window=64))
    assert not has_sliding_window(AutoConfig.from_pretrained(tiny_model_path))
    config = AutoConfig.from_pretrained(tiny_model_path)
    config.sliding_window, config.use_sliding_window = 16, True
    config.save_pretrained(tmp_path)
    for f in Path(tiny_model_path).iterdir():
        if f.name != "config.json":
            (tmp_path / f.name).symlink_to(f)
    learner = Learner(str(tmp_path), {"backend": "torch"})  # the layouts' "auto" defaults step aside
    assert learner.module.config._attn_implementation == "sdpa"
    assert learner.layout == {"pack": False, "share": False}
    with pytest.raises(ValueError, match="sliding window"):
        Learner(str(tmp_path), {"backend": "torch", "share_prefix": True})


@pytest.mark.parametrize("zero_stage,layout", [(2, "shared+packed"), (3, "packed")])
def test_layouts_are_exact_under_zero(tiny_model_path, zero_stage, layout):
    # ZeRO-2 partitions the gradients; the prefix's backward comes after the rows' own
    samples = group_batch(seed=5)
    base = one_step(tiny_model_path, samples, "grpo", LAYOUTS["padded"], backend="deepspeed", zero_stage=zero_stage)
    other = one_step(tiny_model_path, samples, "grpo", LAYOUTS[layout], backend="deepspeed", zero_stage=zero_stage)
    assert_same_step(base, other)


def test_shared_prefix_is_refused_under_zero3(tiny_model_path):
    with pytest.raises(ValueError, match="zero_stage"):
        Learner(tiny_model_path, {"dtype": "float32", "backend": "deepspeed", "zero_stage": 3, "share_prefix": True})
    learner = Learner(tiny_model_path, {"dtype": "float32", "backend": "deepspeed", "zero_stage": 3})
    assert learner.layout == {"pack": "auto", "share": False}  # "auto" shares nothing under ZeRO-3
