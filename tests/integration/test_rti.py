"""RTI end to end: a real Ray cluster, the tiny model, a real engine and DeepSpeed learner."""

import json
import math
import time
from pathlib import Path

import pytest
import ray

from rti_actors import RTIConfig
from rti_actors.groups import group_by_task
from rti_actors.rti.fix_tracker import AcceptedFixes
from rti_actors.trajectory import EpisodeSpec
from tests.integration import learnable_env  # noqa: F401  (registers FirstLetter-v0)

pytestmark = pytest.mark.integration

NAV = {"max_turns": 3, "max_tool_output_chars": 600}


def _nav_config(model, tmp_path, name, **interventions):
    return (RTIConfig()
            .environment("Navigation-v0", env_config=NAV)
            .policy(model=model, engine="hf", max_new_tokens=16, max_model_len=4096)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
            .training(algorithm="rti", group_size=2, tasks_per_iteration=2, lr=1e-4, skip_zero_variance_groups=False)
            .interventions(**{"roles": "rules", "verifier_llm": False, "ppl_threshold": math.inf, **interventions})
            .reporting(run_dir=str(tmp_path), run_name=name, tensorboard=False, plot=False))


def _sample_groups(algo):
    specs = [EpisodeSpec(tid, j) for tid in algo.train_ids[:2] for j in range(2)]
    return group_by_task(algo.rollouts.play(specs))


def test_rules_intervention_is_accepted_continued_and_trained(ray_cluster, tiny_model_path, tmp_path):
    algo = _nav_config(tiny_model_path, tmp_path, "rules").build()
    try:
        groups = _sample_groups(algo)
        assert all(max(t.reward for t in g) == 0 for g in groups)  # a random model fails everything
        for g in groups:
            for t in g:
                assert set(t.token_weight) == {1.0}  # on-policy trajectories: weights exactly 1
        new_groups, m = algo.plugin.transform_groups(algo, groups)
        assert m["rti/provider"] == "rules" and m["rti/triggered_groups"] == 2
        assert m["rti/accepted"] >= 1 and m["rti/continued"] >= 1
        rescued = [t for g in new_groups for t in g if t.intervened]
        assert len(rescued) == m["rti/continued"]
        for t in rescued:
            a, b = t.corrected_span
            w = t.token_weight
            assert all(x == 1.0 for x in w[:a] + w[b:])        # 1 everywhere else ...
            assert any(x != 1.0 for x in w[a:b])                 # ... and reweighted on the fix
            assert all(0.8 - 1e-9 <= x <= 1.2 + 1e-9 for x in w[a:b])
            assert set(t.loss_mask[a:b]) == {1}
            assert t.ids[b - 1] == algo.plugin.intervention.renderer.eos_id
            assert t.reward in (0.0, 1.0)                        # scored by the same reward
            assert t.sample_index >= 2 and t.source_index is not None
        assert sum(len(g) for g in new_groups) == 4 + len(rescued)  # append mode
        # and the learner trains on the rescued trajectories with the rest of the group
        result = algo.train()
        assert result["learner"]["num_samples"] == 4 + result["rti/continued"]
        assert result["pre_intervention_pass_at_G"] == 0.0
        # the accepted fixes are tracked and re-scored through the gate after the publish:
        # the acceptance-time PPL is the gate's, the current one moved with the update
        assert result["rti/fixes_tracked"] == result["rti/continued"] >= 1
        assert result["rti/ppl_fixes_at_gate"] == pytest.approx(result["rti/mean_ppl_accepted"])
        assert math.isfinite(result["rti/ppl_fixes_now"])
        assert result["rti/ppl_fixes_now"] != pytest.approx(result["rti/ppl_fixes_at_gate"], rel=1e-6)
        # saved with the checkpoint and restored; a checkpoint without the file restores empty
        tracked = list(algo.plugin.fixes.fixes)
        ckpt = Path(algo.save(tmp_path / "ckpt"))
        algo.plugin.fixes = AcceptedFixes(64)
        algo.restore(ckpt)
        assert algo.plugin.fixes.fixes == tracked
        marker = json.loads((ckpt / "checkpoint.json").read_text())
        del marker["files"]["accepted_fixes.json"]
        (ckpt / "accepted_fixes.json").unlink()
        (ckpt / "checkpoint.json").write_text(json.dumps(marker))
        algo.restore(ckpt)
        assert algo.plugin.fixes.fixes == []
    finally:
        algo.stop()


