"""The learner group: N DeepSpeed ranks as Ray actors that the driver uses as one learner.

Data parallelism needs every rank in every collective call (the update's all-reduces,
ZeRO-3's parameter gathers, DeepSpeed's ``save_checkpoint``), at the same time. The group is
the one place that knows this: each method starts the call on every rank that must take
part and hands back rank 0's answer, which is the global one (``Learner.update`` reduces its
metrics over ranks; weights are gathered on rank 0). With ``num_learners=1`` it is a single
``QueueLearner`` actor started exactly as before, with no placement group.

With N > 1 the ranks sit in a placement group, one bundle (the per-learner CPUs/GPUs) per
rank, packed onto as few nodes as possible; they form one process group whose rendezvous is
a free port on rank 0's node. A batch is split by tokens (``shard_by_tokens``): rank 0 pulls
the replay queue once and returns one object per shard, which Ray hands to its rank, so the
samples never pass through the driver.

Calls are asynchronous where the driver overlaps them with other actors' work (the update
with the next rollouts, a publish with the engines' side of it): ``pull_and_update``,
``get_weights``, ``init_weight_sync`` and ``broadcast_weights`` return rank 0's ``ObjectRef``.
The other ranks' refs are kept and checked at the group's next call, so a failure there
surfaces at the latest one call later. The other methods wait for every rank and raise the
first failure as soon as it happens. A rank that fails alone before a collective leaves the
others waiting in it until the process group's timeout, so samples are checked once, before
they are split.

Checkpoints are sharded: each rank writes its own ZeRO partition into the same folder, so
with several nodes that folder must be on storage all of them see.
"""

from __future__ import annotations

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rti_actors.learner import QueueLearner, check_samples, shard_by_tokens
from rti_actors.options import ConfigError
from rti_actors.weight_sync import free_address

__all__ = ["LearnerGroup", "shard_by_tokens"]


