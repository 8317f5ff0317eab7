# Environment for running on a small CPU machine (sourced by the scripts; harmless on GPU).
# vLLM's CPU backend: bind OpenMP threads to every core, reserve none, small KV cache.
ncpu=$(nproc)
export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-0-$((ncpu - 1))}"
export VLLM_CPU_NUM_OF_RESERVED_CPU="${VLLM_CPU_NUM_OF_RESERVED_CPU:-0}"
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
# DeepSpeed JIT-builds a shared-memory comm op on first init: cache it in the project.
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$PWD/.cache/torch_extensions}"
export TOKENIZERS_PARALLELISM=false
