"""End to end on a real local Ray cluster: tiny model, real engines, real DeepSpeed learner."""

import json

import pytest
import ray

from rti_actors import RTIConfig
from rti_actors.metrics import merge_summaries
from rti_actors.trajectory import EpisodeSpec
from tests.integration import learnable_env  # noqa: F401  (registers FirstLetter-v0)

pytestmark = pytest.mark.integration


def _config(model, tmp_path, algorithm="grpo", engine="hf", **training):
    return (RTIConfig()
            .environment("FirstLetter-v0")
            .policy(model=model, engine=engine, max_new_tokens=4, max_model_len=512, temperature=1.0)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.25)
            .training(algorithm=algorithm, group_size=4, tasks_per_iteration=2,
                      **{"skip_zero_variance_groups": False, **training})
            .learners(backend="deepspeed", zero_stage=0)
            .evaluation(num_samples=2)
            .reporting(run_dir=str(tmp_path / "runs"), run_name=algorithm, tensorboard=True))


@pytest.fixture(scope="module")
def flat_model(tmp_path_factory):
    # logit_scale 1: a flat random policy, so sampled first letters vary
    from policies.models import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("flat"), logit_scale=1.0, seed=1)


@pytest.mark.parametrize("algorithm", ["grpo", "gspo"])
def test_one_iteration_end_to_end(ray_cluster, flat_model, tmp_path, algorithm):
    algo = _config(flat_model, tmp_path, algorithm).build()
    try:
        m = algo.train()
        assert m["num_episodes"] == 8 and m["num_groups"] == 2 and m["policy_version"] == 1
        assert m["gen_tokens"] > 0 and 0 <= m["success_rate"] <= 1
        assert "loss" in m["learner"] and m["learner"]["num_groups"] == 2
        versions = ray.get([e.version.remote() for e in algo.engines])
        assert versions == [1]
        ev = algo.evaluate(num_tasks=2)
        assert ev["num_tasks"] == 2 and ev["n"] == 2 and "p@1" in ev["table"]
        # a greedy pass beside the sampled one: greedy rollouts of a task are identical
        greedy = algo.evaluate(num_tasks=2, num_samples=3, temperature=0.0, record_path=tmp_path / "greedy.jsonl")
        assert greedy["n"] == 3 and greedy["pass^3"] == greedy["pass@1"]
        replies = {}
        for line in (tmp_path / "greedy.jsonl").read_text().splitlines():
            r = json.loads(line)
            replies.setdefault(r["task_id"], set()).add(json.dumps(r["messages"][-1]))
        assert all(len(v) == 1 for v in replies.values())
        # a slice evaluated in pieces samples what one call samples, rollout for rollout
        ids = algo.task_ids()[:3]
        whole = algo.evaluate(task_ids=ids, record_path=tmp_path / "whole.jsonl")
        pieces = [algo.evaluate(task_ids=part, record_path=tmp_path / "pieces.jsonl") for part in (ids[:1], ids[1:])]
        assert merge_summaries(pieces)["avg_p@k"] == pytest.approx(whole["avg_p@k"])
        assert (tmp_path / "pieces.jsonl").read_text() == (tmp_path / "whole.jsonl").read_text()
        with pytest.raises(ValueError, match="not tasks of split"):
            algo.evaluate(task_ids=["no-such-task"])
    finally:
        algo.stop()
    lines = (tmp_path / "runs" / algorithm / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(l)["kind"] for l in lines] == ["train"] + ["eval"] * 5
    assert (tmp_path / "runs" / algorithm / "learning_curves.png").exists()
    assert list((tmp_path / "runs" / algorithm / "tensorboard").iterdir())


