"""Groups of G trajectories per task and their GRPO advantages.

A_i = (r_i - mean(r)) / (std(r) + 1e-6) over the final group (docs/ALGORITHM.md). A group
whose rewards are all equal has zero advantages and teaches nothing; the fraction of such
groups is the number RTI exists to lower.
"""

from __future__ import annotations

import numpy as np

from rti_actors.trajectory import Trajectory

EPS = 1e-6


def group_by_task(trajectories: list[Trajectory]) -> list[list[Trajectory]]:
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(t.task_id, []).append(t)
    return [sorted(g, key=lambda t: t.sample_index) for g in groups.values()]


def scored_groups(trajectories: list[Trajectory]) -> tuple[list[list[Trajectory]], dict]:
    """The groups to train on, and fault counts. An episode whose environment failed
    (``infra_error``) says nothing about the policy: it is left out of its group rather than
    scored 0, which would bias the advantages and could trigger RTI on a group the policy
    never failed. An agent episode whose prompt stopped extending its record (``dropped``)
    is left out too: its tokens are not what the policy saw. A group left with fewer than
    two episodes cannot be normalised: dropped."""
    scored = [t for t in trajectories if not t.infra_error and not t.dropped]
    groups = [g for g in group_by_task(scored) if len(g) >= 2]
    counts = {"faults/infra_episodes": sum(bool(t.infra_error) for t in trajectories),
              "faults/episode_retries": sum(t.infra_retries for t in trajectories),
              "faults/groups_dropped": len({t.task_id for t in trajectories}) - len(groups)}
    breaks = [t for t in trajectories if t.prefix_break and not t.infra_error]
    if breaks:  # agent mode only: keeps the metrics of other runs as they were
        counts |= {"agent/prefix_breaks": len(breaks), "agent/dropped_episodes": sum(t.dropped for t in breaks)}
    return groups, counts


def group_advantages(rewards: list[float]) -> list[float]:
    r = np.asarray(rewards, dtype=np.float64)
    return ((r - r.mean()) / (r.std() + EPS)).tolist()


def assign_advantages(group: list[Trajectory]) -> list[Trajectory]:
    for t, a in zip(group, group_advantages([t.reward for t in group])):
        t.advantage = float(a)
    return group


def is_learnable(group: list[Trajectory]) -> bool:
    """True when rewards differ inside the group (non-zero advantage variance)."""
    rewards = [t.reward for t in group]
    return max(rewards) - min(rewards) > 1e-9


def all_failed(group: list[Trajectory]) -> bool:
    """The groups RTI intervenes on: every reward is 0 (or below)."""
    return max(t.reward for t in group) <= 0


def assemble(groups: list[list[Trajectory]], rescued: list[Trajectory], mode: str = "append") -> list[list[Trajectory]]:
    """Final groups after RTI. ``append``: the G originals plus the rescued trajectories, so
    a failed step and its fix at the same state form a contrastive pair; ``replace``: each
    rescued trajectory takes its source's place (G stays fixed). Each rescued trajectory
    names its ``group`` (index) and ``source_index``."""
    if mode not in ("append", "replace"):
        raise ValueError(f"group mode must be 'append' or 'replace', got {mode!r}")
    out = [list(g) for g in groups]
    for t in rescued:
        g = out[t.group]
        if mode == "replace":
            g[:] = [x for x in g if x.sample_index != t.source_index]
        g.append(t)
    return out
