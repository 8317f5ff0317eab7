"""The learner: a DeepSpeed engine (or a plain torch loop) over a Hugging Face causal LM.

``Learner`` is a plain class; ``QueueLearner`` (at the end) is the actor the graph runs: it pulls
weighted groups from the replay queue (``rti_actors.learner_group`` starts one per rank).
One ``update`` call is one optimiser step over a list of samples, micro-batched by a padded-
token budget with gradient accumulation. Losses live in ``rti_actors.losses``.

Data parallelism: each rank is one Learner (config ``rank``, ``world_size``, ``master_addr``,
``master_port``) that receives its own shard of the samples. Loss normalisers (tokens or
sequences) and the number of micro-batches are agreed across ranks before the first forward,
so the result equals one rank holding the whole batch (a rank may even hold no sample).
``update``, ``save``, ``load`` and ``export_hf`` are collective under DeepSpeed with
world_size > 1, and so are ``get_weights`` / ``broadcast_weights`` under ZeRO-3 (the other
ranks call ``join_gather``): call them on every rank. ``rti_actors.learner_group`` does that
for the driver.

Memory options: ``gradient_checkpointing`` recomputes activations in the backward (HF's own
checkpointing of the decoder layers); ``offload`` moves the optimiser states ("optimizer"),
and under ZeRO-3 the weights too ("optimizer+params"), from the GPU to host memory.
``lora`` trains low-rank adapters on a frozen base (``rti_actors.lora``): publishes and
``export_hf`` still carry full weights (the merged ones), checkpoints the adapters only.
"""

from __future__ import annotations

import ctypes
import gc
import json
import math
import os
import random
import socket
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import psutil
import ray
import torch

from policies.engines import cpu_has_native_bf16
from policies.models import cache_dir
from rti_actors.algorithms import AlgorithmPlugin, get_algorithm
from rti_actors.batch_layout import Attend, Layout, PrefixKV, Row, Segment, has_sliding_window, plan, register
from rti_actors.checkpoints import check_pickles
from rti_actors.faults import Restartable
from rti_actors.lora import apply_lora, base_parameters, check_lora, lora_settings, merged_weights
from rti_actors.losses import add_stats, finish_stats, masked_token_logprobs, sft_loss
from rti_actors.options import DEFAULTS as OPTION_DEFAULTS
from rti_actors.options import gspo_clip_pair, learner_problems, learner_settings
from rti_actors.plan import ModelShape, model_state_bytes
from rti_actors.trajectory import LearnerSample
from rti_actors.weight_sync import free_address, host_store, init_group, send

# The run config's learner defaults, taken from the options' defaults so the two cannot drift apart:
# algorithm ("rti" trains with the grpo loss), gspo_clip_eps (low, high), temperature (the
# rollout's), micro_batch_tokens (padded tokens, rows x longest row, per micro-batch), dtype
# (None: bfloat16 on GPU, float32 on CPU), ... Then what only a learner process has.
DEFAULTS = {
    **learner_settings(OPTION_DEFAULTS),
    "betas": (0.9, 0.999),
    "rank": 0,
    "world_size": 1,
    "master_addr": "127.0.0.1",
    "master_port": None,            # None: a free port (world_size 1 only)
    # the algorithm's plug-in class, for one the learner's process has not registered (a
    # user's, registered in the driver's script); None: looked up by the algorithm's name
    "plugin": None,
}


# fp16 is left out on purpose: it needs loss scaling, which the torch loop does not do.
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_CHECKPOINT_TAG = "learner"


def learner_dtype(cuda: bool) -> str:
    """The learner's compute dtype when the config leaves it open: bf16 on a GPU and on a CPU
    with native bf16 (fp32 master weights and optimiser states either way), fp32 elsewhere,
    where bf16 matmuls are emulated and slower than fp32 ones."""
    return "bfloat16" if cuda or cpu_has_native_bf16() else "float32"


def release_host_memory() -> None:
    """Return the C allocator's free pages to the OS (glibc; elsewhere only a GC pass).

    A CPU forward/backward over a few thousand tokens frees several GiB of activations, which
    glibc keeps mapped for reuse, so without a trim the learner's resident memory between
    steps stays near its peak (several times what it needs at rest). On a shared CPU machine
    that cached memory is what the engines and the weight copies of a publish are then short of.
    """
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def estimate_memory_gib(model_path: str, zero_stage: int = 0, dtype: str = "float32", world_size: int = 1) -> float:
    """Per-rank GiB of model states: parameters, gradients and AdamW states.

    Activations are not included (they scale with ``micro_batch_tokens``). Mixed precision
    and ZeRO keep an fp32 master copy beside the working weights; ZeRO stage 1 partitions
    the optimiser states over ranks, stage 2 also the gradients, stage 3 also the weights.
    The parameter count comes from the config on the meta device (no weights are read).
    """
    from transformers import AutoConfig

    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    params = ModelShape.from_hf_config(AutoConfig.from_pretrained(model_path)).params
    width = torch.finfo(_DTYPES[dtype]).bits // 8
    return sum(model_state_bytes(params, width, zero_stage, world_size)) / 2**30


