"""The experiment script's pieces on hand-made folders: what is kept is read back and never
run again, an unfinished arm's kept progress is where it continues, and the held-out
numbers and their intervals come from the recorded rollouts, the curves from metrics.jsonl."""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import navigation_experiment as ne  # noqa: E402

from rti_actors.metrics import summarize, wilson  # noqa: E402


def _evaluated(kept: Path, name: str, rewards: dict[str, list[float]], label: str = "sampled") -> None:
    """``name``'s evaluation ``label`` kept as a finished one is."""
    kept.mkdir(parents=True, exist_ok=True)
    full = f"{name}-{label}"
    lines = [json.dumps({"task_id": t, "reward": r}) for t, rs in rewards.items() for r in rs]
    (kept / f"eval-{full}.jsonl").write_text("\n".join(lines) + "\n")
    done = ne.kept_evaluations(kept)
    done[full] = {"p@1": 0.0, "avg_p@k": 0.1, "avg_p^k": 0.05, "mean_progress": 0.125, "num_tasks": len(rewards)}
    (kept / ne.EVALUATIONS).write_text(json.dumps(done))


def _trained(kept: Path, train_rows: list[dict]) -> None:
    kept.mkdir(parents=True, exist_ok=True)
    (kept / "metrics.jsonl").write_text("".join(json.dumps({"kind": "train", **r}) + "\n" for r in train_rows))
    (kept / "config.json").write_text("{}")
    (kept / "adapter").mkdir()


def _policy(tmp_path: Path) -> Path:
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    return policy


def test_report_reads_every_kept_piece_and_bounds_pass_at_1(tmp_path):
    arms = tmp_path / "out" / ne.KEPT
    _evaluated(arms / "start", "start", {"a": [0, 0, 0, 0], "b": [0, 0, 0, 0]})
    _trained(arms / "grpo", [{"step": 1, "success_rate": 0.1}, {"step": 2, "success_rate": 0.2}])
    _evaluated(arms / "grpo", "grpo", {"a": [1, 0, 0, 0], "b": [0, 0, 0, 0]})
    _trained(arms / "rti-rules", [{"step": 1, "success_rate": 0.3, "rti/accepted": 2, "rti/ppl_fixes_now": 2.5,
                                   "rti/validator_found_error": 5, "rti/candidates": 8, "policy_version": 1}])
    _evaluated(arms / "rti-rules", "rti-rules", {"a": [1, 1, 0, 0], "b": [1, 0, 0, 0]})
    out = tmp_path / "out"
    ne.main(["--report-only", "--runs", str(tmp_path / "runs"), "--out", str(out)])
    res = json.loads((out / "results.json").read_text())
    assert list(res) == ["start", "grpo", "rti-rules"]  # the start policy, then ARMS order
    grpo = res["grpo"]["heldout"]["grpo-sampled"]
    assert grpo["p@1"] == pytest.approx((0.25 + 0.0) / 2)  # from the rollouts, not the stored summary
    assert grpo["p@1_ci95"] == pytest.approx(wilson(0.125, 2))  # over the 2 tasks
    assert res["start"]["heldout"]["start-sampled"]["p@1_ci95"][1] > 0.5  # nothing solved of 2: wide, not [0, 0]
    assert res["rti-rules"]["heldout"]["rti-rules-sampled"]["p@1"] == pytest.approx((0.5 + 0.25) / 2)
    assert [r["step"] for r in res["grpo"]["train"]] == [1, 2] and res["start"]["train"] == []
    table = (out / "heldout.md").read_text()
    assert "| rti-rules | sampled | 37.5 [" in table and "| start | sampled | 0.0 [" in table
    assert "| 0.125 | 2 |" in table.splitlines()[2]  # mean route progress, tasks
    assert (out / "curves.png").stat().st_size > 0
    training = (out / "training.md").read_text().splitlines()
    assert len(training) == 2 + 3  # header, rule, one row per arm iteration
    assert training[-1].startswith("| rti-rules | 1 | 0.30 | - |") and "| 5 / 8 |" in training[-1]
    assert "| - > 2.50 | 1 |" in training[-1]  # PPL of tracked fixes, updates so far


