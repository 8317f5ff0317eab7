"""Every actor kind crashes in the middle of an iteration; the iteration completes, trains
exactly the episodes an undisturbed run trains, and the crash is counted. An actor whose
restarts are spent (killed for good) is dropped and the run goes on with the others of its
kind, runner 0 included, until none is left; every actor kind restarts after the driver
dropped whatever it built the actor with.

The episodes are seeded and the weights identical, so a disturbed run and an undisturbed
one from the same config agree on every rollout (reward_mean) and every update (loss)
until the learner is rebuilt from an older checkpoint, which the run then reports."""

import gc
import math
import re
import threading
import time

import pytest
import ray

from rti_actors import RTIConfig
from rti_actors.checkpoints import periodic, periodic_path, verify
from rti_actors.failover import NoneLeft
from tests.integration import learnable_env  # noqa: F401  (registers FirstLetter-v0)

pytestmark = pytest.mark.integration


def _config(model, tmp_path, name):
    return (RTIConfig()
            .environment("FirstLetter-v0")
            .policy(model=model, engine="hf", max_new_tokens=4, max_model_len=512, temperature=1.0)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.25)
            .training(algorithm="grpo", group_size=4, tasks_per_iteration=2, lr=1e-3, skip_zero_variance_groups=False)
            .learners(backend="deepspeed", zero_stage=0)
            .fault_tolerance(max_restarts=3, max_task_retries=3)
            .checkpointing(every=2, keep=1)
            .reporting(run_dir=str(tmp_path), run_name=name, tensorboard=False, plot=False))


@pytest.fixture(scope="module")
def flat_model(tmp_path_factory):
    from policies.models import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("flat"), logit_scale=1.0, seed=1)


def _kill_during_rollouts(engine, victim, for_good: bool = False) -> threading.Thread:
    """Kill ``victim`` (Ray restarts it unless ``for_good``) once the engine has served a
    rollout request."""
    start = ray.get(engine.get_stats.remote())["generate_requests"]

    def run():
        while ray.get(engine.get_stats.remote())["generate_requests"] <= start:
            time.sleep(0.05)
        ray.kill(victim, no_restart=for_good)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _restart(actor) -> None:
    """Kill ``actor`` and return once Ray has restarted it (its incarnation changed): a call
    sent right after ``ray.kill`` could still reach the old process."""
    before = ray.get(actor.incarnation.remote())
    ray.kill(actor, no_restart=False)
    while True:
        try:
            if ray.get(actor.incarnation.remote(), timeout=60) != before:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        time.sleep(0.1)


def _undisturbed(config, iterations: int) -> list[dict]:
    """The metrics of ``iterations`` iterations of ``config`` with nothing killed."""
    algo = config.build()
    try:
        return [algo.train() for _ in range(iterations)]
    finally:
        algo.stop()


def _once(obj, name: str, before=None, after=None):
    """Replace ``obj.name`` for one call: ``before()`` runs first, ``after(result)`` last."""
    original = getattr(obj, name)

    def wrapped(*args):
        setattr(obj, name, original)
        if before:
            before()
        out = original(*args)
        if after:
            after(out)
        return out
    setattr(obj, name, wrapped)


def _probe(engine):
    # fixed ids, so the score depends on the engine's weights only
    return ray.get(engine.score.remote([[5, 6, 7]], [[8, 9]], 1.0))[0]