def shard_by_tokens(samples: list, num_shards: int) -> list[list]:
    """Split ``samples`` into ``num_shards`` lists of about equal token counts (one per rank).

    Greedy, longest sample first, each to the shard with the fewest tokens so far (ties: the
    lower shard), so the first ``num_shards`` samples open one shard each: every shard gets a
    sample when there are at least as many samples as shards. With fewer, the last shards are
    empty; their ranks run zero-loss passes and the step is the same (``Learner.update``).
    Inside a shard the batch order is kept, so one shard is the batch itself.
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    loads, members = [0] * num_shards, [[] for _ in range(num_shards)]
    for i in sorted(range(len(samples)), key=lambda i: (-len(samples[i].ids), i)):
        k = min(range(num_shards), key=lambda j: (loads[j], j))
        members[k].append(i)
        loads[k] += len(samples[i].ids)
    return [[samples[i] for i in sorted(m)] for m in members]


def check_samples(samples: list) -> list[LearnerSample]:
    """The samples as ``LearnerSample`` (a mapping with its field names is taken too), each
    with one entry per id in every per-token list and no loss on the first token."""
    if not samples:
        raise ValueError("update() needs at least one sample")
    out = []
    for k, s in enumerate(samples):
        try:
            s = LearnerSample.of(s)
        except ValueError as e:
            raise ValueError(f"sample {k} {e}") from None
        n = len(s.ids)
        bad = [key for key in ("loss_mask", "behaviour_logprobs", "token_weight", "token_advantages")
               if getattr(s, key) is not None and len(getattr(s, key)) != n]
        if bad:
            raise ValueError(f"sample {k}: {bad} must have one entry per id ({n} ids)")
        out.append(s)
        if n and s.loss_mask[0]:
            raise ValueError(f"sample {k}: loss_mask[0] is 1, but the first token has no context to be "
                             "predicted from; trajectories start with prompt tokens (mask 0)")
    return out


def load_comm_op() -> None:
    """Build (once) and load the shared-memory comm op DeepSpeed needs at its first initialise on
    a CPU. The build is a compiler run of minutes on a busy machine, kept in the project cache.
    Torch guards it with a lock file that a process killed mid-build leaves behind, and every
    later learner then waits on that file forever. Here the build runs under an flock, which
    the kernel drops with its holder, so a lock file found while holding it is stale."""
    import fcntl

    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    root = Path(os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache_dir() / "torch_extensions")))
    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "rti_actors.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        (root / builder.NAME / "lock").unlink(missing_ok=True)
        builder.load(verbose=False)  # cached per process: DeepSpeed's own call loads nothing again


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rng_state() -> dict:
    """Every RNG's state as plain JSON values (a checkpoint holds no pickled Python objects)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state = {"torch": torch.get_rng_state().tolist(), "python": [version, list(internal), gauss],
             "numpy": [name, keys.tolist(), pos, has_gauss, cached]}
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


