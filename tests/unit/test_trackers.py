"""Experiment trackers (rti_actors.trackers), offline: a Reporter drives W&B (offline mode) and
MLflow (its SQLite store in the run directory), and each run is read back with the tool's own
reader: `wandb leet inspect --json` for the .wandb log, MlflowClient for MLflow. The scalars
must equal metrics.jsonl's, the learning curves and the trajectory table must be there, and a
resumed run must show each step once."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rti_actors.config import RTIConfig
from rti_actors.options import ConfigError
from rti_actors.reporting import Reporter
from rti_actors.trackers import TABLE_COLUMNS, mlflow_key, trajectory_rows
from rti_actors.trajectory import Trajectory

pytest.importorskip("wandb")
pytest.importorskip("mlflow")

WANDB = {"name": "wandb", "mode": "offline", "project": "rti-test"}
MEDIA = ("train/learning_curves", "train/trajectories")  # W&B flattens these into <key>.<field>


def _hermetic(mp: pytest.MonkeyPatch, home: Path) -> None:
    """Nothing outside ``home``: W&B's settings, cache and staging; no mode or MLflow URI from the shell."""
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        mp.setenv(var, str(home / "wandb-home" / var.lower()))
    mp.setenv("WANDB_SILENT", "true")
    mp.delenv("WANDB_MODE", raising=False)
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    _hermetic(monkeypatch, tmp_path)


def _trajectory(task: str, index: int, reward: float, answer: str = "done") -> Trajectory:
    messages = [{"role": "system", "content": "You route."}, {"role": "user", "content": f"task {task}"},
                {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
                    "name": "lookup", "arguments": json.dumps({"q": task})}}]},
                {"role": "tool", "content": "x" * 1000}, {"role": "assistant", "content": answer}]
    return Trajectory(task_id=task, sample_index=index, reward=reward, actions=["call", answer], messages=messages,
                      loss_mask=[0, 1, 1], intervened=index == 3)


TRAJECTORIES = [_trajectory(t, i, 1.0 if (t, i) in {("a", 1), ("b", 0)} else 0.0)
                for t in ("a", "b", "c") for i in range(4)]


def _train_metrics(it: int, reward: float) -> dict:
    return {"iteration": it, "reward_mean": reward, "success_rate": reward / 2, "learner": {"loss": 0.5 / it},
            "seconds": {"sample": 1.5, "learn": 0.25}, "frac_all_fail_groups": 0.0, "skipped": False,
            "task_ids": ["a", "b"], "rti/mean_ppl_accepted": math.nan}


def _drive(run_dir: Path, trackers: list, iterations=(1, 2, 3), samples: int = 3) -> Reporter:
    rep = Reporter(run_dir, tensorboard=False)
    config = {"training": {"lr": 1e-6}, "policy": {"model": "smollm2-135m-instruct"},
              "environment": {"env_config": {"user@host": 1}}, "reporting": {"trackers": trackers}}
    rep.start_trackers(trackers, run_dir.name, config, samples)
    rep.log("eval", 0, {"pass@1": 0.25, "pass^2": 0.125, "num_tasks": 4})
    for it in iterations:
        rep.log("train", it, _train_metrics(it, 0.1 * it))
        rep.log_trajectories(it, TRAJECTORIES)
    return rep


