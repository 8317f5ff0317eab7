"""AEPO end to end: a real Ray cluster, the tiny model on the hf engine, the DeepSpeed learner, on a
three-turn env; branches are played by the runners' continuations and trained with AEPO's loss."""

import pytest

import rti_actors.aepo as aepo_module
import rti_actors.algorithms.base as plugin_base  # where advantages are assigned
from envs import Task, ToolEnv
from rti_actors import RTIConfig

pytestmark = pytest.mark.integration


class ChatterEnv(ToolEnv):
    """Three turns: the env answers the first two replies and the third ends the episode;
    reward 1 iff the last reply has an even length (a coin a random policy tosses)."""

    DEFAULT_CONFIG = {**ToolEnv.DEFAULT_CONFIG, "max_turns": 3, "num_tasks": 2}

    def task_ids(self, split):
        return [f"{split}-{i}" for i in range(self.config["num_tasks"])]

    def load_task(self, task_id):
        return Task(task_id, "You reply.", f"Talk. ({task_id})", [])

    def on_text_reply(self, content):
        if self.turns >= 3:
            return [], True
        return [{"role": "user", "content": f"Go on ({self.turns})."}], False

    def compute_reward(self):
        text = self.messages[-1].get("content") or ""
        return float(len(text) % 2 == 0), {"progress": 0.0}

    def reward_evidence(self):
        return {}


def chatter_env(cfg):
    return ChatterEnv(cfg)


def _branching(tiny_model_path, tmp_path, name, monkeypatch):
    # A random tiny model never writes a tool call: count every turn the episode went on after as
    # one, so that branches are taken through the real runners (the planning runs in the driver).
    monkeypatch.setattr(aepo_module, "tool_call_steps", lambda t: list(range(t.num_turns - 1)))
    return (RTIConfig()
            .environment(chatter_env, env_config={})
            .policy(model=tiny_model_path, engine="hf", max_new_tokens=8, max_model_len=1024)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
            .training(algorithm="aepo", group_size=4, tasks_per_iteration=2, lr=1e-4,
                      skip_zero_variance_groups=False)
            # threshold 0 and no entropy term: every decision branches while budget is left
            .aepo(initial_rollouts=2, branch_threshold=0.0, entropy_weight=0.0)
            .learners(backend="deepspeed", zero_stage=0)
            .reporting(run_dir=str(tmp_path), run_name=name, tensorboard=False, plot=False))


def test_one_iteration_branches_within_the_budget_trains_and_checkpoints(ray_cluster, tiny_model_path, tmp_path,
                                                                         monkeypatch):
    cfg = _branching(tiny_model_path, tmp_path, "aepo", monkeypatch)
    algo = cfg.build()
    seen, samples = [], []
    assign = plugin_base.assign_advantages
    monkeypatch.setattr(plugin_base, "assign_advantages", lambda g: seen.append(assign(g)) or g)
    start = algo.updates.start
    algo.updates.start = lambda s, v: samples.extend(x for g in s for x in g) or start(s, v)
    try:
        m = algo.train()
        assert len(seen) == 2 and m["aepo/replay_errors"] == 0
        for group in seen:
            # the group budget: 2 global rollouts and 2 branches, G = 4 in all
            assert sorted(t.sample_index for t in group) == [0, 1, 2, 3]
            branches = [t for t in group if t.branch_of is not None]
            assert len(branches) == 2
            for b in branches:
                parent = next(t for t in group if t.sample_index == b.branch_of)
                k = b.branch_step
                end = parent.turn_spans[k + 1][0]  # through turn k, the env's answer, turn k + 1's prompt
                assert b.ids[:end] == parent.ids[:end] and b.logprobs[:end] == parent.logprobs[:end]
                assert b.loss_mask[:end] == parent.loss_mask[:end] and b.actions[:k + 1] == parent.actions[:k + 1]
                assert b.intervened_step is None
        assert m["aepo/branches"] == 4 and m["aepo/branch_rounds"] >= 1 and m["aepo/global_rollouts"] == 2
        assert m["num_episodes"] == 8
        learn = m["learner"]
        assert not learn["skipped"] and learn["num_samples"] == 8 and learn["step"] == 1
        assert learn["entropy_mean"] > 0 and 0 <= learn["preserved_frac"] <= 1
        assert len(samples) == 8
        # checkpoint and restore; the next iteration runs from the restored state
        ckpt = algo.save(tmp_path / "ckpt")
        algo.restore(ckpt)
        assert algo.iteration == 1 and algo.learner_step == 1
        again = algo.train()
        assert again["aepo/branches"] == 4 and again["learner"]["step"] == 2
    finally:
        algo.stop()


def test_a_runner_that_dies_while_branching_loses_no_branch(ray_cluster, tiny_model_path, tmp_path, monkeypatch):
    # Ray does not retry the call here (max_task_retries=0), so the driver's own retry path in
    # Rollouts.play_branches is what plays the lost shard again, on the next runner; seeded branches make the
    # disturbed iteration equal to an undisturbed one.
    from tests.integration.test_faults import _kill_after_send, train_disturbed

    def config(name):
        return _branching(tiny_model_path, tmp_path, name, monkeypatch).fault_tolerance(max_restarts=3,
                                                                                         max_task_retries=0)

    def disturb(algo):
        algo.rollouts.runners = [_kill_after_send(algo.runners[0], "continue_from"), *algo.runners[1:]]

    want, got = train_disturbed(config, disturb)
    assert got["faults/redone/rollout_chunks"] >= 1 and got["faults/restarts/env_runner"] == 1
    assert got["aepo/branches"] == want["aepo/branches"] == 4 and got["aepo/replay_errors"] == 0
    assert got["reward_mean"] == want["reward_mean"] and got["num_episodes"] == want["num_episodes"] == 8
    assert got["learner"]["num_samples"] == want["learner"]["num_samples"]
    assert got["learner"]["grad_norm"] == pytest.approx(want["learner"]["grad_norm"], rel=1e-4)