@pytest.mark.heavy
def test_every_actor_kind_crashes_mid_iteration_and_nothing_is_lost(ray_cluster, flat_model, tmp_path):
    want = _undisturbed(_config(flat_model, tmp_path, "undisturbed"), 4)

    algo = _config(flat_model, tmp_path, "disturbed").build()
    engine = algo.engines[0]
    try:
        got = [algo.train()]
        # 2: an env runner dies while sampling; the replay queue dies between the put and the pull
        killer = _kill_during_rollouts(engine, algo.runners[0])
        _once(algo.learner, "pull_and_update", before=lambda: _restart(algo.queue))
        got.append(algo.train())
        killer.join(timeout=60)
        # 3: the engine dies while serving rollouts with version-2 weights
        killer = _kill_during_rollouts(engine, engine)
        got.append(algo.train())
        killer.join(timeout=60)
        # between iterations: a restarted engine serves the current weights, not its folder's
        before = _probe(engine)
        ray.kill(engine, no_restart=False)
        assert _probe(engine) == pytest.approx(before, abs=1e-6)
        assert ray.get(engine.version.remote()) == algo.version == 3
        # 4: the learner dies during its step; rebuilt from the checkpoint of iteration 2
        _once(algo.updates, "start", after=lambda out: ray.kill(algo.learner.ranks[0], no_restart=True))
        got.append(algo.train())
    finally:
        algo.stop()

    for i, (g, w) in enumerate(zip(got, want), start=1):
        assert g["num_episodes"] == w["num_episodes"] == 8, i
        assert g["reward_mean"] == w["reward_mean"], i  # the same episodes, sampled by the same weights
        assert g["learner"]["num_samples"] == w["learner"]["num_samples"] == 8, i
    for g, w in zip(got[:3], want[:3]):  # the same updates, until the learner is rebuilt
        assert g["learner"]["grad_norm"] == pytest.approx(w["learner"]["grad_norm"], rel=1e-4)
        assert g["learner"]["loss"] == pytest.approx(w["learner"]["loss"], abs=1e-6)
    last = got[-1]
    assert last["faults/restarts/env_runner"] == 1
    assert last["faults/restarts/replay_queue"] == 1 and last["faults/redone/queue_puts"] == 1
    assert last["faults/restarts/engine"] == 2
    assert last["faults/redone/stale_episodes"] == 0  # restarted engines came back with the current weights
    assert last["faults/redone/learner_rebuilds"] == 1 and last["faults/redone/learner_steps_lost"] == 1
    assert last["learner"]["step"] == 3 and last["policy_version"] == 4
    assert not any(v for k, v in want[-1].items() if k.startswith("faults/restarts/"))


def test_a_learner_without_a_checkpoint_comes_back_on_the_weights_it_published(ray_cluster, flat_model, tmp_path):
    def config(name):
        return _config(flat_model, tmp_path, name).checkpointing(every=0)

    want = _undisturbed(config("undisturbed"), 3)

    algo = config("disturbed").build()
    published = {}

    def kill_learner(_):
        version, refs = ray.get(algo.graph.latest.get.remote())
        published.update(version=version, weights=ray.get(refs[0]))
        ray.kill(algo.learner.ranks[0], no_restart=True)
    try:
        got = [algo.train(), algo.train()]
        # 3: the learner dies during its step and no checkpoint exists: it comes back on the
        # version-2 weights, and the step in flight is redone from them
        _once(algo.updates, "start", after=kill_learner)
        got.append(algo.train())
        got.append(algo.train())  # and the run goes on
    finally:
        algo.stop()

    from safetensors.torch import load_file
    folder = load_file(str(tmp_path / "disturbed" / "learner-rebuild" / "v2" / "model.safetensors"))
    assert published["version"] == 2 and folder.keys() == published["weights"].keys()
    assert all(folder[k].equal(published["weights"][k]) for k in folder)
    for g, w in zip(got[:3], want):
        assert g["reward_mean"] == w["reward_mean"]
        # the loss and gradient come before the optimiser step: the same weights give the same ones
        assert g["learner"]["loss"] == pytest.approx(w["learner"]["loss"], abs=1e-6)
        assert g["learner"]["grad_norm"] == pytest.approx(w["learner"]["grad_norm"], rel=1e-4)
    last = got[-1]
    assert last["faults/redone/learner_from_weights"] == 1 and last["faults/redone/learner_rebuilds"] == 1
    assert last["faults/redone/learner_steps_lost"] == 0  # every finished step had been published
    assert last["learner"]["step"] == 4 and last["policy_version"] == 4