def _expected(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """``kind/metric -> [(step, value)]`` from metrics.jsonl: its finite numbers, nested dicts
    joined with '/' (flattened here on purpose, not with the Reporter's own helper)."""
    out: dict[str, list] = {}

    def walk(prefix, d, step):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(f"{prefix}{k}/", v, step)
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out.setdefault(f"{prefix}{k}", []).append((step, float(v)))

    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        walk(f"{r['kind']}/", {k: v for k, v in r.items() if k not in ("kind", "step", "time")}, r["step"])
    return out


def _ids(run_dir: Path) -> dict:
    return json.loads((run_dir / "trackers.json").read_text())


# ---- each tool's own reader -------------------------------------------------------------------------
def _wandb_items(run_dir: Path, run_id: str) -> list[tuple[Path, dict]]:
    """The history rows of every offline segment of run ``run_id`` (a resume adds one), read
    by wandb's CLI: (the segment's files folder, the row)."""
    rows = []
    # offline-run-<time>-<id>, with -1, -2, ... after it when two start within a second
    for segment in sorted(f.parent for f in (run_dir / "wandb").glob(f"offline-run-*/run-{run_id}.wandb")):
        out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(segment)],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        rows += [(segment / "files", r["history"]["item"]) for r in map(json.loads, out.splitlines())
                 if r.get("type") == "history"]
    assert rows, f"no W&B history for {run_id} under {run_dir}"
    return rows


def _wandb_scalars(run_dir: Path, run_id: str) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list] = {}
    for _, item in _wandb_items(run_dir, run_id):
        for key, value in item.items():
            kind = key.split("/", 1)[0]
            if "/" in key and key != f"{kind}/step" and not key.startswith(MEDIA):
                out.setdefault(key, []).append((item[f"{kind}/step"], float(value)))
    return out


def _mlflow(run_dir: Path):
    from mlflow.tracking import MlflowClient
    return MlflowClient(f"sqlite:///{run_dir / 'mlflow.db'}")


def _mlflow_scalars(run_dir: Path, run_id: str, keys) -> dict[str, list[tuple[int, float]]]:
    client = _mlflow(run_dir)
    logged = set(client.get_run(run_id).data.metrics)
    out = {}
    for key in keys:
        assert mlflow_key(key) in logged, key
        history = sorted(client.get_metric_history(run_id, mlflow_key(key)), key=lambda m: (m.step, m.timestamp))
        out[key] = [(m.step, m.value) for m in history]
    assert len(logged) == len(out), sorted(logged - {mlflow_key(k) for k in out})
    return out


def _scalars_in(run_dir: Path, name: str, keys) -> dict[str, list[tuple[int, float]]]:
    run_id = _ids(run_dir)[name]
    return _wandb_scalars(run_dir, run_id) if name == "wandb" else _mlflow_scalars(run_dir, run_id, keys)


# ---- what they hold ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One run reported to both trackers: three iterations, an eval row, the curves."""
    run_dir = tmp_path_factory.mktemp("runs") / "run-both"
    with pytest.MonkeyPatch.context() as mp:
        _hermetic(mp, run_dir.parent)
        rep = _drive(run_dir, [WANDB, "mlflow"])
        rep.plot()
        rep.close()
    return run_dir


@pytest.mark.parametrize("name", ["wandb", "mlflow"])
def test_each_tracker_holds_the_scalars_of_metrics_jsonl(both, name):
    expected = _expected(both)
    assert {"eval/pass@1", "train/learner/loss", "train/seconds/sample"} <= set(expected)
    assert "train/skipped" not in expected and "train/rti/mean_ppl_accepted" not in expected  # a bool, a NaN
    assert _scalars_in(both, name, expected) == expected


def test_wandb_holds_the_curves_and_the_trajectory_table(both):
    rows = _wandb_items(both, _ids(both)["wandb"])
    curves = [(files, item) for files, item in rows if "train/learning_curves.path" in item]
    assert len(curves) == 1 and curves[0][1]["train/learning_curves._type"] == "image-file"
    files, item = curves[0]
    assert item["train/step"] == 3
    png = (files / item["train/learning_curves.path"]).read_bytes()
    assert hashlib.sha256(png).digest() == hashlib.sha256((both / "learning_curves.png").read_bytes()).digest()
    tables = [(files, item) for files, item in rows if "train/trajectories.path" in item]
    assert [item["train/step"] for _, item in tables] == [1, 2, 3]
    files, item = tables[-1]
    table = json.loads((files / item["train/trajectories.path"]).read_text())
    assert table["columns"] == TABLE_COLUMNS and table["data"] == trajectory_rows(3, TRAJECTORIES, 3)


