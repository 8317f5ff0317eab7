"""The supervised warm start: cross-entropy on the assistant tokens of demonstrations,
through the run's renderer, learner and checkpoints, before any RL. Its progress (steps
planned and done) is saved with every checkpoint, so a killed warm start resumes at its
next step."""

from __future__ import annotations

import os
import time

import numpy as np

from rti_actors.checkpoints import periodic_path, prune
from rti_actors.demonstrations import reaching, read_jsonl, to_sample, write_jsonl
from rti_actors.reporting import progress_bar


class WarmStart:
    def __init__(self, driver):
        self.driver = driver  # the run's Algorithm: its learner, renderer, checkpoints
        self.progress: dict = {}  # the steps done and planned

    def run(self, demonstrations) -> dict:
        """Supervised warm start: cross-entropy on the assistant tokens of demonstrations (a
        JSONL path or a list of records, see ``rti_actors.demonstrations``), through the
        same renderer, learner and checkpoints as RL; then the engines get the new weights.
        Settings: ``.sft(lr, epochs, batch_size, min_reward, reset_optimizer, checkpoint_every)``.

        A run resumed from a checkpoint the warm start wrote (``sft(checkpoint_every=N)``)
        continues it at the next step, in the same order; from a checkpoint after it, it
        trains nothing. Either way the demonstrations must be the ones it started with."""
        d = self.driver
        s, max_len = d.config["sft"], d.config["policy"]["max_model_len"]
        t0 = time.perf_counter()
        records = reaching(read_jsonl(demonstrations) if isinstance(demonstrations, (str, os.PathLike))
                           else list(demonstrations), s["min_reward"])
        samples = [to_sample(d.renderer, r) for r in records]
        too_long = sum(len(x["ids"]) > max_len for x in samples)
        kept = [r for r, x in zip(records, samples) if len(x["ids"]) <= max_len]
        samples = [{k: v for k, v in x.items() if k != "messages"} for x in samples if len(x["ids"]) <= max_len]
        if not samples:
            raise ValueError(f"no demonstration to train on: {len(records)} passed min_reward={s['min_reward']}, "
                             f"{too_long} of them longer than max_model_len={max_len}")
        # Each epoch's order comes from the seed and the epoch alone, so a resumed warm start
        # takes the same batches as the run it continues.
        seed = d.config["debugging"]["seed"]
        steps = [(epoch, order[i:i + s["batch_size"]]) for epoch in range(s["epochs"])
                 for order in [np.random.default_rng((seed, epoch)).permutation(len(samples))]
                 for i in range(0, len(samples), s["batch_size"])]
        plan = {"steps": len(steps), "demonstrations": len(samples), "tokens": sum(len(x["ids"]) for x in samples)}
        done = self.progress.get("done", 0)
        if done and {k: self.progress.get(k) for k in plan} != plan:
            raise ValueError(f"this run was warm-started on other demonstrations ({self.progress}, now {plan}): "
                             "resume it with the same ones, or start a new run")
        if done == 0:
            write_jsonl(d.run_dir / "demonstrations.jsonl", kept, append=True)  # what is trained on
        losses, tokens = [], 0
        bar = progress_bar(len(steps) - done, d.interactive, "sft")
        for k in range(done, len(steps)):
            epoch, order = steps[k]
            m = d.learner.update([samples[j] for j in order], "sft", s["lr"])
            d.updates.learner_step = m["step"]
            m["epoch"] = epoch
            d.reporter.log("sft", m["step"], m)
            losses.append(m["loss"])
            tokens += m["num_tokens"]
            bar.update(1)
            self.progress = {**plan, "done": k + 1}
            if k + 1 == len(steps):
                if s["reset_optimizer"]:
                    d.learner.reset_optimizer_state()
                d.updates.publish()
            if s["checkpoint_every"] and ((k + 1) % s["checkpoint_every"] == 0 or k + 1 == len(steps)):
                d.save(periodic_path(d.run_dir, d.iteration, sft_step=k + 1))
                prune(d.run_dir, d.config["checkpointing"]["keep"])
        bar.close()
        return {"num_demonstrations": len(samples), "skipped_too_long": too_long, "epochs": s["epochs"],
                "steps": len(losses), "resumed_at_step": done, "loss_first": losses[0] if losses else None,
                "loss_last": losses[-1] if losses else None,
                "loss_last_epoch": float(np.mean(losses[-max(1, len(steps) // s["epochs"]):])) if losses else None,
                "trained_tokens": int(tokens), "seconds": time.perf_counter() - t0, "policy_version": d.version}

