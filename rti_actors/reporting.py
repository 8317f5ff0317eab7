"""Run directory output: JSONL metrics, TensorBoard events, a PNG of the learning curves."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path


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
    CURVES = ("reward_mean", "success_rate", "frac_zero_variance_groups", "learner/loss")

    def __init__(self, run_dir: Path, tensorboard: bool = True):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.history: list[dict] = []
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

    def plot(self) -> Path | None:
        train = [r for r in self.history if r["kind"] == "train"]
        if not train:
            return None
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        curves = [(name, [(r["step"], _scalars(r).get(name)) for r in train]) for name in self.CURVES]
        curves = [(n, [(s, v) for s, v in pts if v is not None]) for n, pts in curves]
        curves = [(n, pts) for n, pts in curves if pts]
        fig, axes = plt.subplots(1, len(curves), figsize=(4 * len(curves), 3), squeeze=False)
        for ax, (name, pts) in zip(axes[0], curves):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o")
            ax.set_title(name)
            ax.set_xlabel("iteration")
        fig.tight_layout()
        path = self.run_dir / "learning_curves.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        return path

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def progress_line(m: dict) -> str:
    """One line per training iteration for scripts: rewards, the groups that could teach,
    the learner step (or why there was none), RTI's funnel when it ran, and the time."""
    learn = m["learner"]
    loss = "no update (all groups zero-variance)" if learn.get("skipped") else f"loss {learn['loss']:+.4f}"
    rti = (f"  rti: triggered {m['rti/triggered_groups']}/{m['num_groups']} accepted {m.get('rti/accepted', 0)} "
           f"rescued {m.get('rti/continuation_success', 0)}" if "rti/triggered_groups" in m else "")
    return (f"iter {m['iteration']:3d}  reward {m['reward_mean']:.3f}  success {m['success_rate']:.3f}  "
            f"all-fail groups {m['frac_all_fail_groups']:.2f}  turns {m['turns_mean']:.1f}  {loss}  "
            f"{sum(m['seconds'].values()):.0f}s{rti}")


def sft_line(s: dict) -> str:
    return (f"warm start: {s['num_demonstrations']} demonstrations ({s['skipped_too_long']} too long), {s['steps']} "
            f"steps, loss {s['loss_first']:.3f} -> {s['loss_last_epoch']:.3f}, {s['seconds']:.0f} s")
