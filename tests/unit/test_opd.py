"""OPD: per-token advantages on hand-made log-probs, the driver's scoring with stand-in engines,
the learner's per-token advantages, the endpoint teacher on a loopback server, the config."""

import json

import pytest
import torch

import rti_actors.opd as opd
from rti_actors.config import RTIConfig
from rti_actors.opd import Distiller, ScoreSpan, score_span, token_advantages, tokenizer_mismatch
from rti_actors.options import ConfigError
from rti_actors.trajectory import Trajectory, learner_sample
from tests.fake_openai import serve
from tests.unit.test_failover import _died as actor_died

# a trajectory: prompt (3), a turn of 2 tokens + eos, a tool result (2), a turn of 1 token + eos
MASK = [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
STUDENT = [-0.5, -1.0, -0.1, -2.0, -3.0, -0.7, -0.2]   # ids[3:10]
TEACHER = [-0.25, -2.0, -0.1, -9.0, -0.5, -0.2, -0.9]


def test_score_span_runs_from_the_first_loss_token_through_the_last_within_the_limit():
    assert score_span(MASK, 100) == ScoreSpan(3, 10)
    assert score_span(MASK, 9) == ScoreSpan(3, 9)  # a trajectory that filled the context: last token unscored
    assert score_span(MASK, 3) is None and score_span([0, 0, 0], 100) is None


def test_the_advantage_is_the_negated_reverse_kl_on_loss_tokens_only():
    adv = token_advantages(MASK, ScoreSpan(3, 10), STUDENT, TEACHER, advantage=1.3, reward_weight=0.0)
    # loss tokens: -(log pi_s - log pi_t); the tool result inside the span and the prompt: 0
    expected = [0, 0, 0, -(-0.5 + 0.25), -(-1.0 + 2.0), 0.0, 0, 0, -(-0.7 + 0.2), -(-0.2 + 0.9)]
    assert adv == pytest.approx(expected, abs=0)
    assert adv[3] > 0 and adv[4] < 0  # the teacher likes token 3 more than the student does, token 4 less
    assert [a for a, m in zip(adv, MASK) if not m] == [0.0] * 5


def test_the_reward_weight_adds_the_group_advantage_to_every_loss_token():
    pure = token_advantages(MASK, ScoreSpan(3, 10), STUDENT, TEACHER, advantage=-0.8, reward_weight=0.0)
    mixed = token_advantages(MASK, ScoreSpan(3, 10), STUDENT, TEACHER, advantage=-0.8, reward_weight=0.5)
    assert [m - p for m, p in zip(mixed, pure)] == pytest.approx([0.5 * -0.8 * k for k in MASK])
    # an unscored loss token (past the limit) keeps the reward part, a trajectory with nothing scored too
    cut = token_advantages(MASK, ScoreSpan(3, 9), STUDENT[:6], TEACHER[:6], advantage=-0.8, reward_weight=0.5)
    assert cut[:9] == mixed[:9] and cut[9] == pytest.approx(-0.4)
    assert token_advantages(MASK, None, [], [], advantage=2.0, reward_weight=0.25) == [0.5 * k for k in MASK]


def test_teacher_equal_to_student_gives_exactly_zero():
    assert token_advantages(MASK, ScoreSpan(3, 10), STUDENT, STUDENT, 0.9, 0.0) == [0.0] * len(MASK)


def test_log_probs_of_another_length_are_refused():
    with pytest.raises(ValueError, match="span of 7"):
        token_advantages(MASK, ScoreSpan(3, 10), STUDENT, TEACHER[:-1], 0.0, 0.0)


class _Engine:
    """Stands in for an engine actor: ``score.remote`` answers at once with each completion
    token's log-prob from ``table`` (token id -> log-prob) and records what it was asked."""

    def __init__(self, table):
        self.calls, self.table, self.dead = [], table, False

    def score(self, prompts, completions, temperature):
        if self.dead:  # as a Ray call to an actor whose restarts are spent
            raise actor_died()
        self.calls.append((prompts, completions, temperature))
        return [[self.table[t] for t in c] for c in completions]


def _trajectory(ids, mask, reward, index):
    return Trajectory(task_id="t", sample_index=index, ids=ids, loss_mask=mask, logprobs=[0.0] * len(ids),
                      token_weight=[1.0] * len(ids), reward=reward)


def test_distiller_scores_both_models_on_the_same_ids_and_sets_token_advantages():
    student_table = {i: -0.1 * i for i in range(20)}
    teacher_table = {i: -0.3 * i + 0.5 for i in range(20)}
    policy = [_Engine(student_table), _Engine(student_table)]
    teacher = _Engine(teacher_table)
    a = _trajectory(list(range(10)), MASK, 1.0, 0)
    b = _trajectory([1, 2, 11, 12, 13, 14], [0, 0, 1, 1, 0, 1], 0.0, 1)
    c = _trajectory([1, 2, 3], [0, 0, 0], 0.0, 2)  # nothing to score
    for t, adv in zip((a, b, c), (1.0, -0.5, -0.5)):
        t.advantage = adv
    d = Distiller(policy, opd.EngineTeacher([teacher]), temperature=0.8, reward_weight=0.5, max_model_len=10)
    m = d.apply([[a, b, c]])
    # the same token ids split at the first loss token, in the same batches on both sides (one per
    # policy engine), at the KL's temperature
    assert [call[:2] for e in policy for call in e.calls] == [call[:2] for call in teacher.calls]
    assert {call[2] for e in policy + [teacher] for call in e.calls} == {0.8}
    assert teacher.calls == [([list(range(3))], [list(range(3, 9))], 0.8), ([[1, 2]], [[11, 12, 13, 14]], 0.8)]
    for t in (a, b):
        for i, (tok, mask) in enumerate(zip(t.ids, t.loss_mask)):
            if not mask:
                assert t.token_advantages[i] == 0.0
            elif i < 9:
                kl = student_table[tok] - teacher_table[tok]
                assert t.token_advantages[i] == pytest.approx(-kl + 0.5 * t.advantage)
    assert a.token_advantages[9] == pytest.approx(0.5)  # past the engines' limit: the reward part only
    assert c.token_advantages == [0.0, 0.0, 0.0]
    kls = [student_table[t] - teacher_table[t] for t in (3, 4, 5, 8, 11, 12, 14)]
    assert m["opd/reverse_kl"] == pytest.approx(sum(kls) / len(kls))
    assert m["opd/scored_tokens"] == 7 and m["opd/unscored_tokens"] == 1
    assert m["opd/teacher_seconds"] >= 0 and m["opd/scoring_seconds"] >= m["opd/teacher_seconds"]
    assert learner_sample(a).token_advantages == a.token_advantages


def test_a_batch_whose_engine_is_dead_for_good_is_scored_whole_by_another():
    """Student and teacher must score the same batches: a policy engine dead for good moves
    its batch, unsplit, to a live one, and the advantages are what an undisturbed run gives."""
    table = {i: -0.1 * i for i in range(20)}
    teacher_table = {i: -0.2 * i for i in range(20)}

    def run(dead: bool):
        policy, teacher = [_Engine(table), _Engine(table)], _Engine(teacher_table)
        policy[1].dead = dead
        trajs = [_trajectory(list(range(k, k + 6)), [0, 0, 1, 1, 0, 1], 1.0, k) for k in range(3)]
        for t in trajs:
            t.advantage = 0.0
        Distiller(policy, opd.EngineTeacher([teacher]), 1.0, 0.0, 10).apply([trajs])
        return [t.token_advantages for t in trajs], policy, teacher

    undisturbed, _, _ = run(False)
    advantages, policy, teacher = run(True)
    assert advantages == undisturbed
    assert policy[1].calls == [] and [c[:2] for c in policy[0].calls] == [c[:2] for c in teacher.calls]
    assert len(teacher.calls) == 2  # the split stays one batch per policy engine


def test_zero_token_advantages_make_a_group_that_is_not_trained():
    from dataclasses import replace

    from rti_actors.learner import ZERO_ADVANTAGE, LearnerSample, has_advantage

    sample = LearnerSample([1, 2, 3], [0, 1, 1], [0.0] * 3, [1.0] * 3, advantage=1.0)
    # the per-token advantages decide, not the group's: a reward difference the teacher never saw is no signal
    assert not has_advantage([replace(sample, token_advantages=[0.0, 0.0, ZERO_ADVANTAGE / 2])])
    assert has_advantage([replace(sample, advantage=0.0, token_advantages=[0.0, 0.0, -0.3])])
    assert has_advantage([sample])


def test_learner_trains_per_token_advantages(tiny_model_path):
    """A real (torch-backend) learner: a constant per-token advantage is the sequence advantage
    exactly; per-token ones weight each token (the loss is their mean of -ratio * A_t at ratio 1);
    packed rows give the same; a wrong length is refused."""
    from rti_actors.learner import Learner
    from tests.samples import make_batch

    def learner():
        # fp32: packed and padded rows are compared exactly (bf16 rounds them differently)
        return Learner(tiny_model_path, {"backend": "torch", "algorithm": "opd", "lr": 1e-3, "dtype": "float32"})

    batch = make_batch(n=3)
    same = [{**s, "token_advantages": [s["advantage"] * m for m in s["loss_mask"]]} for s in batch]
    a, b = learner(), learner()
    ma, mb = a.update(batch), b.update(same)
    assert ma["loss"] == pytest.approx(mb["loss"], rel=1e-6)
    assert all(torch.equal(p, q) for p, q in zip(a.module.parameters(), b.module.parameters()))

    # behaviour log-probs equal to the current ones (ratio 1, no clip): loss = -mean_t A_t * w_t
    from transformers import AutoModelForCausalLM

    from rti_actors.losses import token_logprobs

    probe = learner()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    on_policy = []
    for s in batch:
        ids = torch.tensor([s["ids"]])
        with torch.no_grad():
            lp = token_logprobs(model(input_ids=ids).logits, ids, probe.config["temperature"])[0].tolist()
        adv = [(0.3 * (j % 5) - 0.6) * m for j, m in enumerate(s["loss_mask"])]
        on_policy.append({**s, "behaviour_logprobs": [x * m for x, m in zip(lp, s["loss_mask"])],
                          "token_advantages": adv})
    weighted = [a_ * w for s in on_policy for a_, w, m in zip(s["token_advantages"], s["token_weight"], s["loss_mask"])
                if m]
    m = probe.update(on_policy)
    assert m["loss"] == pytest.approx(-sum(weighted) / len(weighted), rel=1e-4, abs=1e-6)
    assert m["clip_frac"] == 0.0
    packed = Learner(tiny_model_path, {"backend": "torch", "algorithm": "opd", "lr": 1e-3, "pack_sequences": True,
                                       "dtype": "float32"})
    assert packed.update(on_policy)["loss"] == pytest.approx(m["loss"], rel=1e-5, abs=1e-7)
    with pytest.raises(ValueError, match="token_advantages"):
        learner().update([{**batch[0], "token_advantages": [0.0]}])


def test_same_tokenizer_passes_and_another_vocabulary_is_named(tokenizer, tiny_model_path):
    from transformers import AutoTokenizer

    assert tokenizer_mismatch(tokenizer, AutoTokenizer.from_pretrained(tiny_model_path)) is None
    other = AutoTokenizer.from_pretrained(tiny_model_path)
    other.add_tokens(["<teacher_only>"])
    why = tokenizer_mismatch(tokenizer, other)
    assert "vocabularies differ" in why and "<teacher_only>" in why
    with pytest.raises(ConfigError, match=r"does not share the tokenizer.*teacher of the policy's model family"):
        opd.check_teacher_tokenizer(tokenizer, other, "teacher(model='x')", "policy(model='y')")


# ---- the endpoint teacher, on a loopback server -------------------------------------------------
SERVER = {"tokenizer": None, "shift": 0}


def _completions(path, headers, body):
    """/v1/completions with echo: log-prob of prompt token k is -(k + id / 1000); token texts are
    the tokenizer's decode of each id (shifted by ``shift``: another tokenizer reading them)."""
    ids = body["prompt"]
    tok = SERVER["tokenizer"]
    texts = [tok.decode([i + SERVER["shift"]]) for i in ids] + ["x"]
    lps = [None] + [-(k + i / 1000) for k, i in enumerate(ids) if k > 0] + [-0.1]
    return {"choices": [{"text": "", "logprobs": {"tokens": texts, "token_logprobs": lps}}]}


@pytest.fixture(scope="module")
def completions_server():
    with serve(_completions) as server:
        yield server


def test_endpoint_teacher_sends_token_ids_and_reads_the_echoed_log_probs(completions_server, tokenizer, monkeypatch):
    from envs.openai_client import OpenAIChatClient

    monkeypatch.setenv("RTI_TEST_TEACHER_KEY", "sk-teacher")
    SERVER.update(tokenizer=tokenizer, shift=0)
    completions_server.seen.clear()
    client = OpenAIChatClient(completions_server.base_url, "teacher-7b", api_key_env="RTI_TEST_TEACHER_KEY", purpose="teacher")
    teacher = opd.EndpointTeacher(client, workers=2)
    requests = [([5, 6, 7], [8, 9]), ([40], [41, 42, 43])]
    assert teacher.start(requests, 0.8, 1)() == [[-(3 + 8 / 1000), -(4 + 9 / 1000)],
                                              [-(1 + 41 / 1000), -(2 + 42 / 1000), -(3 + 43 / 1000)]]
    path, _, body = completions_server.seen[0]
    assert path == "/v1/completions" and body["echo"] is True and body["model"] == "teacher-7b"
    assert sorted(b["prompt"] for _, _, b in completions_server.seen) == [[5, 6, 7, 8, 9], [40, 41, 42, 43]]  # ids, not text
    assert opd.EndpointTeacher.temperature == 1.0
    # the tokenizer probe: the policy's ids read back as the policy's text, or the endpoint is refused
    opd.check_endpoint_tokenizer(client, tokenizer, "teacher(endpoint=...)", "policy(model='p')")
    SERVER["shift"] = 1
    with pytest.raises(ConfigError, match="another tokenizer"):
        opd.check_endpoint_tokenizer(client, tokenizer, "teacher(endpoint=...)", "policy(model='p')")


# ---- the config ---------------------------------------------------------------------------------
def _opd(**teacher):
    return RTIConfig().environment("Navigation-v0").policy(engine="hf").training(algorithm="opd").opd(**teacher)


def test_config_accepts_opd_with_one_teacher_and_says_what_to_change(tiny_model_path, monkeypatch):
    _opd(model=tiny_model_path).validate()
    _opd(endpoint="https://teacher.example/v1", reward_weight=0.5).validate()
    monkeypatch.setenv("RTI_TEACHER_API_KEY", "sk-x")
    for teacher, words in [({}, "needs a teacher to score the student's tokens"),
                           ({"model": tiny_model_path, "endpoint": "https://t/v1"}, "give one teacher"),
                           ({"endpoint": "ftp://t/v1"}, "must be an http"),
                           ({"endpoint": "http://10.1.2.3:8000/v1"}, "cross the network unencrypted"),
                           ({"model": "/no/such/folder"}, "not a built-in model"),
                           ({"model": tiny_model_path, "reward_weight": -1.0}, "reward_weight"),
                           ({"model": tiny_model_path, "endpoint_api_key_env": "not a name"}, "endpoint_api_key_env")]:
        with pytest.raises(ConfigError, match=words):
            _opd(**teacher).validate()
    _opd(endpoint="http://127.0.0.1:8000/v1").validate()  # loopback may carry the key
    # OPD's options only matter to OPD
    RTIConfig().environment("Navigation-v0").policy(engine="hf").opd(model="/no/such/folder").validate()


def test_opd_options_matter_to_a_restore_of_opd_runs_only():
    from rti_actors.checkpoints import config_changes

    base = json.loads(RTIConfig().training(algorithm="opd").opd(model="/m").to_json())
    changed = json.loads(RTIConfig().training(algorithm="opd").opd(model="/m", reward_weight=0.3).to_json())
    assert config_changes(base, changed) == ["opd.reward_weight: 0.0 -> 0.3"]
    grpo = json.loads(RTIConfig().to_json())
    assert config_changes(grpo, {**grpo, "opd": changed["opd"]}) == []
    luffy = json.loads(RTIConfig().training(algorithm="luffy").to_json())
    assert config_changes(luffy, {**luffy, "opd": changed["opd"]}) == []


def test_a_config_saved_with_the_old_teacher_section_still_loads_and_restores():
    """Checkpoints before LUFFY and OPD had sections of their own saved one 'teacher' section;
    restoring one finds no change, and the old setter still works, with a warning."""
    from rti_actors.checkpoints import config_changes

    new = json.loads(RTIConfig().training(algorithm="opd").opd(model="/m", reward_weight=0.3).luffy(gamma=0.5).to_json())
    old = {k: v for k, v in new.items() if k not in ("luffy", "opd")} | {"teacher": {**new["luffy"], **new["opd"]}}
    assert config_changes(old, new) == []
    assert RTIConfig.from_dict(old) == RTIConfig.from_dict(new)
    with pytest.warns(DeprecationWarning, match=r"'teacher' is deprecated.*\.luffy\(source=\.\.\.\), \.opd\(model"):
        config = RTIConfig().teacher(model="/m", gamma=0.5)
    assert (config["opd"]["model"], config["luffy"]["gamma"]) == ("/m", 0.5)
    with pytest.raises(ConfigError, match=r"unknown option teacher\(colour=\.\.\.\)"):
        RTIConfig().teacher(colour=1)


def test_learner_settings_and_defaults_name_opd():
    from rti_actors.algorithms import algorithm_names
    from rti_actors.options import learner_settings
    assert "opd" in algorithm_names()
    assert learner_settings(RTIConfig().training(algorithm="opd"))["algorithm"] == "opd"
    te = RTIConfig()["opd"]
    assert te["reward_weight"] == 0.0 and te["model"] is None and te["endpoint"] is None


@pytest.mark.parametrize("key", ["model", "endpoint", "endpoint_model", "endpoint_api_key_env", "reward_weight"])
def test_hostile_opd_options_fail_cleanly_naming_the_option(key):
    for value in [float("nan"), float("inf"), -1, 0, 1.5, "", "x", True, None, [], {}, [1, 2]]:
        try:
            _opd(**{key: value}).validate(available_cpus=64, available_gpus=8)
        except ConfigError as e:
            assert f"opd({key}=" in str(e) or "opd(model=" in str(e) or "needs a teacher" in str(e), (value, e)


def test_progress_line_shows_the_reverse_kl_and_the_teachers_time():
    from rti_actors.reporting import progress_line

    m = {"iteration": 3, "algorithm": "opd", "reward_mean": 0.0, "success_rate": 0.0, "frac_all_fail_groups": 1.0, "turns_mean": 1.0,
         "learner": {"loss": 0.1}, "seconds": {"sample": 2.0}, "opd/reverse_kl": 0.4321, "opd/teacher_seconds": 1.25}
    assert "opd: reverse KL 0.4321/token, teacher 1.2s" in progress_line(m)


@pytest.mark.parametrize("example", ["navigation", "hard20"])
def test_the_examples_take_opd_with_a_teacher_model(example, tiny_model_path, monkeypatch):
    from tests.conftest import example_config

    argv = ["--algorithm", "opd", "--teacher-model", tiny_model_path, "--opd-reward-weight", "0.25", "--engine", "hf"]
    config = example_config(example, argv, monkeypatch)
    assert config["training"]["algorithm"] == "opd"
    assert (config["opd"]["model"], config["opd"]["reward_weight"]) == (tiny_model_path, 0.25)
    config.validate()