def test_wilson_interval_matches_known_values():
    assert wilson(3 / 8, 8) == pytest.approx([0.137, 0.694], abs=1e-3)
    assert wilson(0.0, 35) == pytest.approx([0.0, 0.0989], abs=1e-4)  # about the rule of three
    assert wilson(1.0, 35) == pytest.approx([0.9011, 1.0], abs=1e-4)


def test_unknown_arm_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="unknown"):
        ne.main(["--arms", "grpo,ppo", "--runs", str(tmp_path), "--out", str(tmp_path)])


def test_kept_pieces_are_never_run_again(tmp_path, monkeypatch):
    # everything kept under --out and no run directory (a fresh machine): nothing is built,
    # only the missing arm policy would be merged, and the report reads what was kept
    out = tmp_path / "out"
    for name in ("start", "grpo"):
        for label in ne.EVALS:
            _evaluated(out / ne.KEPT / name, name, {"a": [1, 0, 0, 0]}, label)
    _trained(out / ne.KEPT / "grpo", [{"step": 1, "success_rate": 0.25}])
    monkeypatch.setattr(ne, "build_resumable", lambda *a: pytest.fail("a kept arm was trained again"))
    monkeypatch.setattr(ne.RTIConfig, "build", lambda self: pytest.fail("a kept evaluation was run again"))
    monkeypatch.setattr(ne, "merge_adapter", lambda *a: Path(a[2]).mkdir(parents=True))
    ne.main(["--arms", "grpo", "--policy", str(_policy(tmp_path)), "--runs", str(tmp_path / "runs"), "--out", str(out)])
    res = json.loads((out / "results.json").read_text())
    assert res["grpo"]["heldout"]["grpo-greedy"]["p@1"] == pytest.approx(0.25)
    assert res["grpo"]["train"] == [{"kind": "train", "step": 1, "success_rate": 0.25}]


def test_an_unfinished_arm_continues_from_its_kept_progress(tmp_path, monkeypatch):
    args = argparse.Namespace(runs=tmp_path / "runs", out=tmp_path / "out", policy=_policy(tmp_path), iterations=3,
                              group_size=4, tasks_per_iteration=2, lr=1e-4, lora_rank=8, eval_tasks=35, seed=0)
    run = args.runs / "rti-self"
    (run / "checkpoints" / "iter_000001").mkdir(parents=True)
    (run / "checkpoints" / "iter_000002").mkdir()
    (run / "checkpoints" / "iter_000002" / "checkpoint.json").write_text('{"iteration": 2}')
    (run / "checkpoints" / "iter_000002" / "config.json").write_text('{"learners": {"dtype": "bfloat16"}}')
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n{"kind": "train", "step": 2}\n')
    ne.keep_progress(args, ["grpo", "rti-self"])  # grpo has not started: nothing to keep
    kept = ne.kept_dir(args, "rti-self") / ne.PROGRESS
    assert sorted(p.name for p in (kept / "checkpoints").iterdir()) == ["iter_000002"]  # the newest only
    assert not ne.kept_dir(args, "grpo").exists()
    shutil.rmtree(args.runs)  # the machine went; a new one continues from the kept progress

    class Algo:
        iteration = 2

        def train(self):
            Algo.iteration += 1
            return {"iteration": Algo.iteration}

        def export_policy(self, path):
            (Path(path) / "adapter").mkdir(parents=True)
            (Path(path) / "adapter" / "adapter_config.json").write_text("{}")

        def stop(self):
            pass

    resumed = []

    def build(cfg, a):  # as the real build: the run directory gets its config
        resumed.append((a.resume, cfg.to_dict()["learners"]["dtype"]))
        (run / "config.json").write_text("{}")
        return Algo()
    monkeypatch.setattr(ne, "build_resumable", build)
    monkeypatch.setattr(ne, "progress_line", str)
    ne.train_arm(args, "rti-self")
    # one iteration left, not three, in the precision the arm started in on the other machine
    assert resumed == [(str(run), "bfloat16")] and Algo.iteration == 3
    assert (run / "checkpoints" / "iter_000002" / "checkpoint.json").is_file()
    done = ne.kept_dir(args, "rti-self")
    assert (done / "adapter" / "adapter_config.json").is_file() and not (done / ne.PROGRESS).exists()
    ran_on = json.loads((done / ne.MACHINE).read_text())["train"]  # what kind of CPU trained it
    assert ran_on["cores"] == os.cpu_count() and ran_on["engine_dtype"] in ("float32", "bfloat16")
    assert ran_on["learner_dtype"] == "bfloat16"


