"""A training run reports to MLflow and W&B (offline) through the driver: the iteration's
scalars, its trajectory table with the episodes' own text, and the curves at stop()."""

import json
from pathlib import Path

import pytest

from rti_actors import RTIConfig
from tests.integration import learnable_env  # noqa: F401  (registers FirstLetter-v0)

pytestmark = pytest.mark.integration
pytest.importorskip("wandb")
pytest.importorskip("mlflow")


def test_a_run_reports_to_both_trackers(ray_cluster, tiny_model_path, tmp_path, monkeypatch):
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = (RTIConfig()
              .environment("FirstLetter-v0")
              .policy(model=tiny_model_path, engine="hf", max_new_tokens=4, max_model_len=512, temperature=1.0)
              .env_runners(num_env_runners=1, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.25)
              .training(group_size=4, tasks_per_iteration=2, skip_zero_variance_groups=False)
              .learners(backend="torch")
              .reporting(run_dir=str(tmp_path / "runs"), run_name="tracked", tensorboard=False,
                         trackers=["mlflow", {"name": "wandb", "mode": "offline"}], tracker_samples=3))
    algo = config.build()
    try:
        m = algo.train()
    finally:
        algo.stop()
    run_dir = tmp_path / "runs" / "tracked"
    ids = json.loads((run_dir / "trackers.json").read_text())
    assert set(ids) == {"mlflow", "wandb"} and list((run_dir / "wandb").glob(f"offline-run-*/run-{ids['wandb']}.wandb"))

    from mlflow.tracking import MlflowClient
    client = MlflowClient(f"sqlite:///{run_dir / 'mlflow.db'}")
    history = client.get_metric_history(ids["mlflow"], "train/reward_mean")
    assert [(h.step, h.value) for h in history] == [(1, m["reward_mean"])]
    assert "learning_curves.png" in [a.path for a in client.list_artifacts(ids["mlflow"])]
    table = Path(client.download_artifacts(ids["mlflow"], "train/trajectories/step_000001.json", str(tmp_path)))
    rows, played = json.loads(table.read_text())["data"], set(m["task_ids"])
    assert len(rows) == 3 and all(row[0] == 1 and row[1] in played and "[assistant]" in row[-1] for row in rows)
