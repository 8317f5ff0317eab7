"""Groups of G trajectories per task and their GRPO advantages.

A_i = (r_i - mean(r)) / (std(r) + 1e-6) over the final group (RTI_SPEC §8). A group whose
rewards are all equal has zero advantages and teaches nothing; the fraction of such
groups is the number RTI exists to lower.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

EPS = 1e-6


def group_by_task(trajectories: list[dict]) -> list[list[dict]]:
    groups: "OrderedDict[str, list[dict]]" = OrderedDict()
    for t in trajectories:
        groups.setdefault(t["task_id"], []).append(t)
    return [sorted(g, key=lambda t: t.get("sample_index", 0)) for g in groups.values()]


def group_advantages(rewards: list[float]) -> list[float]:
    r = np.asarray(rewards, dtype=np.float64)
    return ((r - r.mean()) / (r.std() + EPS)).tolist()


def assign_advantages(group: list[dict]) -> list[dict]:
    for t, a in zip(group, group_advantages([t["reward"] for t in group])):
        t["advantage"] = float(a)
    return group


def is_learnable(group: list[dict]) -> bool:
    """True when rewards differ inside the group (non-zero advantage variance)."""
    rewards = [t["reward"] for t in group]
    return max(rewards) - min(rewards) > 1e-9


def to_learner_sample(t: dict) -> dict:
    """The fields the learner trains on, nothing else (no messages, no evidence)."""
    return {"ids": t["ids"], "loss_mask": t["loss_mask"], "behaviour_logprobs": t["logprobs"],
            "token_weight": t["token_weight"], "advantage": t["advantage"], "policy_version": t["policy_version"]}
