"""Weight updates through vLLM's native weight-transfer protocol (``policies.engines.weight_transfer``).

An engine that installs published weights must then behave exactly like an engine loaded
from a folder holding those weights; every transport is checked against that reference:
the in-process handoff, the shared file (what tensor-parallel workers in other processes
read) and the ``collective_rpc`` fallback. The RPC payloads are measured too: with the
native protocol, no call into the workers carries the weights.

In-process vLLM engines share vLLM's global parallel state, and freeing one tears it down:
so at most one engine lives at a time (the reference is built and freed first, the native
engine lives for its class only, the others for one test).
"""

import gc
import os
import pickle

import pytest
import torch

from policies.engines import SamplingParams, StaleWeightsError, vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM not installed")

PROMPTS = [[1, 520, 9531, 198, 57], [1, 2683, 359, 253, 5356, 5646, 2, 400, 401], [1, 17, 18, 19]]
COMPLETIONS = [[400, 401, 402, 2], [9, 10], [198, 57, 58]]
GREEDY = SamplingParams(max_tokens=12, temperature=0)
EXACT = 1e-5  # one worker: the same kernels on the same weights as the reference
TOL = 2e-3  # two workers: the reductions run in another order (as the conformance suite)
ON_GPU = torch.cuda.is_available()


def _engine(path, **kw):
    from policies.engines.vllm_engine import VLLMEngine
    gc.collect()  # the previous engine must be gone before the next one sets up vLLM's state
    return VLLMEngine(path, dtype="float32", max_model_len=512, **kw)


def _outputs(engine) -> dict:
    return {"tokens": [g.token_ids for g in engine.generate(PROMPTS, GREEDY)],
            "scores": engine.score(PROMPTS, COMPLETIONS, 0.8)}


def _assert_same(got: dict, want: dict, tol: float = EXACT):
    assert got["tokens"] == want["tokens"]
    for a, b in zip(got["scores"], want["scores"]):
        assert max(abs(x - y) for x, y in zip(a, b)) < tol


class RPCSizes:
    """Records the pickled size of every call the engine makes into its workers."""

    def __init__(self, engine):
        self.calls: list[tuple[str, int]] = []
        inner = engine.llm.llm_engine.collective_rpc

        def recording(method, timeout=None, args=(), kwargs=None):
            name = method if isinstance(method, str) else method.__name__
            self.calls.append((name, len(pickle.dumps((args, kwargs)))))
            return inner(method, timeout, args, kwargs)

        engine.llm.llm_engine.collective_rpc = recording


