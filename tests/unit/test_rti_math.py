"""RTI arithmetic: perplexity, the gate, token weights, group assembly, advantages."""

import math

import numpy as np
import pytest

from rti_actors.groups import assemble, assign_advantages
from rti_actors.rti.gate import passes_gate, perplexity, token_weights
from rti_actors.trajectory import Trajectory


def test_perplexity_against_a_hand_computation():
    lps = [math.log(0.5), math.log(0.25), math.log(1.0)]
    # exp(-(ln .5 + ln .25 + 0) / 3) = (0.5 * 0.25) ** (-1/3) = 2
    assert perplexity(lps) == pytest.approx(2.0)
    assert perplexity([]) == math.inf


@pytest.mark.parametrize("ppl,delta,ok", [(4.9, 5, True), (5.0, 5, True), (5.1, 5, False), (1.0, 0, False),
                                          (1e9, math.inf, True), (2.9, 3, True), (19.0, 20, True)])
def test_gate_threshold(ppl, delta, ok):
    assert passes_gate(ppl, delta) is ok


def test_token_weights_are_clipped_ratios():
    lp_c = [math.log(0.9), math.log(0.5), math.log(0.1)]
    lp_h = [math.log(0.3), math.log(0.5), math.log(0.2)]
    w, stats = token_weights(lp_c, lp_h, 0.2)
    # rho = 3.0 -> 1.2 (clipped), 1.0 -> 1.0, 0.5 -> 0.8 (clipped)
    assert w == pytest.approx([1.2, 1.0, 0.8])
    assert stats["clip_frac"] == pytest.approx(2 / 3)
    assert stats["mean_abs_log_rho"] == pytest.approx(np.mean([math.log(3), 0, math.log(2)]))
    w0, _ = token_weights(lp_c, lp_h, 0.0)  # the "no reweighting" ablation
    assert w0 == [1.0, 1.0, 1.0]
    w_in, _ = token_weights([math.log(0.55)], [math.log(0.5)], 0.2)
    assert w_in == pytest.approx([1.1])


def _group(task, rewards):
    return [Trajectory(task, i, reward=r) for i, r in enumerate(rewards)]


def test_assemble_append_and_replace():
    groups = [_group("a", [0, 0, 0]), _group("b", [1, 0, 0])]
    rescued = [Trajectory("a", 3, reward=1.0, group=0, source_index=1)]
    appended = assemble(groups, rescued, "append")
    assert [t.sample_index for t in appended[0]] == [0, 1, 2, 3] and appended[1] == groups[1]
    replaced = assemble(groups, rescued, "replace")
    assert [t.sample_index for t in replaced[0]] == [0, 2, 3]
    assert len(groups[0]) == 3  # inputs untouched
    with pytest.raises(ValueError):
        assemble(groups, rescued, "merge")


def test_advantages_with_an_appended_member():
    g = assemble([_group("a", [0, 0, 0, 0])], [Trajectory("a", 4, reward=1.0, group=0, source_index=0)])[0]
    assign_advantages(g)
    adv = [t.advantage for t in g]
    r = np.array([0, 0, 0, 0, 1.0])
    expected = (r - r.mean()) / (r.std() + 1e-6)
    assert adv == pytest.approx(expected.tolist())
    assert adv[-1] > 0 and all(a < 0 for a in adv[:-1])
