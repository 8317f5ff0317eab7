"""Keep a finished warm-start part: its adapter in bf16, and a record of what it trained on
and what it took.

    python scripts/warm_start_part.py RUN_DIR SECONDS_FILE "NAME FIRST COUNT MAX_WAYPOINTS BATCH" ADAPTER_DIR KEPT_DIR

The record (KEPT_DIR/part.json) is read from the part's run directory (its config and the
SFT steps in metrics.jsonl) and the file of wall seconds that scripts/warm_start.sh appends
one line to per call. bf16 halves what the repository keeps per part; the policy is then
defined by the kept adapter, which the script merges for the next part on every machine.
"""

import json
import shutil
import sys
from pathlib import Path

ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")


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


if __name__ == "__main__":
    run_dir, seconds_file, spec, adapter, kept = sys.argv[1:6]
    keep_adapter(Path(adapter), Path(kept))
    record = part_record(Path(run_dir), Path(seconds_file), spec)
    (Path(kept) / "part.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
