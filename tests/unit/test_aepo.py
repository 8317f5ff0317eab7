"""AEPO: the entropy-balanced loss on hand-made tensors, its options, and the entropy-balanced
rollout's planning (budget, shared prefixes, where a branch may be taken) with fake players."""

import math
import random
from collections import Counter

import pytest
import torch

from rti_actors.aepo import AepoSettings, EntropyBalancedRollout, Path, decide, global_rollouts, step_entropies
from rti_actors.config import RTIConfig
from rti_actors.losses import aepo_loss, finish_stats, grpo_loss, masked_token_logprobs, standardised_entropy
from rti_actors.options import ConfigError, learner_settings
from rti_actors.trajectory import EpisodeSpec, Trajectory

EPS = 0.2


def _grad(loss_fn, logp0):
    logp = logp0.clone().requires_grad_(True)
    loss, stats = loss_fn(logp)
    loss.backward()
    return loss.detach(), logp.grad, stats


def _case():
    # one row, five loss tokens after a prompt token: ratios 1.5 (A>0), 1.5 (A<0), 0.5 (A<0),
    # 0.5 (A>0) and 1.0, set through the behaviour log-probs
    ratios = torch.tensor([[1.0, 1.5, 1.5, 0.5, 0.5, 1.0]])
    logp = torch.tensor([[0.0, -1.0, -1.2, -0.7, -2.0, -0.3]])
    blp = logp - torch.log(ratios)
    adv = torch.tensor([[0.0, 1.0, -1.0, -1.0, 1.0, 0.5]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1]], dtype=torch.bool)
    entropy = torch.tensor([[0.0, 2.0, 0.5, 1.0, 0.1, 3.0]])
    return logp, blp, adv, torch.ones_like(logp), mask, entropy


def test_the_clip_keeps_the_gradient_of_tokens_above_it_with_a_positive_advantage_only():
    logp, blp, adv, tw, mask, ent = _case()
    n = float(mask.sum())
    _, g_grpo, _ = _grad(lambda lp: grpo_loss(lp, blp, adv, tw, mask, clip_eps=EPS), logp)
    value, g, stats = _grad(lambda lp: aepo_loss(lp, blp, adv, tw, mask, ent, clip_eps=EPS,
                                                 advantage_weight=0.0, entropy_clip=True), logp)
    # the paper's F: 1 + eps above the clip with A > 0 (GRPO: 0), 0 below it with A < 0, the ratio elsewhere
    assert g_grpo[0, 1] == 0.0
    assert g[0, 1].item() == pytest.approx(-(1 + EPS) * 1.0 / n)
    assert g[0, 2].item() == pytest.approx(-1.5 * -1.0 / n)            # above the clip, A < 0: unclipped
    assert g[0, 3].item() == 0.0                                       # below the clip, A < 0: clipped
    assert g[0, 4].item() == pytest.approx(-0.5 * 1.0 / n)             # below the clip, A > 0: unclipped
    assert g[0, 5].item() == pytest.approx(-1.0 * 0.5 / n)
    assert g[0, 0].item() == 0.0                                       # off the mask
    # everywhere but token 1 the gradient is GRPO's, and the value is GRPO's everywhere
    keep = torch.tensor([True, False, True, True, True, True])
    assert torch.equal(g[0, keep], g_grpo[0, keep])
    assert value == grpo_loss(logp, blp, adv, tw, mask, clip_eps=EPS)[0]
    assert stats["preserved"] == 1.0


def test_with_the_entropy_terms_off_the_loss_and_gradient_are_grpos_exactly():
    torch.manual_seed(0)
    logp = -torch.rand(3, 9) * 3
    blp = logp + torch.randn(3, 9) * 0.4
    adv = torch.tensor([1.3, -0.7, 0.2])
    tw = 1 + torch.rand(3, 9) * 0.3
    mask = torch.rand(3, 9) > 0.3
    mask[:, 0] = False
    ent = torch.rand(3, 9) * 4
    a, ga, sa = _grad(lambda lp: grpo_loss(lp, blp, adv, tw, mask, clip_eps=EPS, num_tokens=40), logp)
    b, gb, sb = _grad(lambda lp: aepo_loss(lp, blp, adv, tw, mask, ent, clip_eps=EPS, advantage_weight=0.0,
                                           entropy_clip=False, num_tokens=40), logp)
    assert torch.equal(a, b) and torch.equal(ga, gb)
    assert {k: sb[k] for k in sa} == sa


