"""Pass@k estimators, group advantages, the replay queue and config validation."""

from math import comb

import numpy as np
import pytest

from rti_actors.config import RTIConfig
from rti_actors.groups import assign_advantages, group_advantages, group_by_task, is_learnable
from rti_actors.metrics import format_table, merge_summaries, paper_order, pass_at_k, pass_hat_k, summarize
from rti_actors.options import ConfigError
from rti_actors.replay import ReplayQueue
from rti_actors.trajectory import Trajectory, learner_sample


def test_pass_at_k_matches_brute_force():
    import itertools
    n, c = 4, 2
    outcomes = [1, 1, 0, 0]
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(outcomes, k))
        assert pass_at_k(n, c, k) == pytest.approx(np.mean([any(s) for s in subsets]))
        assert pass_hat_k(n, c, k) == pytest.approx(np.mean([all(s) for s in subsets]))
    assert pass_at_k(4, 0, 1) == 0 and pass_at_k(4, 4, 1) == 1 and pass_hat_k(4, 3, 4) == 0
    assert pass_at_k(8, 1, 2) == pytest.approx(1 - comb(7, 2) / comb(8, 2))
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_summarize_and_table():
    s = summarize({"a": [True, False, False, False], "b": [True, True, True, True]})
    assert s["p@1"] == pytest.approx((0.25 + 1) / 2)
    assert s["pass^4"] == pytest.approx(0.5)
    assert s["avg_p@k"] == pytest.approx(np.mean([s[f"pass@{k}"] for k in range(1, 5)]))
    table = format_table({"RTI": {"Navigation": s}, "GRPO": {"Navigation": s}})
    assert "Navigation" in table and "62.50" in table and table.count("\n") == 4
    assert table.index("GRPO") < table.index("RTI")  # the paper's row order, whatever the order run


def test_summaries_of_disjoint_parts_merge_into_the_whole():
    rng = np.random.default_rng(0)
    successes = {f"t{i}": list(rng.random(4) < p) for i, p in enumerate(rng.random(11))}
    tasks = list(successes)
    parts = [summarize({t: successes[t] for t in chunk}) for chunk in (tasks[:3], tasks[3:4], tasks[4:])]
    for p, sec in zip(parts, (1.0, 2.0, 3.0)):
        p["seconds"], p["tasks_left_out_infra"] = sec, 1
    whole, merged = summarize(successes), merge_summaries(parts)
    assert merged["num_tasks"] == 11 and merged["n"] == 4
    assert merged["seconds"] == 6.0 and merged["tasks_left_out_infra"] == 3
    for k in ("p@1", "pass@2", "pass^3", "avg_p@k", "avg_p^k"):
        assert merged[k] == pytest.approx(whole[k])
    assert merged["avg_p@k"] != pytest.approx(np.mean([p["avg_p@k"] for p in parts]))  # weighted, not averaged
    with pytest.raises(ValueError, match="different numbers of rollouts"):
        merge_summaries([parts[0], summarize({"x": [True, False]})])


def test_paper_row_order_for_any_subset():
    assert paper_order(["RTI", "LUFFY", "base", "OPD", "GSPO", "AEPO", "GRPO"]) == [
        "base", "GRPO", "GSPO", "AEPO", "OPD", "LUFFY", "RTI"]
    # a label of no paper method stays after the row it followed; "rti (iter 3)" is RTI
    assert paper_order(["rti (iter 3)", "base", "SFT warm start", "grpo"]) == [
        "base", "SFT warm start", "grpo", "rti (iter 3)"]
    assert paper_order(["SFT warm start", "RTI"]) == ["SFT warm start", "RTI"]
    with pytest.raises(ValueError, match="same number"):
        summarize({"a": [True], "b": [True, False]})


def test_group_advantages():
    adv = group_advantages([1, 0, 0, 0])
    assert adv[0] > 0 and all(a < 0 for a in adv[1:]) and abs(sum(adv)) < 1e-6
    assert group_advantages([0, 0, 0]) == [0.0, 0.0, 0.0]
    trajs = [Trajectory(t, i, reward=r) for t, i, r in [("x", 1, 0.0), ("y", 0, 1.0), ("x", 0, 1.0), ("y", 1, 1.0)]]
    groups = group_by_task(trajs)
    assert [[t.sample_index for t in g] for g in groups] == [[0, 1], [0, 1]]
    assert is_learnable(groups[0]) and not is_learnable(groups[1])
    assign_advantages(groups[0])
    assert groups[0][0].advantage == pytest.approx(1.0, abs=1e-4)


def test_learner_sample_carries_no_messages_or_evidence():
    t = Trajectory("t", 0, ids=[1], loss_mask=[1], logprobs=[0.0], token_weight=[1.0], advantage=0.5,
                   policy_version=3, messages=[{"role": "user", "content": "secret"}], info={"evidence": "secret"},
                   tools=[{"name": "secret"}])
    assert "secret" not in repr(learner_sample(t))


