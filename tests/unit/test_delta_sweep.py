"""scripts/delta_sweep.py on hand-made metrics logs whose shares are counted by hand."""

import importlib.util
import json
import math

import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def delta_sweep():
    spec = importlib.util.spec_from_file_location("delta_sweep", REPO / "scripts" / "delta_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(run_dir, rows, delta=None):
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if delta is not None:
        (run_dir / "config.json").write_text(json.dumps({"interventions": {"ppl_threshold": delta}}))


def _train(step, ppls, scored, passed, attempts):
    return {"kind": "train", "step": step, "rti/ppl_all": ppls, "rti/gate_scored": scored, "rti/gate_pass": passed,
            "rti/corrector_attempts": attempts}


def test_shares_per_run_and_pooled_match_hand_counts(delta_sweep, tmp_path, capsys):
    # run a: PPLs 1.5 3 4 6 inf | 2 25 (step 2's first row is replaced by the second)
    _write(tmp_path / "a", [{"kind": "eval", "step": 0, "success_rate": 0.0},
                            _train(1, [1.5, 3.0, 4.0, 6.0], 5, 3, 9),  # one attempt scored a non-finite PPL
                            _train(2, [100.0], 1, 0, 3),
                            {"kind": "sft", "step": 2, "loss": 1.0},
                            _train(2, [2.0, 25.0], 2, 1, 6),
                            {"kind": "train", "step": 3, "reward_mean": 0.0}], delta=5.0)
    # run b: PPLs 10 19.99 inf; no config.json
    _write(tmp_path / "b", [_train(1, [10.0, 19.99], 3, 0, 4)])
    report = delta_sweep.main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out")])

    def accepted(sweep):
        return [sweep[d]["accepted"] for d in ("0", "3", "5", "20", "inf")]

    a, b, pooled = report["runs"]["a"], report["runs"]["b"], report["pooled"]
    assert accepted(a["sweep"]) == [0, 3, 4, 5, 7]  # 3 <= 3 passes; inf passes only at delta = inf
    assert accepted(b["sweep"]) == [0, 0, 0, 2, 3]
    assert accepted(pooled["sweep"]) == [0, 3, 4, 7, 10]
    assert [pooled["sweep"][d]["share"] for d in report["deltas"]] == pytest.approx([0.0, 0.3, 0.4, 0.7, 1.0])
    assert a["sweep"]["5"]["share"] == pytest.approx(4 / 7)
    assert (a["iterations"], a["gate_scored"], a["non_finite"], a["corrector_attempts"]) == (2, 7, 1, 15)
    assert a["gate_pass"] == a["sweep"]["5"]["accepted"] and a["delta"] == 5.0 and b["delta"] is None
    assert (pooled["gate_scored"], pooled["non_finite"], pooled["corrector_attempts"]) == (10, 2, 19)

    saved = json.loads((tmp_path / "out" / "delta_sweep.json").read_text())
    assert saved == json.loads(json.dumps(report))
    assert (tmp_path / "out" / "delta_sweep.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert "pooled" in printed and "0.700 (    7)" in printed and "4 pass at delta=5" in printed


def test_the_gate_decides_non_finite_ppls_and_the_edges(delta_sweep):
    counts = delta_sweep.sweep([1.0, 5.0, math.inf, math.nan])
    assert [counts[d]["accepted"] for d in ("0", "3", "5", "20", "inf")] == [0, 1, 2, 2, 4]


def test_a_run_without_rti_rows_defaults_to_its_own_dir(delta_sweep, tmp_path):
    _write(tmp_path / "grpo", [{"kind": "train", "step": 1, "reward_mean": 0.0}])
    report = delta_sweep.main([str(tmp_path / "grpo")])
    assert report["runs"]["grpo"]["gate_scored"] == 0 and report["pooled"]["sweep"]["inf"]["share"] is None
    assert (tmp_path / "grpo" / "delta_sweep.json").is_file() and (tmp_path / "grpo" / "delta_sweep.png").is_file()