def test_the_entropy_aware_advantage_equals_the_formula():
    logp, blp, adv, tw, mask, ent = _case()
    blp = logp.clone()  # ratio 1: the surrogate's gradient is -A_t / N per token
    n, a = float(mask.sum()), 0.2
    h = ent[0, 1:]
    hhat = (h - h.mean()) / h.std()  # over the row's loss tokens, unbiased std
    _, g, _ = _grad(lambda lp: aepo_loss(lp, blp, adv, tw, mask, ent, clip_eps=EPS, advantage_weight=a,
                                         entropy_clip=False), logp)
    expected = adv[0, 1:] * (1 + a * hhat)
    assert torch.allclose(-g[0, 1:] * n, expected, atol=1e-6)
    assert torch.allclose(standardised_entropy(ent, mask)[0, 1:], hhat, atol=1e-6)


def test_entropy_is_standardised_per_sequence_so_the_layout_does_not_matter():
    ent = torch.tensor([[0.0, 1.0, 3.0, 0.0, 2.0, 4.0, 9.0]])
    mask = torch.tensor([[0, 1, 1, 0, 1, 1, 1]], dtype=torch.bool)
    seq = torch.tensor([[0, 0, 0, 1, 1, 1, 1]])  # two sequences packed in one row
    packed = standardised_entropy(ent, mask, seq)
    alone = [standardised_entropy(ent[:, :3], mask[:, :3]), standardised_entropy(ent[:, 3:], mask[:, 3:])]
    assert torch.allclose(packed, torch.cat(alone, dim=1))
    # one loss token, or all equal: nothing to standardise by (std taken as 1), no NaN
    one = standardised_entropy(torch.tensor([[0.0, 5.0]]), torch.tensor([[0, 1]], dtype=torch.bool))
    assert one.tolist() == [[0.0, 0.0]]


def test_entropy_comes_from_the_same_logits_as_the_log_probs():
    torch.manual_seed(1)
    head = torch.nn.Linear(4, 7, bias=False)
    hidden = torch.randn(2, 5, 4)
    ids = torch.randint(0, 7, (2, 5))
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 0, 1, 1, 1]], dtype=torch.bool)
    logp, ent = masked_token_logprobs(hidden, head, ids, mask, 0.8, with_entropy=True)
    assert torch.equal(logp, masked_token_logprobs(hidden, head, ids, mask, 0.8))
    p = torch.softmax(head(hidden).detach() / 0.8, dim=-1)
    full = -(p * p.log()).sum(-1)  # position t - 1 predicts token t
    assert torch.allclose(ent[:, 1:][mask[:, 1:]], full[:, :-1][mask[:, 1:]], atol=1e-5)
    assert ent[~mask].abs().sum() == 0 and not ent.requires_grad


def test_finish_stats_reports_entropy_and_preserved_share():
    out = finish_stats({"loss_tokens": 4.0, "clip_units": 4.0, "entropy_sum": 6.0, "preserved": 1.0})
    assert out["entropy_mean"] == 1.5 and out["preserved_frac"] == 0.25


def test_options_are_validated_at_build_with_what_to_change():
    cfg = (RTIConfig().environment("Navigation-v0").policy(engine="hf")
           .training(algorithm="aepo", group_size=4, max_policy_lag=1)
           .aepo(initial_rollouts=5, branch_threshold=1.5, branches_per_step=0, advantage_weight=-1))
    with pytest.raises(ConfigError) as e:
        cfg.validate()
    text = str(e.value)
    for bit in ("aepo(initial_rollouts=5) is more than the group budget", "aepo(branch_threshold=1.5)",
                "aepo(branches_per_step=0)", "aepo(advantage_weight=-1)", "use max_policy_lag=0"):
        assert bit in text
    with pytest.raises(ConfigError, match="unknown option aepo"):
        RTIConfig().aepo(beam=2)
    ok = RTIConfig().environment("Navigation-v0").policy(engine="hf").training(algorithm="aepo").aepo(initial_rollouts=8)
    ok.validate()
    s = learner_settings(ok)
    assert s["algorithm"] == "aepo" and s["aepo_advantage_weight"] == 0.2 and s["aepo_entropy_clip"] is True
    assert math.isclose(RTIConfig()["aepo"]["branch_penalty"], 0.05)