def test_a_learner_that_dies_while_saving_is_rebuilt_and_its_step_redone(ray_cluster, flat_model, tmp_path):
    def config(name):
        return _config(flat_model, tmp_path, name).checkpointing(every=1, keep=1)

    want = _undisturbed(config("undisturbed"), 3)

    algo = config("disturbed").build()
    try:
        got = [algo.train()]
        # 2: the step is done and published, then the learner dies as the checkpoint starts:
        # rebuilt from iteration 1's checkpoint, step 2 is redone and that is what is saved
        _once(algo.learner, "save", before=lambda: ray.kill(algo.learner.ranks[0], no_restart=True))
        got.append(algo.train())
        saved = periodic(algo.run_dir)[-1]
        verify(saved)  # whole: the second save went into the checkpoint the first one started
        got.append(algo.train())
    finally:
        algo.stop()

    assert saved == periodic_path(algo.run_dir, 2)
    for g, w in zip(got, want):  # the redone step is the same update: iteration 3 sees the same weights
        assert g["reward_mean"] == w["reward_mean"]
        assert g["learner"]["loss"] == pytest.approx(w["learner"]["loss"], abs=1e-6)
        assert g["learner"]["grad_norm"] == pytest.approx(w["learner"]["grad_norm"], rel=1e-4)
    last = got[-1]
    assert last["faults/redone/learner_rebuilds"] == 1 and last["faults/redone/learner_steps_redone"] == 1
    assert last["faults/redone/learner_steps_lost"] == 0
    assert last["learner"]["step"] == 3 and last["policy_version"] == 3


def _kill_after_send(actor, method: str, for_good: bool = False):
    """A stand-in for ``actor`` whose first ``method`` call is sent, then the actor is killed
    (Ray restarts it and runs the call again; ``for_good``: it stays dead, the call fails)."""
    class Handle:
        fired = False

        def __getattr__(self, name):
            real = getattr(actor, name)
            if name != method or Handle.fired:
                return real

            class Method:
                @staticmethod
                def remote(*args):
                    Handle.fired = True
                    out = real.remote(*args)
                    ray.kill(actor, no_restart=for_good)
                    return out
            return Method
    return Handle()


def train_disturbed(config, disturb) -> tuple[dict, dict]:
    """One iteration of ``config("undisturbed")`` and one of ``config("disturbed")`` after
    ``disturb(algo)`` wrapped its actors: (undisturbed metrics, disturbed metrics)."""
    out = []
    for name in ("undisturbed", "disturbed"):
        algo = config(name).build()
        try:
            if name == "disturbed":
                disturb(algo)
            out.append(algo.train())
        finally:
            algo.stop()
    return out[0], out[1]


def _rti_config(model, tmp_path, name, env_config=None):
    return (RTIConfig()
            .environment("Navigation-v0", env_config={"max_turns": 3, "max_tool_output_chars": 600, **(env_config or {})})
            .policy(model=model, engine="hf", max_new_tokens=16, max_model_len=4096)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
            .training(algorithm="rti", group_size=2, tasks_per_iteration=2, lr=1e-4, skip_zero_variance_groups=False)
            .interventions(roles="rules", verifier_llm=False, ppl_threshold=math.inf)
            .fault_tolerance(max_restarts=3, max_task_retries=3)
            .reporting(run_dir=str(tmp_path), run_name=name, tensorboard=False, plot=False))


@pytest.fixture(scope="module")
def rti_reference(ray_cluster, tiny_model_path, tmp_path_factory) -> dict:
    """One undisturbed RTI iteration, which every disturbed one below must reproduce."""
    algo = _rti_config(tiny_model_path, tmp_path_factory.mktemp("rti"), "undisturbed").build()
    try:
        want = algo.train()
    finally:
        algo.stop()
    assert want["rti/accepted"] >= 1 and want["rti/continued"] >= 1  # the pipeline's every stage ran
    return want