def test_replay_queue_staleness():
    q = ReplayQueue(max_policy_lag=1)
    q.put([["g0"]], version=0)
    q.put([["g1"]], version=1)
    inc = q.put([["g2"]], version=2)
    assert q.get(10, current_version=2) == (inc, [["g1"], ["g2"]])
    assert q.get_stats()["dropped_stale"] == 1 and q.get_stats()["lag_counts"] == {0: 1, 1: 1}
    q.put([["h0"], ["h1"]], version=[1, 2])  # one version per group: the oldest of its turns
    assert q.get(10, current_version=3)[1] == [["h1"]] and q.get_stats()["dropped_stale"] == 2
    with pytest.raises(ValueError, match="versions"):
        q.put([["x"]], version=[1, 2])
    on_policy = ReplayQueue(0)
    on_policy.put([["a"]], 3)
    assert on_policy.get(5, 3)[1] == [["a"]] and on_policy.get(5, 3)[1] == []
    on_policy.put([["b"], ["c"]], 3)
    assert on_policy.clear() == 2 and on_policy.size() == 0


def test_config_round_trip_and_freeze():
    cfg = RTIConfig().environment("Navigation-v0", env_config={"language": "en"}).training(algorithm="gspo", group_size=4)
    again = RTIConfig.from_dict(cfg.to_dict())
    assert again == cfg and again["training"]["group_size"] == 4
    cfg.freeze()
    with pytest.raises(ConfigError, match="frozen"):
        cfg.training(lr=1.0)
    with pytest.raises(ConfigError, match="known options"):
        RTIConfig().training(learning_rate=1.0)


@pytest.mark.parametrize("mutate,needle", [
    (lambda c: c.environment("NoSuchEnv-v0"), "unknown environment"),
    (lambda c: c.training(algorithm="ppo"), "unknown algorithm"),
    (lambda c: c.training(group_size=1), "at least 2"),
    (lambda c: c.training(task_ids=[]), "non-empty list of task ids"),
    (lambda c: c.training(task_ids="nav-0001"), "non-empty list of task ids"),
    (lambda c: c.policy(engine="tgi"), "unknown engine"),
    (lambda c: c.learners(zero_stage=4), "zero_stage"),
    (lambda c: c.env_runners(num_env_runners=0), "num_env_runners"),
    (lambda c: c.env_runners(num_env_runners=64), "CPUs"),
    (lambda c: c.debugging(log_level="LOUD"), "log_level"),
    (lambda c: c.fault_tolerance(start_timeout_s=0), "start_timeout_s"),
    (lambda c: c.fault_tolerance(max_episode_retries=-1), "max_episode_retries"),
    (lambda c: c.policy(tensor_parallel_size=2), "num_gpus_per_engine=2"),
    (lambda c: c.policy(tensor_parallel_size=0), "tensor_parallel_size"),
    (lambda c: c.env_runners(custom_resources_per_engine={"serve": -1}), "custom_resources_per_engine"),
    (lambda c: c.env_runners(custom_resources_per_env_runner=["rollout"]), "custom_resources_per_env_runner"),
    (lambda c: c.learners(custom_resources_per_learner={"GPU": 1}), "num_gpus_per_"),
])
def test_bad_configs_fail_with_what_to_change(mutate, needle):
    cfg = mutate(RTIConfig().environment("Navigation-v0"))
    with pytest.raises(ConfigError, match=needle):
        cfg.validate(available_cpus=2)


def test_missing_environment_is_reported():
    with pytest.raises(ConfigError, match="no environment"):
        RTIConfig().validate(available_cpus=2)


def test_gpus_requested_beyond_the_cluster_fail_with_the_count():
    cfg = (RTIConfig().environment("Navigation-v0").env_runners(num_engines=2, num_gpus_per_engine=4)
           .learners(num_gpus_per_learner=1))
    with pytest.raises(ConfigError, match=r"need 9 GPUs \(2 engines x 4 \+ learner 1\) but the cluster has 8"):
        cfg.validate(available_cpus=64, available_gpus=8)
    cfg.validate(available_cpus=64, available_gpus=9)


def test_broadcast_on_shared_gpus_is_refused():
    cfg = (RTIConfig().environment("Navigation-v0")
           .env_runners(num_gpus_per_engine=0.5).learners(num_gpus_per_learner=0.5, weight_sync="broadcast"))
    with pytest.raises(ConfigError, match="two NCCL ranks on one device"):
        cfg.validate(available_gpus=1)
    cfg.copy().learners(weight_sync="auto").validate(available_gpus=1)  # auto uses the object store there


def test_custom_resources_are_checked_against_the_cluster():
    from rti_actors.cluster import check_custom_resources

    cfg = (RTIConfig().environment("Navigation-v0")
           .env_runners(num_env_runners=2, custom_resources_per_env_runner={"rollout": 1},
                        custom_resources_per_engine={"serve": 0.5})
           .learners(num_learners=2, num_cpus_per_learner=0.5, custom_resources_per_learner={"rollout": 1}))
    cfg.validate(available_cpus=8)
    check_custom_resources(cfg, {"CPU": 8, "rollout": 4, "serve": 1})
    # runners and learner ranks ask for 4 "rollout" together; "serve" is not declared at all
    with pytest.raises(ConfigError, match=r"rollout: need 4, the cluster has 3.*serve: need 0.5, the cluster has 0"):
        check_custom_resources(cfg, {"CPU": 8, "rollout": 3})