class LearnerGroup:
    """``num_learners`` ranks of ``QueueLearner`` (``settings``: the learner config; each rank
    gets its rank, world size and the rendezvous address on top)."""

    def __init__(self, model_path: str, settings: dict, num_learners: int = 1, num_cpus: float = 0.5,
                 num_gpus: float = 0, runtime_env: dict | None = None, start_timeout_s: float = 900.0,
                 resources: dict | None = None):
        self._args = (model_path, settings, num_learners, num_cpus, num_gpus, runtime_env, start_timeout_s, resources)
        n = self.num_learners = int(num_learners)
        if n < 1:
            raise ValueError(f"num_learners must be >= 1, got {num_learners!r}")
        if n > 1 and settings.get("backend", "deepspeed") != "deepspeed":
            raise ValueError("several learner ranks need backend='deepspeed' (the torch backend runs on one process)")
        self.zero3 = settings.get("backend", "deepspeed") == "deepspeed" and settings.get("zero_stage") == 3
        self.placement_group = None
        self._pending: list = []  # the other ranks' part of the last asynchronous call
        options = {"num_cpus": num_cpus, "num_gpus": num_gpus, "runtime_env": runtime_env}
        cls = ray.remote(QueueLearner)
        if n == 1:
            self.ranks = [cls.options(**options, resources=resources or {}).remote(model_path, settings)]
            return
        bundle = {k: v for k, v in {"CPU": num_cpus, "GPU": num_gpus, **(resources or {})}.items() if v}
        self.placement_group = pg = placement_group([dict(bundle) for _ in range(n)], strategy="PACK")
        try:
            ready, _ = ray.wait([pg.ready()], timeout=start_timeout_s)
            if not ready:
                free = {k: round(v, 2) for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
                raise ConfigError(f"the learner group's {n} bundles of {bundle} could not be placed within "
                                  f"{start_timeout_s:g} s (free in the cluster now: {free}); lower num_learners or "
                                  "num_cpus_per_learner / num_gpus_per_learner, or add nodes")
            in_bundle = [PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i) for i in range(n)]
            host, port = ray.get(ray.remote(free_address).options(num_cpus=0, scheduling_strategy=in_bundle[0]).remote())
            self.ranks = [cls.options(**options, scheduling_strategy=in_bundle[i]).remote(
                model_path, {**settings, "rank": i, "world_size": n, "master_addr": host, "master_port": port})
                for i in range(n)]
        except BaseException:
            remove_placement_group(pg)
            raise

    # ---- life cycle -----------------------------------------------------------------------
    def named_actors(self) -> dict[str, object]:
        """{name: handle} per rank, for the build's start-up pings and error messages."""
        if self.num_learners == 1:
            return {"learner": self.ranks[0]}
        return {f"learner rank {i}": a for i, a in enumerate(self.ranks)}

    def ping(self) -> bool:
        return all(self._wait_all([a.ping.remote() for a in self.ranks], every=True))

    def kill(self) -> None:
        for a in self.ranks:
            ray.kill(a, no_restart=True)
        if self.placement_group is not None:
            remove_placement_group(self.placement_group)
            self.placement_group = None

    def rebuild(self, model_path: str | None = None) -> None:
        """Kill every rank and start the group again from the model folder (or ``model_path``,
        which later rebuilds then use too). A rank that died takes the process group with it
        (the others would wait in their next collective), so a crash is recovered by a new
        group, which the driver then loads a checkpoint into."""
        self.kill()
        self._pending = []
        self.__init__(model_path or self._args[0], *self._args[1:])
        self.ping()

    def set_step(self, step: int) -> int:
        return self._wait_all([a.set_step.remote(step) for a in self.ranks])

    def result(self, ref):
        """Wait for an asynchronous call's ref (``pull_and_update``'s) and the other ranks'
        part of it; a rank that dies raises at once, not after a collective's timeout."""
        pending, self._pending = self._pending, []
        return self._wait_all([ref, *pending])

    # ---- training ---------------------------------------------------------------------------
    def pull_and_update(self, queue, max_groups: int, current_version: int, skip_zero_variance: bool = True):
        """Start one optimiser step on up to ``max_groups`` groups of the replay queue; returns
        the ref of rank 0's metrics (``QueueLearner.pull_and_update``'s)."""
        self._settle()
        if self.num_learners == 1:
            return self.ranks[0].pull_and_update.remote(queue, max_groups, current_version, skip_zero_variance)
        *shards, counts = self.ranks[0].pull_shards.options(num_returns=self.num_learners + 1).remote(
            queue, max_groups, current_version, skip_zero_variance, self.num_learners)
        return self._lead([a.update_shard.remote(s, counts) for a, s in zip(self.ranks, shards)])

    def update(self, samples: list[dict], objective: str | None = None, lr: float | None = None) -> dict:
        """One optimiser step on ``samples`` split over the ranks (``Learner.update``'s metrics)."""
        self._settle()
        samples = check_samples(samples)
        shards = shard_by_tokens(samples, self.num_learners)
        return self._wait_all([a.update.remote(s, objective, lr) for a, s in zip(self.ranks, shards)])

    def reset_optimizer_state(self) -> None:
        self._settle()
        self._wait_all([a.reset_optimizer_state.remote() for a in self.ranks])

    # ---- weights ----------------------------------------------------------------------------
    def get_weights(self, dtype: str | None = None):
        """The ref of rank 0's full weights (``Learner.get_weights``): hand it to the engines
        as it is, so the driver never holds a copy. Under ZeRO-3 the other ranks take part in
        each parameter's gather without keeping the result."""
        self._settle()
        return self._lead([self.ranks[0].get_weights.remote(dtype)] + self._gather_partners("join_gather"))

    def weight_sync_address(self) -> tuple[str, int]:
        self._settle()
        return ray.get(self.ranks[0].weight_sync_address.remote())

    def init_weight_sync(self, host: str, port: int, world_size: int, backend: str):
        """Rank 0 joins the learner -> engines weight group; returns its ref (the engines join
        at the same time, so the caller waits for all of them together)."""
        self._settle()
        return self.ranks[0].init_weight_sync.remote(host, port, world_size, backend)

    def weight_meta(self) -> list:
        self._settle()
        return ray.get(self.ranks[0].weight_meta.remote())

    def broadcast_weights(self):
        """Rank 0 broadcasts to the engines, every rank gathers under ZeRO-3; returns rank 0's
        ref (wait for it together with the engines' ``receive_weights``)."""
        self._settle()
        return self._lead([self.ranks[0].broadcast_weights.remote()] + self._gather_partners("broadcast_weights"))

    # ---- checkpoints --------------------------------------------------------------------------
    def save(self, path: str) -> str:
        """Every rank writes its partition into ``path`` (rank 0 also the learner.json)."""
        self._settle()
        return self._wait_all([a.save.remote(path) for a in self.ranks])

    def load(self, path: str) -> int:
        """Restore a ``save`` of a group with the same number of ranks and ZeRO stage; the step."""
        self._settle()
        return self._wait_all([a.load.remote(path) for a in self.ranks])

    def export_hf(self, path: str) -> str:
        self._settle()
        return self._wait_all([a.export_hf.remote(path) for a in self.ranks])

    # ---- pieces ---------------------------------------------------------------------------------
    def _gather_partners(self, method: str) -> list:
        # Only ZeRO-3 partitions the weights; below it rank 0 holds them all and needs no one.
        if not self.zero3:
            return []
        return [getattr(a, method).remote() for a in self.ranks[1:]]

    def _lead(self, refs: list):
        """Rank 0's ref; the others are checked at the next call (``_settle``)."""
        self._pending = refs[1:]
        return refs[0]

    def _settle(self) -> None:
        pending, self._pending = self._pending, []
        ray.get(pending)

    @staticmethod
    def _wait_all(refs: list, every: bool = False):
        """Rank 0's result (or every result) once all ranks are done; the first failure is
        raised as it happens rather than after the other ranks time out in a collective."""
        left = list(refs)
        while left:
            done, left = ray.wait(left, num_returns=1)
            ray.get(done)
        return ray.get(refs) if every else ray.get(refs[0])