class Learner:
    """Holds the trainable policy; ``update`` does one optimiser step on a list of samples."""

    def __init__(self, model_path: str, config: dict | None = None):
        unknown = set(config or {}) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown learner config keys {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        self.config = {**DEFAULTS, **(config or {})}
        c = self.config
        self.plugin: type[AlgorithmPlugin] = c["plugin"] or get_algorithm(c["algorithm"])
        if self.plugin.name != c["algorithm"]:
            raise ValueError(f"plugin {self.plugin.__name__} is algorithm {self.plugin.name!r}, not {c['algorithm']!r}")
        c["gspo_clip_eps"] = gspo_clip_pair(c["gspo_clip_eps"], "learner gspo_clip_eps")
        # one check, with the options' own rules (rti_actors.options): a config that
        # validated passes, a hand-built dict gets the same messages
        problems = learner_problems(c) + [f"lora={c['lora']!r}: {p}"
                                          for p in check_lora(c["lora"], zero_stage=c["zero_stage"])]
        if problems:
            raise ValueError("invalid learner settings:\n  - " + "\n  - ".join(problems))
        self.lora = lora_settings(c["lora"])  # None: full fine-tuning
        cuda = torch.cuda.is_available()
        c["dtype"] = c["dtype"] or learner_dtype(cuda)
        self.model_path = model_path
        self.step = 0
        self.world_size, self.rank = int(c["world_size"]), int(c["rank"])
        random.seed(c["seed"])
        np.random.seed(c["seed"])
        torch.manual_seed(c["seed"])

        if c["backend"] == "deepspeed":
            self._init_distributed(cuda)
        self.device = torch.device(f"cuda:{torch.cuda.current_device()}" if cuda else "cpu")

        from transformers import AutoConfig, AutoModelForCausalLM

        # The torch backend keeps fp32 weights and autocasts (plain AdamW on bf16 weights
        # would round lr-1e-6 updates away); DeepSpeed casts to bf16 itself and keeps an
        # fp32 master copy in its optimiser.
        load_dtype = _DTYPES[c["dtype"]] if c["backend"] == "deepspeed" else torch.float32
        # The learner's own attention function (rti_actors.batch_layout): plain causal SDPA
        # for padded rows, and the packed and shared-prefix layouts when those are on. A
        # sliding-window model keeps transformers' SDPA (and the padded layout).
        hf_config = AutoConfig.from_pretrained(model_path)
        windowed = has_sliding_window(hf_config)
        if windowed and (c["pack_sequences"] is True or c["share_prefix"] is True):
            raise ValueError(f"{model_path} attends within a sliding window, which packed rows and shared prefixes "
                             "do not support: set pack_sequences=False and share_prefix=False")
        # what "auto" may use here: nothing on a windowed model; no shared prefix under ZeRO-3,
        # whose per-layer gather does not reach a prefix's late backward
        self.layout = {"pack": False if windowed else c["pack_sequences"],
                       "share": False if windowed or c["zero_stage"] == 3 else c["share_prefix"]}
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=load_dtype,
                                                     attn_implementation="sdpa" if windowed else register())
        if c["gradient_checkpointing"]:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if self.lora is not None:
            # peft swaps the targeted linears for LoRA layers in place, so the wrapper's
            # get_decoder() runs the adapters. Non-reentrant checkpointing needs no
            # enable_input_require_grads: it does not skip a segment whose input needs no grad.
            model = apply_lora(model, c["lora"])
        model.train()
        self.pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        if c["offload"] != "none":
            # ZeRO-Offload steps the optimiser on the host and refuses a client torch AdamW
            # there (several times slower); DeepSpeed's CPU Adam is the same AdamW update.
            from deepspeed.ops.adam import DeepSpeedCPUAdam
            optimizer = DeepSpeedCPUAdam(self._param_groups(model), lr=c["lr"], betas=tuple(c["betas"]),
                                         adamw_mode=True)
        else:
            # fused: one kernel per parameter instead of a dozen elementwise passes (about
            # twice as fast as the default loop on a CPU; the same update)
            optimizer = torch.optim.AdamW(self._param_groups(model), lr=c["lr"], betas=tuple(c["betas"]), fused=True)

        if c["backend"] == "deepspeed":
            import deepspeed

            self.engine, self.optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                                                     config=self._ds_config())
            self.module = self.engine.module
            self._undo_warmup_step()
        else:
            self.engine = None
            self.module = model.to(self.device)
            self.optimizer = optimizer

    # ---- setup --------------------------------------------------------------------------
    def _param_groups(self, model) -> list[dict]:
        # Decay matrices only: decaying norm gains and biases is the usual mistake that
        # slowly shrinks a pretrained model's activations.
        decay, no_decay = [], []
        for p in model.parameters():
            if p.requires_grad:
                (decay if p.ndim >= 2 else no_decay).append(p)
        return [{"params": decay, "weight_decay": self.config["weight_decay"]},
                {"params": no_decay, "weight_decay": 0.0}]

    def _init_distributed(self, cuda: bool) -> None:
        c = self.config
        if self.world_size > 1 and not c["master_port"]:
            raise ValueError("world_size > 1 needs the same master_addr and master_port in every rank's config")
        port = c["master_port"] or _free_port()
        # The config wins over inherited variables: a Ray worker or a subprocess may carry
        # another process group's port and rank.
        os.environ.update({"RANK": str(self.rank), "WORLD_SIZE": str(self.world_size),
                           "LOCAL_RANK": str(self.rank % max(torch.cuda.device_count(), 1) if cuda else 0),
                           "MASTER_ADDR": c["master_addr"], "MASTER_PORT": str(port)})
        load_comm_op()
        if cuda:
            # Under Ray each actor usually sees exactly one GPU, whatever its rank.
            local = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local if local < torch.cuda.device_count() else 0)
        if self.rank == 0:  # the group's store, listening on master_addr only (reused by the rendezvous)
            self._store = host_store(c["master_addr"], port, self.world_size, timedelta(minutes=30))
        import deepspeed
        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo", auto_mpi_discovery=False)

    def _ds_config(self) -> dict:
        c = self.config
        zero: dict = {"stage": c["zero_stage"]}
        # Pinned host buffers make the GPU<->host copies asynchronous; on a CPU there is nothing to pin.
        pin = torch.cuda.is_available()
        if c["offload"] != "none":
            zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
        if c["offload"] == "optimizer+params":
            zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
        return {
            # Batch sizes are bookkeeping only: update() drives accumulation itself with
            # set_gradient_accumulation_boundary, so the micro-batch count may vary per call.
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "train_batch_size": self.world_size,
            "gradient_clipping": c["grad_clip"],
            "zero_optimization": zero,
            "bf16": {"enabled": c["dtype"] == "bfloat16"},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 2**62,
            "wall_clock_breakdown": False,
        }

    # ---- training -----------------------------------------------------------------------
    def _all_reduce(self, values: list[float], op: str = "sum") -> list[float]:
        if self.world_size == 1:
            return values
        import torch.distributed as dist
        t = torch.tensor(values, dtype=torch.float64 if self.device.type == "cpu" else torch.float32,
                         device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return t.tolist()

    def _row_tensors(self, samples: list[LearnerSample], row: Row) -> dict:
        """The row's lines as [lines, width] tensors, right-padded: token ids, position ids (a
        segment's restart at its start in the sample), loss mask, behaviour log-probs, token
        weights, each token's advantage (the sample's, or OPD's per token) and sequence index (for
        GSPO), whether it is a teacher's (LUFFY), and the spans the attention needs (offset and
        length of each segment in its line)."""
        n, width = len(row.lines), row.width
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        pos = torch.arange(width, dtype=torch.long).repeat(n, 1)
        mask = torch.zeros((n, width), dtype=torch.bool)
        blp, tw, adv = torch.zeros((n, width)), torch.ones((n, width)), torch.zeros((n, width))
        seq = torch.zeros((n, width), dtype=torch.long)
        off = torch.zeros((n, width), dtype=torch.bool)
        spans, k = [], 0
        for i, line in enumerate(row.lines):
            at, line_spans = 0, []
            for seg in line:
                s, sl = samples[seg.sample], slice(at, at + seg.length)
                ids[i, sl] = torch.tensor(s.ids[seg.start:], dtype=torch.long)
                pos[i, sl] = torch.arange(seg.start, seg.start + seg.length)
                mask[i, sl] = torch.tensor(s.loss_mask[seg.start:], dtype=torch.bool)
                blp[i, sl] = torch.tensor(s.behaviour_logprobs[seg.start:], dtype=torch.float32)
                tw[i, sl] = torch.tensor(s.token_weight[seg.start:], dtype=torch.float32)
                token_adv = s.token_advantages
                adv[i, sl] = (float(s.advantage) if token_adv is None
                              else torch.tensor(token_adv[seg.start:], dtype=torch.float32))
                off[i, sl] = bool(s.off_policy)
                seq[i, sl] = k
                line_spans.append((at, seg.length))
                at, k = at + seg.length, k + 1
            seq[i, at:] = k - 1  # pads belong to the line's last sequence; their mask is 0
            spans.append(line_spans)
        out = {k: v.to(self.device) for k, v in
               {"ids": ids, "pos": pos, "mask": mask, "blp": blp, "tw": tw, "adv": adv, "seq": seq,
                "off": off}.items()}
        out["spans"] = spans
        return out

    def _hidden(self, ids: torch.Tensor, pos: torch.Tensor | None, attend: Attend | None) -> torch.Tensor:
        # The decoder runs on every token; the vocabulary projection only where there is a loss.
        autocast = self.engine is None and self.config["dtype"] != "float32"
        with torch.autocast(self.device.type, dtype=_DTYPES[self.config["dtype"]], enabled=autocast):
            return self.module.get_decoder()(input_ids=ids, position_ids=pos, use_cache=False,
                                             attend=attend).last_hidden_state

    def _loss(self, batch: dict, normaliser: float, objective: str, attend: Attend | None = None):
        hidden = self._hidden(batch["ids"], batch["pos"], attend)
        head = self.module.get_output_embeddings()
        if objective == "sft":  # the model's own distribution: temperature 1
            return sft_loss(masked_token_logprobs(hidden, head, batch["ids"], batch["mask"], 1.0), batch["tw"],
                            batch["mask"], num_tokens=normaliser)
        with torch.profiler.record_function("learner.vocab_logprobs"):  # named in profiles (benchmarks/learner.py)
            scored = masked_token_logprobs(hidden, head, batch["ids"], batch["mask"], self.config["temperature"],
                                           with_entropy=self.plugin.with_entropy)
        logp, entropy = scored if self.plugin.with_entropy else (scored, None)
        return self.plugin.loss(logp, batch, self.config, normaliser, entropy)

    def _passes(self, samples: list[LearnerSample], layout: Layout, normaliser: float, objective: str):
        """Yield (tensor to backward, loss stats or None) per backward pass of the layout.

        A shared prefix runs forward first; its keys and values become leaves that the rows
        attend to, and after the rows' backward passes have filled the leaves' gradients,
        one more pass sends those through the prefix (stats None: it is not a loss)."""
        for cluster in layout.clusters:
            kv = None
            if cluster.prefix:
                kv = PrefixKV()
                ids = torch.tensor([cluster.prefix], dtype=torch.long, device=self.device)
                self._hidden(ids, None, Attend([[(0, len(cluster.prefix))]], kv, mode="prefix"))
                kv.detach()
            for row in cluster.rows:
                batch = self._row_tensors(samples, row)
                yield self._loss(batch, normaliser, objective, Attend(batch["spans"], kv))
            if kv is not None:
                yield kv.surrogate(), None

    def update(self, samples: list[dict], objective: str | None = None, lr: float | None = None) -> dict:
        """One optimiser step on ``samples`` (this rank's shard); returns metrics.

        ``objective``: the config's algorithm by default, or "sft" (cross-entropy on the
        loss-mask tokens; advantages and behaviour log-probs are ignored). ``lr``: this
        step's learning rate instead of the configured one (the warm start uses its own).

        Metrics (global over ranks): loss, clip_frac, ratio_mean, approx_kl, grad_norm (before
        clipping), num_tokens (loss tokens), num_samples, num_micro_batches (this rank), step,
        lr, seconds, tokens_per_s (all tokens processed), skipped (True: no step was taken),
        nonfinite (True: the loss or the gradient was NaN or infinite, so the step was skipped
        and the weights kept; an update that would write NaN into every weight and then into
        the engines must never be applied).
        """
        t0 = time.perf_counter()
        if samples or self.world_size == 1:  # a rank of a group may get no sample (fewer samples than ranks)
            samples = check_samples(samples)
        c = self.config
        objective = objective or c["algorithm"]
        if objective not in (c["algorithm"], "sft"):
            raise ValueError(f"unknown objective {objective!r}; this learner trains {c['algorithm']!r} or 'sft' "
                             "(the warm start's cross-entropy)")
        layout = plan([s.ids for s in samples], [s.loss_mask for s in samples], c["micro_batch_tokens"],
                      **self.layout)
        tokens = sum(sum(1 for m in s.loss_mask if m) for s in samples)
        seqs = sum(1 for s in samples if any(s.loss_mask))
        tokens, seqs, n_samples = self._all_reduce([float(tokens), float(seqs), float(len(samples))])
        (n_passes,) = self._all_reduce([float(layout.passes)], op="max")
        normaliser = seqs if objective != "sft" and self.plugin.normaliser == "sequences" else tokens
        if tokens == 0:
            # Nothing to learn from; an Adam step on zero gradients would still move the
            # weights (momentum, weight decay), so no step is taken. Same on every rank.
            return {"loss": 0.0, "clip_frac": 0.0, "ratio_mean": 1.0, "approx_kl": 0.0, "grad_norm": 0.0,
                    "num_tokens": 0, "num_samples": int(n_samples), "num_micro_batches": 0, "step": self.step,
                    "lr": float(self.optimizer.param_groups[0]["lr"]), "seconds": time.perf_counter() - t0,
                    "tokens_per_s": 0.0, "skipped": True, "nonfinite": False}
        # DeepSpeed averages gradients over ranks; the loss is a sum over the global batch
        # divided by the global normaliser, so each rank's share is scaled back up.
        scale = float(self.world_size)

        totals: dict = {}
        loss_sum = 0.0
        passes = self._passes(samples, layout, normaliser, objective)
        for k in range(int(n_passes)):
            if self.engine is not None:
                self.engine.set_gradient_accumulation_boundary(k == int(n_passes) - 1)
            loss, stats = next(passes, (None, None))
            if loss is None:
                # This rank ran out of passes: a zero-loss pass keeps the collective
                # gathers/reductions of ZeRO in step with the other ranks.
                filler = samples[:1] or [self._filler_sample()]
                loss = self._loss(self._row_tensors(filler, Row([[Segment(0, 0, len(filler[0].ids))]])),
                                  normaliser, objective)[0] * 0.0
            elif stats is not None:
                add_stats(totals, stats)
                loss_sum += float(loss.detach())
                loss = loss * scale
            # else: a shared prefix's pass, whose leaf gradients already carry the scale
            if self.engine is not None:
                self.engine.backward(loss)
            else:
                loss.backward()

        grad_norm, stepped = self._optimizer_step(lr)
        self.step += int(stepped)
        keys = ("loss_tokens", "clipped", "clip_units", "ratio_sum", "kl_sum")
        if objective != "sft":
            keys += self.plugin.loss_stats
        loss_sum, processed, *summed = self._all_reduce(
            [loss_sum, float(sum(len(s.ids) for s in samples))] + [totals.get(k, 0.0) for k in keys])
        if self.device.type == "cpu":
            release_host_memory()
        seconds = time.perf_counter() - t0
        return {"loss": loss_sum, **finish_stats(dict(zip(keys, summed))), "grad_norm": grad_norm,
                "num_tokens": int(tokens), "num_samples": int(n_samples), "num_micro_batches": layout.rows,
                "step": self.step, "lr": float(lr if lr is not None else self.optimizer.param_groups[0]["lr"]),
                "seconds": seconds, "tokens_per_s": processed / seconds, "skipped": not stepped, "nonfinite": not stepped,
                "host_rss_gib": psutil.Process().memory_info().rss / 2**30,
                **layout.stats([len(s.ids) for s in samples])}

    def _filler_sample(self) -> LearnerSample:
        # The input of a rank's zero-loss passes when its shard is empty: any finite loss
        # times 0 will do, so two pad tokens with one (finite, zero-advantage) loss token.
        return LearnerSample([self.pad_id] * 2, [0, 1], [0.0, 0.0], [1.0, 1.0], 0.0)

    def _optimizer_step(self, lr: float | None = None) -> tuple[float, bool]:
        c = self.config
        if lr is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        try:
            return self._step_once()
        finally:
            for group in self.optimizer.param_groups:
                group["lr"] = c["lr"]

    def set_step(self, step: int) -> int:
        """Count optimiser steps on from ``step`` (a learner rebuilt from published weights
        carries on the run's count)."""
        self.step = int(step)
        return self.step

    def reset_optimizer_state(self) -> None:
        """Forget the optimiser's moments (Adam's exp_avg / exp_avg_sq and step counts), so
        that RL after a warm start begins as a fresh run on the warm-started weights."""
        inner = getattr(self.optimizer, "optimizer", self.optimizer)  # DeepSpeed wraps the client AdamW
        inner.state.clear()

    def _step_once(self) -> tuple[float, bool]:
        """One optimiser step; returns (grad norm before clipping, whether the step was taken).
        A gradient with a NaN or inf in it is dropped and no step taken: clipping cannot repair
        it (the norm itself is NaN), and one such step would corrupt every weight."""
        c = self.config
        if self.engine is None:
            norm = float(torch.nn.utils.clip_grad_norm_(self.module.parameters(), c["grad_clip"] if c["grad_clip"] > 0
                                                        else float("inf")))
            if math.isfinite(norm):
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            return norm, math.isfinite(norm)
        own_norm = None
        if c["zero_stage"] == 0:
            # Stage 0 steps the client optimizer without looking at the norm (nor recording it
            # in fp32); the gradients are whole and already averaged over ranks here.
            grads = [p.grad for p in self.module.parameters() if p.grad is not None]
            own_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))
            if not math.isfinite(own_norm):
                self.engine.zero_grad()
                return own_norm, False
        # ZeRO-1/2/3 take the norm of the partitioned gradients themselves and skip a step
        # whose norm is not finite (reported as inf), clearing the gradients
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        norm = float(norm) if norm is not None else float(own_norm if own_norm is not None else "nan")
        return norm, own_norm is not None or math.isfinite(norm)

    # ---- weights and checkpoints --------------------------------------------------------
    def _full_params(self):
        """(name, full tensor on the learner's device) per parameter, in order; under ZeRO-3
        one parameter is gathered at a time, so no more than one full copy exists at once.
        With LoRA: the merged weights under the base model's names (what the engines hold)."""
        if self.lora is not None:  # never ZeRO-3 (check_lora), so every tensor is whole here
            yield from merged_weights(self.module)
            return
        zero3 = self.engine is not None and self.config["zero_stage"] == 3
        masters = self._stage0_masters()
        for name, p in self.module.named_parameters():
            if id(p) in masters:
                yield name, masters[id(p)].detach()
            elif zero3:
                import deepspeed
                with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                    yield name, p.detach()
            else:
                yield name, p.detach()

    @torch.no_grad()
    def _undo_warmup_step(self) -> None:
        """DeepSpeed's bf16 wrapper without ZeRO creates AdamW's state by stepping once on zero
        gradients: the step count starts at 1, so the first real update is 0.74 of AdamW's
        (bias correction one step ahead), and weight decay has already shrunk the fp32 masters
        away from the loaded weights. Forget that step and put the loaded weights back."""
        masters = self._stage0_masters()
        if not masters:
            return
        self.reset_optimizer_state()
        for p in self.module.parameters():
            if id(p) in masters:
                masters[id(p)].copy_(p)

    def _stage0_masters(self) -> dict:
        """id(bf16 working parameter) -> its fp32 master, for DeepSpeed's bf16 without ZeRO.
        The working copy rounds away updates below a bf16 step (a norm gain near 1 moves by
        lr 1e-3 only once several updates add up), so engines get the master, as from the
        torch loop's fp32 weights."""
        opt = self.optimizer if self.engine is not None else None
        if opt is None or self.config["zero_stage"] != 0 or not hasattr(opt, "fp32_groups"):
            return {}
        return {id(lp): hp for lps, hps in zip(opt.fp16_groups, opt.fp32_groups) for lp, hp in zip(lps, hps)}

    @torch.no_grad()
    def get_weights(self, dtype: str | None = None) -> dict[str, torch.Tensor]:
        """Full weights as CPU tensors under HF parameter names (tied duplicates omitted);
        ``dtype`` (e.g. "bfloat16" for a bf16 engine) casts them, halving what a publish moves."""
        to = getattr(torch, dtype) if dtype else None
        return {name: t.to("cpu", dtype=to, copy=True) for name, t in self._full_params()}

    @torch.no_grad()
    def join_gather(self) -> int:
        """Take part in another rank's ``get_weights`` / ``export_hf`` under ZeRO-3 (each
        parameter's gather is collective) without keeping a copy. Returns parameters seen."""
        if self.lora is not None:  # nothing is gathered without ZeRO-3, so there is nothing to merge either
            return sum(1 for _ in base_parameters(self.module))
        return sum(1 for _ in self._full_params())

    # ---- broadcast weight sync (rti_actors.weight_sync) ---------------------------------
    def weight_sync_address(self) -> tuple[str, int]:
        return free_address()

    def init_weight_sync(self, host: str, port: int, world_size: int, backend: str) -> bool:
        """Join the weight group as its rank 0 (call together with the engines' joins)."""
        if self.rank == 0:
            self._weight_group = init_group(host, port, 0, world_size, backend)
        return True

    def weight_meta(self) -> list[tuple[str, list[int], str]]:
        if self.lora is not None:  # the merged weights: the base model's names, shapes and dtypes
            return [(name, list(p.shape), str(p.dtype)) for name, p in base_parameters(self.module)]
        # the dtype of what _full_params sends: the fp32 master where DeepSpeed's bf16 keeps
        # one beside the working copy, so a broadcast carries what get_weights and export give
        masters = self._stage0_masters()
        return [(name, list(getattr(p, "ds_shape", None) or p.shape), str(masters[id(p)].dtype if id(p) in masters
                                                                           else p.dtype))
                for name, p in self.module.named_parameters()]

    @torch.no_grad()
    def broadcast_weights(self) -> int:
        """Send the full weights to every engine of the weight group (collective under
        ZeRO-3 with world_size > 1: every rank gathers, rank 0 sends). Returns tensors sent."""
        tensors = (t for _, t in self._full_params())
        try:
            if self.rank == 0:
                send(self._weight_group, self.weight_meta(), tensors, self.device)
        finally:
            # Finish the gathers even when a send fails (an engine left the group): under
            # ZeRO-3 the other ranks are in the same sequence of gathers and would wait in
            # the next one forever.
            for _ in tensors:
                pass
        return len(self.weight_meta())

    def save(self, path: str) -> str:
        """Model, optimiser, step and RNG states, so that ``load`` then ``update`` continues exactly.
        With LoRA the model part is the adapters only: the frozen base is the model folder,
        which the loading learner has already read."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / f"rng_rank{self.rank}.json").write_text(json.dumps({"step": self.step, "rng": _rng_state()}))
        lora = self.lora is not None
        if self.engine is not None:
            self.engine.save_checkpoint(str(path), tag=_CHECKPOINT_TAG, client_state={"step": self.step},
                                        save_latest=False, exclude_frozen_parameters=lora)
        else:
            model = ({n: p.detach() for n, p in self.module.named_parameters() if p.requires_grad} if lora
                     else self.module.state_dict())
            torch.save({"step": self.step, "model": model, "optimizer": self.optimizer.state_dict()},
                       path / "torch_learner.pt")
        if self.rank == 0:
            meta = {"backend": self.config["backend"], "zero_stage": self.config["zero_stage"],
                    "world_size": self.world_size, "step": self.step, "model_path": self.model_path,
                    "lora": self.lora}
            (path / "learner.json").write_text(json.dumps(meta, indent=2))
        return str(path)

    def load(self, path: str) -> int:
        """Restore a ``save`` of a learner with the same backend; returns the step. The learning
        rate is this learner's configured one, not the checkpoint's."""
        path = Path(path)
        meta_file, rng_file = path / "learner.json", path / f"rng_rank{self.rank}.json"
        for f in (meta_file, rng_file):
            if not f.is_file():
                raise FileNotFoundError(f"{path} is not a learner checkpoint of this version (no {f.name})")
        check_pickles(path)  # before DeepSpeed's unrestricted torch.load reads any file
        meta = json.loads(meta_file.read_text())
        if meta["backend"] != self.config["backend"]:
            raise ValueError(f"checkpoint {path} was saved by the {meta['backend']!r} backend; "
                             f"load it with learner backend={meta['backend']!r}")
        if meta.get("lora") != self.lora:  # a checkpoint from before LoRA existed is a full fine-tune
            raise ValueError(f"checkpoint {path} was saved with lora={meta.get('lora')}; this learner has "
                             f"lora={self.lora}. Restore with the same learners(lora=...) setting (the adapters' "
                             "shapes and scale follow it); to change it, start a new learner from a folder that "
                             "export_hf wrote (the merged weights)")
        if self.engine is not None:
            here = {"zero_stage": self.config["zero_stage"], "world_size": self.world_size}
            there = {k: meta[k] for k in here}
            if here != there:
                # DeepSpeed's optimiser shards are laid out per stage and rank count.
                raise ValueError(f"checkpoint {path} was saved with {there}; this learner has {here}. "
                                 "Restore with the same zero_stage and world_size (or use export_hf for weights only)")
            # with LoRA the saved module state is the adapters alone (the base stays as loaded)
            loaded, _ = self.engine.load_checkpoint(str(path), tag=_CHECKPOINT_TAG, load_optimizer_states=True,
                                                    load_lr_scheduler_states=False,
                                                    load_module_strict=self.lora is None)
            if loaded is None:
                raise FileNotFoundError(f"DeepSpeed found no checkpoint '{_CHECKPOINT_TAG}' under {path}")
        else:
            state = torch.load(path / "torch_learner.pt", map_location=self.device, weights_only=True)
            if self.lora is not None:  # the adapters only, every one of them; the base stays as loaded
                trainable = {n for n, p in self.module.named_parameters() if p.requires_grad}
                if set(state["model"]) != trainable:
                    raise ValueError(f"checkpoint {path} holds other adapter weights than this learner's "
                                     f"({len(state['model'])} saved, {len(trainable)} here)")
            self.module.load_state_dict(state["model"], strict=self.lora is None)
            self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:
            group["lr"] = self.config["lr"]
        state = json.loads(rng_file.read_text())
        self.step = int(state["step"])
        _set_rng_state(state["rng"])
        return self.step

    def export_hf(self, path: str) -> str:
        """A plain HF folder (weights, config, tokenizer) that transformers and vLLM load; with
        LoRA the merged weights, and the adapter itself in ``<path>/adapter`` (peft's format)."""
        from transformers import AutoTokenizer

        if self.rank != 0:  # only rank 0 writes; the others take part in its ZeRO-3 gathers
            self.join_gather()
            return str(path)
        weights = self.get_weights()
        Path(path).mkdir(parents=True, exist_ok=True)
        if self.lora is None:
            self.module.save_pretrained(path, state_dict=weights)
        else:
            # peft's save_pretrained writes the adapter alone: the model under it writes the
            # merged weights, config and generation config as a plain model; the adapter is
            # kept beside them for whoever wants it (no engine reads a subfolder).
            self.module.get_base_model().save_pretrained(path, state_dict=weights)
            self.module.save_pretrained(Path(path) / "adapter")
        AutoTokenizer.from_pretrained(self.model_path).save_pretrained(path)
        return str(path)


# ---- the learner actor: pulls groups from the replay queue -------------------------------
# Equal rewards normalise to float noise, not always exactly 0: their mean can round, and the
# 1e-6 std floor scales that to ~1e-10 for rewards in [0, 1]. A real reward difference of
# 1e-9 already gives |A| ~ 5e-4, so 1e-5 separates the two with room on both sides.
ZERO_ADVANTAGE = 1e-5


def has_advantage(group: list[LearnerSample]) -> bool:
    """True when some sample of the group has a non-zero advantage (rewards differed; with
    OPD's per-token advantages, some token's is non-zero: the teacher disagreed somewhere)."""
    return any(abs(s.advantage) > ZERO_ADVANTAGE if s.token_advantages is None
               else any(abs(a) > ZERO_ADVANTAGE for a in s.token_advantages) for s in group)


def pull(queue, max_groups: int, current_version: int, skip_zero_variance: bool) -> tuple[list, dict]:
    """The samples of up to ``max_groups`` groups from the queue, and the pull's counts.

    With ``skip_zero_variance`` a group whose advantages are all 0 is not sent through the
    model: it adds nothing to the gradient, only dilutes the other groups' share of the
    token-mean loss, and on a CPU its forward/backward is most of the step (most groups of
    a weak policy fail entirely)."""
    incarnation, groups = ray.get(queue.get.remote(max_groups, current_version))
    groups = [[LearnerSample.of(s) for s in g] for g in groups]  # a hand-put dict is read by field name
    kept = [g for g in groups if g and (has_advantage(g) or not skip_zero_variance)]
    return [s for g in kept for s in g], {"num_groups": len(groups), "num_groups_trained": len(kept),
                                          "queue_incarnation": incarnation}


def _skipped(counts: dict) -> dict:
    return {"skipped": True, **counts, "num_groups_trained": 0, "num_samples": 0}


class QueueLearner(Learner, Restartable):
    def pull_and_update(self, queue, max_groups: int, current_version: int, skip_zero_variance: bool = True) -> dict:
        """Pull up to ``max_groups`` groups (each a list of ``LearnerSample``, already cut out
        of the trajectories by the driver) and take one optimiser step on them (``pull``
        says which groups are skipped). One learner; a group of ranks uses ``pull_shards``."""
        samples, counts = pull(queue, max_groups, current_version, skip_zero_variance)
        if not samples:
            return _skipped(counts)
        metrics = self.update(samples)
        metrics.update(counts)
        return metrics

    def pull_shards(self, queue, max_groups: int, current_version: int, skip_zero_variance: bool,
                    num_shards: int) -> list:
        """Rank 0 of a group: pull once and split the samples by tokens. Returns the
        ``num_shards`` shards, then the counts (call with ``num_returns=num_shards + 1``, so
        each shard goes from here to its rank through the object store, not the driver)."""
        samples, counts = pull(queue, max_groups, current_version, skip_zero_variance)
        if samples:
            samples = check_samples(samples)  # here, once: a rank that failed alone would leave the others in a collective
        return [*shard_by_tokens(samples, num_shards), counts]

    def update_shard(self, shard: list, counts: dict) -> dict:
        """Every rank of a group: one step on this rank's shard of a ``pull_shards``. The
        counts say whether anything was pulled, the same on every rank, so all skip or all step."""
        if counts["num_groups_trained"] == 0:
            return _skipped(counts)
        metrics = self.update(shard)
        metrics.update(counts)
        return metrics

    def ping(self) -> bool:
        return True