def test_zero_variance_groups_are_not_trained(ray_cluster, flat_model, tmp_path):
    # an unreachable target: every reward is 0, so no group can teach anything
    # training(task_ids=...): only those tasks of the train split are drawn
    algo = (_config(flat_model, tmp_path, skip_zero_variance_groups=True, task_ids=["train-1", "train-3"])
            .environment(env_config={"target": "\u2603"}).build())
    try:
        m = algo.train()
    finally:
        algo.stop()
    assert sorted(m["task_ids"]) == ["train-1", "train-3"]
    from rti_actors.options import ConfigError
    with pytest.raises(ConfigError, match=r"\['test-1', 'train-99'\] \(2 in all\) are not tasks of"):
        _config(flat_model, tmp_path, task_ids=["train-1", "train-99", "test-1"]).build()
    assert m["frac_zero_variance_groups"] == 1.0
    assert m["learner"]["skipped"] and m["learner"]["num_groups_trained"] == 0
    assert m["policy_version"] == 0  # nothing learned, nothing published


def _rare_first_char(model_path) -> str:
    """A first character the initial policy produces in roughly 5-35% of replies."""
    from collections import Counter

    from envs import make_env
    from policies.chat import ChatRenderer
    from policies.engines import SamplingParams, make_engine

    eng = make_engine("hf", model_path)
    renderer = ChatRenderer(eng.tokenizer)
    obs, info = make_env("FirstLetter-v0", {"num_tasks": 1}).reset(options={"task_id": "train-0"})
    msgs, buf = renderer.begin(obs, info["tools"])
    gens = eng.generate([buf.ids + renderer.generation_prompt_ids(msgs)] * 64, SamplingParams(max_tokens=4, temperature=1.0, seed=5))
    counts = Counter(renderer.decode_turn(g.token_ids)["content"][:1] for g in gens)
    return next(c for c, n in counts.most_common() if c and 3 <= n <= 22)


def test_learning_signal_raises_success(ray_cluster, tiny_model_path, tmp_path):
    # the peaked tiny model (logit_scale 8) and a large learning rate: the sign of the
    # update shows within a few iterations. The rise comes as one jump after a few small
    # updates, and where it lands depends on every rounding before it: an fp32 learner on
    # every CPU, so the run is the same wherever it runs (a bf16 learner's single update is
    # held to fp32's in test_learner_precision, and the Lookup learning test runs bf16)
    target = _rare_first_char(tiny_model_path)
    algo = (_config(tiny_model_path, tmp_path, lr=3e-3).environment(env_config={"target": target, "num_tasks": 1})
            .training(group_size=16, tasks_per_iteration=1).learners(dtype="float32").evaluation(num_samples=16)
            .build())
    try:
        first = algo.evaluate(split="train")["p@1"]
        curve = [algo.train()["success_rate"] for _ in range(10)]
        last = algo.evaluate(split="train")["p@1"]
    finally:
        algo.stop()
    assert last > first + 0.4, (target, first, curve, last)


def test_restore_continues_exactly_all_or_nothing_and_refuses_other_training_options(ray_cluster, flat_model,
                                                                                     tmp_path):
    import shutil

    from rti_actors.checkpoints import CheckpointError
    from rti_actors.options import ConfigError

    cfg = _config(flat_model, tmp_path, lr=1e-3)
    a = cfg.build()
    try:
        a.train()
        ckpt = a.save(tmp_path / "ckpt")
        ref = a.train()
        weights = ray.get(a.learner.get_weights())
        bad = tmp_path / "bad"
        shutil.copytree(ckpt, bad)
        shard = next(bad.rglob("*model_states.pt"))
        shard.write_bytes(shard.read_bytes()[:-100])  # a truncated shard: nothing may be half-restored
        with pytest.raises(CheckpointError, match="model_states.pt has"):
            a.restore(bad)
        assert a.iteration == 2 and a.learner_step == 2
        assert all(bool((w == v).all()) for w, v in zip(weights.values(), ray.get(a.learner.get_weights()).values()))
    finally:
        a.stop()
    b = cfg.copy().training(lr=1e-2).reporting(run_name="other-lr").build()
    try:
        with pytest.raises(ConfigError, match=r"training\.lr: 0\.001 -> 0\.01"):
            b.restore(ckpt)
        assert b.restore(ckpt, allow_config_change=True) == ["training.lr: 0.001 -> 0.01"]
        got = b.train()
    finally:
        b.stop()
    # the same rollouts and the same loss before the step as the run that was not restored,
    # then this run's learning rate
    assert got["iteration"] == ref["iteration"] == 2 and got["reward_mean"] == ref["reward_mean"]
    assert got["learner"]["loss"] == pytest.approx(ref["learner"]["loss"], rel=1e-5, abs=1e-7)
    assert got["learner"]["lr"] == 1e-2 and ref["learner"]["lr"] == 1e-3


