"""Bucketing of the broadcast weight sync, and a two-process gloo broadcast round trip."""

import io
import multiprocessing as mp
import socket

import pytest
import torch

from rti_actors.weight_sync import init_group, plan, receive, send


def test_buckets_are_ordered_runs_of_one_dtype_within_the_budget():
    meta = [("a", [10], "torch.float32"), ("b", [20], "torch.float32"), ("c", [4], "torch.bfloat16"),
            ("d", [100], "torch.float32"), ("e", [5], "torch.float32")]
    buckets = plan(meta, bucket_bytes=160)
    assert buckets == [[0, 1], [2], [3], [4]]  # 120 B; dtype change; 400 B alone; the rest
    assert [i for b in buckets for i in b] == list(range(len(meta)))
    with pytest.raises(ValueError, match="int64"):
        plan([("x", [2], "torch.int64")])


def _receiver(port, meta, queue):
    pg = init_group("127.0.0.1", port, 1, 2, "gloo", timeout_s=60)
    # Bytes, not tensors: a queued tensor is shared through a handle this process
    # serves, and the process may have exited by the time the parent reads it.
    buf = io.BytesIO()
    torch.save([(n, t.clone()) for n, t in receive(pg, meta, "cpu", bucket_bytes=64)], buf)
    queue.put(buf.getvalue())


def test_gloo_broadcast_round_trip():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tensors = {"w": torch.randn(3, 4), "b": torch.randn(4), "h": torch.randn(2, 2).to(torch.bfloat16)}
    meta = [(n, list(t.shape), str(t.dtype)) for n, t in tensors.items()]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_receiver, args=(port, meta, queue))
    proc.start()
    pg = init_group("127.0.0.1", port, 0, 2, "gloo", timeout_s=60)
    send(pg, meta, iter(tensors.values()), "cpu", bucket_bytes=64)
    got = torch.load(io.BytesIO(queue.get(timeout=60)))
    proc.join(timeout=30)
    assert [n for n, _ in got] == list(tensors)
    for (_, t), ref in zip(got, tensors.values()):
        assert t.dtype == ref.dtype and torch.equal(t, ref)
