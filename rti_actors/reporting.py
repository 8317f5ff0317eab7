"""Run directory output: JSONL metrics, TensorBoard events, a PNG of the learning curves;
the same to the experiment trackers a run names (``rti_actors.trackers``)."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

from rti_actors.algorithms import algorithm_names, get_algorithm
from rti_actors.trackers import TABLE_COLUMNS, Tracker, make_trackers, trajectory_rows

log = logging.getLogger("rti_actors")


def _scalars(d: dict, prefix: str = "") -> dict[str, float]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_scalars(v, key + "/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[key] = float(v)
    return out


class Reporter:
    # the panels every method has; a plug-in adds its own (AlgorithmPlugin.panels)
    PANELS = (("reward_mean",), ("success_rate",), ("frac_zero_variance_groups",), ("learner/loss",),
              ("pre_intervention_pass_at_G", "pass_at_G"))

    def __init__(self, run_dir: Path, tensorboard: bool = True, panels: tuple = ()):
        self.run_dir = Path(run_dir)
        self.panel_metrics = self.PANELS + tuple(panels)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.history: list[dict] = []
        self.trackers: list[Tracker] = []  # start_trackers: W&B, MLflow
        self.samples = 0  # trajectories per iteration in the trackers' table
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.writer = SummaryWriter(str(self.run_dir / "tensorboard"))
            except ImportError:  # tensorboard is a dependency; tolerate its absence anyway
                self.writer = None

    def log(self, kind: str, step: int, metrics: dict) -> None:
        record = {"kind": kind, "step": step, "time": time.time(), **metrics}
        self.history.append(record)
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record, default=str) + "\n")
        if self.writer is not None:
            for k, v in _scalars(metrics).items():
                self.writer.add_scalar(f"{kind}/{k}", v, step)
            self.writer.flush()
        if self.trackers:
            values = _scalars(metrics)
            self._track(lambda t: t.scalars(kind, step, values, record["time"]))

    def rewind(self, iteration: int, learner_step: int | None = None) -> None:
        """A resumed run: keep the records of the iterations up to ``iteration`` and of the
        warm-start steps up to ``learner_step`` (what its checkpoint holds) and drop those a
        killed run logged after them, so the curves and metrics.jsonl show each step once."""
        path = self.run_dir / "metrics.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
        def kept(r: dict) -> bool:  # sft records count learner steps
            if r.get("kind") == "sft":
                return learner_step is None or r["step"] <= learner_step
            return r["step"] <= iteration

        self.history = [r for r in records if kept(r)]
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in self.history))
        tmp.replace(path)
        if self.trackers and len(self.history) < len(records):
            # the tracker runs hold the dropped steps too and none can take points back:
            # new runs instead, so that they show each step once, as metrics.jsonl does
            self._track(lambda t: t.close())
            self.trackers = make_trackers(*self._tracking, resume=False)
        self._track(lambda t: t.continued or self._replay(t))

    def curves(self) -> dict[str, list[tuple[int, float]]]:
        """What ``plot`` draws: {panel metrics joined by " vs ": {metric: [(iteration, value)]}},
        only the metrics of each panel that this run has."""
        rows = [(r["step"], _scalars(r)) for r in self.history if r["kind"] == "train"]
        out = {}
        for panel in self.panel_metrics:
            series = {n: [(step, v[n]) for step, v in rows if n in v] for n in panel}
            series = {n: pts for n, pts in series.items() if pts}
            if series:
                out[" vs ".join(series)] = series
        return out

    def panels(self) -> list[list[str]]:
        """The metrics of each panel ``plot`` draws."""
        return [list(series) for series in self.curves().values()]

    def plot(self) -> Path | None:
        panels = self.curves()
        if not panels:
            return None
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3), squeeze=False)
        for ax, (title, series) in zip(axes[0], panels.items()):
            for name, pts in series.items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("iteration")
            if len(series) > 1:
                ax.legend(fontsize=7)
        fig.tight_layout()
        path = self.run_dir / "learning_curves.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        step = max(r["step"] for r in self.history if r["kind"] == "train")
        self._track(lambda t: t.image("train/learning_curves", step, path))
        return path

    # ---- trackers (rti_actors.trackers) ----------------------------------------------------
    def start_trackers(self, trackers: list, run_name: str, config: dict, samples: int = 4) -> None:
        """Send what this run logs to ``reporting(trackers=...)`` as well, continuing the
        tracker runs this run directory names; ``samples`` trajectories per iteration go to
        a table (``log_trajectories``)."""
        self._tracking = (list(trackers), self.run_dir, run_name, config)
        self.samples = samples
        self.trackers = make_trackers(*self._tracking)

    def _replay(self, tracker: Tracker) -> None:
        """The history so far into a tracker run that starts after it (a resumed run's new one)."""
        for r in self.history:
            metrics = {k: v for k, v in r.items() if k not in ("kind", "step", "time")}
            tracker.scalars(r["kind"], r["step"], _scalars(metrics), r["time"])

    def log_trajectories(self, step: int, trajectories: list) -> None:
        """A few of this iteration's trajectories as a table in each tracker
        (``trackers.trajectory_rows``)."""
        if self.trackers and self.samples:
            rows = trajectory_rows(step, trajectories, self.samples)
            self._track(lambda t: t.table("train/trajectories", step, TABLE_COLUMNS, rows))

    def _track(self, call) -> None:
        """``call(tracker)`` for each tracker. One that fails is dropped with a warning: the
        run directory still has everything, and a tracker's server being down must not end
        a long run."""
        for t in list(self.trackers):
            try:
                call(t)
            except Exception as e:
                log.warning("tracker %s failed (%s: %s); it gets nothing more from this run, the run directory "
                            "has everything", t.name, type(e).__name__, e)
                self.trackers.remove(t)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self._track(lambda t: t.close())
        self.trackers = []


# RTI's funnel in candidates (failed trajectories), stage by stage, as the progress line names it;
# "accepted" can be below "gate passed": a group keeps at most max_accepted_per_group fixes
def progress_line(m: dict) -> str:
    """One line per training iteration for scripts: rewards, the groups that could teach,
    the learner step (or why there was none), the method's own part (RTI's funnel, OPD's
    reverse KL, AEPO's branching: ``AlgorithmPlugin.progress``), recoveries from crashes,
    and the time."""
    learn = m["learner"]
    if learn.get("nonfinite"):
        loss = "no update (non-finite loss or gradient: step skipped, weights kept)"
    else:
        loss = "no update (all groups zero-variance)" if learn.get("skipped") else f"loss {learn['loss']:+.4f}"
    # a method registered in another process (metrics read back later) just has no part here
    method = m.get("algorithm")
    own = get_algorithm(method).progress(m) if method in algorithm_names() else ""
    faults = {k.split("/", 1)[1]: v for k, v in m.items()
              if k.startswith(("faults/restarts/", "faults/dead/", "faults/redone/")) and v}
    crashes = ("  faults (run so far): " + ", ".join(f"{k} {v}" for k, v in faults.items())) if faults else ""
    return (f"iter {m['iteration']:3d}  reward {m['reward_mean']:.3f}  success {m['success_rate']:.3f}  "
            f"all-fail groups {m['frac_all_fail_groups']:.2f}  turns {m['turns_mean']:.1f}  {loss}  "
            f"{sum(m['seconds'].values()):.0f}s{own}{crashes}")


def sft_line(s: dict) -> str:
    head = f"warm start: {s['num_demonstrations']} demonstrations ({s['skipped_too_long']} too long), "
    resumed = f" (resumed after step {s['resumed_at_step']})" if s.get("resumed_at_step") else ""
    if not s["steps"]:
        return head + f"nothing left to train{resumed}"
    return (head + f"{s['steps']} steps{resumed}, loss {s['loss_first']:.3f} -> {s['loss_last_epoch']:.3f}, "
            f"{s['seconds']:.0f} s")


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def progress_bar(total: int, interactive: bool, desc: str):
    """A tqdm bar on an interactive terminal, nothing otherwise (logs stay clean)."""
    if not interactive:
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, leave=False)
