"""Tables and the picture of the Lookup experiment (scripts/lookup_experiment.py), from the
pieces kept under its --out folder; what has not run yet is left out of them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rti_actors.metrics import wilson


def _load(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def _metrics(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("kind") == "train"]


def pooled(by_tier: dict, tiers: list[str]) -> dict:
    """p@1 over the tasks of the given tiers, each task's own success rate averaged over its
    rollouts (several runs' rollouts of the same task pooled), with a Wilson interval over tasks."""
    per_task: dict[str, list[bool]] = {}
    for tier in tiers:
        for part in by_tier.get(tier, []):
            for task, outcomes in part["successes"].items():
                per_task.setdefault(task, []).extend(outcomes)
    if not per_task:
        return {}
    p = float(np.mean([np.mean(v) for v in per_task.values()]))
    return {"p@1": p, "ci95": wilson(p, len(per_task)), "num_tasks": len(per_task),
            "rollouts": sum(len(v) for v in per_task.values())}


def _cell(s: dict) -> str:
    return f"{100 * s['p@1']:.1f} [{100 * s['ci95'][0]:.1f}, {100 * s['ci95'][1]:.1f}]" if s else "-"


def calibration(kept: Path) -> str:
    rows = _load(kept / "lookup.json")
    if not rows:
        return ""
    lines = ["| tier | tasks | p@1 (one rollout) | Pass@8 | all 8 fail | mixed |", "|---|---|---|---|---|---|"]
    for tier, s in next(iter(rows.values())).items():
        outcomes = list(s["successes"].values())
        fail = np.mean([not any(v) for v in outcomes])
        mixed = np.mean([any(v) and not all(v) for v in outcomes])
        lines.append(f"| {tier} | {len(outcomes)} | {100 * s['p@1']:.1f} | {100 * s['pass@8']:.1f} | "
                     f"{100 * fail:.0f} % | {100 * mixed:.0f} % |")
    return "\n".join(lines)


def _row(label: str, seed, by_tier: dict, groups: dict) -> str:
    """A held-out row: p@1 per tier, then pooled over each group of tiers (with intervals)."""
    cells = [_cell(pooled(by_tier, [t])) if t in by_tier else "-" for t in TIERS]
    cells += [_cell(pooled(by_tier, tiers)) if all(t in by_tier for t in tiers) else "-" for tiers in groups.values()]
    return f"| {label} | {seed} | " + " | ".join(cells) + " |"


TIERS = ("1", "2", "3", "4")


def report(out: Path, arms: dict, seeds, groups: dict) -> dict:
    """``groups``: name -> the tiers pooled in a column of the held-out table (and a panel of
    the picture), e.g. {"easy": ["1", "2"], "all-fail": ["2", "3"]}."""
    arms_dir = out / "arms"
    results = {"calibration": _load(arms_dir / "calibration" / "lookup.json"), "groups": groups, "arms": {}}
    start = (_load(arms_dir / "start" / "lookup.json") or {}).get("start")
    held = ["| policy | seed | " + " | ".join(f"tier {t}" for t in TIERS) + " | "
            + " | ".join(f"{name} ({'+'.join(tiers)})" for name, tiers in groups.items()) + " |",
            "|---" * (2 + len(TIERS) + len(groups)) + "|"]
    if start:
        held.append(_row("start", "-", {t: [s] for t, s in start.items()}, groups))
        results["start"] = {t: {k: v for k, v in s.items() if k not in ("successes", "table")} for t, s in start.items()}
    training = []
    for arm in arms:
        runs = {s: arms_dir / f"{arm}-s{s}" for s in seeds if (arms_dir / f"{arm}-s{s}" / "lookup.json").is_file()}
        if not runs:
            continue
        entry = results["arms"][arm] = {"seeds": {}}
        parts: dict[str, list] = {}
        curves = []
        for seed, folder in runs.items():
            rows = _load(folder / "lookup.json")
            trained = rows[next(k for k in rows if k != "start")]
            metrics = _metrics(folder / "metrics.jsonl")
            curves.append([m["success_rate"] for m in metrics])
            seconds = (folder / "seconds").read_text().strip() if (folder / "seconds").is_file() else None
            entry["seeds"][seed] = {"heldout": {t: {k: v for k, v in s.items() if k not in ("successes", "table")}
                                                for t, s in trained.items()},
                                    "success_rate": curves[-1], "wall_seconds": seconds,
                                    "rti": [{k: v for k, v in m.items() if k.startswith("rti/") and not isinstance(v, dict)}
                                            for m in metrics if "rti/triggered_groups" in m]}
            held.append(_row(arm, seed, {t: [s] for t, s in trained.items()}, groups))
            for t, s in trained.items():
                parts.setdefault(t, []).append(s)
        entry["pooled"] = {t: pooled(parts, [t]) for t in parts}
        held.append(_row(f"**{arm}**", f"all {len(runs)}", parts, groups))
        width = min(len(c) for c in curves)
        mean = np.mean([c[:width] for c in curves], axis=0) if width else []
        training.append(f"| {arm} | {len(runs)} | " + " ".join(f"{x:.2f}" for x in mean) + " |")
    (out / "calibration.md").write_text(calibration(arms_dir / "calibration") + "\n")
    (out / "heldout.md").write_text("\n".join(held) + "\n")
    (out / "training.md").write_text("| arm | seeds | success rate of the policy's own rollouts per iteration (mean over seeds) |\n"
                                     "|---|---|---|\n" + "\n".join(training) + "\n" + funnel(results))
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    plot(out, results, groups)
    print((out / "calibration.md").read_text(), (out / "heldout.md").read_text(), (out / "training.md").read_text(),
          sep="\n")
    return results


FUNNEL = (("triggered", "rti/triggered_groups"), ("error found", "rti/validator_found_error"),
          ("accepted", "rti/accepted"), ("continued", "rti/continued"), ("succeeded", "rti/continuation_success"),
          ("learnable before", "rti/frac_learnable_before"), ("learnable after", "rti/frac_learnable_after"),
          ("PPL of accepted fixes", "rti/mean_ppl_accepted"))


def funnel(results: dict) -> str:
    """RTI's funnel per iteration of every RTI arm and seed: groups intervened on, what each
    stage kept, the share of learnable groups before and after, the accepted fixes' PPL."""
    out = []
    for arm, entry in results["arms"].items():
        for seed, run in entry["seeds"].items():
            if not run["rti"]:
                continue
            out += [f"\n{arm}, seed {seed}, per iteration:\n", "| iteration | " + " | ".join(n for n, _ in FUNNEL) + " |",
                    "|---" * (1 + len(FUNNEL)) + "|"]
            for i, m in enumerate(run["rti"], 1):
                cells = [m.get(k) for _, k in FUNNEL]
                out.append(f"| {i} | " + " | ".join("-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)
                                                  for v in cells) + " |")
    return "\n".join(out) + ("\n" if out else "")


def plot(out: Path, results: dict, groups: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(groups)
    panels = ((f"{names[0]} tiers ({'+'.join(groups[names[0]])}): most groups mixed", ("grpo-easy",)),
              (f"{names[1]} tiers ({'+'.join(groups[names[1]])}): every rollout fails", ("grpo-hard", "rti-rules-hard",
                                                                                          "rti-self-hard")))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, (title, names) in zip(axes, panels):
        for i, name in enumerate(names):
            arm = results["arms"].get(name)
            if not arm:
                continue
            curves = [s["success_rate"] for s in arm["seeds"].values()]
            width = min(len(c) for c in curves)
            x = np.arange(1, width + 1)
            for c in curves:
                ax.plot(x, c[:width], color=f"C{i}", alpha=0.25, linewidth=1)
            ax.plot(x, np.mean([c[:width] for c in curves], axis=0), color=f"C{i}", linewidth=2,
                    marker="o", markersize=3, label=f"{name} (mean of {len(curves)} seeds)")
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("success rate of the policy's own rollouts")
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    plt.close(fig)
