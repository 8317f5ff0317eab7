"""Weight publishing by collective broadcast: learner (rank 0) -> every engine actor.

The default path moves a weights dict through Ray's object store (one copy per engine,
always available). With ``learners(weight_sync="broadcast")`` — what ``"auto"`` picks when
the learner and the engines are all on GPUs — the learner and the engine actors form a
process group of their own (NCCL on GPUs, gloo on CPUs) and the learner broadcasts the
weights in a few large flat buckets; each engine unflattens them and installs them through its normal
``update_weights`` (vLLM: the worker's ``load_weights``), so no tensor passes through the
object store or the driver.

The group is built without ``torch.distributed.init_process_group``: the learner's
DeepSpeed engine owns the default group, so this one is a standalone ``ProcessGroup`` over
its own ``TCPStore`` and is used through its low-level API (``pg.broadcast``), which does
not consult global ranks.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch

BUCKET_BYTES = 512 * 2**20
_DTYPES = {str(d): d for d in (torch.float32, torch.bfloat16, torch.float16)}


def free_address() -> tuple[str, int]:
    """This node's IP (as Ray sees it) and a free TCP port on it, for the group's store."""
    import ray
    host = ray.util.get_node_ip_address()
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return host, s.getsockname()[1]


def host_store(host: str, port: int, world_size: int, timeout: timedelta):
    """The master TCPStore of a group, listening on ``host`` only: by itself TCPStore listens
    on every interface (``::``). ``multi_tenant``: torch's env:// rendezvous on the same port
    in this process (DeepSpeed's init) reuses this server instead of starting its own."""
    import torch.distributed as dist

    sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET, backlog=1024)
    return dist.TCPStore(host, port, world_size, True, timeout, wait_for_workers=False, multi_tenant=True,
                         master_listen_fd=sock.detach())


def init_group(host: str, port: int, rank: int, world_size: int, backend: str, timeout_s: float = 300.0):
    """Join the weight group (rank 0 hosts the store). Blocks until all ranks joined."""
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    tcp = host_store(host, port, world_size, timeout) if rank == 0 else dist.TCPStore(host, port, world_size, False, timeout)
    store = dist.PrefixStore("rti-weight-sync", tcp)
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world_size, options)
    raise ValueError(f"weight-sync backend must be 'gloo' or 'nccl', got {backend!r}")


def plan(meta: list[tuple[str, list[int], str]], bucket_bytes: int = BUCKET_BYTES) -> list[list[int]]:
    """Split the tensors (indices into ``meta``, in order) into runs of one dtype of at most
    ``bucket_bytes`` each (a larger tensor gets a bucket of its own). Sender and receivers
    call this on the same ``meta`` and so agree on the buckets; the sender can fill them
    from a stream of tensors (one gathered parameter at a time under ZeRO-3)."""
    buckets: list[list[int]] = []
    used, dtype_now = 0, None
    for i, (_, shape, dtype) in enumerate(meta):
        if dtype not in _DTYPES:
            raise ValueError(f"cannot broadcast {meta[i][0]} of dtype {dtype}; supported: {sorted(_DTYPES)}")
        size = _numel(shape) * torch.empty((), dtype=_DTYPES[dtype]).element_size()
        if not buckets or dtype != dtype_now or used + size > bucket_bytes:
            buckets.append([])
            used, dtype_now = 0, dtype
        buckets[-1].append(i)
        used += size
    return buckets


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _broadcast(pg, tensor: torch.Tensor) -> None:
    import torch.distributed as dist
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    pg.broadcast([tensor], opts).wait()


def send(pg, meta: list, tensors, device: str | torch.device, bucket_bytes: int = BUCKET_BYTES) -> None:
    """Rank 0: broadcast ``tensors`` (an iterable in ``meta`` order) bucket by bucket."""
    stream = iter(tensors)
    for bucket in plan(meta, bucket_bytes):
        flat = torch.empty(sum(_numel(meta[i][1]) for i in bucket), dtype=_DTYPES[meta[bucket[0]][2]], device=device)
        offset = 0
        for i in bucket:
            t = next(stream)
            n = _numel(meta[i][1])
            if t.numel() != n:
                raise ValueError(f"{meta[i][0]} has {t.numel()} elements; the metadata says {n}")
            flat[offset:offset + n].copy_(t.detach().reshape(-1))
            offset += n
        _broadcast(pg, flat)


def receive(pg, meta: list, device: str | torch.device, bucket_bytes: int = BUCKET_BYTES) -> list[tuple[str, torch.Tensor]]:
    """Other ranks: receive the buckets and return (name, tensor) pairs in ``meta`` order."""
    out: dict[int, torch.Tensor] = {}
    for bucket in plan(meta, bucket_bytes):
        dtype = _DTYPES[meta[bucket[0]][2]]
        flat = torch.empty(sum(_numel(meta[i][1]) for i in bucket), dtype=dtype, device=device)
        _broadcast(pg, flat)
        offset = 0
        for i in bucket:
            n = _numel(meta[i][1])
            out[i] = flat[offset:offset + n].view(meta[i][1])
            offset += n
    return [(meta[i][0], out[i]) for i in range(len(meta))]