def test_mlflow_holds_the_params_the_curves_and_the_trajectory_tables(both):
    import mlflow
    client, run_id = _mlflow(both), _ids(both)["mlflow"]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == both.name
    params = run.data.params
    assert params["training.lr"] == "1e-06" and params["policy.model"] == "smollm2-135m-instruct"
    assert params["environment.env_config.user_at_host"] == "1"  # a name MLflow refuses, spelled its way
    assert {"eval/pass_at_1", "eval/pass_hat_2", "train/learner/loss"} <= set(run.data.metrics)  # MLflow's spelling
    assert "learning_curves.png" in [a.path for a in client.list_artifacts(run_id)]
    tables = [a.path for a in client.list_artifacts(run_id, "train/trajectories")]
    assert tables == [f"train/trajectories/step_{i:06d}.json" for i in (1, 2, 3)]
    table = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/{tables[-1]}")
    assert table == {"columns": TABLE_COLUMNS, "data": trajectory_rows(3, TRAJECTORIES, 3)}
    png = Path(client.download_artifacts(run_id, "learning_curves.png", str(both.parent)))
    assert png.read_bytes() == (both / "learning_curves.png").read_bytes()


# ---- resuming -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["wandb", "mlflow"])
def test_a_resume_continues_the_tracker_run_or_starts_a_clean_one(tmp_path, name):
    spec = WANDB if name == "wandb" else "mlflow"
    run_dir = tmp_path / "run"
    _drive(run_dir, [spec], iterations=(1, 2)).close()
    first = _ids(run_dir)[name]
    # stopped right after its checkpoint at 2: the same tracker run goes on, no step twice
    rep = _drive(run_dir, [spec], iterations=())
    rep.rewind(2)
    assert _ids(run_dir)[name] == first and rep.trackers[0].continued
    rep.log("train", 3, _train_metrics(3, 0.3))
    rep.close()
    keys = _expected(run_dir)
    assert _scalars_in(run_dir, name, keys)["train/reward_mean"] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    # killed after logging 4 and 5 with its last checkpoint at 3: the tracker run holds
    # steps the resumed run redoes, so a new one gets the kept history, then what follows
    _drive(run_dir, [spec], iterations=(4, 5)).close()
    rep = Reporter(run_dir, tensorboard=False)
    rep.start_trackers([spec], run_dir.name, {}, 3)
    rep.rewind(3)
    second = _ids(run_dir)[name]
    assert second != first and not rep.trackers[0].continued
    rep.log("train", 4, _train_metrics(4, 0.7))
    rep.close()
    keys = _expected(run_dir)
    got = _scalars_in(run_dir, name, keys)
    assert got["train/reward_mean"] == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.7)]
    assert got == keys  # eval rows too: the new run is metrics.jsonl, each step once


# ---- the table ----------------------------------------------------------------------------------------
def test_the_table_alternates_successes_and_failures_over_distinct_tasks_and_stays_small():
    rows = trajectory_rows(7, TRAJECTORIES, 6)  # successes: a1, b0; every task's first failure before a second
    assert [(r[1], r[2], r[5]) for r in rows] == [("a", 1, True), ("a", 0, False), ("b", 0, True), ("b", 1, False),
                                                  ("c", 0, False), ("a", 2, False)]
    assert all(len(r) == len(TABLE_COLUMNS) and r[0] == 7 and r[6] == 2 and r[7] == 2 for r in rows)
    text = rows[0][-1]
    assert "You route" not in text and "[tool] " + "x" * 297 + "..." in text and text.endswith("[assistant] done")
    assert '[assistant] [{"type": "function"' in text and len(text) < 4 * 320
    assert trajectory_rows(7, TRAJECTORIES, 0) == [] and len(trajectory_rows(7, TRAJECTORIES, 100)) == 12
    assert trajectory_rows(1, [_trajectory("a", 3, 0.0)], 1)[0][3] == "rti fix"


