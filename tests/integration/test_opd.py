"""OPD end to end: a real Ray cluster, tiny models on hf engines (the policy's and the teacher's),
the DeepSpeed learner, on the single-turn FirstLetter env."""

import math

import pytest
import ray

from rti_actors import RTIConfig
from rti_actors.options import ConfigError
from tests.integration import learnable_env  # noqa: F401  (registers FirstLetter-v0)

pytestmark = pytest.mark.integration


def _config(student, teacher, tmp_path, name, **training):
    return (RTIConfig()
            .environment("FirstLetter-v0", env_config={"num_tasks": 1})
            .policy(model=student, engine="hf", max_new_tokens=4, max_model_len=512, temperature=1.0)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=4)
            .training(**{"algorithm": "opd", "group_size": 8, "tasks_per_iteration": 1, "lr": 1e-3, **training})
            .opd(model=teacher)
            .learners(backend="deepspeed", zero_stage=0)
            .reporting(run_dir=str(tmp_path), run_name=name, tensorboard=False, plot=False))


def _prompt_ids(model_path) -> list[int]:
    """The policy's prompt of FirstLetter's one training task, up to its generation prompt."""
    from transformers import AutoTokenizer

    from envs import make_env
    from policies.chat import ChatRenderer

    renderer = ChatRenderer(AutoTokenizer.from_pretrained(model_path))
    obs, info = make_env("FirstLetter-v0", {"num_tasks": 1}).reset(options={"task_id": "train-0"})
    msgs, buf = renderer.begin(obs, info["tools"])
    return buf.ids + renderer.generation_prompt_ids(msgs)


def _captured(algo) -> list:
    """Every learner sample the driver queues, by wrapping its update."""
    samples = []
    start = algo.updates.start
    algo.updates.start = lambda s, v: samples.extend(x for g in s for x in g) or start(s, v)
    return samples


def test_teacher_equal_to_student_gives_zero_advantages_and_moves_nothing(ray_cluster, tiny_model_path, tmp_path):
    algo = _config(tiny_model_path, tiny_model_path, tmp_path, "same").build()
    samples = _captured(algo)
    probe = ([_prompt_ids(tiny_model_path)], [[algo.renderer.eos_id]])
    try:
        before = ray.get(algo.engines[0].score.remote(*probe, 1.0))
        m = algo.train()
        after = ray.get(algo.engines[0].score.remote(*probe, 1.0))
    finally:
        algo.stop()
    assert len(samples) == 8 and all(sum(s.loss_mask) > 0 for s in samples)
    # both models score the same ids the same way: every advantage is 0, not merely small
    assert {a for s in samples for a in s.token_advantages} == {0.0}
    assert m["opd/reverse_kl"] == 0.0 and m["opd/scored_tokens"] == sum(sum(s.loss_mask) for s in samples)
    assert m["learner"]["skipped"] and m["learner"]["num_groups_trained"] == 0
    assert m["policy_version"] == 0 and before == after