def test_a_missing_start_policy_says_how_to_make_it(tmp_path):
    with pytest.raises(SystemExit, match="warm_start.sh"):
        ne.main(["--policy", str(tmp_path / "nope"), "--runs", str(tmp_path), "--out", str(tmp_path)])


def test_a_cut_short_evaluation_continues_at_its_next_piece(tmp_path, monkeypatch):
    args = argparse.Namespace(runs=tmp_path / "runs", out=tmp_path / "out", policy=_policy(tmp_path), iterations=3,
                              group_size=4, tasks_per_iteration=2, lr=1e-4, lora_rank=8, eval_tasks=35, seed=0)
    ids = [f"t{i:02d}" for i in range(40)]
    played, cut_after = [], [3]

    class Algo:  # task i succeeds in its first sample when i is even
        def task_ids(self):
            return ids

        def evaluate(self, method, record_path, task_ids, num_samples, temperature):
            if len(played) == cut_after[0]:
                raise KeyboardInterrupt  # the machine goes mid-piece
            played.append((method, list(task_ids)))
            ok = {t: [int(t[1:]) % 2 == 0 and j == 0 for j in range(num_samples)] for t in task_ids}
            Path(record_path).parent.mkdir(parents=True, exist_ok=True)
            with open(record_path, "a") as f:
                f.writelines(json.dumps({"task_id": t, "reward": float(s)}) + "\n" for t in task_ids for s in ok[t])
            return {**summarize(ok), "seconds": 1.0, "tasks_left_out_infra": 0, "table": "..."}

        def stop(self):
            pass
    monkeypatch.setattr(ne.RTIConfig, "build", lambda self: Algo())
    with pytest.raises(KeyboardInterrupt):
        ne.evaluate_policy(args, "start", args.policy)
    # 2 runners x 4 envs, four waves: 8 tasks of 4 samples a piece; three pieces were kept
    assert [len(t) for _, t in played] == [8, 8, 8]
    assert not ne.kept_evaluations(ne.kept_dir(args, "start"))
    played.clear()
    cut_after[0] = -1
    ne.evaluate_policy(args, "start", args.policy)  # another machine: the rest, nothing twice
    assert [(m, t[0], len(t)) for m, t in played] == [("start-sampled", "t24", 8), ("start-sampled", "t32", 3),
                                                      ("start-greedy", "t00", 32), ("start-greedy", "t32", 3)]
    kept = ne.kept_dir(args, "start")
    done = ne.kept_evaluations(kept)
    assert done["start-sampled"]["num_tasks"] == 35 and done["start-sampled"]["pieces"] == 5
    assert done["start-sampled"]["p@1"] == pytest.approx(18 / 35 / 4) and done["start-greedy"]["p@1"] == pytest.approx(18 / 35)
    records = [json.loads(x) for x in (kept / "eval-start-sampled.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in records[::4]] == ids[:35]  # every task once, in order
    assert ne.heldout(kept / "eval-start-sampled.jsonl")["p@1"] == pytest.approx(done["start-sampled"]["p@1"])
    assert not (kept / ne.PIECES).exists() and json.loads((kept / ne.MACHINE).read_text())["greedy"]["cores"]


def test_an_arm_that_never_updated_reuses_the_start_policys_evaluations(tmp_path, monkeypatch):
    import torch
    from safetensors.torch import save_file

    out = tmp_path / "out"
    for label in ne.EVALS:
        _evaluated(out / ne.KEPT / "start", "start", {"a": [1, 0, 0, 0], "b": [0, 0, 0, 0]}, label)
    for arm, b in (("grpo", 0.0), ("rti-rules", 0.5)):
        _trained(out / ne.KEPT / arm, [{"step": 1, "success_rate": 0.0}])
        save_file({"m.lora_A.weight": torch.ones(2, 4), "m.lora_B.weight": torch.full((4, 2), b)},
                  str(out / ne.KEPT / arm / "adapter" / "adapter_model.safetensors"))
    assert ne.adds_nothing(out / ne.KEPT / "grpo" / "adapter")
    assert not ne.adds_nothing(out / ne.KEPT / "rti-rules" / "adapter")  # an update moved B
    evaluated = []
    monkeypatch.setattr(ne, "build_resumable", lambda *a: pytest.fail("a kept arm was trained again"))
    monkeypatch.setattr(ne, "merge_adapter", lambda *a: Path(a[2]).mkdir(parents=True))
    monkeypatch.setattr(ne, "evaluate_policy", lambda args, name, policy: evaluated.append(name))
    policy = _policy(tmp_path)
    ne.main(["--arms", "grpo,rti-rules", "--policy", str(policy), "--runs", str(tmp_path / "runs"),
             "--out", str(out), "--train-only"])
    assert evaluated == [] and "grpo-sampled" not in ne.kept_evaluations(out / ne.KEPT / "grpo")
    ne.main(["--arms", "grpo,rti-rules", "--policy", str(policy), "--runs", str(tmp_path / "runs"),
             "--out", str(out)])
    assert evaluated == ["start", "rti-rules"]  # grpo's policy is the start policy: not sampled again
    res = json.loads((out / "results.json").read_text())
    start, grpo = res["start"]["heldout"]["start-sampled"], res["grpo"]["heldout"]["grpo-sampled"]
    assert grpo["p@1"] == start["p@1"] == pytest.approx(0.125) and grpo["same_policy_as"] == "start"
    assert "| grpo (= start: never updated) | greedy |" in (out / "heldout.md").read_text()


def test_arms_on_a_training_slice_train_on_it_only_and_report_beside_the_others(tmp_path):
    args = argparse.Namespace(runs=tmp_path / "runs", out=tmp_path / "out", policy=_policy(tmp_path), iterations=4,
                              group_size=4, tasks_per_iteration=2, lr=1e-4, lora_rank=8, eval_tasks=35, seed=0,
                              arms="grpo,rti-self", train_max_waypoints=3)
    assert ne.arm_names(args) == ["grpo-w3", "rti-self-w3"]
    cfg = ne.arm_config(args, "rti-self-w3", args.policy).to_dict()
    ids = cfg["training"]["task_ids"]
    assert cfg["training"]["algorithm"] == "rti" and cfg["interventions"]["roles"] == "self"
    from envs import make_env
    env = make_env("Navigation-v0", {**ne.ENV_CONFIG, "split": "train"}).unwrapped
    assert ids and {env.difficulty(t)["waypoints"] for t in ids} == {3}
    assert len(ids) == sum(env.difficulty(t)["waypoints"] == 3 for t in env.task_ids("train"))
    assert ne.arm_config(args, "grpo", args.policy).to_dict()["training"]["task_ids"] is None  # the whole split
    for name in ("rti-self-w3", "grpo", "grpo-w3", "rti-rules", "start"):
        _trained(args.out / ne.KEPT / name, [{"step": 1}])
    (args.runs / "grpo-eval").mkdir(parents=True)  # an evaluation's run directory is not an arm
    assert ne.known_names(args) == ["start", "grpo", "grpo-w3", "rti-rules", "rti-self-w3"]
