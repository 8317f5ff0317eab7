"""The learner on a tiny random model: real DeepSpeed (gloo, world size 1) and the torch loop.

DeepSpeed's first initialise on a machine JIT-builds a comm op (scripts/setup.sh does it once,
cached under .cache/torch_extensions); after that each learner starts in a few seconds.
"""

import copy
import json
import math
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from envs import make_env
from policies.chat import ChatRenderer
from rti_actors.batch_layout import plan
from rti_actors.demonstrations import record_agent, to_sample
from rti_actors.learner import Learner, check_samples, estimate_memory_gib
from rti_actors.losses import token_logprobs
from tests.samples import make_batch

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("isolated_process_group")]

LR = 1e-3  # large, so a few steps move a tiny model measurably


def sequence_logprob(model_path, weights, sample, temperature=0.8):
    """Sum of log-probs of the sample's loss tokens under ``weights`` (scored with transformers)."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.load_state_dict(weights, strict=False)  # tied lm_head follows the embeddings
    ids = torch.tensor([sample["ids"]])
    with torch.no_grad():
        lp = token_logprobs(model(input_ids=ids).logits, ids, temperature)[0]
    return lp, float((lp * torch.tensor(sample["loss_mask"])).sum())


def assert_weights_close(a, b, atol):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=0, atol=atol), (k, (a[k] - b[k]).abs().max())


@pytest.mark.parametrize("zero_stage, algorithm", [(0, "grpo"), (2, "gspo")])
def test_deepspeed_update_matches_torch_loop(tiny_model_path, zero_stage, algorithm):
    batch = make_batch()
    config = {"dtype": "float32", "lr": LR, "algorithm": algorithm, "micro_batch_tokens": 48,
              "gspo_clip_eps": 0.2}  # a wide GSPO clip: the synthetic behaviour log-probs are far off-policy
    ds = Learner(tiny_model_path, {"dtype": "float32", **config, "backend": "deepspeed", "zero_stage": zero_stage})
    before = ds.get_weights()
    m = ds.update(batch)
    after = ds.get_weights()
    assert m["step"] == ds.step == 1 and m["num_samples"] == 4 and m["num_micro_batches"] > 1
    assert m["num_tokens"] == sum(sum(s["loss_mask"]) for s in batch)
    for key in ("loss", "clip_frac", "approx_kl", "grad_norm", "ratio_mean", "seconds", "tokens_per_s"):
        assert isinstance(m[key], float) and torch.isfinite(torch.tensor(m[key])), key
    assert m["lr"] == LR and m["grad_norm"] > 0
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) == len(before)

    ref = Learner(tiny_model_path, {"dtype": "float32", **config, "backend": "torch"})
    r = ref.update(batch)
    assert m["loss"] == pytest.approx(r["loss"], rel=1e-5)
    assert m["grad_norm"] == pytest.approx(r["grad_norm"], rel=1e-4)
    assert m["clip_frac"] == pytest.approx(r["clip_frac"])
    # one Adam step moves each weight by about lr; the backends agree far below that
    assert_weights_close(after, ref.get_weights(), atol=LR * 1e-2)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_advantage_sign_moves_sequence_logprob(tiny_model_path, sign):
    sample = make_batch(seed=1, n=1)[0]
    sample["token_weight"] = [1.0] * len(sample["ids"])
    learner = Learner(tiny_model_path, {"dtype": "float32", "lr": LR, "zero_stage": 0})
    history = []
    for _ in range(3):
        # on-policy: behaviour log-probs are the current policy's, as the engine would report
        lp, total = sequence_logprob(tiny_model_path, learner.get_weights(), sample)
        history.append(total)
        sample["behaviour_logprobs"] = (lp * torch.tensor(sample["loss_mask"])).tolist()
        m = learner.update([{**sample, "advantage": sign}])
        assert m["clip_frac"] == 0.0 and m["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    history.append(sequence_logprob(tiny_model_path, learner.get_weights(), sample)[1])
    steps = [b - a for a, b in zip(history, history[1:])]
    assert all(sign * d > 0 for d in steps), history


def test_masked_tokens_do_not_change_the_update(tiny_model_path, tmp_path):
    batch = make_batch(seed=2)
    # a masked suffix (e.g. a tool result after the last generated token), with garbage
    # behaviour log-probs and token weights on it
    rng = random.Random(3)
    for s in batch:
        s["ids"] += [rng.randrange(200, 5000) for _ in range(5)]
        s["loss_mask"] += [0] * 5
        s["behaviour_logprobs"] += [0.0] * 5
        s["token_weight"] += [1.0] * 5
    other = [dict(s) for s in batch]
    for s in other:
        s["ids"] = s["ids"][:-5] + [rng.randrange(200, 5000) for _ in range(5)]
        s["behaviour_logprobs"] = s["behaviour_logprobs"][:-5] + [-30.0] * 5
        s["token_weight"] = s["token_weight"][:-5] + [7.0] * 5
    learner = Learner(tiny_model_path, {"dtype": "float32", "lr": LR, "zero_stage": 2})
    learner.save(tmp_path / "start")
    m1 = learner.update(batch)
    w1 = learner.get_weights()
    learner.load(tmp_path / "start")
    m2 = learner.update(other)
    assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-6)
    assert_weights_close(w1, learner.get_weights(), atol=1e-7)
    # the same change on a loss token does change the update (the check above can fail)
    learner.load(tmp_path / "start")
    changed = [dict(s) for s in batch]
    changed[0]["ids"] = changed[0]["ids"][:-6] + [changed[0]["ids"][-6] + 1] + changed[0]["ids"][-5:]
    learner.update(changed)
    with pytest.raises(AssertionError):
        assert_weights_close(w1, learner.get_weights(), atol=1e-7)


@pytest.mark.parametrize("backend", ["deepspeed", "torch"])
def test_save_load_update_equals_uninterrupted(tiny_model_path, tmp_path, backend):
    config = {"dtype": "float32", "lr": LR, "backend": backend, "zero_stage": 2, "seed": 7}
    a = Learner(tiny_model_path, config)
    a.update(make_batch(seed=4))
    a.save(tmp_path / "ckpt")
    ma = a.update(make_batch(seed=5))
    b = Learner(tiny_model_path, config)
    assert b.load(tmp_path / "ckpt") == 1
    mb = b.update(make_batch(seed=5))
    assert mb["step"] == ma["step"] == 2
    assert mb["loss"] == ma["loss"] and mb["grad_norm"] == ma["grad_norm"]
    wa, wb = a.get_weights(), b.get_weights()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    if backend == "deepspeed":
        with pytest.raises(ValueError, match="zero_stage"):
            Learner(tiny_model_path, {"dtype": "float32", **config, "zero_stage": 0}).load(tmp_path / "ckpt")
    # and the optimiser state was restored: a fresh learner on the same second batch differs
    c = Learner(tiny_model_path, config)
    c.update(make_batch(seed=5))
    assert not all(torch.equal(wa[k], v) for k, v in c.get_weights().items())


def test_export_hf_loads_with_transformers(tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    learner = Learner(tiny_model_path, {"dtype": "float32", "lr": LR, "zero_stage": 0})
    learner.update(make_batch())
    out = learner.export_hf(str(tmp_path / "hf"))
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.encode("hello world") == AutoTokenizer.from_pretrained(tiny_model_path).encode("hello world")
    weights = learner.get_weights()
    exported = dict(model.named_parameters())
    assert weights.keys() <= exported.keys()
    assert all(torch.equal(exported[k].detach(), v) for k, v in weights.items())
    sample = make_batch(seed=6, n=1)[0]
    assert sequence_logprob(out, {}, sample)[1] == pytest.approx(
        sequence_logprob(tiny_model_path, weights, sample)[1], rel=1e-6)
    bf16 = learner.get_weights("bfloat16")  # what a publish to a bf16 engine sends
    assert all(t.dtype == torch.bfloat16 and torch.equal(t, weights[k].to(torch.bfloat16)) for k, t in bf16.items())


_TRIM_PROBE = """
import ctypes, psutil, torch
from rti_actors.learner import release_host_memory
rss = lambda: psutil.Process().memory_info().rss / 2**20
libc = ctypes.CDLL("libc.so.6")
# as after a learner's first steps: glibc serves blocks of a few MiB from its heap (not mmap)
# and does not shrink the heap on free (M_MMAP_THRESHOLD = -3, M_TRIM_THRESHOLD = -1)
assert libc.mallopt(-3, 64 << 20) and libc.mallopt(-1, 1 << 30)
keep, freed = [], []
for _ in range(64):  # 256 MiB on the heap, each block pinned in place by a small live one
    freed.append(torch.ones(4 << 20, dtype=torch.uint8)); keep.append(torch.ones(64, dtype=torch.uint8))
