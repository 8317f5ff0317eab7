"""Weight updates through vLLM's native weight-transfer protocol, over shared memory.

vLLM (0.32) installs new weights in four calls: ``init_weight_transfer_engine`` once, then
``start_weight_update`` / ``update_weights`` / ``finish_weight_update`` per update. The engine
core relays each call to every worker, where a ``WeightTransferEngine`` (picked by
``WeightTransferConfig.backend`` from ``WeightTransferEngineFactory``) fetches the data itself:
only the call's small ``update_info`` dict is pickled per worker. vLLM's own backends need an
accelerator (NCCL, CUDA IPC), so this module registers one more, ``"rti_shm"``, that runs on
any device: the sender writes the tensors once into a shared-memory file, and every worker
(tensor-parallel ranks included) maps that file and loads its shard straight from it. When
the only worker runs in the sender's own process (one worker, engine core in-process), the
update hands over references to the tensors instead: no copy at all.

Both halves follow vLLM's classes: ``ShmWeightTransferEngine`` (worker side) and
``ShmTrainerWeightTransferEngine`` (sender side, registered with the trainer factory). The
worker side uses vLLM's layerwise reload, as its NCCL and IPC engines do, which re-runs each
layer's post-load processing (on CPU: the oneDNN weight packing).
"""

from __future__ import annotations

import math
import os
import tempfile
import uuid
import weakref
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

BACKEND = "rti_shm"
# Importing this module registers the backend; vLLM imports a worker extension class in
# every worker process before it loads the model, so naming this one as
# ``worker_extension_cls`` makes the backend known in spawned workers too.
EXTENSION = f"{__name__}.RegisterInWorker"
_ALIGN = 64  # every tensor starts on a cache line, so any dtype can view it in place
_HANDOFF: dict[str, list] = {}  # in-process updates: key -> (name, tensor) pairs, during one update
_MAPPED: dict[str, torch.Tensor] = {}  # worker side: the shared file's mapping, by its key


class RegisterInWorker:
    """Empty worker extension: its only job is to get this module imported in the worker."""


@dataclass
class ShmInitInfo(WeightTransferInitInfo):
    """Nothing to rendezvous: where the data is rides each update."""


@dataclass
class ShmUpdateInfo(WeightTransferUpdateInfo):
    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    handoff: str | None = None  # in-process: the key of the tensors in _HANDOFF
    path: str | None = None  # else the shared file (``key`` names this file for good), ...
    key: str | None = None
    nbytes: int = 0
    offsets: list[int] | None = None  # ... and each tensor's byte offset in it


@dataclass
class ShmTrainerInitInfo(TrainerInitInfo):
    backend: ClassVar[str] = BACKEND
    in_process: bool = False  # every worker runs in the sender's process: hand tensors over


def layout(tensors) -> tuple[list[int], int]:
    """Byte offsets of each tensor in the shared file, and the file's size."""
    offsets, end = [], 0
    for t in tensors:
        offsets.append(end)
        end += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
    return offsets, max(end, _ALIGN)


class SharedFile:
    """A file in shared memory, mapped writable, that other processes on this node open by
    ``path``. On Linux a memfd: it has no name in any directory, so nothing is left behind
    even when this process is killed."""

    def __init__(self, nbytes: int):
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("rti-weights")
            self.path, self._close = f"/proc/{os.getpid()}/fd/{fd}", weakref.finalize(self, os.close, fd)
        else:
            fd, self.path = tempfile.mkstemp(prefix="rti-weights-")
            os.close(fd)
            self._close = weakref.finalize(self, os.unlink, self.path)
        os.truncate(self.path, nbytes)
        self.nbytes, self.key = nbytes, uuid.uuid4().hex  # a closed fd's number gets reused: the key does not
        self.buf = torch.from_file(self.path, shared=True, size=nbytes, dtype=torch.uint8)

    def close(self) -> None:
        self.buf = None
        self._close()


