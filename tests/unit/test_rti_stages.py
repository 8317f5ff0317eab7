"""The intervention's stages in one process, with real components: Navigation episodes
played by a real env runner on the tiny model's transformers engine, the env's own
rule-based roles, the engine's scores as the gate. No Ray cluster: the pipeline calls
plain objects the way it calls actors."""

import math
from collections import Counter

import numpy as np
import pytest

import envs  # noqa: F401  (registers the built-in envs)
from envs.registry import get_creator
from policies.chat import ChatRenderer
from policies.engines import SamplingParams, make_engine
from rti_actors.engine_actor import LocalEngines
from rti_actors.env_runner import EnvRunner, request_seed
from rti_actors.groups import group_by_task
from rti_actors.options import DEFAULTS
from rti_actors.rti.pipeline import Intervention, episode_text
from rti_actors.rti.records import Candidate, Finding
from rti_actors.rti.roles import RuleRoles
from rti_actors.trajectory import EpisodeSpec

NAV = {"max_turns": 3, "max_tool_output_chars": 600}
POLICY = {**DEFAULTS["policy"], "max_new_tokens": 16, "max_model_len": 4096}
SAMPLING = SamplingParams(max_tokens=16, temperature=0.8, top_p=1.0)


@pytest.fixture(scope="module")
def parts(tiny_model_path):
    from transformers import AutoTokenizer

    creator = get_creator("Navigation-v0")
    engines = LocalEngines(make_engine("hf", tiny_model_path, max_model_len=4096), temperature=0.8)
    runner = EnvRunner(creator, NAV, 2, tiny_model_path, POLICY, engines)
    renderer = ChatRenderer(AutoTokenizer.from_pretrained(tiny_model_path))
    rules = RuleRoles(creator, NAV, tiny_model_path)
    tasks = runner.task_ids("train")[:2]
    groups = group_by_task(runner.sample([EpisodeSpec(t, j) for t in tasks for j in range(2)], SAMPLING))
    evidence = {t: runner.reward_evidence(t, "train") for t in tasks}
    return {"runner": runner, "engines": engines, "renderer": renderer, "rules": rules, "groups": groups,
            "evidence": evidence}


def _intervention(parts, **overrides):
    cfg = {**DEFAULTS["interventions"], "roles": "rules", "verifier_llm": False, "ppl_threshold": math.inf,
           **overrides}
    return Intervention(cfg, roles=[parts["rules"]], verifiers=[], gate=parts["engines"], runners=[parts["runner"]],
                        renderer=parts["renderer"], sampling=SAMPLING, seed=0,
                        facts=parts["runner"].verifier_facts())


def _candidates(parts, min_step=0):
    return [Candidate(gi, t, episode_text(t), parts["evidence"][t.task_id], min_step=min_step)
            for gi, g in enumerate(parts["groups"]) for t in g]


def test_the_tiny_model_fails_every_group(parts):
    assert all(max(t.reward for t in g) == 0 for g in parts["groups"])


def test_validator_stage_keeps_the_first_invalid_step_at_or_after_min_step(parts):
    iv = _intervention(parts)
    c = Counter()
    found = iv._validate(_candidates(parts), c)
    assert found and c["validator_found_error"] == len(found)
    for cd in found:
        rule = parts["rules"].rules.validate(cd.traj.messages, cd.traj.actions, cd.evidence)
        assert cd.step == rule["step"] and cd.verdict == rule
    # a second fix looks only after the first: steps before min_step are never found
    later = iv._validate(_candidates(parts, min_step=max(cd.step for cd in found) + 1), Counter())
    assert all(cd.step >= cd.min_step for cd in later) and len(later) < len(found)


def test_corrector_attempts_are_policy_ids_ending_in_eos(parts):
    iv = _intervention(parts)
    c = Counter()
    fixed = iv._correct(iv._validate(_candidates(parts), Counter()), c, round_=0)
    assert fixed and c["corrector_parsed"] == len(fixed)
    eos = parts["renderer"].eos_id
    for cd in fixed:
        (a,) = cd.attempts  # the rules are deterministic: one attempt
        assert a.complete and a.ids[-1] == eos
        assert parts["renderer"].tokenizer.decode(a.ids[:-1]) == a.text


def test_the_gate_scores_the_rewrite_in_both_contexts(parts):
    iv = _intervention(parts)
    c = Counter()
    gated = iv._gate(iv._correct(iv._validate(_candidates(parts), Counter()), Counter(), 0), c, {"ppls": []})
    assert gated and c["gate_scored"] == c["gate_pass"] == len(gated)  # delta = inf passes all
    for cd in gated:
        a = cd.best
        assert len(a.lp_h) == len(a.lp_c) == len(a.ids) and a.lp_h != a.lp_c
        assert a.ppl == pytest.approx(math.exp(-sum(a.lp_h) / len(a.lp_h)))
        h, guided = iv.contexts(cd)
        assert guided[:len(h) - len(parts["renderer"].generation_prompt_ids(cd.episode.history(cd.step)))] == \
            h[:len(h) - len(parts["renderer"].generation_prompt_ids(cd.episode.history(cd.step)))]
        assert len(guided) > len(h)  # the guidance note sits before the generation prompt