def test_delta_zero_accepts_nothing_and_equals_grpo(ray_cluster, tiny_model_path, tmp_path):
    rti = _nav_config(tiny_model_path, tmp_path, "delta0", ppl_threshold=0.0).build()
    try:
        r = rti.train()
    finally:
        rti.stop()
    grpo = _nav_config(tiny_model_path, tmp_path, "grpo").training(algorithm="grpo").build()
    try:
        g = grpo.train()
    finally:
        grpo.stop()
    assert r["rti/gate_pass"] == 0 and r["rti/accepted"] == 0 and r["rti/gate_scored"] >= 1
    assert r["reward_mean"] == g["reward_mean"] and r["num_episodes"] == g["num_episodes"]
    assert r["learner"]["loss"] == pytest.approx(g["learner"]["loss"], abs=1e-7)
    assert r["learner"]["grad_norm"] == pytest.approx(g["learner"]["grad_norm"], rel=1e-5)


def test_leakage_canary_never_reaches_a_sample_or_prompt(ray_cluster, tiny_model_path, tmp_path):
    canary = "CANARY-7f3a9c"
    algo = (RTIConfig().environment("FirstLetter-v0", env_config={"target": "\u2603", "canary": canary})
            .policy(model=tiny_model_path, engine="hf", max_new_tokens=8, max_model_len=1024)
            .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
            .training(algorithm="rti", group_size=4, tasks_per_iteration=2)
            .interventions(roles="self", ppl_threshold=math.inf, verifier=False, max_role_tokens=32)
            .reporting(run_dir=str(tmp_path), run_name="canary", tensorboard=False, plot=False).build())
    tok = algo.plugin.intervention.renderer.tokenizer
    try:
        for it in range(2):
            groups = _sample_groups(algo)
            assert canary in repr(ray.get(algo.runners[0].reward_evidence.remote(groups[0][0].task_id, "train")))
            new_groups, m = algo.plugin.transform_groups(algo, groups)
            assert m["rti/triggered_groups"] == len(groups)
            for t in (t for g in new_groups for t in g):
                assert canary not in tok.decode(t.ids)
            algo.train()
        evals = algo.rollouts.play([EpisodeSpec("test-0", 0, 0, "e", "test")])
        assert canary not in tok.decode(evals[0].ids)
    finally:
        algo.stop()


def test_second_fix_on_a_rescued_trajectory_that_still_fails(ray_cluster, tiny_model_path, tmp_path):
    algo = _nav_config(tiny_model_path, tmp_path, "depth2", interventions_per_trajectory=2).build()
    try:
        new_groups, m = algo.plugin.transform_groups(algo, _sample_groups(algo))
    finally:
        algo.stop()
    assert m["rti/accepted_second_fix"] >= 1
    twice = [t for g in new_groups for t in g if t.depth == 1]
    assert twice
    for t in twice:
        a, b = t.corrected_span
        w = t.token_weight
        assert any(x != 1.0 for x in w[:a])  # the first fix, carried in the prefix
        assert any(x != 1.0 for x in w[a:b]) and all(x == 1.0 for x in w[b:])
    # each source trajectory contributes at most one rescued trajectory to its group
    for g in new_groups:
        sources = [t.source_index for t in g if t.intervened]
        assert len(sources) == len(set(sources))


def test_rule_roles_need_an_env_that_has_them(ray_cluster, tiny_model_path, tmp_path):
    from rti_actors import ConfigError

    cfg = (RTIConfig().environment("FirstLetter-v0", env_config={"target": "a"})
           .policy(model=tiny_model_path, engine="hf", max_new_tokens=8, max_model_len=1024)
           .env_runners(num_env_runners=1, num_envs_per_env_runner=1)
           .training(algorithm="rti", group_size=2, tasks_per_iteration=1).interventions(roles="rules")
           .reporting(run_dir=str(tmp_path), run_name="no-rules", tensorboard=False, plot=False))
    free = ray.available_resources().get("CPU", 0.0)
    with pytest.raises(ConfigError, match="rti_rules"):
        cfg.build()
    deadline = time.time() + 30  # the actors that had started are gone again
    while time.time() < deadline and ray.available_resources().get("CPU", 0.0) < free:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0.0) >= free - 1e-6  # (an earlier test's actors may still be leaving)