# ---- the entropy-balanced rollout, on fake episodes ----------------------------------------------
TOOL = '<tool_call>{"name": "look", "arguments": {}}</tool_call>'
V = 1000  # vocabulary size: a step's entropy is its summed surprisal over ln V
GEN = 3   # tokens per fake turn


class World:
    """Deterministic fake episodes of ``turns`` turns: each turn is a generation prompt, GEN
    sampled ids (distinct per sample and turn) with surprisal ``surprisal(k)`` each, then a tool
    result. ``tool(k)``: whether turn k calls a tool."""

    def __init__(self, turns=4, surprisal=lambda k: 1.0, tool=lambda k: True):
        self.turns, self.surprisal, self.tool = turns, surprisal, tool
        self.played, self.branched = 0, 0

    def _turn(self, t: Trajectory, idx: int, k: int, ids=None, lps=None):
        t.ids += [100 + k]
        t.loss_mask += [0]
        t.logprobs += [0.0]
        t.token_weight += [1.0]
        a = len(t.ids)
        ids = ids if ids is not None else [10_000 * (idx + 1) + 10 * k + j for j in range(GEN)]
        lps = lps if lps is not None else [-self.surprisal(k)] * GEN
        t.ids += ids
        t.loss_mask += [1] * GEN
        t.logprobs += lps
        t.token_weight += [1.0] * GEN
        t.turn_spans.append((a, len(t.ids)))
        t.turn_versions.append(0)
        action = TOOL if self.tool(k) else "an answer"
        t.actions.append(action)
        t.messages += [{"role": "assistant", "content": action}, {"role": "tool", "content": f"result {k}"}]
        t.ids += [200 + k]
        t.loss_mask += [0]
        t.logprobs += [0.0]
        t.token_weight += [1.0]

    def play(self, specs):
        out = []
        for s in specs:
            self.played += 1
            t = Trajectory(s.task_id, s.sample_index, s.seed, s.round, s.split, ids=[1, 2], loss_mask=[0, 0],
                           logprobs=[0.0, 0.0], token_weight=[1.0, 1.0],
                           messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}])
            for k in range(self.turns):
                self._turn(t, s.sample_index, k)
            out.append(t)
        return out

    def branch(self, requests):
        out = []
        for r in requests:
            self.branched += 1
            s, p = r.spec, r.prefix
            k = len(r.actions)
            t = Trajectory(s.task_id, s.sample_index, s.seed, s.round, s.split, ids=list(p.ids),
                           loss_mask=list(p.loss_mask), logprobs=list(p.logprobs), token_weight=list(p.token_weight),
                           turn_spans=list(r.turn_spans), turn_versions=list(r.turn_versions),
                           actions=list(r.actions), messages=list(r.messages))
            t.ids, t.loss_mask, t.logprobs, t.token_weight = t.ids[:-1], t.loss_mask[:-1], t.logprobs[:-1], t.token_weight[:-1]
            self._turn(t, s.sample_index, k, ids=list(r.ids), lps=list(r.logprobs))  # the parent's turn k, again
            for j in range(k + 1, self.turns):
                self._turn(t, s.sample_index, j)
            t.intervened_step = k  # what the runner's continuation sets; AEPO clears it
            out.append(t)
        return out


def _rollout(world, tasks=("a", "b"), **kw):
    s = AepoSettings(group_size=kw.pop("group_size", 8), vocab_size=V, **kw)
    return EntropyBalancedRollout(s, world.play, world.branch).rollout(list(tasks), 0)


def _groups(out):
    g = {}
    for t in out:
        g.setdefault(t.task_id, []).append(t)
    return g