def test_no_samples_means_no_table(tmp_path):
    class Recorder:
        name, run_id, continued = "rec", "r", True

        def __init__(self):
            self.tables = []

        def scalars(self, *a):
            pass

        def table(self, *a):
            self.tables.append(a)

    rep = Reporter(tmp_path, tensorboard=False)
    rep.trackers, rep.samples = [Recorder()], 0
    rep.log_trajectories(1, TRAJECTORIES)
    assert rep.trackers[0].tables == []


def test_a_failing_tracker_is_dropped_with_a_warning_and_the_run_dir_keeps_everything(tmp_path, caplog):
    class Broken:
        name, run_id, continued = "broken", "x", True

        def scalars(self, *a):
            raise ConnectionError("server down")

    rep = Reporter(tmp_path, tensorboard=False)
    rep.trackers = [Broken()]
    with caplog.at_level(logging.WARNING, logger="rti_actors"):
        rep.log("train", 1, {"reward_mean": 0.5})
        rep.log("train", 2, {"reward_mean": 0.6})
    assert rep.trackers == [] and len(caplog.records) == 1 and "tracker broken failed" in caplog.text
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_an_online_wandb_run_without_a_login_fails_saying_how_to_run_offline(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc with a key
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    rep = Reporter(tmp_path / "run", tensorboard=False)
    with pytest.raises(RuntimeError, match=r"could not start a W&B run: .*use \{'name': 'wandb', 'mode': 'offline'\}"):
        rep.start_trackers([{"name": "wandb", "mode": "online"}], "run", {}, 1)


# ---- validation -------------------------------------------------------------------------------------------
def _validate(trackers):
    RTIConfig().environment("Navigation-v0").policy(engine="hf").reporting(trackers=trackers).validate()


def test_known_trackers_validate():
    _validate(["wandb", {"name": "mlflow", "tracking_uri": "http://127.0.0.1:5000", "experiment": "x"}])
    _validate([{"name": "wandb", "mode": "offline", "project": "p", "entity": "e", "group": "g"}])


@pytest.mark.parametrize("trackers,message", [
    (["neptune"], r"reporting\(trackers=\['neptune'\]\): unknown tracker 'neptune'; choose from \['mlflow', 'wandb'\]"),
    ([{"tracking_uri": "x"}], r"unknown tracker None"),
    ([{"name": ["wandb"]}], r"unknown tracker \['wandb'\]"),
    (["wandb", "wandb"], r"'wandb' is named twice"),
    ([{"name": "mlflow", "uri": "x"}], r"mlflow takes \['tracking_uri', 'experiment'\], not \['uri'\]"),
    ([{"name": "mlflow", "tracking_uri": ""}], r"mlflow's \['tracking_uri'\] must be non-empty strings"),
    ([{"name": "wandb", "mode": "offline!"}], r"wandb's mode must be one of \['online', 'offline', 'disabled'\]"),
    ("wandb", r"reporting\(trackers='wandb'\) must be a list of tracker names"),
    ([3], r"must be a list of tracker names \('wandb', 'mlflow'\) or dicts"),
])
def test_a_bad_tracker_fails_validation_saying_what_to_change(trackers, message):
    with pytest.raises(ConfigError, match=message):
        _validate(trackers)


@pytest.mark.parametrize("tracker,module,extra", [
    ("wandb", "wandb", "wandb"), ("mlflow", "mlflow", "mlflow"), ("mlflow", "sqlalchemy", "mlflow")])
def test_a_tracker_whose_package_is_missing_says_how_to_install_it(monkeypatch, tracker, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # what find_spec reports for a package that is not there
    with pytest.raises(ConfigError, match=rf"needs \['{module}'\], which are not installed: "
                                          rf"pip install 'rti-actors\[{extra}\]'"):
        _validate([tracker])


def test_mlflow_on_a_server_does_not_need_the_local_store(monkeypatch):
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)
    _validate([{"name": "mlflow", "tracking_uri": "https://mlflow.example.org"}])
