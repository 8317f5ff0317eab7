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


def assemble(groups: list[list[dict]], rescued: list[dict], mode: str = "append") -> list[list[dict]]:
    """Final groups after RTI (RTI_SPEC §7). ``append``: the G originals plus the rescued
    trajectories, so a failed step and its fix at the same state form a contrastive pair;
    ``replace``: each rescued trajectory takes its source's place (G stays fixed).
    Each rescued trajectory names its ``group`` (index) and ``source_index``."""
    if mode not in ("append", "replace"):
        raise ValueError(f"group mode must be 'append' or 'replace', got {mode!r}")
    out = [list(g) for g in groups]
    for t in rescued:
        g = out[t["group"]]
        if mode == "replace":
            g[:] = [x for x in g if x["sample_index"] != t["source_index"]]
        g.append(t)
    return out


def to_learner_sample(t: dict) -> dict:
    """The fields the learner trains on, nothing else (no messages, no evidence)."""
    return {"ids": t["ids"], "loss_mask": t["loss_mask"], "behaviour_logprobs": t["logprobs"],
            "token_weight": t["token_weight"], "advantage": t["advantage"], "policy_version": t["policy_version"]}
