"""Experiment trackers: Weights & Biases and MLflow get what the run directory gets.

``reporting(trackers=["wandb", "mlflow"])`` (or dicts such as ``{"name": "mlflow",
"tracking_uri": ...}``) makes the ``Reporter`` send every scalar of metrics.jsonl, each
learning_curves.png it draws and, per iteration, a small table of sampled trajectories to
each tracker. Each tool is an optional extra (``pip install 'rti-actors[wandb]'``); its
package is imported only when a run asks for it. docs/TRACKERS.md shows both.

A run keeps its tracker runs' ids in ``<run dir>/trackers.json``, so a resumed run goes on
writing to the same W&B / MLflow runs (``make_trackers``), unless it redoes steps they hold
(``Reporter.rewind`` then starts new ones).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from itertools import zip_longest
from pathlib import Path
from typing import Protocol

IDS_FILE = "trackers.json"
WANDB_MODES = ("online", "offline", "disabled")
# each tracker: the modules it needs and the keys its dict may hold; the extra that installs
# it (pyproject.toml) has its name
KNOWN = {"wandb": (("wandb",), ("project", "entity", "mode", "group")),
         "mlflow": (("mlflow",), ("tracking_uri", "experiment"))}
# MLflow's local store is SQLite (its file store refuses new runs by default since 3.x),
# which mlflow-skinny reads through SQLAlchemy and creates with Alembic
MLFLOW_DB_MODULES = ("sqlalchemy", "alembic")
TEXT_PER_MESSAGE, MESSAGES_SHOWN = 300, 4  # the table's last-turns column stays small


class Tracker(Protocol):
    """What the ``Reporter`` calls. ``run_id`` is kept in trackers.json for a resume;
    ``continued``: this run was started before (the Reporter replays the history into one
    that was not)."""

    name: str
    run_id: str
    continued: bool

    def scalars(self, kind: str, step: int, values: dict[str, float], when: float) -> None: ...

    def image(self, key: str, step: int, path: Path) -> None: ...

    def table(self, key: str, step: int, columns: list[str], rows: list[list]) -> None: ...

    def close(self) -> None: ...


# ---- the option -----------------------------------------------------------------------------
def spec_of(item) -> dict:
    """``"wandb"`` or ``{"name": "wandb", ...}`` as a dict."""
    return {"name": item} if isinstance(item, str) else dict(item)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _local_mlflow_store(uri) -> bool:
    return not str(uri or os.environ.get("MLFLOW_TRACKING_URI", "")).startswith(("http://", "https://", "databricks"))


def tracker_problems(trackers: list) -> list[str]:
    """What is wrong with ``reporting(trackers=...)``, each with what to change. The list's
    shape (names or dicts) is the option's own check; here: known names and keys, values
    of the right type, and the package installed."""
    problems, seen = [], set()
    for item in trackers:
        spec = spec_of(item)
        name = spec.get("name")
        if not isinstance(name, str) or name not in KNOWN:
            problems.append(f"unknown tracker {name!r}; choose from {sorted(KNOWN)}, as a name or a dict "
                            "{'name': ..., option: value}")
            continue
        modules, keys = KNOWN[name]
        if name in seen:
            problems.append(f"{name!r} is named twice; give each tracker once")
        seen.add(name)
        unknown = sorted(set(spec) - {"name", *keys})
        if unknown:
            problems.append(f"{name} takes {list(keys)}, not {unknown}")
        texts = [k for k in keys if k != "mode" and k in spec and not (isinstance(spec[k], str) and spec[k].strip())]
        if texts:
            problems.append(f"{name}'s {texts} must be non-empty strings (leave a key out for its default)")
        if name == "wandb" and spec.get("mode", "online") not in WANDB_MODES:
            problems.append(f"wandb's mode must be one of {list(WANDB_MODES)} (offline: no network, "
                            "synced later with `wandb sync`), or left out for WANDB_MODE or wandb's default")
        if name == "mlflow" and _local_mlflow_store(spec.get("tracking_uri")):
            modules = modules + MLFLOW_DB_MODULES
        missing = [m for m in modules if not _installed(m)]
        if missing:
            problems.append(f"{name} needs {missing}, which are not installed: pip install 'rti-actors[{name}]'")
    return problems


# ---- starting them ------------------------------------------------------------------------------
def make_trackers(trackers: list, run_dir: Path, run_name: str, config: dict, resume: bool = True) -> list[Tracker]:
    """Start a tracker run for each entry of ``reporting(trackers=...)`` (validated). With
    ``resume``, a tracker whose run id is in ``<run_dir>/trackers.json`` continues that run;
    otherwise it starts a new one. The ids are written back."""
    run_dir = Path(run_dir)
    ids_path = run_dir / IDS_FILE
    ids = json.loads(ids_path.read_text()) if resume and ids_path.is_file() else {}
    out: list[Tracker] = []
    try:
        for item in trackers:
            spec = spec_of(item)
            cls = WandbTracker if spec["name"] == "wandb" else MLflowTracker
            out.append(cls(spec, run_dir, run_name, config, ids.get(spec["name"])))
    except BaseException:
        for t in out:
            t.close()
        raise
    ids_path.write_text(json.dumps({t.name: t.run_id for t in out}, indent=1))
    return out


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


class WandbTracker:
    """A W&B run in ``<run dir>/wandb``. Each kind of record (train, eval, sft) has its own
    x axis, ``<kind>/step``: W&B's own step only grows, and a resumed run logs again from the
    checkpoint's iteration."""

    name = "wandb"

    def __init__(self, spec: dict, run_dir: Path, run_name: str, config: dict, run_id: str | None):
        import wandb
        self._wandb = wandb
        try:
            self.run = wandb.init(dir=str(run_dir), project=spec.get("project", "rti-actors"),
                                  entity=spec.get("entity"), group=spec.get("group"), mode=spec.get("mode"),
                                  name=run_name, config=config, id=run_id, resume="allow" if run_id else None,
                                  reinit="create_new")
        except Exception as e:  # mostly no login for an online run: say how to run without one
            why = str(e).rstrip(".")
            raise RuntimeError(f"reporting(trackers=[... 'wandb' ...]) could not start a W&B run: {why}. Without an "
                               "account or network, use {'name': 'wandb', 'mode': 'offline'} (or WANDB_MODE=offline) "
                               "and `wandb sync` later") from e
        self.run_id = self.run.id
        self.continued = run_id is not None  # offline, a new segment of the same run: `wandb sync` joins them
        self._kinds: set[str] = set()

    def _axis(self, kind: str) -> str:
        if kind not in self._kinds:
            self.run.define_metric(f"{kind}/step")
            self.run.define_metric(f"{kind}/*", step_metric=f"{kind}/step")
            self._kinds.add(kind)
        return f"{kind}/step"

    def scalars(self, kind: str, step: int, values: dict[str, float], when: float) -> None:
        self.run.log({self._axis(kind): step, **{f"{kind}/{k}": v for k, v in values.items()}})

    def image(self, key: str, step: int, path: Path) -> None:
        kind = key.split("/", 1)[0]
        self.run.log({self._axis(kind): step, key: self._wandb.Image(str(path))})

    def table(self, key: str, step: int, columns: list[str], rows: list[list]) -> None:
        kind = key.split("/", 1)[0]
        self.run.log({self._axis(kind): step, key: self._wandb.Table(columns=columns, data=rows)})

    def close(self) -> None:
        self.run.finish()


