"""Evaluation: n rollouts per task of a split, no learning and no intervention, summarised
as Pass@k / Pass^k over tasks (``rti_actors.metrics``) and logged with the run's metrics."""

from __future__ import annotations

import os
import time

from rti_actors.demonstrations import from_trajectory, write_jsonl
from rti_actors.metrics import format_table, mean, summarize
from rti_actors.trajectory import EpisodeSpec


def evaluate(driver, split: str | None = None, num_tasks: int | None = None, method: str | None = None,
             record_path: str | os.PathLike | None = None, num_samples: int | None = None,
             temperature: float | None = None, task_ids: list[str] | None = None) -> dict:
    """n rollouts per task, no learning, no intervention; Pass@k / Pass^k summary.
    ``record_path``: append every rollout to this JSONL as demonstration records (with
    their rewards; ``pretrain_sft`` keeps those at or above ``sft(min_reward=...)``).
    ``num_samples`` / ``temperature`` override ``evaluation(...)`` for this call (e.g. a
    greedy pass beside the sampled one). ``task_ids``: these tasks of the split instead
    of its first ``num_tasks``. An episode's seeds come from its task, its sample index and
    the run's seed, not from the call that plays it, so a slice evaluated in parts samples
    what one call would (``metrics.merge_summaries`` joins the parts' summaries)."""
    e = dict(driver.config["evaluation"])
    e.update({k: v for k, v in (("num_samples", num_samples), ("temperature", temperature)) if v is not None})
    split = split or e["split"]
    ids = driver.task_ids(split)
    if task_ids is not None:
        unknown = sorted(set(task_ids) - set(ids))
        if unknown:
            raise ValueError(f"task_ids: {unknown[:5]} are not tasks of split {split!r} (algo.task_ids({split!r}) "
                             "lists them)")
        ids = list(task_ids)
    else:
        n_tasks = num_tasks if num_tasks is not None else e["num_tasks"]
        ids = ids[:n_tasks] if n_tasks else ids
    specs = [EpisodeSpec(tid, j, driver.config["debugging"]["seed"], f"eval-{driver.iteration}", split)
             for tid in ids for j in range(e["num_samples"])]
    sampling = driver.rollouts.sampling(temperature=e["temperature"])
    t0 = time.perf_counter()
    trajectories = driver.rollouts.play(specs, sampling)
    env = driver.config["environment"]["env"]
    env_name = env if isinstance(env, str) else "custom"
    if record_path is not None:
        write_jsonl(record_path, [from_trajectory(t, env_name, source=f"policy-v{driver.version}")
                                  for t in trajectories if not t.infra_error], append=True)
    # a task whose environment failed in one of its rollouts is left out (never scored 0):
    # Pass@k needs the same n rollouts of every task
    failed_env = {tr.task_id for tr in trajectories if tr.infra_error}
    trajectories = [tr for tr in trajectories if tr.task_id not in failed_env]
    successes: dict[str, list[bool]] = {}
    for tr in trajectories:
        successes.setdefault(tr.task_id, []).append(tr.reward >= 1.0)
    summary = summarize(successes)
    summary["tasks_left_out_infra"] = len(failed_env)
    # partial credit (the env contract's progress key): what a 0/1 reward hides, e.g.
    # after a warm start on a weak model
    if any("progress" in tr.reward_breakdown for tr in trajectories):
        summary["mean_progress"] = mean([tr.progress for tr in trajectories])
    label = method or f"{driver.config['training']['algorithm']} (iter {driver.iteration})"
    summary["table"] = format_table({label: {env_name: summary}})
    summary["seconds"] = time.perf_counter() - t0
    summary["split"] = split
    driver.reporter.log("eval", driver.iteration, {k: v for k, v in summary.items() if k != "table"})
    return summary