RTI_KEYS = ("rti/triggered_groups", "rti/candidates", "rti/accepted", "rti/continued", "rti/continuation_success",
            "reward_mean")


def _same_iteration(got: dict, want: dict) -> None:
    for key in RTI_KEYS:
        assert got[key] == want[key], key
    assert got["learner"]["num_samples"] == want["learner"]["num_samples"]
    assert got["learner"]["grad_norm"] == pytest.approx(want["learner"]["grad_norm"], rel=1e-4)


@pytest.mark.heavy
def test_rti_roles_gate_and_continuing_runner_crash_and_nothing_is_lost(rti_reference, tiny_model_path, tmp_path):
    algo = _rti_config(tiny_model_path, tmp_path, "disturbed").build()
    try:
        iv = algo.plugin.intervention
        iv.roles = [_kill_after_send(a, "validate") for a in iv.roles]
        iv.gate = _kill_after_send(iv.gate, "score_many")
        iv.runners = [_kill_after_send(iv.runners[0], "continue_from"), *iv.runners[1:]]
        got = algo.train()
    finally:
        algo.stop()
    _same_iteration(got, rti_reference)
    assert got["faults/restarts/rule_roles"] == 1 and got["faults/restarts/gate"] == 1
    assert got["faults/restarts/env_runner"] == 1


def test_runner_0_dead_for_good_during_an_rti_iteration_changes_nothing(rti_reference, tiny_model_path, tmp_path):
    # runner 0 dies for good right after its rollout chunk is sent: runner 1 plays that chunk,
    # and the reward evidence and the continuations, with the same seeds
    algo = _rti_config(tiny_model_path, tmp_path, "runner-0-dead").build()
    runner_0 = algo.runners[0]
    try:
        algo.runners.actors[0] = _kill_after_send(runner_0, "sample", for_good=True)
        got = algo.train()
        assert algo.runners.dead.keys() == {0}
    finally:
        algo.runners.actors[0] = runner_0
        algo.stop()
    _same_iteration(got, rti_reference)
    assert got["faults/dead/env_runner"] == 1 and got["faults/redone/rollout_chunks"] == 1


def test_runner_0_and_the_engines_dead_for_good_the_run_goes_on_until_none_is_left(ray_cluster, flat_model, tmp_path,
                                                                                 caplog):
    algo = _config(flat_model, tmp_path, "degrade").env_runners(num_engines=2).evaluation(num_samples=2).build()
    runner_0 = algo.runners[0]
    try:
        whole = algo.evaluate(num_tasks=2, record_path=tmp_path / "alive.jsonl")
        # runner 0 dies for good while it plays evaluate()'s episodes: runner 1 plays its
        # chunk, with the same seeds, so the evaluation is the same rollout for rollout
        algo.runners.actors[0] = _kill_after_send(runner_0, "sample", for_good=True)
        again = algo.evaluate(num_tasks=2, record_path=tmp_path / "runner-0-dead.jsonl")
        algo.runners.actors[0] = runner_0  # dead, and known to be
        assert (tmp_path / "runner-0-dead.jsonl").read_text() == (tmp_path / "alive.jsonl").read_text()
        assert again["p@1"] == whole["p@1"] and algo.runners.dead.keys() == {0}
        assert algo.task_ids() == ["test-0", "test-1", "test-2", "test-3"]  # asked of a live runner
        first = algo.train()
        assert first["num_episodes"] == 8 and first["learner"]["num_samples"] == 8
        assert first["faults/dead/env_runner"] == 1
        # engine 0 dies for good while the engines serve rollouts: every pool drops it, the
        # episodes it was serving go to engine 1, and the weights are published to engine 1 only
        killer = _kill_during_rollouts(algo.engines[1], algo.engines[0], for_good=True)
        algo.train()
        killer.join(timeout=60)
        last = algo.train()
        assert last["num_episodes"] == 8 and last["learner"]["num_samples"] == 8 and last["policy_version"] == 3
        assert last["faults/dead/engine"] == 1 and ray.get(algo.engines[1].version.remote()) == 3
        assert re.search(r"engine 0 is dead for good \(The actor is dead because it was killed by `ray.kill`", caplog.text)
        # no engine left: the run stops, and the first line says which one died and why
        ray.kill(algo.engines[1], no_restart=True)
        with pytest.raises(NoneLeft) as info:
            algo.train()
        assert re.fullmatch(r"engine [01] is dead for good \(The actor is dead because it was killed by `ray.kill`\.\) "
                            r"and no engine is left", str(info.value).splitlines()[0])
        ray.kill(algo.runners[1], no_restart=True)
        with pytest.raises(NoneLeft, match=r"^env runner 1 is dead for good \(The actor is dead because it was killed"):
            algo.evaluate(num_tasks=1)
    finally:
        algo.stop()