@pytest.mark.parametrize("initial", [None, 1, 3, 8])
def test_branching_stays_within_the_group_budget(initial):
    # every reaction to a tool result is far more uncertain than the first turn: branch whenever allowed
    world = World(turns=5, surprisal=lambda k: 0.1 if k == 0 else 4.0)
    out, m = _rollout(world, initial_rollouts=initial, entropy_weight=5.0, branch_penalty=0.0)
    for task, group in _groups(out).items():
        assert [t.sample_index for t in group] == list(range(8))  # exactly G, numbered once each
    assert world.played + world.branched == 16
    assert m["aepo/branches"] == world.branched and m["aepo/fill_rollouts"] + world.branched + 2 * (
        initial or m["aepo/global_rollouts"]) == 16
    if initial in (1, 3):
        assert m["aepo/branches"] == 2 * (8 - initial) and m["aepo/fill_rollouts"] == 0
    if initial == 8:
        assert m["aepo/branches"] == 0 and m["aepo/decisions"] == 0  # m = G is GRPO's rollout


def test_branches_share_their_prefix_ids_with_their_parent():
    world = World(turns=4, surprisal=lambda k: 0.1 if k == 0 else 4.0)
    out, m = _rollout(world, initial_rollouts=2, entropy_weight=5.0, branch_penalty=0.0)
    branches = [t for t in out if t.branch_of is not None]
    assert branches and m["aepo/branch_rounds"] >= 1
    for b in branches:
        parent = next(t for t in out if t.task_id == b.task_id and t.sample_index == b.branch_of)
        k = b.branch_step
        end = parent.turn_spans[k + 1][0]  # through turn k, its tool result and turn k + 1's prompt
        assert b.ids[:end] == parent.ids[:end] and b.logprobs[:end] == parent.logprobs[:end]
        assert b.loss_mask[:end] == parent.loss_mask[:end] and b.actions[:k + 1] == parent.actions[:k + 1]
        assert b.turn_spans[:k + 1] == parent.turn_spans[:k + 1]
        # its own turns are its own samples, and it is not mistaken for an intervention
        assert b.ids[slice(*b.turn_spans[k + 1])] != parent.ids[slice(*parent.turn_spans[k + 1])]
        assert b.intervened_step is None and b.corrected_span is None


def test_a_branch_is_taken_only_at_a_tool_call_step_above_the_threshold():
    # turn 1 answers without a tool (its reaction, turn 2, is very uncertain: still no branch there);
    # step 0's reaction (turn 1) is more certain than the first turn (pushed below the threshold);
    # step 2's reaction (turn 3) is far above: the only place a branch may be taken
    surprisal = {0: 1.0, 1: 0.0, 2: 9.0, 3: 9.0}
    world = World(turns=4, surprisal=surprisal.get, tool=lambda k: k != 1)
    out, m = _rollout(world, group_size=4, initial_rollouts=1, entropy_weight=20.0, branch_threshold=0.5)
    branches = [t for t in out if t.branch_of is not None]
    assert branches and {b.branch_step for b in branches} == {2}
    assert m["aepo/decisions"] == 2 * 2  # steps 0 and 2 of each task's global rollout; turn 1 is no tool call
    # nothing above the threshold: no branch at all, the budget is filled with global rollouts
    calm = World(turns=4, surprisal=lambda k: 1.0 if k == 0 else 0.0)
    out, m = _rollout(calm, group_size=4, initial_rollouts=1, entropy_weight=20.0)
    assert m["aepo/branches"] == 0 and m["aepo/fill_rollouts"] == 6 and len(out) == 8