del freed
before = rss(); release_host_memory(); print(before - rss())
"""


def test_a_comm_op_lock_left_by_a_killed_build_does_not_stop_the_next_learner(tmp_path):
    # A learner killed while DeepSpeed built its CPU comm op leaves torch's lock file behind;
    # torch's own loader then waits on it forever. A copy of the project's built op with such
    # a file: the next load must still return, load the op, and leave no lock.
    from policies.models import cache_dir
    built = Path(os.environ.get("TORCH_EXTENSIONS_DIR", cache_dir() / "torch_extensions")) / "deepspeed_shm_comm"
    root = tmp_path / "torch_extensions"
    op = root / built.name
    if built.is_dir():
        shutil.copytree(built, op, ignore=shutil.ignore_patterns("lock"))
    op.mkdir(parents=True, exist_ok=True)
    (op / "lock").touch()
    code = ("from rti_actors.learner import load_comm_op; load_comm_op()\n"
            "from deepspeed.comm.torch import build_shm_op; assert build_shm_op() is not None; print('loaded')")
    run = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TORCH_EXTENSIONS_DIR": str(root)},
                         capture_output=True, text=True, timeout=900, cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0 and "loaded" in run.stdout, run.stderr[-3000:]
    assert not (op / "lock").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_release_host_memory_returns_freed_heap_to_the_os():
    # a CPU learner calls this after every update: without it the freed activations of a
    # long-context step stay resident
    out = subprocess.run([sys.executable, "-c", _TRIM_PROBE], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert float(out.stdout.split()[-1]) > 128  # MiB given back of the 256 freed


def test_memory_estimate_counts_model_states(tiny_model_path):
    from transformers import AutoModelForCausalLM
    n = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_model_path).parameters())
    gib = n / 2**30
    # fp32, no ZeRO: weights 4 + grads 4 + Adam 8 bytes per parameter
    assert estimate_memory_gib(tiny_model_path, 0, "float32") == pytest.approx(16 * gib)
    # bf16: 2 + 2 + fp32 master 4 + Adam 8; ZeRO-3 over 4 ranks partitions all of it
    assert estimate_memory_gib(tiny_model_path, 0, "bfloat16") == pytest.approx(16 * gib)
    assert estimate_memory_gib(tiny_model_path, 3, "bfloat16", world_size=4) == pytest.approx(4 * gib)
    assert estimate_memory_gib(tiny_model_path, 2, "bfloat16", world_size=4) == pytest.approx((2 + 0.5 + 3) * gib)


def test_micro_batches_respect_the_token_budget():
    lengths = [10, 50, 20, 20, 70, 5]
    rows = plan([[1] * n for n in lengths], [[0] * n for n in lengths], budget=60).clusters[0].rows
    groups = [sorted(line[0].sample for line in r.lines) for r in rows]
    assert sorted(i for g in groups for i in g) == list(range(6))
    for g in groups:
        assert len(g) == 1 or len(g) * max(lengths[i] for i in g) <= 60
    assert [4] in groups  # longer than the budget: alone


def test_bad_samples_and_config_fail_clearly(tiny_model_path):
    good = make_batch(n=1)[0]
    with pytest.raises(ValueError, match="loss_mask"):
        check_samples([{**good, "loss_mask": good["loss_mask"][:-1]}])
    with pytest.raises(ValueError, match="first token"):
        check_samples([{**good, "loss_mask": [1] * len(good["ids"])}])
    with pytest.raises(ValueError, match="advantage"):
        check_samples([{k: v for k, v in good.items() if k != "advantage"}])
    with pytest.raises(ValueError, match="unknown algorithm"):
        Learner(tiny_model_path, {"dtype": "float32", "algorithm": "ppo"})
    with pytest.raises(ValueError, match="unknown learner config"):
        Learner(tiny_model_path, {"dtype": "float32", "learning_rate": 1e-3})


def test_batch_without_loss_tokens_takes_no_step(tiny_model_path):
    learner = Learner(tiny_model_path, {"dtype": "float32", "lr": LR, "zero_stage": 0})
    learner.update(make_batch())  # Adam now has momentum that a zero-gradient step would apply
    before = learner.get_weights()
    sample = make_batch(n=1)[0]
    sample["loss_mask"] = [0] * len(sample["ids"])
    m = learner.update([sample])
    assert m["skipped"] and m["step"] == learner.step == 1 and m["num_tokens"] == 0
    assert all(torch.equal(before[k], v) for k, v in learner.get_weights().items())


@pytest.mark.parametrize("backend, zero_stage", [("deepspeed", 0), ("deepspeed", 2), ("torch", 0)])
def test_a_non_finite_loss_skips_the_step_and_keeps_the_weights(tiny_model_path, backend, zero_stage):
    learner = Learner(tiny_model_path, {"dtype": "float32", "lr": LR, "backend": backend, "zero_stage": zero_stage})
    learner.update(make_batch())  # Adam has momentum now: a step on any gradient would move the weights
    before = learner.get_weights()
    bad = make_batch(n=2)
    # a finite but absurd behaviour log-prob: the ratio overflows to inf, and with a negative
    # advantage the loss and every gradient are inf/NaN
    bad[1]["behaviour_logprobs"] = [-1e30 if m else 0.0 for m in bad[1]["loss_mask"]]
    m = learner.update(bad)
    assert m["skipped"] and m["nonfinite"] and m["step"] == learner.step == 1
    assert all(torch.equal(before[k], v) for k, v in learner.get_weights().items())
    m = learner.update(make_batch(seed=3))  # training goes on from the kept weights
    assert not m["skipped"] and m["step"] == 2 and math.isfinite(m["grad_norm"])
    assert all(torch.isfinite(v).all() for v in learner.get_weights().values())
    assert not all(torch.equal(before[k], v) for k, v in learner.get_weights().items())


def test_a_learner_checkpoint_holds_no_pickled_code_and_a_tampered_one_is_refused(tiny_model_path, tmp_path):
    from rti_actors.checkpoints import CheckpointError, check_pickles

    learner = Learner(tiny_model_path, {"dtype": "float32", "lr": LR, "zero_stage": 2})
    learner.update(make_batch())
    learner.save(tmp_path / "ckpt")
    check_pickles(tmp_path / "ckpt")  # DeepSpeed's files hold only tensors and its trusted classes
    assert json.loads((tmp_path / "ckpt" / "rng_rank0.json").read_text())["step"] == 1
    shard = next((tmp_path / "ckpt").rglob("*optim_states.pt"))
    state = torch.load(shard, weights_only=False)
    state["payload"] = Tampered(tmp_path / "sentinel")
    torch.save(state, shard)
    fresh = Learner(tiny_model_path, {"dtype": "float32", "lr": LR, "zero_stage": 2})
    with pytest.raises(CheckpointError, match="optim_states.pt names Python objects"):
        fresh.load(tmp_path / "ckpt")
    assert not (tmp_path / "sentinel").exists() and fresh.step == 0


class Tampered:
    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):  # unpickling this writes a file: what an attacker's payload would do
        return Path.write_text, (Path(self.target), "pwned")


RANK_WORKER = """
import json, sys, torch
from rti_actors.learner import Learner
model, config, shard, out = sys.argv[1], json.loads(sys.argv[2]), json.loads(open(sys.argv[3]).read()), sys.argv[4]
learner = Learner(model, config)
metrics = learner.update(shard)
torch.save({"metrics": metrics, "weights": learner.get_weights()}, out)
"""


def test_two_ranks_on_shards_equal_one_rank_on_the_batch(tiny_model_path, tmp_path):
    # Uneven shards: rank 0 needs several micro-batches, rank 1 one, so rank 1 must run
    # zero-loss passes to keep ZeRO's collectives in step, and both must normalise by the
    # global token count.
    batch = make_batch(seed=8, n=4)
    config = {"dtype": "float32", "lr": LR, "zero_stage": 2, "micro_batch_tokens": 40}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank, shard in enumerate([batch[:3], batch[3:]]):
        (tmp_path / f"shard{rank}.json").write_text(json.dumps(shard))
        cfg = {**config, "rank": rank, "world_size": 2, "master_port": port}
        procs.append(subprocess.Popen(
            [sys.executable, "-c", RANK_WORKER, tiny_model_path, json.dumps(cfg), str(tmp_path / f"shard{rank}.json"),
             str(tmp_path / f"rank{rank}.pt")], cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert ranks[0]["metrics"]["num_micro_batches"] > ranks[1]["metrics"]["num_micro_batches"] == 1

    single = Learner(tiny_model_path, config)
    m = single.update(batch)
    for r in ranks:
        assert r["metrics"]["loss"] == pytest.approx(m["loss"], rel=1e-5)
        assert r["metrics"]["grad_norm"] == pytest.approx(m["grad_norm"], rel=1e-4)
        assert r["metrics"]["num_tokens"] == m["num_tokens"] and r["metrics"]["num_samples"] == 4
        assert_weights_close(r["weights"], single.get_weights(), atol=LR * 1e-2)


# ---- the SFT objective (warm start) --------------------------------------------------------
@pytest.fixture(scope="module")
def nav_record():
    env = make_env("Navigation-v0", {"split": "train", "language": "en"}).unwrapped
    tid = next(t for t in env.task_ids("train") if env.difficulty(t)["waypoints"] == 3)
    return record_agent("Navigation-v0", {"language": "en"}, [tid])[0]


def _sample(tokenizer, record):
    s = to_sample(ChatRenderer(tokenizer), record)
    s.pop("messages")
    return s


def _cut_after_tool(record, k):
    """The record up to and including its k-th tool result (ends on a tool message)."""
    out, seen = copy.deepcopy(record), 0
    for i, m in enumerate(out["messages"]):
        seen += m["role"] == "tool"
        if seen == k:
            out["messages"] = out["messages"][:i + 1]
            return out
    raise AssertionError("not enough tool results")


def _moved_differently(a, b) -> float:
    """Share of weights whose values differ by more than a tenth of a step."""
    diff = sum(int(((a[k] - b[k]).abs() > LR / 10).sum()) for k in a)
    return diff / sum(v.numel() for v in a.values())


def test_tool_results_carry_no_loss(tiny_model_path, tokenizer, nav_record, tmp_path):
    # a demonstration ending on a tool result: whatever that result says, the SFT loss and
    # the update are the same (it is context, never a target)
    base = _cut_after_tool(nav_record, 2)
    other = copy.deepcopy(base)
    other["messages"][-1]["content"] = '{"status": "1", "pois": [{"name": "somewhere else entirely"}]}'
    a, b = _sample(tokenizer, base), _sample(tokenizer, other)
    assert a["ids"] != b["ids"] and sum(a["loss_mask"]) == sum(b["loss_mask"])
    learner = Learner(tiny_model_path, {"dtype": "float32", "lr": LR, "zero_stage": 0})
    learner.save(tmp_path / "start")
    m1 = learner.update([a], "sft")
    w1 = learner.get_weights()
    learner.load(tmp_path / "start")
    m2 = learner.update([b], "sft")
    assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-6) and m1["num_tokens"] == m2["num_tokens"] > 0
    # the two sequences differ in length, so float sums run in another order; Adam's first
    # step is about +-lr wherever a gradient is non-zero, so a gradient that is ~0 either
    # way can flip. Hence: almost no weight may move differently (the control moves many)
    assert _moved_differently(w1, learner.get_weights()) < 1e-4
    # changing an assistant turn does change the loss (the check above can fail)
    changed = copy.deepcopy(base)
    first = next(m for m in changed["messages"] if m["role"] == "assistant")
    first["tool_calls"][0]["arguments"]["address"] += " north gate"
    first["content"] = "Let me look the places up one by one, starting where the trip starts."
    learner.load(tmp_path / "start")
    assert learner.update([_sample(tokenizer, changed)], "sft")["loss"] != pytest.approx(m1["loss"], rel=1e-5)
    assert _moved_differently(w1, learner.get_weights()) > 1e-2


@pytest.mark.parametrize("backend", ["deepspeed", "torch"])
def test_sft_loss_decreases_and_optimizer_resets(tiny_model_path, tokenizer, nav_record, backend):
    sample = _sample(tokenizer, nav_record)
    learner = Learner(tiny_model_path, {"dtype": "float32", "lr": 1e-6, "backend": backend, "zero_stage": 0})
    losses = [learner.update([sample], "sft", lr=LR)["loss"] for _ in range(8)]
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(g["lr"] == 1e-6 for g in learner.optimizer.param_groups)  # the override was for those steps
    inner = getattr(learner.optimizer, "optimizer", learner.optimizer)
    assert len(inner.state) > 0
    learner.reset_optimizer_state()
    assert len(inner.state) == 0
    m = learner.update([sample], "sft", lr=LR)
    assert m["step"] == 9 and len(inner.state) > 0 and m["loss"] < losses[0]


def test_lr_zero_step_leaves_weights_and_unknown_objective_fails(tiny_model_path, tokenizer, nav_record):
    sample = _sample(tokenizer, nav_record)
    learner = Learner(tiny_model_path, {"dtype": "float32", "lr": LR, "backend": "torch"})
    before = learner.get_weights()
    learner.update([sample], "sft", lr=0.0)
    assert_weights_close(before, learner.get_weights(), atol=0)
    with pytest.raises(ValueError, match="unknown objective"):
        learner.update([sample], "dpo")