def _restarted(actor, timeout_s: float = 300) -> None:
    """Kill ``actor`` and return once Ray has restarted it; fail if it does not come back (a
    constructor argument Ray no longer has leaves the restart hanging, then failing)."""
    before = ray.get(actor.incarnation.remote())
    ray.kill(actor, no_restart=False)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ray.get(actor.incarnation.remote(), timeout=30) != before:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"{actor} did not come back within {timeout_s:g} s of its restart")


@pytest.mark.heavy
def test_every_actor_kind_restarts_after_the_driver_dropped_what_it_was_built_with(rti_reference, tiny_model_path,
                                                                                  tmp_path, monkeypatch):
    created = []  # (class, max_restarts, constructor arguments) of every actor the build starts
    start = ray.actor.ActorClass._remote

    def recording(self, args=None, kwargs=None, **options):
        created.append((self.__ray_metadata__.class_name, options.get("max_restarts"),
                        [*(args or ()), *(kwargs or {}).values()]))
        return start(self, args, kwargs, **options)

    monkeypatch.setattr(ray.actor.ActorClass, "_remote", recording)
    # an env_config above Ray's inline limit: it reaches the runners through the object store
    algo = _rti_config(tiny_model_path, tmp_path, "restarted", {"padding": "x" * 300_000}).build()
    monkeypatch.undo()
    try:
        # Ray's own test of an argument (the serialisation it sends): a handle or an object
        # ref inside one is a reference the restart may not find; a large value goes by ref
        context = ray._private.worker.global_worker.get_serialization_context()
        kept = {ref.hex() for ref in algo.graph.kept}
        assert len(kept) == 1  # the large env_config, held by the graph for the run
        restartable = [(cls, args) for cls, restarts, args in created if restarts]
        assert {cls for cls, _ in restartable} >= {"EngineActor", "EnvRunner", "ReplayQueue", "LatestWeights",
                                                   "RoleActor", "RuleRoles", "PPLGate"}
        for cls, args in restartable:
            for arg in args:
                if isinstance(arg, ray.ObjectRef):
                    assert arg.hex() in kept, cls
                    continue
                data = context.serialize(arg)
                assert not data.contained_object_refs, (cls, type(arg).__name__)
                assert data.total_bytes <= 100 * 1024, (cls, type(arg).__name__)
        created.clear()  # the driver's last references to what the actors were built with
        del restartable, arg, args
        gc.collect()
        kinds = {kind: actors for kind, actors in algo.graph.kinds().items() if kind != "learner"}
        for actors in [[algo.graph.latest], *kinds.values()]:
            for actor in actors:
                _restarted(actor)
        got = algo.train()
    finally:
        algo.stop()
    _same_iteration(got, rti_reference)  # the restarted graph plays and learns what the first one did
    for kind, actors in kinds.items():
        assert got[f"faults/restarts/{kind}"] == len(actors), kind