def test_the_consecutive_branch_penalty_lowers_the_next_branch_on_the_same_path():
    world = World(turns=5, surprisal=lambda k: 0.0 if k == 0 else 9.0)
    t = world.play([EpisodeSpec("a", 0)])[0]
    s = AepoSettings(group_size=16, vocab_size=V, entropy_weight=20.0, branch_penalty=1.0)
    steps = [pt.step for pt in decide([Path(t)], 15, s, random.Random(0), Counter())]
    assert steps == [0, 2]  # after the branch at 0, step 1 has l = 1 and probability 0; step 2 has l = 0
    s0 = AepoSettings(group_size=16, vocab_size=V, entropy_weight=20.0, branch_penalty=0.0)
    assert [pt.step for pt in decide([Path(t)], 15, s0, random.Random(0), Counter())] == [0, 1, 2, 3]
    # a branch inherits the branches taken on its shared prefix: its first own step is penalised
    p = Path(t, first_own_step=2, branched_at={0, 1})
    assert p.consecutive_branches(2) == 2 and p.consecutive_branches(1) == 1


def test_pre_monitoring_splits_the_budget_by_the_entropy_gap():
    world = World(turns=3, surprisal=lambda k: 3.0 if k == 0 else 1.0)
    probe = world.play([EpisodeSpec("a", 0)])[0]
    s = AepoSettings(group_size=16, vocab_size=V, monitor_beta=0.5)
    h = step_entropies(probe, 20, V)
    assert h == pytest.approx([9 / math.log(V), 3 / math.log(V), 3 / math.log(V)])
    gap = h[0] - (h[1] + h[2]) / 2  # the tool results' entropy: turns after tool calls 0 and 1
    assert global_rollouts(probe, s) == min(16, int(16 / (1 + math.exp(-0.5 * gap))) + 1)
    no_tool = World(turns=2, tool=lambda k: False).play([EpisodeSpec("a", 0)])[0]
    assert global_rollouts(no_tool, s) == 9  # gap 0: floor(16 / 2) + 1


# ---- the learner and the examples ------------------------------------------------------------------

def test_a_real_learner_trains_aepo_as_grpo_with_the_entropy_terms_off_and_the_same_whatever_the_layout(
        tiny_model_path):
    from rti_actors.learner import Learner
    from tests.samples import make_batch

    batch = make_batch(n=3)

    def learner(algorithm, **kw):
        return Learner(tiny_model_path, {"backend": "torch", "algorithm": algorithm, "lr": 1e-3, **kw})

    g, a = learner("grpo"), learner("aepo", aepo_advantage_weight=0.0, aepo_entropy_clip=False)
    mg, ma = g.update(batch), a.update(batch)
    assert ma["loss"] == mg["loss"]
    assert all(torch.equal(p, q) for p, q in zip(g.module.parameters(), a.module.parameters()))
    assert ma["entropy_mean"] > 0 and "entropy_mean" not in mg
    # the defaults (entropy-aware advantage and clip on): packing the rows changes nothing
    plain, packed = learner("aepo"), learner("aepo", pack_sequences=True)
    mp, mq = plain.update(batch), packed.update(batch)
    assert mq["loss"] == pytest.approx(mp["loss"], rel=1e-5, abs=1e-7)
    assert mq["entropy_mean"] == pytest.approx(mp["entropy_mean"], rel=1e-5)
    with pytest.raises(ValueError, match="aepo_advantage_weight"):
        learner("aepo", aepo_advantage_weight=-0.5)


def test_a_checkpoint_from_before_aepo_restores_and_aepo_options_matter_to_aepo_runs():
    import json

    from rti_actors.checkpoints import config_changes

    grpo = json.loads(RTIConfig().to_json())
    older = {k: v for k, v in grpo.items() if k != "aepo"}
    assert config_changes(older, grpo) == []
    base = json.loads(RTIConfig().training(algorithm="aepo").to_json())
    changed = json.loads(RTIConfig().training(algorithm="aepo").aepo(advantage_weight=0.0).to_json())
    assert config_changes(base, changed) == ["aepo.advantage_weight: 0.2 -> 0.0"]
    assert config_changes(grpo, {**grpo, "aepo": changed["aepo"]}) == []  # a GRPO run never reads them


@pytest.mark.parametrize("example", ["navigation", "hard20"])
def test_the_examples_take_aepo(example, monkeypatch):
    from tests.conftest import example_config

    config = example_config(example, ["--algorithm", "aepo", "--engine", "hf"], monkeypatch)
    assert config["training"]["algorithm"] == "aepo"
    config.validate()
