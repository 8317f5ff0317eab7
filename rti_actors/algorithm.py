"""``Algorithm``: the driver loop over the actor graph.

``train()`` reads like the recipe: sample G episodes per task on the env runners, add the
traces the policy did not sample, group and score them, transform the groups, compute
advantages, cut the learner's samples out and push them to the replay queue, let the
learner pull and update, publish the new weights to every engine. What a method changes in
that recipe (RTI's interventions on all-fail groups, LUFFY's teacher traces, OPD's per-token
advantages, AEPO's branching rollouts) is its plug-in's hooks (``rti_actors.algorithms``).
Everything heavy runs in actors (started by ``rti_actors.build``); the driver only moves
references. docs/ARCHITECTURE.md follows one iteration through the modules.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import ray

from rti_actors.build import build_graph
from rti_actors.checkpoints import atomic_dir, config_changes, periodic, periodic_path, prune, verify
from rti_actors.evaluation import evaluate
from rti_actors.faults import ActorMonitor
from rti_actors.groups import all_failed, is_learnable, scored_groups
from rti_actors.metrics import mean
from rti_actors.options import ConfigError
from rti_actors.reporting import Reporter
from rti_actors.rollouts import Launch, Rollouts
from rti_actors.trajectory import EpisodeSpec, Trajectory, learner_sample
from rti_actors.updates import Updates
from rti_actors.warm_start import WarmStart

if TYPE_CHECKING:  # the builder sits above the graph it starts
    from rti_actors.config import RTIConfig

log = logging.getLogger("rti_actors")

# what the driver redoes after a crash, each reported (as faults/redone/<name>) from the start
REDONE = ("rollout_chunks", "stale_episodes", "engines_repaired", "queue_puts", "learner_rebuilds",
          "learner_steps_lost", "learner_steps_redone", "learner_from_weights")


class Algorithm:
    def __init__(self, config: RTIConfig):
        self.config = config.copy()
        self.config.freeze()
        c = self.config
        rep = c["reporting"]
        name = rep["run_name"] or time.strftime("%Y%m%d-%H%M%S") + f"-{c['training']['algorithm']}"
        self.run_dir = Path(rep["run_dir"]).expanduser().resolve() / name
        self.graph = build_graph(c, self.run_dir)  # the actors' logs go to the run dir too
        try:
            self._setup(c)
        except BaseException:
            self.graph.kill()  # e.g. an unwritable run dir: the started actors must not keep their CPUs
            raise

    def _setup(self, c: RTIConfig) -> None:
        g, rep = self.graph, c["reporting"]
        self.model_path, self.renderer, self.engine_dtype = g.model_path, g.renderer, g.engine_dtype
        self.engines, self.runners, self.queue, self.learner = g.engines, g.runners, g.queue, g.learner
        self.train_ids = g.train_ids
        self.plugin = g.plugin  # the algorithm: its hooks change the recipe of train()
        self.iteration = 0
        self.monitor = ActorMonitor(g.kinds())
        self.redone: Counter = Counter()  # what the driver redid after a crash (faults/...)
        self.interactive = rep["progress_bar"] if rep["progress_bar"] is not None else sys.stderr.isatty()
        self.updates = Updates(g, c, self.monitor, self.redone, self.run_dir)  # learner steps, publishing, weights version
        self.rollouts = Rollouts(self.runners, c, self.updates, self.redone, self.interactive)
        self.warm_start = WarmStart(self)  # its steps done and planned are saved with each checkpoint
        self.resumed_from: Path | None = None
        self.rng = np.random.default_rng(c["debugging"]["seed"])
        self.next_launch: Launch | None = None  # the next iteration's rollouts, when they overlap learning
        self.reporter = Reporter(self.run_dir, tensorboard=rep["tensorboard"], panels=self.plugin.panels)
        self.reporter.start_trackers(rep["trackers"], self.run_dir.name, json.loads(self.config.to_json()),
                                     rep["tracker_samples"])
        (self.run_dir / "config.json").write_text(self.config.to_json())
        self._times: dict = {}  # this iteration's seconds per phase (timed)
        self.plugin.setup(self)

    # ---- the driver loop ------------------------------------------------------------------
    def train(self) -> dict:
        c, plugin = self.config, self.plugin
        self._times = times = {}
        with self.timed("sample"):
            trajectories, launch, sampled = plugin.sample(self)
        extra, joined = plugin.extra_trajectories(self, launch)  # off-policy: a teacher's traces
        groups, faults = scored_groups(trajectories + extra)  # an episode the env failed is never scored
        # the policy's own Pass@G, before any trace it did not sample joins (RTI's fixes, a teacher's)
        pre_pass_at_g = mean([max((tr.reward for tr in g if not tr.off_policy), default=0.0) >= 1.0 for g in groups])
        groups, transformed = plugin.transform_groups(self, groups)
        advantaged = plugin.advantages(self, groups)
        with self.timed("learn"):
            samples = [[learner_sample(tr) for tr in g] for g in groups]  # no text past this point
            versions = [min(tr.policy_version for tr in g) for g in groups]
            update = self.updates.start(samples, versions)
            if c["training"]["max_policy_lag"] > 0:  # the next iteration samples with these weights meanwhile
                self._rng_before_next = self.rng.bit_generator.state
                self.next_launch = self.rollouts.launch(self._train_specs(self.iteration + 1))
            learn = self.updates.finish(update, samples, versions)
        with self.timed("publish"):
            if not learn.get("skipped"):
                self.updates.publish()
        self.iteration += 1
        published = plugin.after_publish(self, groups)
        metrics = self._train_metrics([tr for tr in trajectories if not tr.infra_error], groups, learn, times)
        metrics["pre_intervention_pass_at_G"] = pre_pass_at_g
        # the iteration's tasks in draw order: runs with one seed can be checked to have
        # trained on the same tasks, whatever else differs
        metrics["task_ids"] = list(dict.fromkeys(tr.task_id for tr in trajectories))
        for part in (faults, self._fault_metrics(), sampled, joined, transformed, advantaged, published):
            metrics.update(part)
        self.reporter.log("train", self.iteration, metrics)
        self.reporter.log_trajectories(self.iteration, [tr for g in groups for tr in g])
        # after the log: a checkpoint of iteration N implies N's metrics row is written
        every = c["checkpointing"]["every"]
        if every and self.iteration % every == 0:
            t0 = time.perf_counter()
            self.save(periodic_path(self.run_dir, self.iteration))
            prune(self.run_dir, c["checkpointing"]["keep"])
            metrics["seconds"]["checkpoint"] = round(time.perf_counter() - t0, 3)
        return metrics

    def task_ids(self, split: str | None = None) -> list[str]:
        """The tasks of ``split`` (default: the evaluation split), in the environment's order."""
        return self.runners.call("task_ids", split or self.config["evaluation"]["split"])  # any live runner

    def evaluate(self, split: str | None = None, num_tasks: int | None = None, method: str | None = None,
                 record_path: str | os.PathLike | None = None, num_samples: int | None = None,
                 temperature: float | None = None, task_ids: list[str] | None = None) -> dict:
        """n rollouts per task, no learning, no intervention; Pass@k / Pass^k summary
        (``rti_actors.evaluation.evaluate`` says what each option does)."""
        return evaluate(self, split, num_tasks, method, record_path, num_samples, temperature, task_ids)

    def pretrain_sft(self, demonstrations) -> dict:
        """Supervised warm start on demonstrations (a JSONL path or a list of records), with
        ``.sft(...)``'s settings; then the engines get the new weights
        (``rti_actors.warm_start.WarmStart.run``)."""
        return self.warm_start.run(demonstrations)

    @property
    def sft_progress(self) -> dict:
        return self.warm_start.progress

    # ---- checkpoints ----------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> str:
        """Learner, config and driver state into ``path``, atomically (``rti_actors.checkpoints``):
        a save killed midway leaves the previous checkpoint there whole."""
        path = Path(path)
        # rollouts still in flight are not saved: the restored run draws the same tasks again
        rng = self._rng_before_next if self.next_launch is not None else self.rng.bit_generator.state
        state = {"iteration": self.iteration, "version": self.version, "rng": rng, "learner_step": self.learner_step,
                 "sft": self.sft_progress}
        with atomic_dir(path, {k: v for k, v in state.items() if k != "rng"}) as tmp:
            self.updates.save(str(tmp / "learner"))
            (tmp / "config.json").write_text(self.config.to_json())
            (tmp / "algorithm_state.json").write_text(json.dumps(state))
            self.plugin.save_state(tmp)
        self.updates.last_save = path
        return str(path)

    def resume(self, allow_config_change: bool = False) -> int:
        """Continue this run (built with the same run_dir and run_name) from the newest
        periodic checkpoint in its directory; returns the iteration it continues from."""
        found = periodic(self.run_dir)
        if found:
            self.restore(found[-1], allow_config_change)
            self.resumed_from = found[-1]
            self.reporter.rewind(self.iteration, self.learner_step)
        return self.iteration

    def restore(self, path: str | os.PathLike, allow_config_change: bool = False) -> list[str]:
        """Continue from the checkpoint at ``path``: all of it or nothing. The checkpoint is
        verified (every file there, unaltered, none holding code) before anything changes; a
        checkpoint made with other training options is refused unless ``allow_config_change``,
        and then this run's options apply and the changes are returned (and logged)."""
        path = verify(path)
        saved = json.loads((path / "config.json").read_text())
        changed = config_changes(saved, json.loads(self.config.to_json()))
        model = [c for c in changed if c.startswith("policy.model:")]
        if model:  # other weights altogether: no override makes sense
            raise ConfigError(f"checkpoint {path} was made with another model ({model[0]}); build from the saved "
                              "config instead")
        if changed and not allow_config_change:
            raise ConfigError(f"checkpoint {path} was made with other training options ({'; '.join(changed)}); build "
                              "with its config.json, or pass allow_config_change=True to continue with this config's")
        if changed:
            log.warning("restoring %s with changed options: %s", path, "; ".join(changed))
        state = json.loads((path / "algorithm_state.json").read_text())
        plugin_state = self.plugin.read_state(path)  # read before anything changes
        self.updates.load(path)
        self.iteration, self.rng.bit_generator.state = state["iteration"], state["rng"]
        self.warm_start.progress = state.get("sft", {})
        self.plugin.apply_state(plugin_state)
        if self.next_launch is not None:  # rollouts launched before the restore: drawn from the old state
            self.rollouts.collect(self.next_launch)
            self.next_launch = None
        self.updates.republish(state["version"])
        return changed

    def export_policy(self, path: str | os.PathLike) -> str:
        """A plain Hugging Face folder that transformers and vLLM load."""
        return self.learner.export_hf(str(path))

    def stop(self) -> None:
        # the actors go whatever the plots and trackers do: a run that failed must not
        # keep its CPUs from the next one in the same cluster
        try:
            if self.config["reporting"]["plot"]:
                self.reporter.plot()
            self.reporter.close()
        finally:
            self.graph.kill()


    # ---- what plug-ins call ---------------------------------------------------------------
    def sample_iteration(self) -> tuple[Launch, list[Trajectory]]:
        """The default rollouts: the plug-in's episodes per task for the picked tasks, launched
        now or, with max_policy_lag, while the last update ran."""
        launch = self.next_launch or self.rollouts.launch(self._train_specs(self.iteration))
        self.next_launch = None
        return launch, self.rollouts.collect(launch)

    def play(self, specs: list[EpisodeSpec]) -> list[Trajectory]:
        """These episodes, in spec order, with the rollout sampling (crashes redone)."""
        return self.rollouts.play(specs)

    @property
    def version(self) -> int:
        """The weights version the engines serve."""
        return self.updates.version

    @property
    def learner_step(self) -> int:
        return self.updates.learner_step

    @contextmanager
    def timed(self, name: str):
        """Time a phase of this iteration (``seconds/<name>`` in its metrics)."""
        with _timed(self._times, name):
            yield

    # ---- pieces ---------------------------------------------------------------------------
    def pick_tasks(self, n: int) -> list[str]:
        replace = n > len(self.train_ids)
        idx = self.rng.choice(len(self.train_ids), size=n, replace=replace)
        return [self.train_ids[i] for i in idx]

    def _train_specs(self, round_: int) -> list[EpisodeSpec]:
        t, seed = self.config["training"], self.config["debugging"]["seed"]
        tasks = self.pick_tasks(t["tasks_per_iteration"])
        per_task = self.plugin.episodes_per_task(self.config)
        return [EpisodeSpec(tid, j, seed, round_, "train") for tid in tasks for j in range(per_task)]

    def _fault_metrics(self) -> dict:
        """Restarts per actor kind (seen by their incarnations) and what the driver redid."""
        seen = self.monitor.check()
        return {**{f"faults/{k}": v for k, v in seen.items()}, **{f"faults/redone/{k}": self.redone[k] for k in REDONE}}

    def _train_metrics(self, trajectories, groups, learn, times) -> dict:
        rewards = [t.reward for t in trajectories]
        stats = ray.get(self.queue.get_stats.remote())
        return {
            "iteration": self.iteration, "algorithm": self.plugin.name, "policy_version": self.version,
            "reward_mean": mean(rewards), "success_rate": mean([r >= 1.0 for r in rewards]),
            "num_episodes": len(trajectories), "num_groups": len(groups),
            "frac_zero_variance_groups": mean([not is_learnable(g) for g in groups]),
            "frac_all_fail_groups": mean([all_failed(g) for g in groups]),
            "pass_at_G": mean([max(t.reward for t in g) >= 1.0 for g in groups]),
            "gen_tokens": int(sum(t.gen_tokens for t in trajectories)),
            "turns_mean": mean([t.num_turns for t in trajectories]),
            "frac_turns_unparsable": (sum(t.info.get("unparsable_turns", 0) for t in trajectories)
                                      / max(1, sum(t.num_turns for t in trajectories))),
            "frac_context_truncated": mean([t.context_truncated for t in trajectories]),
            "seconds": {k: round(v, 3) for k, v in times.items()}, "learner": learn, "queue": stats,
        }



@contextmanager
def _timed(times: dict, name: str):
    t = time.perf_counter()
    yield
    times[name] = times.get(name, 0.0) + time.perf_counter() - t
