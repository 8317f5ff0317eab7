"""The learner's default layout ("auto"): a group's opening is shared, and its continuations
packed, only where sharing saves a quarter of the group's positions; the rest runs padded."""

import random

from rti_actors.batch_layout import AUTO_SHARE_FROM, plan, worth_sharing


def group(prompt: int, lengths: list[int], seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Samples that open with the same ``prompt`` tokens (no loss there) and go on for ``lengths``."""
    rng = random.Random(seed)
    opening = [rng.randrange(100, 9000) for _ in range(prompt)]
    ids = [opening + [rng.randrange(100, 9000) for _ in range(n)] for n in lengths]
    return ids, [[0] * prompt + [1] * n for n in lengths]


def test_short_completions_after_a_long_prompt_share_it_and_pack():
    # a GRPO group of tool-call completions: 8 x 20-60 tokens after a 250-token prompt
    ids, masks = group(250, [20, 35, 60, 44, 28, 51, 39, 23])
    layout = plan(ids, masks, budget=1024, pack="auto", share="auto")
    (cluster,) = layout.clusters
    assert len(cluster.prefix) == 249  # the position before the first loss token stays with the sample
    assert all(len(r.lines) == 1 for r in cluster.rows)  # packed
    assert layout.stats([len(i) for i in ids])["padding_frac"] == 0.0


def test_long_continuations_after_a_short_opening_run_whole_and_padded():
    # Navigation-like: two rollouts of thousands of tokens after a 300-token opening
    ids, masks = group(300, [2500, 3200])
    assert not worth_sharing(299, [len(i) for i in ids])
    layout = plan(ids, masks, budget=8192, pack="auto", share="auto")
    assert [c.prefix for c in layout.clusters] == [[]]
    assert [len(r.lines) for c in layout.clusters for r in c.rows] == [2]  # one padded row of two lines
    # forced on, the same batch is shared
    assert len(plan(ids, masks, budget=8192, share=True).clusters[0].prefix) == 299


def test_each_group_of_a_step_is_judged_on_its_own():
    a_ids, a_masks = group(200, [30] * 6, seed=1)
    b_ids, b_masks = group(40, [900, 1100], seed=2)
    ids, masks = a_ids + b_ids, a_masks + b_masks
    layout = plan(ids, masks, budget=4096, pack="auto", share="auto")
    shared = [c for c in layout.clusters if c.prefix]
    loose = [c for c in layout.clusters if not c.prefix]
    assert len(shared) == 1 and len(shared[0].prefix) == 199
    assert sorted(s.sample for r in shared[0].rows for line in r.lines for s in line) == [0, 1, 2, 3, 4, 5]
    (rest,) = loose
    assert all(len(line) == 1 for r in rest.rows for line in r.lines)  # padded: one sample a line
    # pack=True packs the unshared samples too
    packed = plan(ids, masks, budget=4096, pack=True, share="auto")
    assert all(len(r.lines) == 1 for c in packed.clusters for r in c.rows)


def test_the_threshold_is_a_quarter_of_the_groups_positions():
    assert AUTO_SHARE_FROM == 0.25
    assert worth_sharing(25, [100, 100, 100, 100, 0])  # 25 x 4 saved of 400: exactly a quarter
    assert not worth_sharing(24, [100, 100, 100, 100, 0])
    assert not worth_sharing(500, [600])  # one sample saves nothing


def test_false_keeps_the_padded_layout_whatever_the_batch():
    ids, masks = group(250, [20, 35, 60, 44])
    layout = plan(ids, masks, budget=1024, pack=False, share=False)
    assert [c.prefix for c in layout.clusters] == [[]]
    assert layout.stats([len(i) for i in ids])["padding_frac"] > 0