def test_per_group_cap_and_sample_index_bookkeeping(parts):
    groups = parts["groups"]
    out, m = _intervention(parts, max_accepted_per_group=1).run(groups, version=0, round_=0,
                                                                 evidence=parts["evidence"])
    assert m["rti/triggered_groups"] == len(groups) and m["rti/accepted"] <= len(groups)
    for g_in, g_out in zip(groups, out):
        rescued = [t for t in g_out if t.intervened]
        assert len(rescued) <= 1
        assert [t.sample_index for t in g_out[:len(g_in)]] == [t.sample_index for t in g_in]  # append mode
        for t in rescued:
            assert t.sample_index == len(g_in) and t.source_index in {x.sample_index for x in g_in}
            assert t.depth == 0 and t.intervened_step is not None
    # partial credit of the continued runs and of the runs they were fixed from (Navigation's
    # route checks), each averaged over the continued runs
    pairs = [(t, next(x for x in g_in if x.sample_index == t.source_index))
             for g_in, g_out in zip(groups, out) for t in g_out if t.intervened]
    assert len(pairs) == m["rti/continued"] >= 1
    assert m["rti/progress_continued"] == pytest.approx(np.mean([t.progress for t, _ in pairs]))
    assert m["rti/progress_source"] == pytest.approx(np.mean([x.progress for _, x in pairs]))
    assert all("progress" in t.reward_breakdown for t, _ in pairs)
    two, _ = _intervention(parts, max_accepted_per_group=2).run(groups, version=0, round_=0,
                                                                evidence=parts["evidence"])
    for g_in, g_out in zip(groups, two):
        indices = [t.sample_index for t in g_out]
        assert len(indices) == len(set(indices))  # new members are numbered after the group's own


def test_replace_mode_keeps_the_group_size(parts):
    groups = parts["groups"]
    out, m = _intervention(parts, group_mode="replace").run(groups, version=0, round_=0, evidence=parts["evidence"])
    assert m["rti/continued"] >= 1
    assert [len(g) for g in out] == [len(g) for g in groups]
    for g in out:
        for t in (t for t in g if t.intervened):
            assert t.source_index not in {x.sample_index for x in g if not x.intervened}


def test_second_fix_replaces_the_first_and_carries_both(parts):
    out, m = _intervention(parts, interventions_per_trajectory=2).run(parts["groups"], version=0, round_=0,
                                                                       evidence=parts["evidence"])
    twice = [t for g in out for t in g if t.intervened and t.depth == 1]
    assert m["rti/accepted_second_fix"] >= 1 and twice
    for t in twice:
        a, b = t.corrected_span
        assert any(x != 1.0 for x in t.token_weight[:a])  # the first fix, in the prefix
        assert t.intervened_step >= 1
        assert len(t.turn_versions) == len(t.turn_spans) == t.num_turns  # one weights version per turn
    for g in out:
        sources = [t.source_index for t in g if t.intervened]
        assert len(sources) == len(set(sources))  # one rescued trajectory per source


class _FirstWaveClean:
    """The env's rule roles, except that the first ``validate`` call finds no error at all,
    as a Validator that misses every error of the best candidates would."""

    def __init__(self, rules):
        self.rules, self.calls = rules, 0

    def validate(self, queries):
        self.calls += 1
        return [Finding() for _ in queries] if self.calls == 1 else self.rules.validate(queries)

    def correct(self, *args):
        return self.rules.correct(*args)


def test_candidates_are_tried_in_waves_until_the_group_has_its_fixes(parts):
    groups = parts["groups"]
    one_wave = _intervention(parts, candidates_per_wave=len(groups[0]))
    _, m = one_wave.run(groups, version=0, round_=0, evidence=parts["evidence"])
    assert m["rti/waves"] == 1 and m["rti/candidates"] == sum(map(len, groups))

    iv = _intervention(parts, candidates_per_wave=1, max_accepted_per_group=1)
    iv.roles = [_FirstWaveClean(parts["rules"])]
    out, m = iv.run(groups, version=0, round_=0, evidence=parts["evidence"])
    # wave 1 (each group's best candidate) found nothing, so wave 2 tried the next one
    assert m["rti/waves"] == 2 and m["rti/candidates"] == 2 * len(groups)
    assert m["rti/accepted"] >= 1
    for g_in, g_out in zip(groups, out):
        best = min(g_in, key=lambda t: (-t.progress, t.num_turns, request_seed(0, 0, t.task_id, t.sample_index)))
        for t in (t for t in g_out if t.intervened):
            assert t.source_index != best.sample_index  # the rescue came from the second wave