def read(info: ShmUpdateInfo) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) views into the shared file; ``load_weights`` copies each shard out.
    The mapping is kept for the next update, whose pages are then already mapped."""
    buf = _MAPPED.get(info.key)
    if buf is None:
        _MAPPED.clear()
        buf = _MAPPED[info.key] = torch.from_file(info.path, shared=True, size=info.nbytes, dtype=torch.uint8)
    out = []
    for name, dtype, shape, off in zip(info.names, info.dtype_names, info.shapes, info.offsets):
        dt = getattr(torch, dtype)
        n = math.prod(shape) * torch.empty((), dtype=dt).element_size()
        out.append((name, buf[off:off + n].view(dt).view(shape)))
    return out


class ShmWeightTransferEngine(WeightTransferEngine[ShmInitInfo, ShmUpdateInfo]):
    """Worker side: load each update's tensors from the handoff or the shared file."""

    init_info_cls = ShmInitInfo
    update_info_cls = ShmUpdateInfo

    def init_transfer_engine(self, init_info: ShmInitInfo) -> None:
        pass

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload
        initialize_layerwise_reload(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class ends with torch.accelerator.synchronize(), which raises on a
        # CPU-only torch (no accelerator): synchronize only where a GPU copies async.
        self.receive_weights(self.parse_update_info(update_info))
        if torch.cuda.is_available():
            torch.cuda.current_stream().synchronize()

    def receive_weights(self, update_info: ShmUpdateInfo) -> None:
        pairs = _HANDOFF[update_info.handoff] if update_info.handoff else read(update_info)
        self.model.load_weights(weights=iter(pairs))

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload
        from vllm.model_executor.model_loader.reload.layerwise import get_layerwise_info

        # Layerwise reload processes only the layers a weight was loaded into. A tied
        # lm_head gets the new values through the shared tensor but keeps what its
        # processing derived from the old ones (on CPU: a packed copy of the embedding for
        # its matmul), and would compute logits with the old weights: process it again.
        unloaded = {m for m in self.model.modules()
                    if get_layerwise_info(m).can_load() and get_layerwise_info(m).load_numel == 0}
        finalize_layerwise_reload(self.model, self.model_config)
        with torch.no_grad():
            for module in _tied(self.model) & unloaded:
                if getattr(module, "quant_method", None) is not None:
                    module.quant_method.process_weights_after_loading(module)

    def shutdown(self) -> None:
        _MAPPED.clear()


def _tied(model: torch.nn.Module) -> set:
    """The layers that share a parameter with another layer."""
    owners: dict[int, list] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            owners.setdefault(id(p), []).append(module)
    return {m for ms in owners.values() if len(ms) > 1 for m in ms}


class ShmTrainerWeightTransferEngine(TrainerWeightTransferEngine[ShmTrainerInitInfo]):
    """Sender side, on the engine's node: write an update into the shared file (one copy)
    and drive start / update / finish through ``client``. The weights of each round are
    ``send_weights``' argument (the protocol's per-round style), or the ``source`` given at
    ``trainer_init``.

    The file outlives the update, as do the workers' mappings of it: a fresh file would
    cost a page fault per 4 KiB page on both sides, every update (shared memory gets no
    huge pages), which takes longer than the copies themselves. The price is one copy of
    the weights in shared memory while the engine lives; ``shutdown`` releases it."""

    init_info_cls = ShmTrainerInitInfo

    def __init__(self, *, client, source=None, is_sender: bool = True, in_process: bool = False):
        super().__init__(client=client, source=source, is_sender=is_sender)
        self.in_process = in_process
        self.file: SharedFile | None = None

    @classmethod
    def trainer_init(cls, init_info: ShmTrainerInitInfo, *, client, source=None):
        engine = cls(client=client, source=source, is_sender=init_info.is_sender, in_process=init_info.in_process)
        if engine.is_sender:
            engine.client.init_weight_transfer_engine(asdict(ShmInitInfo()))
        return engine

    def send_weights(self, weights=None, weight_version: str | None = None) -> None:
        if not self.is_sender:
            return
        pairs = [(n, t.detach()) for n, t in (weights if weights is not None else self.source)]
        meta = dict(names=[n for n, _ in pairs], dtype_names=[str(t.dtype).removeprefix("torch.") for _, t in pairs],
                    shapes=[list(t.shape) for _, t in pairs])
        if self.in_process:
            info = ShmUpdateInfo(**meta, handoff=uuid.uuid4().hex)
            _HANDOFF[info.handoff] = pairs
            try:
                self._round(info, weight_version)
            finally:
                del _HANDOFF[info.handoff]
            return
        offsets, nbytes = layout([t for _, t in pairs])
        if self.file is None or self.file.nbytes < nbytes:
            self.shutdown()
            self.file = SharedFile(nbytes)
        for (_, t), off in zip(pairs, offsets):
            self.file.buf[off:off + t.numel() * t.element_size()].view(t.dtype).view(t.shape).copy_(t)
        self._round(ShmUpdateInfo(**meta, path=self.file.path, key=self.file.key, nbytes=self.file.nbytes,
                                  offsets=offsets), weight_version)

    def _round(self, info: ShmUpdateInfo, weight_version: str | None) -> None:
        self.client.start_weight_update()
        self.client.update_weights(asdict(info))
        self.client.finish_weight_update(weight_version)

    def shutdown(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class LLMClient:
    """vLLM's ``VLLMWeightSyncClient`` protocol over an offline ``LLM`` in this process."""

    def __init__(self, llm):
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info: dict) -> None:
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version)


def register() -> None:
    """Make ``"rti_shm"`` known to both of vLLM's factories (idempotent)."""
    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, ShmWeightTransferEngine)
    if BACKEND not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(BACKEND, ShmTrainerWeightTransferEngine)


register()