_MLFLOW_SPELLING = {"@": "_at_", "^": "_hat_"}


def mlflow_key(key: str) -> str:
    """A metric name as MLflow accepts it (letters, digits, _ - . / : and spaces):
    ``eval/pass@1`` is logged as ``eval/pass_at_1`` and ``eval/pass^2`` as ``eval/pass_hat_2``."""
    for char, word in _MLFLOW_SPELLING.items():
        key = key.replace(char, word)
    return re.sub(r"[^\w./\- :]", "_", key)


class MLflowTracker:
    """An MLflow run; by default in a SQLite store in the run directory (``mlflow.db``, its
    artifacts in ``mlartifacts``), else at ``tracking_uri`` or $MLFLOW_TRACKING_URI. The
    config goes in as params once (MLflow refuses to change a param) and as config.json."""

    name = "mlflow"
    BATCH = 500  # MLflow takes at most 1000 metrics and 100 params per call

    def __init__(self, spec: dict, run_dir: Path, run_name: str, config: dict, run_id: str | None):
        from mlflow.entities import Metric, Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
        self._metric = Metric
        uri = spec.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
        local = uri is None
        if local:
            uri = f"sqlite:///{Path(run_dir).resolve() / 'mlflow.db'}"
        self.client = MlflowClient(uri)
        name = spec.get("experiment", "rti-actors")
        found = self.client.get_experiment_by_name(name)
        experiment_id = found.experiment_id if found else self.client.create_experiment(
            name, artifact_location=(Path(run_dir).resolve() / "mlartifacts").as_uri() if local else None)
        self.run_id = None
        if run_id:
            try:
                self.client.update_run(run_id, status="RUNNING")
                self.run_id = run_id
            except MlflowException:  # not in this store (another tracking_uri): a new run
                pass
        if self.run_id is None:
            self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
            flat = {mlflow_key(k)[:250]: v if isinstance(v, str) else json.dumps(v, default=str)
                    for k, v in _flat(config).items()}
            params = [Param(k, v[:500]) for k, v in flat.items()]
            for i in range(0, len(params), 100):
                self.client.log_batch(self.run_id, params=params[i:i + 100])
        self.continued = self.run_id == run_id
        self.client.log_dict(self.run_id, config, "config.json")

    def scalars(self, kind: str, step: int, values: dict[str, float], when: float) -> None:
        ms = int(when * 1000)
        metrics = [self._metric(mlflow_key(f"{kind}/{k}"), v, ms, step) for k, v in values.items()]
        for i in range(0, len(metrics), self.BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + self.BATCH])

    def image(self, key: str, step: int, path: Path) -> None:
        """The latest curves replace the last ones (one file, as in the run directory)."""
        self.client.log_artifact(self.run_id, str(path))

    def table(self, key: str, step: int, columns: list[str], rows: list[list]) -> None:
        """One JSON file per step, ``<key>/step_000012.json``, as {"columns": ..., "data": ...}."""
        self.client.log_dict(self.run_id, {"columns": columns, "data": rows}, f"{key}/step_{step:06d}.json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id, "FINISHED", end_time=int(time.time() * 1000))


# ---- the trajectory table ---------------------------------------------------------------------
TABLE_COLUMNS = ["iteration", "task_id", "sample", "origin", "reward", "success", "turns", "gen_tokens",
                 "last_turns"]


def _origin(t) -> str:
    if t.intervened:
        return "rti fix"
    if t.off_policy:
        return "teacher"
    return "branch" if t.branch_of is not None else "policy"


def _message_text(m: dict) -> str:
    content = m.get("content")
    text = content if isinstance(content, str) else "" if content is None else json.dumps(content, default=str)
    if m.get("tool_calls"):
        text = f"{text} {json.dumps(m['tool_calls'], default=str)}".strip()
    cut = text if len(text) <= TEXT_PER_MESSAGE else text[:TEXT_PER_MESSAGE - 3] + "..."
    return f"[{m.get('role', '?')}] {cut}"


def _spread(trajectories: list) -> list:
    """Distinct tasks first: each trajectory ranked by how many of its task came before it."""
    seen: dict[str, int] = {}
    ranked = []
    for i, t in enumerate(trajectories):
        ranked.append((seen.get(t.task_id, 0), i, t))
        seen[t.task_id] = seen.get(t.task_id, 0) + 1
    return [t for _, _, t in sorted(ranked, key=lambda r: r[:2])]


def trajectory_rows(iteration: int, trajectories: list, k: int) -> list[list]:
    """At most ``k`` rows of ``TABLE_COLUMNS`` for one iteration: successes and failures in
    turn, over as many tasks as there are, so the table shows what worked beside what did not;
    the last few messages of each, cut short."""
    won = _spread([t for t in trajectories if t.reward >= 1.0])
    lost = _spread([t for t in trajectories if t.reward < 1.0])
    picked = [t for pair in zip_longest(won, lost) for t in pair if t is not None][:k]
    rows = []
    for t in picked:
        shown = [m for m in t.messages if m.get("role") != "system"][-MESSAGES_SHOWN:]
        rows.append([iteration, str(t.task_id), t.sample_index, _origin(t), float(t.reward), t.reward >= 1.0,
                     t.num_turns, t.gen_tokens, "\n".join(_message_text(m) for m in shown)])
    return rows
