"""The learner's steps and the weights' way to the engines, with what a crash makes the
driver redo: the iteration's samples are kept until the step is done, so a replay queue
that restarted empty or a learner that died gets them again (the learner rebuilt from the
newest checkpoint, or from the last published weights when there is none); a publish or a
checkpoint that meets a dead learner rebuilds it, redoes the step it lost from the samples
the driver still holds, and publishes or saves that;
an engine behind the current version gets the latest weights again; an engine dead for
good gets no more weights, and the run goes on with the others (``failover.Members``)."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import ray

from rti_actors.checkpoints import load_error, resolve
from rti_actors.failover import Members
from rti_actors.faults import ACTOR_FAILURES, ActorMonitor, died

log = logging.getLogger("rti_actors")


class Updates:
    """``version``: the weights version the engines serve (bumped by each publish);
    ``learner_step``: the learner's optimiser steps, to count what a learner crash lost;
    ``last_save``: the checkpoint a crashed learner is rebuilt from; ``published_step``: the
    learner step whose weights the engines got last (a learner without a checkpoint is
    rebuilt from them)."""

    def __init__(self, graph, config, monitor: ActorMonitor, redone: Counter, run_dir: Path | None = None):
        self.graph, self.learner, self.queue = graph, graph.learner, graph.queue
        self.engines = Members("engine", graph.engines, max_tries=config["fault_tolerance"]["max_restarts"] + 1)
        self.weight_sync = graph.weight_sync
        self.training, self.max_restarts = config["training"], config["fault_tolerance"]["max_restarts"]
        self.monitor, self.redone = monitor, redone
        self.version = 0
        self.learner_step = 0
        self.published_step = 0
        self.last_save: Path | None = None
        self.run_dir = run_dir
        self.lora = bool(config["learners"]["lora"])
        # (step, samples, versions, weights version it ran at) of the newest step, for its redo
        self.last_step: tuple | None = None

    # ---- one step: put the groups, let the learner pull them ------------------------------
    def start(self, samples: list, versions: list, version: int | None = None) -> tuple:
        """Put the groups and let the learner pull them, as of weights ``version`` (default:
        the current one; a redone step pulls as of the version it first ran at, or the
        queue's lag bound would drop its groups as stale)."""
        version = self.version if version is None else version
        incarnation = ray.get(self.queue.put.remote(samples, versions))
        return incarnation, self.learner.pull_and_update(self.queue, len(samples), version,
                                                        self.training["skip_zero_variance_groups"])

    def finish(self, update: tuple, samples: list, versions: list, version: int | None = None) -> dict:
        """The step's metrics. If the queue restarted (empty) between the put and the
        learner's get, or the learner died, the samples are put again and the step redone,
        on a learner rebuilt from the last checkpoint."""
        version = self.version if version is None else version
        for _ in range(self.max_restarts + 1):
            incarnation, ref = update
            try:
                learn = self.learner.result(ref)
            except ACTOR_FAILURES as err:
                if not died(err):
                    raise  # raised inside the step
                self.rebuild_learner(err)  # a learner rank died
            else:
                if learn["queue_incarnation"] == incarnation:
                    self.learner_step = learn.get("step", self.learner_step)
                    self.last_step = (self.learner_step, samples, versions, version)
                    return learn
                log.warning("the replay queue restarted before the learner pulled; putting the groups again")
                self.redone["queue_puts"] += 1
            ray.get(self.queue.clear.remote())
            update = self.start(samples, versions, version)
        raise RuntimeError("the update failed after every retry: the learner or the replay queue keeps crashing")

    # ---- publishing -----------------------------------------------------------------------
    def publish(self, bump: bool = True) -> None:
        """The learner's weights to every engine, as version ``version + 1`` (``bump``) or
        as the current version again."""
        if bump:
            self.version += 1
        if self.weight_sync == "broadcast":
            try:
                ray.get([self.learner.broadcast_weights()]
                        + [e.receive_weights.remote(self.graph.weight_meta, self.version) for e in self.engines])
                ray.get(self.graph.latest.set.remote(self.version, None))  # no copy to restart from
                return
            except (*ACTOR_FAILURES, ray.exceptions.RayTaskError) as err:
                # a restarted engine is no longer in the group: publish through the object
                # store from now on (always correct, one copy per engine)
                log.warning("weight broadcast failed (%s); using the object store", type(err).__name__)
                self.weight_sync = "object_store"
        # the learner's return value goes to the object store once and every engine reads it
        # from there (the driver never holds a copy), in a 16-bit engine's dtype: it casts anyway
        weights = self.weights()
        try:
            self.engines.each("update_weights", weights, self.version)  # an engine dead for good is dropped
        except ACTOR_FAILURES as err:
            # an engine's own death does not reach here, so this one is the learner's (before
            # its weights were out): publish a rebuilt learner's weights instead
            if not died(err) or self.learner_alive():
                raise
            self.recover_learner(err)
            weights = self.weights()
            self.engines.each("update_weights", weights, self.version)
        ray.get(self.graph.latest.set.remote(self.version, [weights]))  # kept for engines that restart
        self.published_step = self.learner_step

    def weights(self):
        dtype = self.graph.engine_dtype
        return self.learner.get_weights(dtype if dtype in ("bfloat16", "float16") else None)

    def repair_engines(self) -> None:
        """Give every engine that is behind ``version`` the current weights."""
        behind = [i for i, v in self.engines.each("version").items() if v < self.version]
        if behind:
            _, refs = ray.get(self.graph.latest.get.remote())
            weights = refs[0] if refs else self.weights()
            self.engines.each("update_weights", weights, self.version, only=behind)
            self.redone["engines_repaired"] += len(behind)

    # ---- a restore ------------------------------------------------------------------------
    def load(self, path: Path) -> None:
        """The learner's state from the checkpoint at ``path``, which a crashed learner is
        then rebuilt from. On a failure the learner is put back as it was and the error raised."""
        try:
            self.learner_step = self.learner.load(str(path / "learner"))
        except Exception as err:
            # a rank may have loaded part of its state: put the learner back as it was
            self.learner_step = self.fresh_learner(self.last_save, f"restoring {path} failed ({type(err).__name__})")
            named = load_error(path / "learner", err)  # the folder and the file, whatever the backend said
            if named is err:
                raise
            raise named from err
        self.last_save = path

    def republish(self, saved_version: int) -> None:
        """After a restore: the engines serve the restored weights, under a version above
        any they have seen (``saved_version``: the checkpoint's)."""
        current = max(self.engines.each("version").values())
        if saved_version == current == 0:
            return  # nothing was ever published: the engines' folder weights are the learner's
        self.version = max(saved_version, current)
        self.publish(bump=current >= saved_version)

    # ---- the learner after a crash --------------------------------------------------------
    def learner_alive(self) -> bool:
        try:
            return self.learner.ping()
        except ACTOR_FAILURES:
            return False

    def save(self, path: str) -> None:
        """The learner's state into ``path``. A learner that dies while saving is rebuilt,
        its lost step redone, and saved again: the checkpoint holds the weights published."""
        for _ in range(self.max_restarts + 1):
            try:
                self.learner.save(path)
                return
            except ACTOR_FAILURES as err:
                if not died(err):
                    raise
                self.recover_learner(err)
        raise RuntimeError(f"saving the learner into {path} failed after every retry: its ranks keep dying")

    def rebuild_learner(self, err: Exception) -> None:
        """A new learner group in place of one whose rank died; a rank of the new group that
        dies while it loads (a node going away mid-recovery) makes the next try."""
        why = f"the learner died ({type(err).__name__})"
        for _ in range(self.max_restarts + 1):
            try:
                step = self.fresh_learner(self.last_save, why)
                break
            except ACTOR_FAILURES as again:
                if not died(again):
                    raise
                why = f"the rebuilt learner died too ({type(again).__name__})"
        else:
            raise RuntimeError(f"{why}; no rebuild of the learner lived through its loading")
        self.redone["learner_rebuilds"] += 1
        self.redone["learner_steps_lost"] += self.learner_step - step
        self.learner_step = step

    def recover_learner(self, err: Exception) -> None:
        """The learner died after its step, before its weights were published or saved: it is
        rebuilt and, when what it came back to is one step behind, that step is redone on the
        iteration's samples (the same update: the same weights, optimiser state and batch)."""
        self.rebuild_learner(err)
        step, samples, versions, version = self.last_step or (None, None, None, None)
        if step == self.learner_step + 1:
            log.warning("redoing learner step %d, lost with the learner", step)
            ray.get(self.queue.clear.remote())
            learn = self.finish(self.start(samples, versions, version), samples, versions, version)
            if learn.get("step") != step:
                raise RuntimeError(f"redoing learner step {step} stepped to {learn.get('step')} "
                                   f"({learn.get('num_groups_trained', 0)} groups trained): the run cannot go on "
                                   "with weights other than those it published")
            self.redone["learner_steps_lost"] -= 1
            self.redone["learner_steps_redone"] += 1

    def fresh_learner(self, ckpt: Path | None, why: str) -> int:
        """A new learner group from ``ckpt`` (or the model folder when nothing was trained
        yet, or the last published weights when there is no checkpoint); returns its step."""
        if ckpt is None and self.learner_step > 0:
            return self._learner_from_published(why)
        log.warning("%s; rebuilding the learner from %s", why, ckpt or "the model folder")
        self.learner.rebuild()
        step = self.learner.load(str(resolve(ckpt) / "learner")) if ckpt is not None else 0
        self.monitor.replace("learner", self.learner.ranks)
        self.weight_sync = "object_store"  # the new ranks are not in the broadcast group
        return step

    def _learner_from_published(self, why: str) -> int:
        """A new learner group on the weights the engines were last given, with a fresh
        optimiser: what the engines sample from is kept, Adam's moments are not. A broadcast
        publish keeps no copy to rebuild from, and LoRA's adapters cannot be told apart from
        the merged weights published, so those runs need a checkpoint."""
        version, refs = ray.get(self.graph.latest.get.remote())
        if not refs or self.lora or self.run_dir is None:
            reason = ("LoRA runs publish merged weights" if self.lora else
                      "its weights went to the engines by broadcast, which keeps no copy")
            raise RuntimeError(f"{why} after {self.learner_step} steps; this run has no checkpoint to rebuild the "
                               f"learner from and {reason}: set checkpointing(every=N) to survive this")
        folder = self.run_dir / "learner-rebuild" / f"v{version}"
        ray.get(ray.remote(write_model_folder).options(num_cpus=0).remote(refs[0], self.graph.model_path, str(folder)))
        log.warning("%s and this run has no checkpoint: rebuilding the learner from the weights published as "
                    "version %d (step %d) with a fresh optimiser state (Adam's moments are lost)%s", why, version,
                    self.published_step, "; they were cast to the engines' 16-bit dtype"
                    if self.graph.engine_dtype in ("bfloat16", "float16") else "")
        self.learner.rebuild(str(folder))
        self.learner.set_step(self.published_step)
        self.monitor.replace("learner", self.learner.ranks)
        self.weight_sync = "object_store"
        self.redone["learner_from_weights"] += 1
        return self.published_step


def write_model_folder(weights: dict, model_path: str, out: str) -> str:
    """``weights`` (HF names) as a model folder a learner loads: the model folder's own files
    (config, tokenizer, generation settings) beside one safetensors file of them."""
    import shutil

    from safetensors.torch import save_file

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in Path(model_path).iterdir():
        if f.is_file() and f.suffix not in (".safetensors", ".bin", ".pt", ".pth") and not f.name.endswith(".index.json"):
            shutil.copy2(f, out_dir / f.name)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(out_dir / "model.safetensors"))
    return str(out_dir)
