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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import ray

from rti_actors.build import build_graph, rollout_sampling
from rti_actors.checkpoints import atomic_dir, config_changes, periodic, periodic_path, prune, resolve, verify
from rti_actors.evaluation import evaluate
from rti_actors.faults import ActorMonitor, died
from rti_actors.groups import all_failed, is_learnable, scored_groups
from rti_actors.metrics import mean
from rti_actors.options import ConfigError
from rti_actors.reporting import Reporter, progress_bar
from rti_actors.trajectory import EpisodeSpec, Trajectory, learner_sample
from rti_actors.warm_start import WarmStart

if TYPE_CHECKING:  # the builder sits above the graph it starts
    from rti_actors.config import RTIConfig

log = logging.getLogger("rti_actors")

# what the driver redoes after a crash, each reported (as faults/redone/<name>) from the start
REDONE = ("rollout_chunks", "stale_episodes", "engines_repaired", "queue_puts", "learner_rebuilds",
          "learner_steps_lost")


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
        self.weight_sync, self.train_ids = g.weight_sync, g.train_ids
        self.plugin = g.plugin  # the algorithm: its hooks change the recipe of train()
        self.iteration = 0
        self.version = 0
        self.learner_step = 0  # the learner's optimiser steps, to count what a learner crash lost
        self.warm_start = WarmStart(self)  # its steps done and planned are saved with each checkpoint
        self.monitor = ActorMonitor(g.kinds())
        self.redone: Counter = Counter()  # what the driver redid after a crash (faults/...)
        self._last_save: Path | None = None  # where a crashed learner is rebuilt from
        self.resumed_from: Path | None = None
        self.rng = np.random.default_rng(c["debugging"]["seed"])
        self._next: _Launch | None = None  # the next iteration's rollouts, when they overlap learning
        self.reporter = Reporter(self.run_dir, tensorboard=rep["tensorboard"])
        (self.run_dir / "config.json").write_text(self.config.to_json())
        self.interactive = rep["progress_bar"] if rep["progress_bar"] is not None else sys.stderr.isatty()
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
            update = self._start_update(samples, versions)
            if c["training"]["max_policy_lag"] > 0:  # the next iteration samples with these weights meanwhile
                self._rng_before_next = self.rng.bit_generator.state
                self._next = self._launch(self._train_specs(self.iteration + 1), self._sampling())
            learn = self._finish_update(update, samples, versions)
        with self.timed("publish"):
            if not learn.get("skipped"):
                self._publish()
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
        return ray.get(self.runners[0].task_ids.remote(split or self.config["evaluation"]["split"]))

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
        rng = self._rng_before_next if self._next is not None else self.rng.bit_generator.state
        state = {"iteration": self.iteration, "version": self.version, "rng": rng, "learner_step": self.learner_step,
                 "sft": self.sft_progress}
        with atomic_dir(path, {k: v for k, v in state.items() if k != "rng"}) as tmp:
            self.learner.save(str(tmp / "learner"))
            (tmp / "config.json").write_text(self.config.to_json())
            (tmp / "algorithm_state.json").write_text(json.dumps(state))
            self.plugin.save_state(tmp)
        self._last_save = path
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
        before = self._last_save
        try:
            self.learner_step = self.learner.load(str(path / "learner"))
        except Exception as err:
            # a rank may have loaded part of its state: put the learner back as it was
            self.learner_step = self._fresh_learner(before, f"restoring {path} failed ({type(err).__name__})")
            raise
        self._last_save = path
        self.iteration, self.rng.bit_generator.state = state["iteration"], state["rng"]
        self.warm_start.progress = state.get("sft", {})
        self.plugin.apply_state(plugin_state)
        if self._next is not None:  # rollouts launched before the restore: drawn from the old state
            self._collect(self._next)
            self._next = None
        current = max(ray.get([e.version.remote() for e in self.engines]))
        if state["version"] == current == 0:
            return changed  # nothing was ever published: the engines' folder weights are the learner's
        self.version = max(state["version"], current)
        self._publish(bump=current >= state["version"])
        return changed

    def export_policy(self, path: str | os.PathLike) -> str:
        """A plain Hugging Face folder that transformers and vLLM load."""
        return self.learner.export_hf(str(path))

    def stop(self) -> None:
        if self.config["reporting"]["plot"]:
            self.reporter.plot()
        self.reporter.close()
        self.graph.kill()


    # ---- what plug-ins call ---------------------------------------------------------------
    def sample_iteration(self) -> tuple[_Launch, list[Trajectory]]:
        """The default rollouts: the plug-in's episodes per task for the picked tasks, launched
        now or, with max_policy_lag, while the last update ran."""
        launch = self._next or self._launch(self._train_specs(self.iteration), self._sampling())
        self._next = None
        return launch, self._collect(launch)

    def play(self, specs: list[EpisodeSpec]) -> list[Trajectory]:
        """These episodes, in spec order, with the rollout sampling (crashes redone)."""
        return self._sample(specs, self._sampling())

    @contextmanager
    def timed(self, name: str):
        """Time a phase of this iteration (``seconds/<name>`` in its metrics)."""
        with _timed(self._times, name):
            yield

    # ---- pieces ---------------------------------------------------------------------------
    def _sampling(self, temperature: float | None = None) -> dict:
        return rollout_sampling(self.config["policy"], temperature)

    def pick_tasks(self, n: int) -> list[str]:
        replace = n > len(self.train_ids)
        idx = self.rng.choice(len(self.train_ids), size=n, replace=replace)
        return [self.train_ids[i] for i in idx]

    def _train_specs(self, round_: int) -> list[EpisodeSpec]:
        t, seed = self.config["training"], self.config["debugging"]["seed"]
        tasks = self.pick_tasks(t["tasks_per_iteration"])
        per_task = self.plugin.episodes_per_task(self.config)
        return [EpisodeSpec(tid, j, seed, round_, "train") for tid in tasks for j in range(per_task)]

    def _sample(self, specs: list[EpisodeSpec], sampling: dict) -> list[Trajectory]:
        return self._collect(self._launch(specs, sampling))

    def _launch(self, specs: list[EpisodeSpec], sampling: dict) -> _Launch:
        """Spread episode specs over the runners (collected by ``_collect``)."""
        n = len(self.runners)
        chunks = [specs[i::n] for i in range(n)]
        pending = {self.runners[i].sample.remote(ch, sampling): (i, ch, 0) for i, ch in enumerate(chunks) if ch}
        return _Launch(specs, sampling, pending, self.version)

    def _collect(self, launch: _Launch) -> list[Trajectory]:
        """The launched episodes in spec order; a chunk whose runner dies is re-run on the
        next runner (a restarted actor included), so nothing is lost or duplicated. An
        episode with a turn from weights older than those it was launched with met an
        engine that restarted and was not repaired in time: the engines are brought up to
        date and the episode is sampled again, so no stale turn is ever trained on."""
        results = self._gather(launch)
        for _ in range(self.config["fault_tolerance"]["max_restarts"] + 1):
            stale = {(t.task_id, t.sample_index) for t in results
                     if t.turn_versions and min(t.turn_versions) < launch.version}
            if not stale:
                return results
            self.redone["stale_episodes"] += len(stale)
            log.warning("%d episode(s) had turns from weights older than version %d; repairing the engines and "
                        "sampling them again", len(stale), launch.version)
            self._repair_engines()
            again = [sp for sp in launch.specs if (sp.task_id, sp.sample_index) in stale]
            fresh = {(t.task_id, t.sample_index): t for t in self._gather(self._launch(again, launch.sampling))}
            results = [fresh.get((t.task_id, t.sample_index), t) for t in results]
        raise RuntimeError(f"episodes kept meeting engines older than version {launch.version}: an engine restarts "
                           "faster than the driver can repair it")

    def _gather(self, launch: _Launch) -> list[Trajectory]:
        specs, sampling, pending = launch.specs, launch.sampling, launch.pending
        n = len(self.runners)
        results: list[Trajectory] = []
        retries = self.config["fault_tolerance"]["max_restarts"] + 1
        bar = progress_bar(len(specs), self.interactive, "rollouts")
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            i, chunk, tries = pending.pop(ref)
            try:
                out = ray.get(ref)
            except ray.exceptions.RayActorError as err:
                if not died(err):
                    # the runner is alive; an actor it called (an engine) is gone for good
                    raise RuntimeError(f"env runner {i} could not sample: {err.cause!r}") from err
                if tries >= retries:
                    raise RuntimeError(f"env runner {i} failed {tries + 1} times; giving up: {err}") from err
                j = (i + 1 + tries) % n
                pending[self.runners[j].sample.remote(chunk, sampling)] = (j, chunk, tries + 1)
                self.redone["rollout_chunks"] += 1
                continue
            results += out
            bar.update(len(out))
        bar.close()
        order = {(s.task_id, s.sample_index): k for k, s in enumerate(specs)}
        return sorted(results, key=lambda t: order[(t.task_id, t.sample_index)])

    def play_branches(self, requests: list) -> list:
        """AEPO's branches: each ``Continuation`` played on the runners (spread like episodes), a
        trajectory or a ``ReplayFailure`` per request, in request order. As with ``_collect``, a
        shard whose runner died goes to the next runner, and a branch with a turn from weights
        older than the driver's is played again once the engines are repaired."""
        n, retries = len(self.runners), self.config["fault_tolerance"]["max_restarts"] + 1
        out: list = [None] * len(requests)
        todo = list(range(len(requests)))
        def submit(j: int, shard: list[int]):
            return self.runners[j].continue_from.remote([requests[k] for k in shard], self._sampling())

        for _ in range(retries + 1):
            pending = [(i, 0, shard, submit(i, shard)) for i, shard in enumerate(todo[i::n] for i in range(n)) if shard]
            while pending:  # every shard is sent before any is waited for, so the runners play together
                i, tries, shard, ref = pending.pop(0)
                try:
                    got = ray.get(ref)
                except ray.exceptions.RayActorError as err:
                    j = (i + tries) % n
                    if not died(err) or tries == retries:
                        raise RuntimeError(f"env runner {j} could not play AEPO's branches: {err}") from err
                    self.redone["rollout_chunks"] += 1
                    pending.append((i, tries + 1, shard, submit((i + tries + 1) % n, shard)))
                    continue
                for k, res in zip(shard, got):
                    out[k] = res
            todo = [k for k in todo if isinstance(out[k], Trajectory) and out[k].turn_versions
                    and min(out[k].turn_versions) < self.version]
            if not todo:
                return out
            self.redone["stale_episodes"] += len(todo)
            self._repair_engines()
        raise RuntimeError(f"AEPO's branches kept meeting engines older than version {self.version}")

    def _publish(self, bump: bool = True) -> None:
        if bump:
            self.version += 1
        if self.weight_sync == "broadcast":
            try:
                ray.get([self.learner.broadcast_weights()]
                        + [e.receive_weights.remote(self.graph.weight_meta, self.version) for e in self.engines])
                ray.get(self.graph.latest.set.remote(self.version, None))  # no copy to restart from
                return
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
                # a restarted engine is no longer in the group: publish through the object
                # store from now on (always correct, one copy per engine)
                log.warning("weight broadcast failed (%s); using the object store", type(err).__name__)
                self.weight_sync = "object_store"
        # the learner's return value goes to the object store once and every engine reads it
        # from there (the driver never holds a copy), in a 16-bit engine's dtype: it casts anyway
        weights = self._weights()
        try:
            ray.get([e.update_weights.remote(weights, self.version) for e in self.engines])
        except ray.exceptions.RayActorError as err:
            # engines retry on their own, so a death that reaches here is the learner's (before
            # its weights were out): publish a rebuilt learner's weights instead
            if not died(err) or self._learner_alive():
                raise
            self._rebuild_learner(err)
            weights = self._weights()
            ray.get([e.update_weights.remote(weights, self.version) for e in self.engines])
        ray.get(self.graph.latest.set.remote(self.version, [weights]))  # kept for engines that restart

    def _weights(self):
        return self.learner.get_weights(self.engine_dtype if self.engine_dtype in ("bfloat16", "float16") else None)

    def _repair_engines(self) -> None:
        """Give every engine that is behind ``self.version`` the current weights."""
        behind = [e for e, v in zip(self.engines, ray.get([e.version.remote() for e in self.engines]))
                  if v < self.version]
        if behind:
            _, refs = ray.get(self.graph.latest.get.remote())
            weights = refs[0] if refs else self._weights()
            ray.get([e.update_weights.remote(weights, self.version) for e in behind])
            self.redone["engines_repaired"] += len(behind)

    # ---- the update, redone after a crash of the replay queue or the learner -----------------
    def _start_update(self, samples: list, versions: list) -> tuple:
        incarnation = ray.get(self.queue.put.remote(samples, versions))
        t = self.config["training"]
        return incarnation, self.learner.pull_and_update(self.queue, len(samples), self.version,
                                                        t["skip_zero_variance_groups"])

    def _finish_update(self, update: tuple, samples: list, versions: list) -> dict:
        """The step's metrics. The driver keeps the iteration's samples until the step is
        done: if the queue restarted (empty) between the put and the learner's get, or the
        learner died, the samples are put again and the step redone, on a learner rebuilt
        from the last checkpoint."""
        for _ in range(self.config["fault_tolerance"]["max_restarts"] + 1):
            incarnation, ref = update
            try:
                learn = self.learner.result(ref)
            except ray.exceptions.RayActorError as err:
                if not died(err):
                    raise  # raised inside the step
                self._rebuild_learner(err)  # a learner rank died
            else:
                if learn["queue_incarnation"] == incarnation:
                    self.learner_step = learn.get("step", self.learner_step)
                    return learn
                log.warning("the replay queue restarted before the learner pulled; putting the groups again")
                self.redone["queue_puts"] += 1
            ray.get(self.queue.clear.remote())
            update = self._start_update(samples, versions)
        raise RuntimeError("the update failed after every retry: the learner or the replay queue keeps crashing")

    def _learner_alive(self) -> bool:
        try:
            return self.learner.ping()
        except ray.exceptions.RayActorError:
            return False

    def _rebuild_learner(self, err: Exception) -> None:
        step = self._fresh_learner(self._last_save, f"the learner died ({type(err).__name__})")
        self.redone["learner_rebuilds"] += 1
        self.redone["learner_steps_lost"] += self.learner_step - step
        self.learner_step = step

    def _fresh_learner(self, ckpt: Path | None, why: str) -> int:
        """A new learner group from ``ckpt`` (or the model folder when nothing was trained
        yet); returns its step."""
        if ckpt is None and self.learner_step > 0:
            raise RuntimeError(f"{why} after {self.learner_step} steps and this run has no checkpoint to rebuild the "
                               "learner from: set checkpointing(every=N) to survive this")
        log.warning("%s; rebuilding the learner from %s", why, ckpt or "the model folder")
        self.learner.rebuild()
        step = self.learner.load(str(resolve(ckpt) / "learner")) if ckpt is not None else 0
        self.monitor.replace("learner", self.learner.ranks)
        self.weight_sync = "object_store"  # the new ranks are not in the broadcast group
        return step

    def _fault_metrics(self) -> dict:
        """Restarts per actor kind (seen by their incarnations) and what the driver redid."""
        seen = self.monitor.check()
        return {**{f"faults/{k}": v for k, v in seen.items()}, **{f"faults/redone/{k}": self.redone[k] for k in REDONE}}

    def _train_metrics(self, trajectories, groups, learn, times) -> dict:
        rewards = [t.reward for t in trajectories]
        stats = ray.get(self.queue.get_stats.remote())
        return {
            "iteration": self.iteration, "policy_version": self.version,
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


@dataclass
class _Launch:
    """Rollouts sent to the runners and not collected yet: refs -> (runner, chunk, tries)."""

    specs: list[EpisodeSpec]
    sampling: dict
    pending: dict
    version: int  # the driver's weights version at launch: no turn may come from older ones


@contextmanager
def _timed(times: dict, name: str):
    t = time.perf_counter()
    yield
    times[name] = times.get(name, 0.0) + time.perf_counter() - t
