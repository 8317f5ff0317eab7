"""Episodes played on the env runners and collected in spec order. A chunk whose runner
died is re-run on the next runner (a restarted actor included), so nothing is lost or
duplicated; an episode with a turn from weights older than those it was launched with met
an engine that restarted and was not repaired in time: the engines are brought up to date
and the episode is played again, so no stale turn is ever trained on."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

import ray

from policies.engines import SamplingParams
from rti_actors.build import rollout_sampling
from rti_actors.faults import died
from rti_actors.reporting import progress_bar
from rti_actors.trajectory import EpisodeSpec, Trajectory
from rti_actors.updates import Updates

log = logging.getLogger("rti_actors")


@dataclass
class Launch:
    """Rollouts sent to the runners and not collected yet: refs -> (runner, chunk, tries)."""

    specs: list[EpisodeSpec]
    sampling: SamplingParams
    pending: dict
    version: int  # the weights version at launch: no turn may come from older ones


class Rollouts:
    def __init__(self, runners: list, config, updates: Updates, redone: Counter, interactive: bool):
        self.runners, self.policy, self.updates, self.redone = runners, config["policy"], updates, redone
        self.retries = config["fault_tolerance"]["max_restarts"] + 1
        self.interactive = interactive

    def sampling(self, temperature: float | None = None) -> SamplingParams:
        """The rollout sampling (``temperature``: another one, e.g. evaluation's)."""
        return rollout_sampling(self.policy, temperature)

    def launch(self, specs: list[EpisodeSpec], sampling: SamplingParams | None = None) -> Launch:
        """Spread episode specs over the runners (collected by ``collect``)."""
        sampling = sampling or self.sampling()
        n = len(self.runners)
        chunks = [specs[i::n] for i in range(n)]
        pending = {self.runners[i].sample.remote(ch, sampling): (i, ch, 0) for i, ch in enumerate(chunks) if ch}
        return Launch(specs, sampling, pending, self.updates.version)

    def play(self, specs: list[EpisodeSpec], sampling: SamplingParams | None = None) -> list[Trajectory]:
        """These episodes, in spec order (crashes redone)."""
        return self.collect(self.launch(specs, sampling))

    def collect(self, launch: Launch) -> list[Trajectory]:
        """The launched episodes in spec order, none with a stale turn."""
        results = self._gather(launch)
        for _ in range(self.retries):
            stale = {(t.task_id, t.sample_index) for t in results
                     if t.turn_versions and min(t.turn_versions) < launch.version}
            if not stale:
                return results
            self.redone["stale_episodes"] += len(stale)
            log.warning("%d episode(s) had turns from weights older than version %d; repairing the engines and "
                        "sampling them again", len(stale), launch.version)
            self.updates.repair_engines()
            again = [sp for sp in launch.specs if (sp.task_id, sp.sample_index) in stale]
            fresh = {(t.task_id, t.sample_index): t for t in self._gather(self.launch(again, launch.sampling))}
            results = [fresh.get((t.task_id, t.sample_index), t) for t in results]
        raise RuntimeError(f"episodes kept meeting engines older than version {launch.version}: an engine restarts "
                           "faster than the driver can repair it")

    def _gather(self, launch: Launch) -> list[Trajectory]:
        specs, sampling, pending = launch.specs, launch.sampling, launch.pending
        n = len(self.runners)
        results: list[Trajectory] = []
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
                if tries >= self.retries:
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
        trajectory or a ``ReplayFailure`` per request, in request order. As with ``collect``, a
        shard whose runner died goes to the next runner, and a branch with a turn from weights
        older than the current ones is played again once the engines are repaired."""
        n, retries = len(self.runners), self.retries
        out: list = [None] * len(requests)
        todo = list(range(len(requests)))

        def submit(j: int, shard: list[int]):
            return self.runners[j].continue_from.remote([requests[k] for k in shard], self.sampling())

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
            version = self.updates.version
            todo = [k for k in todo if isinstance(out[k], Trajectory) and out[k].turn_versions
                    and min(out[k].turn_versions) < version]
            if not todo:
                return out
            self.redone["stale_episodes"] += len(todo)
            self.updates.repair_engines()
        raise RuntimeError(f"AEPO's branches kept meeting engines older than version {self.updates.version}")