def test_a_nan_reward_is_an_env_failure_and_a_nan_gradient_skips_the_step(ray_cluster, flat_model, tmp_path):
    # train-0's grader returns NaN: its episodes are never scored or trained, the rest are
    algo = _config(flat_model, tmp_path, lr=1e-3).environment(env_config={"num_tasks": 2,
                                                                          "nan_reward_task": "train-0"}).build()
    try:
        m = algo.train()
        assert m["faults/infra_episodes"] == 4 and m["num_groups"] == 1 and not m["learner"]["skipped"]
        before = ray.get(algo.learner.get_weights())
        # a group whose loss overflows (an absurd but finite behaviour log-prob, negative
        # advantage): the learner skips the step, keeps its weights and says so
        group = [{"ids": [1, 2, 3, 4], "loss_mask": [0, 1, 1, 1], "behaviour_logprobs": [0.0, -1e30, -1e30, -1e30],
                  "token_weight": [1.0] * 4, "advantage": adv, "policy_version": algo.version} for adv in (-1.0, 1.0)]
        ray.get(algo.queue.put.remote([group], algo.version))
        learn = algo.learner.result(algo.learner.pull_and_update(algo.queue, 1, algo.version))
        assert learn["skipped"] and learn["nonfinite"]
        after = ray.get(algo.learner.get_weights())
        assert all(bool((before[k] == after[k]).all()) for k in before)
        m = algo.train()  # and the run goes on
        assert m["iteration"] == 2 and not m["learner"]["skipped"] and m["policy_version"] == 2
    finally:
        algo.stop()


def test_async_rollouts_overlap_learning_and_report_their_lag(ray_cluster, flat_model, tmp_path):
    # max_policy_lag=1: iteration i+1 is sampled while the learner trains on iteration i,
    # with the weights the engines had, so its groups reach the learner one version old
    algo = _config(flat_model, tmp_path, max_policy_lag=1).build()
    try:
        ms = [algo.train() for _ in range(3)]
        assert algo.next_launch is not None  # the fourth iteration's rollouts are already running
    finally:
        algo.stop()
    assert [m["policy_version"] for m in ms] == [1, 2, 3]
    assert ms[0]["queue"]["lag_counts"] == {0: 2}
    assert ms[-1]["queue"]["lag_counts"] == {0: 2, 1: 4} and ms[-1]["queue"]["dropped_stale"] == 0
    # on-policy (lag 0) nothing overlaps: every group is trained at the version that sampled it
    sync = _config(flat_model, tmp_path, algorithm="gspo").build()
    try:
        m = [sync.train() for _ in range(2)][-1]
    finally:
        sync.stop()
    assert m["queue"]["lag_counts"] == {0: 4}


def test_killed_env_runner_loses_no_episode(ray_cluster, flat_model, tmp_path):
    algo = _config(flat_model, tmp_path).fault_tolerance(max_restarts=2).build()
    try:
        specs = [EpisodeSpec(f"train-{i % 4}", i) for i in range(16)]
        # a restarted runner: Ray runs its call again there
        refs = algo.runners[0].sample.remote(specs[:8], algo.rollouts.sampling())
        ray.kill(algo.runners[0], no_restart=False)
        assert [(t.task_id, t.sample_index) for t in ray.get(refs)] == [(s.task_id, s.sample_index) for s in specs[:8]]
        # a runner gone for good: the driver moves its chunks to the others
        ray.kill(algo.runners[1], no_restart=True)
        out = algo.rollouts.play(specs)
        assert sorted((t.task_id, t.sample_index) for t in out) == sorted((s.task_id, s.sample_index) for s in specs)
        m = algo.train()
        # once known dead, runner 1 is sent nothing: only play()'s chunk was played again
        assert m["num_episodes"] == 8 and m["faults/redone/rollout_chunks"] == 1
        assert m["faults/restarts/env_runner"] == 1 and m["faults/dead/env_runner"] == 1
    finally:
        algo.stop()