def _fitted(model_path, prompt, target: dict, out_dir) -> str:
    """``model_path`` trained until its first reply token after ``prompt`` follows ``target``
    ({token id: probability}) closely, saved in ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, q = torch.tensor(list(target)), torch.tensor(list(target.values()))
    torch.manual_seed(0)
    for _ in range(300):
        logp = torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1].float(), -1)
        loss = (q * (q.log() - logp[ids])).sum()  # KL(target || model) on the target's tokens
        if loss.item() < 0.05:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(model_path).save_pretrained(out_dir)
    return str(out_dir)


@pytest.fixture(scope="module")
def distillation_pair(tmp_path_factory, tiny_model_path) -> tuple[str, str, int]:
    """(student, teacher, token): on FirstLetter's prompt the student opens its reply with one of
    four tokens, ``token`` the least likely (0.1); the teacher, fitted from the same model, opens
    with ``token`` 85% of the time. Like a real student and teacher, they share their candidates."""
    import torch
    from transformers import AutoModelForCausalLM

    prompt = _prompt_ids(tiny_model_path)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    with torch.no_grad():
        top = torch.topk(base(input_ids=torch.tensor([prompt])).logits[0, -1], 4).indices.tolist()
    a, b, c, token = top
    student = _fitted(tiny_model_path, prompt, {a: 0.45, b: 0.3, c: 0.15, token: 0.1},
                      tmp_path_factory.mktemp("opd_student"))
    teacher = _fitted(tiny_model_path, prompt, {a: 0.05, b: 0.05, c: 0.05, token: 0.85},
                      tmp_path_factory.mktemp("opd_teacher"))
    return student, teacher, token


def test_student_takes_up_the_teachers_preferred_token(ray_cluster, distillation_pair, tmp_path):
    # pure distillation (reward weight 0): the env's reward plays no part, only the teacher's
    # scores. One-token replies: the two models were fitted on the first token only
    student, teacher, token = distillation_pair
    algo = (_config(student, teacher, tmp_path, "learn", lr=3e-4).policy(max_new_tokens=1).build())
    probe = ([_prompt_ids(student)], [[token]])
    try:
        first = math.exp(ray.get(algo.engines[0].score.remote(*probe, 1.0))[0][0])
        kls = [algo.train()["opd/reverse_kl"] for _ in range(4)]
        last = math.exp(ray.get(algo.engines[0].score.remote(*probe, 1.0))[0][0])
    finally:
        algo.stop()
    assert first < 0.2 and last > first + 0.4, (first, last, kls)
    assert kls[-1] < kls[0], kls  # the student moves toward the teacher


def test_one_iteration_mixes_the_reward_checkpoints_and_restores(ray_cluster, tiny_model_path, tmp_path, monkeypatch):
    """A flat student, the peaked tiny model as teacher (one tokenizer), reward weight 0.5: each
    token's advantage is -(log pi_s - log pi_t) + 0.5 A_i, checked against both models scored here.
    The group advantages A_i are set by hand (a flat model rarely succeeds), so the mix shows."""
    import rti_actors.algorithms.base as plugin_base  # where advantages are assigned
    from policies.engines import make_engine
    from policies.models import make_tiny_model

    def assign(group):
        for t in group:
            t.advantage = (t.sample_index - 3.5) / 4
        return group

    monkeypatch.setattr(plugin_base, "assign_advantages", assign)
    student = make_tiny_model(tmp_path / "flat", logit_scale=1.0, seed=1)
    algo = _config(student, tiny_model_path, tmp_path, "mix").opd(reward_weight=0.5).build()
    samples = _captured(algo)
    try:
        m = algo.train()
        assert not m["learner"]["skipped"] and m["learner"]["step"] == 1 and m["policy_version"] == 1
        assert m["opd/teacher_seconds"] > 0 and m["seconds"]["distill"] >= m["opd/teacher_seconds"]
        ckpt = algo.save(tmp_path / "ckpt")
        algo.restore(ckpt)
        assert algo.iteration == 1 and algo.learner_step == 1
        again = algo.train()
        assert again["learner"]["step"] == 2 and again["opd/scored_tokens"] > 0
    finally:
        algo.stop()
    first = samples[:8]
    assert sorted(s.advantage for s in first) == [(k - 3.5) / 4 for k in range(8)]
    scorers = [make_engine("hf", student), make_engine("hf", tiny_model_path)]
    kls, total = [], 0
    for s in first:
        start = s.loss_mask.index(1)
        ids = s.ids
        lp_s, lp_t = (e.score([ids[:start]], [ids[start:]], 1.0)[0] for e in scorers)
        for j, (a, b) in enumerate(zip(lp_s, lp_t)):
            i = start + j
            expected = (-(a - b) + 0.5 * s.advantage) if s.loss_mask[i] else 0.0
            assert s.token_advantages[i] == pytest.approx(expected, abs=1e-4)
            if s.loss_mask[i]:
                kls.append(a - b)
        assert s.token_advantages[:start] == [0.0] * start
        total += sum(s.loss_mask)
    assert m["opd/reverse_kl"] == pytest.approx(sum(kls) / len(kls), abs=1e-4) and m["opd/scored_tokens"] == total


def test_build_refuses_a_teacher_with_another_tokenizer_and_opd_without_a_teacher(ray_cluster, tiny_model_path,
                                                                                    tiny_family_models, tmp_path):
    qwen = tiny_family_models("qwen3")  # Qwen3's chat and tool tokens added: another vocabulary
    with pytest.raises(ConfigError, match=r"opd\(model=.*does not share the tokenizer.*vocabularies differ"):
        _config(tiny_model_path, qwen, tmp_path, "mismatch").build()
    with pytest.raises(ConfigError, match=r"algorithm='opd'\) needs a teacher.*opd\(model="):
        _config(tiny_model_path, None, tmp_path, "none").build()
