"""The accepted-fix tracker on real fixes: Navigation episodes on the tiny model's
transformers engine, rescued by the env's rule-based roles, gated by that engine's scores
(as in test_rti_stages), then re-scored before and after the engine's weights change."""

import json
import math

import pytest

import envs  # noqa: F401  (registers the built-in envs)
from envs.registry import get_creator
from policies.chat import ChatRenderer
from policies.engines import SamplingParams, make_engine
from rti_actors.engine_actor import LocalEngines
from rti_actors.env_runner import EnvRunner
from rti_actors.groups import group_by_task
from rti_actors.options import DEFAULTS
from rti_actors.reporting import Reporter
from rti_actors.rti.fix_tracker import AcceptedFixes
from rti_actors.rti.gate import perplexity
from rti_actors.rti.pipeline import Intervention
from rti_actors.rti.plugin import RTI
from rti_actors.rti.roles import RuleRoles
from rti_actors.trajectory import EpisodeSpec
from tests.conftest import perturbed_model

NAV = {"max_turns": 3, "max_tool_output_chars": 600}
POLICY = {**DEFAULTS["policy"], "max_new_tokens": 16, "max_model_len": 4096}
SAMPLING = SamplingParams(max_tokens=16, temperature=0.8, top_p=1.0)


@pytest.fixture(scope="module")
def run(tiny_model_path):
    from transformers import AutoTokenizer

    creator = get_creator("Navigation-v0")
    engines = LocalEngines(make_engine("hf", tiny_model_path, max_model_len=4096), temperature=0.8)
    runner = EnvRunner(creator, NAV, 2, tiny_model_path, POLICY, engines)
    tasks = runner.task_ids("train")[:2]
    groups = group_by_task(runner.sample([EpisodeSpec(t, j) for t in tasks for j in range(2)], SAMPLING))
    cfg = {**DEFAULTS["interventions"], "roles": "rules", "verifier_llm": False, "ppl_threshold": math.inf}
    iv = Intervention(cfg, roles=[RuleRoles(creator, NAV, tiny_model_path)], verifiers=[], gate=engines,
                      runners=[runner], renderer=ChatRenderer(AutoTokenizer.from_pretrained(tiny_model_path)),
                      sampling=SAMPLING, seed=0, facts=runner.verifier_facts())
    out, m = iv.run(groups, version=0, round_=0, evidence={t: runner.reward_evidence(t, "train") for t in tasks})
    rescued = [t for g in out for t in g if t.intervened]
    assert len(rescued) >= 2 and len(rescued) == m["rti/continued"]
    return {"engines": engines, "out": out, "rescued": rescued}


def _engine_ppl(engines, fixes) -> float:
    """Mean PPL of the fixes, each scored alone by the engine itself at the gate's temperature."""
    return sum(perplexity(engines.engine.score([f.context], [f.fix], 0.8)[0]) for f in fixes) / len(fixes)


def test_a_tracked_fix_is_the_pair_the_gate_scored(run):
    tracker = AcceptedFixes(64)
    assert tracker.add((t for g in run["out"] for t in g), iteration=1) == len(run["rescued"])  # originals skipped
    for f, t in zip(tracker.fixes, run["rescued"]):
        a, b = t.corrected_span
        assert f.fix == t.ids[a:b]
        source = next(x for x in run["out"][t.group] if x.sample_index == t.source_index and not x.intervened)
        assert f.context == source.ids[:source.turn_spans[t.intervened_step][0]]  # h_k of the source
        assert f.ppl_at_gate == t.gate_ppl and f.iteration == 1
    # same weights: the re-scored PPL is the gate's own
    m = tracker.rescore(run["engines"])
    assert m["rti/fixes_tracked"] == len(run["rescued"])
    assert m["rti/ppl_fixes_at_gate"] == pytest.approx(sum(t.gate_ppl for t in run["rescued"]) / len(run["rescued"]))
    assert m["rti/ppl_fixes_now"] == pytest.approx(m["rti/ppl_fixes_at_gate"], rel=1e-4)
    assert m["rti/ppl_fixes_now"] == pytest.approx(_engine_ppl(run["engines"], tracker.fixes), rel=1e-4)


def test_rescoring_follows_the_engine_weights(run, tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM

    engine = run["engines"].engine
    tracker = AcceptedFixes(64)
    tracker.add(run["rescued"], iteration=1)
    before = tracker.rescore(run["engines"])
    original = [(n, p.detach().clone()) for n, p in AutoModelForCausalLM.from_pretrained(tiny_model_path).named_parameters()]
    engine.update_weights(list(perturbed_model(tiny_model_path, tmp_path, scale=0.02).named_parameters()),
                          engine.version + 1)
    try:
        after = tracker.rescore(run["engines"])
        assert after["rti/ppl_fixes_now"] == pytest.approx(_engine_ppl(run["engines"], tracker.fixes), rel=1e-4)
        assert abs(after["rti/ppl_fixes_now"] - before["rti/ppl_fixes_now"]) > 1e-3 * before["rti/ppl_fixes_now"]
        assert after["rti/ppl_fixes_at_gate"] == before["rti/ppl_fixes_at_gate"]  # the acceptance-time PPL stays
    finally:
        engine.update_weights(original, engine.version + 1)
    assert tracker.rescore(run["engines"])["rti/ppl_fixes_now"] == pytest.approx(before["rti/ppl_fixes_now"], rel=1e-4)


def test_the_cap_keeps_the_first_fixes_accepted(run):
    first, *rest = run["rescued"]
    tracker = AcceptedFixes(cap=1)
    assert tracker.add(run["rescued"], iteration=1) == 1
    assert tracker.add(rest, iteration=2) == 0
    (f,) = tracker.fixes
    assert f.fix == first.ids[slice(*first.corrected_span)] and f.iteration == 1
    assert tracker.rescore(run["engines"])["rti/fixes_tracked"] == 1


def test_the_saved_state_round_trips_through_json(run):
    tracker = AcceptedFixes(cap=3)
    tracker.add(run["rescued"], iteration=4)
    back = AcceptedFixes.from_dict(json.loads(json.dumps(tracker.to_dict())))
    assert back.cap == 3 and back.fixes == tracker.fixes
    assert back.rescore(run["engines"]) == pytest.approx(tracker.rescore(run["engines"]))
    empty = AcceptedFixes.from_dict(json.loads(json.dumps(AcceptedFixes(64).to_dict())))
    m = empty.rescore(gate=None)  # nothing tracked: the gate is not called
    assert m["rti/fixes_tracked"] == 0 and math.isnan(m["rti/ppl_fixes_now"])


def test_the_fixes_panel_plots_both_curves(tmp_path):
    rep = Reporter(tmp_path, tensorboard=False, panels=RTI.panels)
    for it, now in ((1, 4.0), (2, 3.5)):
        rep.log("train", it, {"reward_mean": 0.0, "rti/fixes_tracked": 2, "rti/ppl_fixes_at_gate": 4.2,
                              "rti/ppl_fixes_now": now})
    assert ["rti/ppl_fixes_at_gate", "rti/ppl_fixes_now"] in rep.panels()
    assert rep.plot().is_file()