def test_bad_model_and_template_fail_at_build(ray_cluster, tiny_model_path, tmp_path):
    import shutil

    from rti_actors import ConfigError
    with pytest.raises(ConfigError, match="unknown model"):
        _config(str(tmp_path / "nope"), tmp_path).build()
    # a tokenizer without a chat template, and no fallback allowed
    bare = tmp_path / "bare"
    shutil.copytree(tiny_model_path, bare)
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    import json
    cfg = json.loads((bare / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="no chat template"):
        _config(str(bare), tmp_path).policy(fallback_chat_template=None).build()
    # the tiny model has 4096 positions
    with pytest.raises(ConfigError, match=r"max_model_len=8192\) is longer than the model's 4096 positions"):
        _config(tiny_model_path, tmp_path).policy(max_model_len=8192).build()


def test_an_engine_that_cannot_start_fails_build(ray_cluster, tiny_model_path, tmp_path):
    # the engine actor's constructor raises: build() must say so instead of returning an
    # algorithm whose first generate (or publish, after an hour of SFT) would fail
    import time
    free = ray.available_resources().get("CPU", 0.0)
    with pytest.raises(ray.exceptions.RayActorError, match="no_such_engine_option") as failure:
        _config(tiny_model_path, tmp_path).policy(engine_kwargs={"no_such_engine_option": 1}).build()
    # the actors that did start (runners, learner) are gone, even while the traceback (which
    # holds the half-built algorithm, as a notebook's last traceback does) is still alive
    assert failure.tb is not None
    deadline = time.time() + 30
    while time.time() < deadline and ray.available_resources().get("CPU", 0.0) < free:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0.0) >= free - 1e-6  # (an earlier test's actors may still be leaving)


def test_a_run_dir_that_cannot_be_written_frees_the_started_actors(ray_cluster, tiny_model_path, tmp_path):
    # every actor started and answered; then config.json cannot be written (a folder sits
    # where it goes): the error comes back and the actors give their CPUs back
    import time
    (tmp_path / "runs" / "blocked" / "config.json").mkdir(parents=True)
    free = ray.available_resources().get("CPU", 0.0)
    with pytest.raises(IsADirectoryError, match="config.json"):
        _config(tiny_model_path, tmp_path).reporting(run_name="blocked").build()
    deadline = time.time() + 30
    while time.time() < deadline and ray.available_resources().get("CPU", 0.0) < free:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0.0) >= free - 1e-6


@ray.remote
class _Squatter:
    def ping(self):
        return True


def test_an_actor_that_cannot_be_scheduled_fails_build_after_the_timeout(ray_cluster, tiny_model_path, tmp_path):
    # another job holds all but half a CPU: the engine and the runner (a quarter each) fit,
    # the learner (half) can never be scheduled, and build() must say so instead of waiting
    import time

    from rti_actors import ConfigError
    total = ray.cluster_resources()["CPU"]
    deadline = time.time() + 60  # let an earlier test's actors leave first
    while time.time() < deadline and ray.available_resources().get("CPU", 0.0) < total:
        time.sleep(0.2)
    free = ray.available_resources().get("CPU", 0.0)
    squatter = _Squatter.options(num_cpus=free - 0.5).remote()
    ray.get(squatter.ping.remote())
    try:
        cfg = (_config(tiny_model_path, tmp_path).env_runners(num_env_runners=1, num_cpus_per_env_runner=0.25,
                                                                num_cpus_per_engine=0.25)
               .fault_tolerance(start_timeout_s=60))
        with pytest.raises(ConfigError, match=r"did not start within 60 s: .*learner"):
            cfg.build()
    finally:
        ray.kill(squatter)
    deadline = time.time() + 30  # and the actors that did start are gone
    while time.time() < deadline and ray.available_resources().get("CPU", 0.0) < free:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0.0) >= free - 1e-6  # (an earlier test's actors may still be leaving)


