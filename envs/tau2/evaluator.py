"""τ² reward computation: gating on the termination reason, then the
product of the components named in the task's ``reward_basis``.

The predicted state is the live environment's final state: every tool here is
deterministic, so replaying the trajectory on a fresh environment reproduces it exactly
(a unit test keeps that true). The gold state is a fresh environment plus initialisation
plus the gold actions (no sync after them; failing ones skipped); its fingerprints are
memoised per task because they never change.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

from envs.tau2.data import Tau2Data
from envs.tau2.domains import build_environment
from envs.tau2.environment import Tau2Environment

REWARDING_TERMINATIONS = ("user_stop", "agent_stop")
DEFAULT_REWARD_BASIS = ("DB", "COMMUNICATE")

# judge(trajectory, nl_assertions) -> list of bools, one per assertion (the NL_ASSERTION component)
NLJudge = Callable[[list[dict], list[str]], list[bool]]


def gold_fingerprints(data: Tau2Data, domain: str, task_id: str) -> tuple[str, str | None]:
    """(agent DB, user DB) fingerprints of a task's gold state, memoised per process."""
    return _gold_fingerprints(str(data.root), domain, task_id)


@functools.lru_cache(maxsize=1024)
def _gold_fingerprints(root: str, domain: str, task_id: str) -> tuple[str, str | None]:
    data = Tau2Data(root)
    return gold_environment(data, domain, data.tasks(domain)[task_id]).fingerprints()


def gold_environment(data: Tau2Data, domain: str, task: dict) -> Tau2Environment:
    env = build_environment(data, domain)
    env.initialise(task)
    for action in (task.get("evaluation_criteria") or {}).get("actions") or []:
        env.apply_gold_action(action)
    return env


def tool_calls_in(trajectory: list[dict]):
    """Every tool call of every agent and user message, in trajectory order."""
    for message in trajectory:
        if message["role"] in ("assistant", "user"):
            yield from message.get("tool_calls") or []


def communicate_met(trajectory: list[dict], info: str) -> bool:
    """COMMUNICATE: case-insensitive substring of an agent message with commas removed."""
    needle = info.lower()
    return any(m["role"] == "assistant" and m.get("content") and m["content"].strip()
               and needle in m["content"].lower().replace(",", "") for m in trajectory)


def action_met(trajectory: list[dict], gold: dict) -> bool:
    """ACTION: some call with the same name and the compared arguments equal."""
    for call in tool_calls_in(trajectory):
        if call["name"] != gold["name"]:
            continue
        args = call.get("arguments") or {}
        keys = gold.get("compare_args")
        keys = list(args) if keys is None else keys
        if not keys:
            return True
        want = {k: v for k, v in (gold.get("arguments") or {}).items() if k in keys}
        have = {k: v for k, v in args.items() if k in keys}
        if want == have:
            return True
    return False


def reward_basis(criteria: dict) -> list[str]:
    """The components scored; the default only when the key is absent (or null, which
    upstream's task model would reject), so an empty basis scores 1.0 as upstream's does."""
    basis = criteria.get("reward_basis")
    return list(DEFAULT_REWARD_BASIS if basis is None else basis)


def evaluate(data: Tau2Data, domain: str, task: dict, trajectory: list[dict], termination_reason: str,
             live: Tau2Environment, nl_judge: NLJudge | None = None) -> tuple[float, dict]:
    """The τ² reward of a finished episode (gated, then the product of its components) and its breakdown."""
    breakdown: dict = {"termination_reason": termination_reason}
    if termination_reason not in REWARDING_TERMINATIONS:
        breakdown["gated"] = True
        breakdown["progress"] = 0.0
        return 0.0, breakdown
    criteria = task.get("evaluation_criteria")
    if not criteria:
        breakdown["progress"] = 1.0
        return 1.0, breakdown
    basis = reward_basis(criteria)
    breakdown["reward_basis"] = basis
    reward = 1.0
    # progress: the mean over the scored components of the share of each one's items met
    # (the DB is one item); it is 1 exactly when the reward is, and grades the failures.
    parts: list[float] = []

    if "DB" in basis or "ENV_ASSERTION" in basis:
        env_reward = 1.0
        if criteria.get("actions") is not None or criteria.get("env_assertions") is not None:
            if "DB" in basis:
                gold = gold_fingerprints(data, domain, task["id"])
                live_fp = live.fingerprints()
                breakdown["db_match"] = {"agent": live_fp[0] == gold[0], "user": live_fp[1] == gold[1]}
                db = float(live_fp == gold)
                breakdown["DB"] = db
                parts.append(db)
                env_reward *= db
            if "ENV_ASSERTION" in basis:
                results = []
                for a in criteria.get("env_assertions") or []:
                    value = live.run_function(a["env_type"], a["func_name"], a.get("arguments") or {})
                    if not isinstance(value, bool):
                        raise TypeError(f"assertion {a['func_name']} returned {value!r}, not a bool")
                    results.append(value == a.get("assert_value", True))
                breakdown["env_assertions"] = results
                parts.append(_share(results))
                breakdown["ENV_ASSERTION"] = float(all(results))
                env_reward *= breakdown["ENV_ASSERTION"]
        reward *= env_reward

    if "ACTION" in basis:
        met = [action_met(trajectory, g) for g in criteria.get("actions") or []]
        breakdown["actions_met"] = met
        parts.append(_share(met))
        breakdown["ACTION"] = float(all(met))
        reward *= breakdown["ACTION"]

    if "COMMUNICATE" in basis:
        met = [communicate_met(trajectory, s) for s in criteria.get("communicate_info") or []]
        breakdown["communicate_met"] = met
        parts.append(_share(met))
        breakdown["COMMUNICATE"] = float(all(met))
        reward *= breakdown["COMMUNICATE"]

    if "NL_ASSERTION" in basis:
        assertions = criteria.get("nl_assertions") or []
        if nl_judge is None:
            raise ValueError(f"task {task['id']} is scored with NL_ASSERTION; pass env_config['nl_judge']")
        met = list(nl_judge(trajectory, assertions)) if assertions else []
        breakdown["nl_assertions_met"] = met
        parts.append(_share(met))
        breakdown["NL_ASSERTION"] = float(all(met))
        reward *= breakdown["NL_ASSERTION"]

    breakdown["reward"] = reward
    breakdown["progress"] = round(sum(parts) / len(parts), 6) if parts else reward
    return reward, breakdown


def _share(met: list[bool]) -> float:
    """The fraction of items met; an empty list is fully met, as ``all([])`` scores it."""
    return sum(map(bool, met)) / len(met) if met else 1.0


def is_success(reward: float) -> bool:
    return 1 - 1e-6 <= reward <= 1 + 1e-6


def pass_hat_k(rewards_per_task: dict[str, list[float]], k: int) -> float:
    """τ²'s pass^k: mean over tasks of C(successes, k) / C(trials, k)."""
    scores = []
    for task_id, rewards in rewards_per_task.items():
        if len(rewards) < k:
            raise ValueError(f"task {task_id} has {len(rewards)} trials, fewer than k={k}")
        successes = sum(is_success(r) for r in rewards)
        scores.append(math.comb(successes, k) / math.comb(len(rewards), k))
    return sum(scores) / len(scores)
