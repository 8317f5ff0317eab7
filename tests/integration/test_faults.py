"""Every actor kind crashes in the middle of an iteration; the iteration completes, trains
exactly the episodes an undisturbed run trains, and the crash is counted.

The episodes are seeded and the weights identical, so a disturbed run and an undisturbed
one from the same config agree on every rollout (reward_mean) and every update (loss)
until the learner is rebuilt from an older checkpoint, which the run then reports."""

import math
import threading
import time

import pytest
import ray

from rti_actors import RTIConfig
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


def _kill_during_rollouts(engine, victim) -> threading.Thread:
    """Kill ``victim`` (Ray restarts it) once the engine has served a rollout request."""
    start = ray.get(engine.get_stats.remote())["generate_requests"]

    def run():
        while ray.get(engine.get_stats.remote())["generate_requests"] <= start:
            time.sleep(0.05)
        ray.kill(victim, no_restart=False)

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


def test_every_actor_kind_crashes_mid_iteration_and_nothing_is_lost(ray_cluster, flat_model, tmp_path):
    ref = _config(flat_model, tmp_path, "undisturbed").build()
    try:
        want = [ref.train() for _ in range(4)]
    finally:
        ref.stop()

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


def _kill_after_send(actor, method: str):
    """A stand-in for ``actor`` whose first ``method`` call is sent, then the actor is killed
    (Ray restarts it and runs the call again)."""
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
                    ray.kill(actor, no_restart=False)
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


def test_rti_roles_gate_and_continuing_runner_crash_and_nothing_is_lost(ray_cluster, tiny_model_path, tmp_path):
    def config(name):
        return (RTIConfig()
                .environment("Navigation-v0", env_config={"max_turns": 3, "max_tool_output_chars": 600})
                .policy(model=tiny_model_path, engine="hf", max_new_tokens=16, max_model_len=4096)
                .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
                .training(algorithm="rti", group_size=2, tasks_per_iteration=2, lr=1e-4,
                          skip_zero_variance_groups=False)
                .interventions(roles="rules", verifier_llm=False, ppl_threshold=math.inf)
                .fault_tolerance(max_restarts=3, max_task_retries=3)
                .reporting(run_dir=str(tmp_path), run_name=name, tensorboard=False, plot=False))

    def disturb(algo):
        iv = algo.plugin.intervention
        iv.roles = [_kill_after_send(a, "validate") for a in iv.roles]
        iv.gate = _kill_after_send(iv.gate, "score_many")
        iv.runners = [_kill_after_send(iv.runners[0], "continue_from"), *iv.runners[1:]]

    want, got = train_disturbed(config, disturb)
    assert want["rti/accepted"] >= 1 and want["rti/continued"] >= 1
    for key in ("rti/triggered_groups", "rti/candidates", "rti/accepted", "rti/continued", "reward_mean"):
        assert got[key] == want[key], key
    assert got["learner"]["num_samples"] == want["learner"]["num_samples"]
    assert got["learner"]["grad_norm"] == pytest.approx(want["learner"]["grad_norm"], rel=1e-4)
    assert got["faults/restarts/rule_roles"] == 1 and got["faults/restarts/gate"] == 1
    assert got["faults/restarts/env_runner"] == 1