@pytest.mark.parametrize("weight_sync,dtype", [("broadcast", "float32"), ("object_store", "bfloat16")])
def test_publish_installs_the_learners_weights(ray_cluster, flat_model, tmp_path, weight_sync, dtype):
    # broadcast: gloo here; the same code path runs NCCL when learner and engines are on GPUs.
    # object_store with a bf16 engine: the learner sends bf16 weights, which must equal the
    # engine's own cast of the fp32 weights.
    from policies.engines import make_engine
    algo = (_config(flat_model, tmp_path, lr=1e-3).policy(dtype=dtype)
            .learners(weight_sync=weight_sync).build())
    try:
        assert algo.updates.weight_sync == weight_sync
        if weight_sync == "broadcast":
            # what the learner process listens on besides Ray's own worker port (its process
            # group's store, the weight group's): loopback or the node's own Ray address, never
            # every interface
            import psutil
            info = ray._private.state.actors(algo.learner.ranks[0]._actor_id.hex())
            ours = [c.laddr.ip for c in psutil.Process(info["Pid"]).net_connections("tcp")
                    if c.status == psutil.CONN_LISTEN and c.laddr.port != info["Address"]["Port"]]
            assert len(ours) >= 2 and set(ours) <= {"127.0.0.1", info["Address"]["IPAddress"]}, ours
        m = algo.train()
        assert not m["learner"].get("skipped") and ray.get([e.version.remote() for e in algo.engines]) == [1]
        exported = algo.export_policy(tmp_path / "exported")
        prompts, completions = [[1, 2, 3, 4, 5], [7, 8, 9]], [[10, 11, 12], [13, 14]]
        served = ray.get(algo.engines[0].score.remote(prompts, completions, 1.0))
    finally:
        algo.stop()
    learned = make_engine("hf", exported, dtype=dtype).score(prompts, completions, 1.0)
    initial = make_engine("hf", flat_model, dtype=dtype).score(prompts, completions, 1.0)
    flat = lambda rows: [x for r in rows for x in r]  # noqa: E731
    assert flat(served) == pytest.approx(flat(learned), abs=1e-6)
    assert flat(served) != pytest.approx(flat(initial), abs=1e-6)  # the update moved the weights: the check can fail


def test_broadcast_between_learner_and_cpu_engines_on_gpu_is_refused(ray_cluster, flat_model, tmp_path):
    from rti_actors.options import ConfigError
    cfg = _config(flat_model, tmp_path).learners(weight_sync="broadcast", num_gpus_per_learner=1)
    with pytest.raises(ConfigError, match="same kind of device"):
        cfg.validate()


def test_lora_with_shared_prefix_and_packing_trains_and_publishes_merged_weights(ray_cluster, flat_model, tmp_path):
    # LoRA adapters with the group's opening shared and rows packed, through the actor graph:
    # the engine receives the merged weights, the export is a plain folder that transformers
    # and vLLM load, and all of them score tokens as the learner's merged model does
    from policies.engines import make_engine
    algo = (_config(flat_model, tmp_path, lr=5e-2)
            .learners(lora={"r": 4}, share_prefix=True, pack_sequences=True).build())
    try:
        m = algo.train()
        assert not m["learner"].get("skipped") and m["learner"]["prefix_clusters"] >= 1
        assert m["learner"]["padding_frac"] == 0.0
        exported = algo.export_policy(tmp_path / "exported")
        prompts, completions = [[1, 2, 3, 4, 5], [7, 8, 9]], [[10, 11, 12], [13, 14]]
        served = ray.get(algo.engines[0].score.remote(prompts, completions, 1.0))
    finally:
        algo.stop()
    flat = lambda rows: [x for r in rows for x in r]  # noqa: E731
    learned = make_engine("hf", exported).score(prompts, completions, 1.0)
    initial = make_engine("hf", flat_model).score(prompts, completions, 1.0)
    assert flat(served) == pytest.approx(flat(learned), abs=1e-5)
    assert flat(served) != pytest.approx(flat(initial), abs=1e-5)  # the adapters moved the merged weights
    vllm_scores = make_engine("vllm", exported, dtype="float32", max_model_len=512).score(prompts, completions, 1.0)
    assert flat(vllm_scores) == pytest.approx(flat(learned), abs=1e-4)