@pytest.fixture(scope="module")
def weights(tiny_model_path, tmp_path_factory):
    """The tiny model's weights, new weights (a perturbation) and a folder holding the new ones."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.manual_seed(123)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    new_path = tmp_path_factory.mktemp("perturbed")
    model.save_pretrained(new_path)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(new_path)
    new = {n: p.detach().clone() for n, p in model.named_parameters()}
    return {"base": base, "new": new, "new_path": str(new_path),
            "bytes": sum(t.numel() * t.element_size() for t in new.values())}


@pytest.fixture(scope="module")
def reference(weights):
    """Outputs of an engine loaded from the folder with the new weights."""
    return _outputs(_engine(weights["new_path"], weight_transfer="rpc"))


@pytest.fixture(scope="class")
def native(tiny_model_path, reference):
    engine = _engine(tiny_model_path, weight_transfer="native")
    engine.before = _outputs(engine)  # the folder's (base) weights
    yield engine
    del engine
    gc.collect()


class TestNative:
    def test_choice_of_transfer(self, native):
        from policies.engines.vllm_engine import native_supported, resolve_weight_transfer

        assert native_supported()  # vLLM 0.32's worker (the CPU one inherits it) and LLM have the calls
        assert native.weight_transfer == "native"
        assert native._sender.in_process  # one worker, engine core in this process
        # "auto": native for workers in other processes (the TP test checks an engine's choice)
        assert resolve_weight_transfer("auto", supported=True, in_process=False) == "native"
        assert resolve_weight_transfer("auto", supported=True, in_process=True) == "rpc"
        assert resolve_weight_transfer("auto", supported=False, in_process=False) == "rpc"
        with pytest.raises(ValueError, match="vLLM >= 0.32"):
            resolve_weight_transfer("native", supported=False, in_process=False)
        with pytest.raises(ValueError, match="choose one of"):
            resolve_weight_transfer("nccl", supported=True, in_process=False)

    def test_in_process_handoff_matches_engine_loaded_from_folder(self, native, weights, reference):
        rpc = RPCSizes(native)
        version = native.version + 1
        assert native.update_weights(weights["new"], version) == version
        assert native.version == version and native.last_publish["version"] == version
        assert native.last_publish["transfer"] == "native" and native.last_publish["seconds"] > 0
        after = _outputs(native)
        assert after["tokens"] != native.before["tokens"]
        _assert_same(after, reference)
        assert all(g.version == version for g in native.generate(PROMPTS[:1], GREEDY))
        # start / update / finish went to the workers, none of them carrying the weights
        assert [n for n, _ in rpc.calls if "weight" in n] == ["start_weight_update", "update_weights",
                                                              "finish_weight_update"]
        assert max(size for _, size in rpc.calls) < weights["bytes"] / 100
        with pytest.raises(StaleWeightsError):
            native.update_weights(weights["new"], version)

    def test_shared_file_matches_engine_loaded_from_folder(self, native, weights, reference):
        # what workers in other processes read: force it for this in-process worker
        native._sender.in_process = False
        try:
            native.update_weights(weights["base"], native.version + 1)
            _assert_same(_outputs(native), native.before)  # back to the folder's weights
            native.update_weights(weights["new"], native.version + 1)
            assert native._sender.file.nbytes >= weights["bytes"]
            _assert_same(_outputs(native), reference)
        finally:
            native._sender.in_process = True

    @pytest.mark.skipif(not ON_GPU, reason="GPU only: the broadcast publish hands over CUDA tensors")
    def test_cuda_tensors_are_handed_over_in_process(self, native, weights, reference):
        native.update_weights({n: t.cuda() for n, t in weights["new"].items()}, native.version + 1)
        _assert_same(_outputs(native), reference)


def test_rpc_fallback_matches_engine_loaded_from_folder(tiny_model_path, weights, reference):
    engine = _engine(tiny_model_path)  # "auto" with one in-process worker: rpc passes references
    try:
        assert engine.weight_transfer == "rpc"
        before = _outputs(engine)
        rpc = RPCSizes(engine)
        engine.update_weights(weights["new"], 1)
        assert engine.version == 1 and engine.last_publish["transfer"] == "rpc"
        after = _outputs(engine)
        assert after["tokens"] != before["tokens"]
        _assert_same(after, reference)
        # the contrast to the native path: this call carries the whole state dict (pickled
        # once per worker when the workers are in other processes)
        assert max(size for _, size in rpc.calls) > weights["bytes"]
    finally:
        del engine


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or (ON_GPU and torch.cuda.device_count() < 2),
                    reason="tensor parallelism over 2 workers needs 2 cores (CPU) or 2 GPUs")
def test_tensor_parallel_workers_each_read_the_shared_file(tiny_model_path, weights, reference, monkeypatch):
    if not ON_GPU:
        from vllm import envs

        monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # one core per worker
        envs.disable_envs_cache()  # an earlier engine froze vLLM's view of the environment
    engine = _engine(tiny_model_path, tensor_parallel_size=2)  # "auto"
    try:
        assert engine.weight_transfer == "native" and not engine._sender.in_process
        before = _outputs(engine)
        rpc = RPCSizes(engine)
        engine.update_weights(weights["new"], 1)
        assert engine.version == 1
        after = _outputs(engine)
        assert after["tokens"] != before["tokens"]
        _assert_same(after, reference, TOL)
        assert engine._sender.file.nbytes >= weights["bytes"]  # one copy, for both workers
        assert max(size for _, size in rpc.calls) < weights["bytes"] / 100
    finally:
        engine.llm.llm_engine.engine_core.shutdown()  # stop the worker processes now, not at exit
