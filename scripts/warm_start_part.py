"""Keep a finished warm-start part: its adapter in bf16, and a record of what it trained on
and what it took. Or keep an unfinished part's progress, for a later machine to continue.

    python scripts/warm_start_part.py RUN_DIR SECONDS_FILE "NAME FIRST COUNT MAX_WAYPOINTS BATCH" ADAPTER_DIR KEPT_DIR
    python scripts/warm_start_part.py --progress keep RUN_DIR SECONDS_FILE KEPT_DIR
    python scripts/warm_start_part.py --progress restore RUN_DIR SECONDS_FILE KEPT_DIR

The record (KEPT_DIR/part.json) is read from the part's run directory (its config and the
SFT steps in metrics.jsonl) and the file of wall seconds that scripts/warm_start.sh appends
one line to per call. bf16 halves what the repository keeps per part; the policy is then
defined by the kept adapter, which the script merges for the next part on every machine.

A part cut off when a machine goes would be lost with its run directory, so its newest
checkpoint (adapter and optimiser state, tens of MB), its metrics so far and its seconds can
be kept under KEPT_DIR/progress, and restored into an empty run directory to resume from.
It is dropped when the part is kept.
"""

import json
import shutil
import sys
from pathlib import Path

ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
PROGRESS = "progress"


def part_record(run_dir: Path, seconds_file: Path, spec: str) -> dict:
    name, first, count, waypoints, batch = spec.split()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in records if r["kind"] == "sft"]
    config = json.loads((run_dir / "config.json").read_text())
    return {"part": name, "demonstrations": {"first": int(first), "count": int(count),
                                             "max_waypoints": int(waypoints)},
            "batch_size": int(batch), "steps": len(steps),
            "trained_tokens": sum(r["num_tokens"] for r in steps),
            "loss_first": steps[0]["loss"] if steps else None, "loss_last": steps[-1]["loss"] if steps else None,
            "wall_seconds": sum(int(x) for x in seconds_file.read_text().split()),
            "learner": config["learners"], "sft": config["sft"], "start_policy": Path(config["policy"]["model"]).name}


def keep_adapter(adapter: Path, kept: Path) -> None:
    """The peft adapter folder ``adapter`` copied to ``kept`` with its weights in bf16."""
    import torch
    from safetensors.torch import load_file, save_file

    kept.mkdir(parents=True, exist_ok=True)
    weights = load_file(adapter / ADAPTER_FILES[0])
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in weights.items()}, kept / ADAPTER_FILES[0])
    shutil.copy2(adapter / ADAPTER_FILES[1], kept / ADAPTER_FILES[1])


def keep_part(run_dir: Path, seconds_file: Path, spec: str, adapter: Path, kept: Path) -> None:
    keep_adapter(adapter, kept)
    (kept / "part.json").write_text(json.dumps(part_record(run_dir, seconds_file, spec), indent=2, default=str) + "\n")
    shutil.rmtree(kept / PROGRESS, ignore_errors=True)  # the part is done


def keep_progress(run_dir: Path, seconds_file: Path, kept: Path) -> str | None:
    """The run's newest checkpoint, metrics and seconds kept in ``kept/progress`` (replacing
    older progress); the checkpoint's name, or None when it has none. The call that was cut
    short is counted up to that checkpoint, from its ``.started`` file."""
    from rti_actors.checkpoints import MARKER, periodic
    from rti_actors.resume import keep_newest

    started = seconds_file.with_suffix(".started")
    checkpoints = periodic(run_dir)
    if checkpoints and started.is_file():  # a killed call never wrote its seconds
        saved_at = json.loads((checkpoints[-1] / MARKER).read_text())["saved_at"]
        with seconds_file.open("a") as f:
            f.write(f"{int(saved_at - int(started.read_text()))}\n")
        started.unlink()
    name = keep_newest(run_dir, kept / PROGRESS)
    if name and seconds_file.is_file():
        shutil.copy2(seconds_file, kept / PROGRESS / "seconds")
    return name


def restore_progress(run_dir: Path, seconds_file: Path, kept: Path) -> str | None:
    """Kept progress copied into ``run_dir`` (which must hold no checkpoint) for the part to
    resume from; the checkpoint's name, or None when there is no progress to restore."""
    from rti_actors.resume import restore_kept

    name = restore_kept(kept / PROGRESS, run_dir)
    if name and (kept / PROGRESS / "seconds").is_file():
        shutil.copy2(kept / PROGRESS / "seconds", seconds_file)
    return name


if __name__ == "__main__":
    if sys.argv[1] == "--progress":
        action, run_dir, seconds_file, kept = sys.argv[2:6]
        fn = {"keep": keep_progress, "restore": restore_progress}[action]
        name = fn(Path(run_dir), Path(seconds_file), Path(kept))
        print(f"{Path(run_dir).name}: {action} progress: " + (f"{name} ({kept}/{PROGRESS})" if name else "none"))
    else:
        run_dir, seconds_file, spec, adapter, kept = sys.argv[1:6]
        keep_part(Path(run_dir), Path(seconds_file), spec, Path(adapter), Path(kept))
