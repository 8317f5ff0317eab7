"""AEPO's entropy-balanced rollout: a group of G grown as a tree at uncertain tool calls.

Dong et al., 2025, *Agentic Entropy-Balanced Policy Optimization* (docs/ALGORITHM.md, AEPO).
Per task, m global rollouts are played from the task (m from entropy pre-monitoring on a probe
rollout, or fixed), then each tool-call step of each trajectory gets one branch decision with
probability (alpha + gamma * Delta H) * (1 - c * l), l the branches taken in a row just before it
on that path. A branch is an RTI-style continuation of its parent from the step after the tool
call (the env replayed, the parent's token ids kept as they are), so branches share their prefix
ids exactly. Branches are played in rounds until none is taken or the budget is spent; what is
left is filled with more global rollouts, so every group has exactly G trajectories.

The planning here is pure Python over ``Trajectory`` records; ``EntropyBalancedRollout`` gets
the two ways of playing (fresh episodes, continuations) as callables, so it runs on Ray runners
in the driver and on fakes in the tests. AEPO's loss is ``losses.aepo_loss``.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from envs.tool_calls import parse_tool_calls
from envs.transcript import own_turn_positions
from policies.chat import TokenBuffer
from rti_actors.env_runner import Continuation, ReplayFailure, request_seed
from rti_actors.trajectory import EpisodeSpec, Trajectory

# what the rollout counts, each reported (as aepo/<name>) even when it stayed at 0
COUNTS = ("branches", "branch_rounds", "fill_rollouts", "tool_steps", "decisions", "replay_errors")


@dataclass(frozen=True)
class AepoSettings:
    """The rollout's settings: the config's ``aepo`` section, the group budget G, the policy's
    vocabulary size (a step's entropy is divided by ln V) and the run's seed."""

    group_size: int
    vocab_size: int
    seed: int = 0
    initial_rollouts: int | None = None
    monitor_beta: float = 0.5
    branch_threshold: float = 0.5
    entropy_weight: float = 0.2
    branch_penalty: float = 0.05
    branches_per_step: int = 1
    entropy_tokens: int = 20

    @classmethod
    def from_config(cls, config, vocab_size: int) -> "AepoSettings":
        a = config["aepo"]
        return cls(group_size=config["training"]["group_size"], vocab_size=vocab_size,
                   seed=config["debugging"]["seed"], initial_rollouts=a["initial_rollouts"],
                   monitor_beta=a["monitor_beta"], branch_threshold=a["branch_threshold"],
                   entropy_weight=a["entropy_weight"], branch_penalty=a["branch_penalty"],
                   branches_per_step=a["branches_per_step"], entropy_tokens=a["entropy_tokens"])


def step_entropies(t: Trajectory, tokens: int, vocab_size: int) -> list[float]:
    """H_k per assistant turn: the summed surprisal -log pi_b of the turn's first ``tokens``
    sampled ids, over ln V. The sampled token's surprisal is an unbiased estimate of that
    position's entropy, and the sampler already returned it: no scoring call is needed."""
    scale = math.log(max(vocab_size, 2))
    return [sum(-lp for lp in t.logprobs[a:b][:tokens]) / scale for a, b in t.turn_spans]


def tool_call_steps(t: Trajectory) -> list[int]:
    """The turns that called a tool and after which the policy acted again (a turn k + 1 exists
    to read the tool result's entropy from, and to branch at)."""
    return [k for k in range(t.num_turns - 1) if parse_tool_calls(t.actions[k])["tool_calls"]]


def global_rollouts(probe: Trajectory, s: AepoSettings) -> int:
    """Entropy pre-monitoring: m = min(G, floor(G * sigmoid(beta * (H_root - mean H_tool))) + 1)
    from a probe rollout. H_root is its first turn's entropy, H_tool the entropy of the turn after
    each tool call; with no tool call (or no turn) the gap is 0, as in the authors' code."""
    h = step_entropies(probe, s.entropy_tokens, s.vocab_size)
    tool = [h[k + 1] for k in tool_call_steps(probe)]
    gap = h[0] - sum(tool) / len(tool) if h and tool else 0.0
    share = 1.0 / (1.0 + math.exp(-s.monitor_beta * gap))
    return max(1, min(s.group_size, int(s.group_size * share) + 1))


@dataclass
class Path:
    """One trajectory of a task's tree: where its own turns start (0 for a global rollout, k + 1
    for a branch taken at step k), the steps on its path where a branch was taken (shared ones
    included), and whether its own steps were decided on."""

    traj: Trajectory
    first_own_step: int = 0
    branched_at: set[int] = field(default_factory=set)
    decided: bool = False

    def consecutive_branches(self, k: int) -> int:
        """l: how many of this path's tool-call steps right before ``k`` took a branch."""
        n = 0
        for j in reversed([j for j in tool_call_steps(self.traj) if j < k]):
            if j not in self.branched_at:
                break
            n += 1
        return n


@dataclass(frozen=True)
class BranchPoint:
    """``count`` new trajectories to continue from ``paths[path]`` after its tool-call ``step``."""

    path: int
    step: int
    count: int


def decide(paths: list[Path], budget: int, s: AepoSettings, rng: random.Random, counts: Counter) -> list[BranchPoint]:
    """One branch decision per own tool-call step of every path not decided yet, taken step by
    step across the group (all paths' step 0, then step 1, ...) while budget is left."""
    todo = {i: [k for k in tool_call_steps(p.traj) if k >= p.first_own_step]
            for i, p in enumerate(paths) if not p.decided and not p.traj.infra_error}
    h = {i: step_entropies(paths[i].traj, s.entropy_tokens, s.vocab_size) for i in todo}
    points = []
    for k in sorted({k for steps in todo.values() for k in steps}):
        for i, steps in todo.items():
            if k not in steps:
                continue
            p = paths[i]
            counts["tool_steps"] += 1
            alpha = rng.random()  # drawn for every step, so a decision's draw does not depend on the budget
            if budget <= 0:
                continue
            counts["decisions"] += 1
            delta = h[i][k + 1] - h[i][0]
            keep = max(0.0, 1.0 - s.branch_penalty * p.consecutive_branches(k))
            prob = min(1.0, max(0.0, (alpha + s.entropy_weight * delta) * keep))
            if prob > s.branch_threshold:
                n = min(s.branches_per_step, budget)
                budget -= n
                points.append(BranchPoint(i, k, n))
                p.branched_at.add(k)
    for i in todo:
        paths[i].decided = True
    return points


class EntropyBalancedRollout:
    """Plays one iteration's groups. ``play(specs)`` returns a trajectory per spec (fresh
    episodes, in spec order); ``branch(requests)`` a trajectory or ``ReplayFailure`` per
    ``Continuation``."""

    def __init__(self, settings: AepoSettings, play: Callable[[list[EpisodeSpec]], list[Trajectory]],
                 branch: Callable[[list[Continuation]], list]):
        self.s, self.play, self.branch = settings, play, branch

    def rollout(self, tasks: list[str], round_, split: str = "train") -> tuple[list[Trajectory], dict]:
        s, counts = self.s, Counter()
        tasks = list(dict.fromkeys(tasks))  # a task drawn twice is one group, as group_by_task makes it
        paths: dict[str, list[Path]] = {t: [] for t in tasks}

        def spec(task: str) -> EpisodeSpec:
            return EpisodeSpec(task, len(paths[task]) + pending[task], s.seed, round_, split)

        def add_fresh(wanted: dict[str, int]) -> None:
            specs = []
            for task, n in wanted.items():
                for _ in range(n):
                    specs.append(spec(task))
                    pending[task] += 1
            for t in self.play(specs):
                paths[t.task_id].append(Path(t))
                pending[t.task_id] -= 1

        pending = Counter()
        if s.initial_rollouts is not None:
            m = {t: min(s.initial_rollouts, s.group_size) for t in tasks}
            add_fresh(m)
        else:  # the first global rollout is the probe that sets m
            add_fresh({t: 1 for t in tasks})
            m = {t: global_rollouts(paths[t][0].traj, s) for t in tasks}
            add_fresh({t: m[t] - 1 for t in tasks})
        rngs = {t: random.Random(request_seed(s.seed, round_, t, "aepo")) for t in tasks}
        while True:
            points = {t: decide(paths[t], s.group_size - len(paths[t]), s, rngs[t], counts) for t in tasks}
            requests, origins = [], []
            for task, pts in points.items():
                for pt in pts:
                    parent, k = paths[task][pt.path], pt.step
                    # the env replays turns 0..k-1, turn k is the parent's own ids (run again, so its
                    # tool result is fresh) and the policy plays on under the branch's own seeds; the
                    # token buffer up to turn k is the parent's, never re-tokenised
                    p = parent.traj
                    a, b = p.turn_spans[k]
                    before = p.messages[:own_turn_positions(p.messages, p.num_turns)[k]]
                    prefix = TokenBuffer(p.ids[:a], p.loss_mask[:a], p.logprobs[:a], p.token_weight[:a])
                    for _ in range(pt.count):
                        requests.append(Continuation(spec(task), p.actions[:k], before, prefix, p.turn_spans[:k],
                                                     p.turn_versions[:k], p.ids[a:b], p.logprobs[a:b],
                                                     p.token_weight[a:b], p.turn_versions[k]))
                        origins.append((task, parent, k))
                        pending[task] += 1
            if not requests:
                break
            counts["branch_rounds"] += 1
            for (task, parent, step), res in zip(origins, self.branch(requests)):
                pending[task] -= 1
                if isinstance(res, ReplayFailure):
                    counts["replay_errors"] += 1
                    continue
                # a branch, not an intervention: what it shares is the parent's own turn
                res.intervened_step, res.corrected_span = None, None
                res.branch_of, res.branch_step = parent.traj.sample_index, step
                counts["branches"] += 1
                paths[task].append(Path(res, step + 1, {j for j in parent.branched_at if j <= step}))
        fill = {t: s.group_size - len(paths[t]) for t in tasks}
        counts["fill_rollouts"] = sum(fill.values())
        add_fresh(fill)
        out = [p.traj for t in tasks for p in sorted(paths[t], key=lambda p: p.traj.sample_index)]
        metrics = {f"aepo/{k}": counts[k] for k in COUNTS}
        metrics["aepo/global_rollouts"] = sum(m.values()) / max(len(m), 1)
        metrics["aepo/branch_rate"] = counts["branches"] / counts["decisions"] if counts["decisions"] else 0.0
        return out, metrics
