"""The engine dtype a config leaves open follows the hardware."""

from policies.engines import cpu_has_native_bf16, default_dtype


def test_vllm_takes_bf16_on_gpus_and_on_cpus_with_native_bf16_only(monkeypatch):
    import policies.engines as engines

    assert default_dtype("vllm", on_gpu=True) == "bfloat16"
    assert default_dtype("hf", on_gpu=False) == "float32"
    monkeypatch.setattr(engines, "cpu_has_native_bf16", lambda: False)
    assert default_dtype("vllm", on_gpu=False) == "float32"
    monkeypatch.setattr(engines, "cpu_has_native_bf16", lambda: True)
    assert default_dtype("vllm", on_gpu=False) == "bfloat16"


def test_the_cpu_flags_are_read_from_proc_cpuinfo():
    flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "").split()
    assert cpu_has_native_bf16() == ("avx512_bf16" in flags or "amx_bf16" in flags)
