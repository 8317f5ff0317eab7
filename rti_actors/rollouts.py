"""Episodes played on the env runners and collected in spec order. A chunk whose runner
died is played again by another live runner (``failover.Members``; a runner dead for good
gets no more chunks), so nothing is lost or duplicated; an episode with a turn from weights
older than those it was launched with met an engine that restarted and was not repaired in
time: the engines are brought up to date and the episode is played again, so no stale turn
is ever trained on."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

from policies.engines import SamplingParams
from rti_actors.build import rollout_sampling
from rti_actors.failover import Members, Sent, as_members
from rti_actors.reporting import progress_bar
from rti_actors.trajectory import EpisodeSpec, Trajectory
from rti_actors.updates import Updates

log = logging.getLogger("rti_actors")


@dataclass
class Launch:
    """Rollouts sent to the runners and not collected yet."""

    specs: list[EpisodeSpec]
    sampling: SamplingParams
    sent: Sent
    version: int  # the weights version at launch: no turn may come from older ones


class Rollouts:
    """``runners``: ``failover.Members`` (or a list of runner handles, e.g. a test's wrappers)."""

    def __init__(self, runners, config, updates: Updates, redone: Counter, interactive: bool):
        self.runners, self.policy, self.updates, self.redone = runners, config["policy"], updates, redone
        self.retries = config["fault_tolerance"]["max_restarts"] + 1
        self.interactive = interactive

    def members(self) -> Members:
        return as_members(self.runners, "env runner", self.retries)

    def sampling(self, temperature: float | None = None) -> SamplingParams:
        """The rollout sampling (``temperature``: another one, e.g. evaluation's)."""
        return rollout_sampling(self.policy, temperature)

    def launch(self, specs: list[EpisodeSpec], sampling: SamplingParams | None = None) -> Launch:
        """Spread episode specs over the live runners (collected by ``collect``)."""
        sampling = sampling or self.sampling()
        return Launch(specs, sampling, self.members().send("sample", specs, sampling), self.updates.version)

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
        bar = progress_bar(len(launch.specs), self.interactive, "rollouts")
        results = launch.sent.collect(lambda done: bar.update(len(done)))
        bar.close()
        self.redone["rollout_chunks"] += launch.sent.resent
        return results

    def play_branches(self, requests: list) -> list:
        """AEPO's branches: each ``Continuation`` played on the runners (spread like episodes), a
        trajectory or a ``ReplayFailure`` per request, in request order. As with ``collect``, a
        shard whose runner died goes to another live runner, and a branch with a turn from
        weights older than the current ones is played again once the engines are repaired."""
        out: list = [None] * len(requests)
        todo = list(range(len(requests)))
        for _ in range(self.retries + 1):
            sent = self.members().send("continue_from", [requests[k] for k in todo], self.sampling())
            for k, res in zip(todo, sent.collect()):
                out[k] = res
            self.redone["rollout_chunks"] += sent.resent
            version = self.updates.version
            todo = [k for k in todo if isinstance(out[k], Trajectory) and out[k].turn_versions
                    and min(out[k].turn_versions) < version]
            if not todo:
                return out
            self.redone["stale_episodes"] += len(todo)
            self.updates.repair_engines()
        raise RuntimeError(f"AEPO's branches kept meeting engines older than version {self.updates.version}")
