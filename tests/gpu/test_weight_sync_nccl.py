"""The broadcast weight sync (rti_actors.weight_sync) over NCCL, between two processes.

``init_group`` / ``send`` / ``receive`` with backend "nccl" need two GPUs: NCCL refuses two
ranks on one device. Both ranks run in spawned children, so a hung collective is killed by
the parent instead of hanging pytest. The probe first records what NCCL does with two ranks
on one GPU, which is where ``learners(weight_sync="auto")`` picks a broadcast when the
learner and the engines share a GPU (fractional num_gpus_per_*): the driver then falls back
to the object store only if the broadcast raises rather than hangs.
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod
import socket
import time

import torch

from tests.gpu.common import GPU, needs_two_gpus
from tests.gpu.report import record

pytestmark = GPU

BIG = 64 * 2**20  # elements of the large bf16 tensor: 128 MiB


def _tensors(device: str, big: bool) -> dict[str, torch.Tensor]:
    """The same tensors in every process: drawn on the CPU from one seed, then moved."""
    g = torch.Generator().manual_seed(0)
    specs = [("w", (1024, 1024), torch.float32), ("b", (4096,), torch.float32), ("h", (512, 512), torch.bfloat16)]
    if big:
        specs.append(("big", (BIG,), torch.bfloat16))
    return {n: torch.randn(shape, generator=g).to(dtype).to(device) for n, shape, dtype in specs}


def _rank(rank: int, port: int, device: int, repeats: int, big: bool, out) -> None:
    try:
        from rti_actors.weight_sync import init_group, receive, send

        torch.cuda.set_device(device)
        dev = f"cuda:{device}"
        tensors = _tensors(dev, big)
        meta = [(n, list(t.shape), str(t.dtype)) for n, t in tensors.items()]
        t0 = time.perf_counter()
        pg = init_group("127.0.0.1", port, rank, 2, "nccl", timeout_s=60)
        join_s = time.perf_counter() - t0
        times, equal = [], True
        for _ in range(repeats):
            torch.cuda.synchronize()
            t = time.perf_counter()
            if rank == 0:
                send(pg, meta, iter(tensors.values()), dev)
            else:
                got = receive(pg, meta, dev)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            if rank != 0:
                equal = equal and [n for n, _ in got] == list(tensors) and all(
                    t.dtype == tensors[n].dtype and torch.equal(t, tensors[n]) for n, t in got)
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        out.put((rank, "ok", {"join_s": join_s, "times": times, "equal": equal, "bytes": nbytes}))
    except Exception as e:  # the parent reports whatever happened
        out.put((rank, "error", f"{type(e).__name__}: {e}"[:400]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pair(devices: tuple[int, int], repeats: int, big: bool, timeout_s: float) -> dict:
    """{rank: (status, info)} of two children; a rank that did not answer is ("hung", ...)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, devices[r], repeats, big, out), daemon=True) for r in (0, 1)]
    for p in procs:
        p.start()
    results: dict = {}
    deadline = time.monotonic() + timeout_s
    gone_since = None  # both children exited: what they put is on its way, wait a moment for it
    while len(results) < 2 and time.monotonic() < deadline:
        try:
            rank, status, info = out.get(timeout=1.0)
            results[rank] = (status, info)
        except queue_mod.Empty:
            if all(not p.is_alive() for p in procs):
                gone_since = gone_since or time.monotonic()
                if time.monotonic() - gone_since > 3:
                    break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    for r in (0, 1):
        if r not in results:
            code = procs[r].exitcode
            results[r] = ("hung", f"no answer within {timeout_s:g} s") if code in (None, -9) else (
                "error", f"the rank's process died (exit code {code}) without an answer")
    return results


def test_probe_two_ranks_on_one_gpu():
    """Informational (passes either way): does NCCL accept two ranks on one device here?"""
    res = _pair((0, 0), repeats=1, big=False, timeout_s=60)
    states = {s for s, _ in res.values()}
    if states == {"ok"}:
        outcome = "accepted" if res[1][1]["equal"] else "accepted, wrong data"
    elif "error" in states:
        outcome = "refused: " + next(info for s, info in res.values() if s == "error")
    else:
        outcome = "hung"
    record("nccl two ranks on one gpu", outcome=outcome[:200])


@needs_two_gpus
def test_nccl_broadcast_between_two_gpus():
    res = _pair((0, 1), repeats=3, big=True, timeout_s=180)
    assert res[0][0] == "ok" and res[1][0] == "ok", res
    sender, receiver = res[0][1], res[1][1]
    assert receiver["equal"], "the received tensors differ from the sent ones"
    best = min(sender["times"][1:])  # the first broadcast also sets up the NCCL communicator
    record("nccl broadcast 2 gpus", mbytes=sender["bytes"] / 2**20, first_s=sender["times"][0], best_s=best,
           gb_per_s=sender["bytes"] / best / 1e9, join_s=sender["join_s"])