def test_env_failures_are_counted_never_scored_and_never_trigger_rti(ray_cluster, tiny_model_path, tmp_path):
    algo = (RTIConfig().environment("Failing-v0")
            .policy(model=tiny_model_path, engine="hf", max_new_tokens=8, max_model_len=1024)
            .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
            .training(algorithm="rti", group_size=2, tasks_per_iteration=4, skip_zero_variance_groups=False)
            .interventions(roles="self", verifier=False, max_role_tokens=16)
            .fault_tolerance(max_episode_retries=1)
            .reporting(run_dir=str(tmp_path), run_name="failing", tensorboard=False, plot=False).build())
    try:
        algo.train_ids = ["ok", "grader-down", "bug"]  # one group the policy fails, two the env does
        algo.pick_tasks = lambda n: list(algo.train_ids)
        m = algo.train()
    finally:
        algo.stop()
    assert m["faults/infra_episodes"] == 4 and m["faults/groups_dropped"] == 2 and m["faults/episode_retries"] == 4
    assert m["num_groups"] == 1 and m["num_episodes"] == 2 and m["reward_mean"] == 0.0
    assert m["rti/triggered_groups"] == 1  # only the group the policy itself failed


VERDICT_TEXT = '{"is_valid":false,"error_types":["wrong"],"diagnosis":"bad start","suggest_next":"retry"}'


@pytest.fixture(scope="module")
def verdict_model(tmp_path_factory, tiny_model_path):
    """The tiny model trained to answer every chat prompt with one short Validator verdict
    (and nothing else), so the policy itself can play the roles through ``roles="self"``."""
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    target = tok.encode(VERDICT_TEXT, add_special_tokens=False) + [tok.eos_token_id]
    rng, words = random.Random(0), ["route", "tool", "step", "reply", "Say", "task", "{", "}", "a", "9"]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for _ in range(60):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 300)))
        prompt = tok.apply_chat_template([{"role": "system", "content": "You reply."}, {"role": "user", "content": text}],
                                         tokenize=False, add_generation_prompt=True)
        ids = tok.encode(prompt, add_special_tokens=False)
        x = torch.tensor([ids + target])
        labels = torch.tensor([[-100] * len(ids) + target])
        loss = model(input_ids=x, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    path = tmp_path_factory.mktemp("verdict_model")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_self_roles_accept_a_fix_through_the_gate_and_train_it(ray_cluster, verdict_model, tmp_path):
    # the policy fails every task (its answer starts with "{", the target is a snowman), as
    # Validator it writes an invalid-step verdict under the schema, as Corrector it rewrites
    # the step as it would write it: the rewrite's PPL under the policy is near 1, so the
    # default gate (delta = 5) keeps it, and the continuation joins the learner's batch
    algo = (RTIConfig().environment("FirstLetter-v0", env_config={"target": "\u2603"})
            .policy(model=verdict_model, engine="hf", max_new_tokens=48, max_model_len=2048)
            .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
            .training(algorithm="rti", group_size=2, tasks_per_iteration=2, skip_zero_variance_groups=False)
            .interventions(roles="self", verifier=False, max_role_tokens=64)
            .reporting(run_dir=str(tmp_path), run_name="self", tensorboard=False, plot=False).build())
    try:
        m = algo.train()
    finally:
        algo.stop()
    assert m["rti/triggered_groups"] == 2 and m["rti/validator_found_error"] >= 1
    assert m["rti/validator_unparsable"] == 0  # the schema leaves nothing to misread
    assert m["rti/corrector_parsed"] >= 1 and m["rti/gate_pass"] >= 1 and m["rti/accepted"] >= 1
    assert m["rti/mean_ppl_accepted"] <= 5.0
    assert m["rti/continued"] >= 1
    assert m["learner"]["num_samples"] == m["num_episodes"] + m["rti/continued"]
