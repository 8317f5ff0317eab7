#!/usr/bin/env bash
# The main job: install everything, start a local Ray head, submit the example with
# `ray job submit`, stop Ray. Extra arguments go to the example script.
#   bash scripts/main_job.sh                 # CPU quick run of examples/hard20.py (RTI, SmolLM2)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source "${RTI_VENV:-.venv}/bin/activate"
source scripts/cpu_env.sh
EXAMPLE="${RTI_MAIN_EXAMPLE:-examples/hard20.py}"
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(--quick)
# Build the cached model folder once, outside the job, so the job's log shows training.
python -c "from policies.models import load_model; load_model('smollm2-135m-instruct')" 2>/dev/null
# A head of our own, on loopback only and under its own temp dir, so that stopping it
# touches no other Ray cluster on this machine (`ray stop` would stop them all): see
# scripts/ray_head.py. Short path: AF_UNIX <= 107 bytes.
RAY_TMP=$(mktemp -d /tmp/rtimain.XXXXXX)
trap 'python scripts/ray_head.py stop "$RAY_TMP"' EXIT
# Ray >= 2.59 enables token authentication on local clusters: use one token for the head
# and for the job client (created in ~/.ray/auth_token if missing).
export RAY_AUTH_MODE=token
ray get-auth-token --generate >/dev/null
HEAD=(--num-cpus "$(nproc)")  # free ports unless these are set
[ -z "${RTI_RAY_PORT:-}" ] || HEAD+=(--port "$RTI_RAY_PORT")
[ -z "${RTI_RAY_DASHBOARD_PORT:-}" ] || HEAD+=(--dashboard-port "$RTI_RAY_DASHBOARD_PORT")
RAY_ADDRESS=$(python scripts/ray_head.py start "$RAY_TMP" "${HEAD[@]}")
export RAY_ADDRESS
# the head's job agent registers a few seconds after `ray start`
for _ in $(seq 30); do ray job list >/dev/null 2>&1 && break; sleep 2; done
start=$(date +%s)
ray job submit --working-dir . \
    --runtime-env-json="{\"env_vars\": {\"RTI_CACHE_DIR\": \"$PWD/.cache\", \"VLLM_CPU_KVCACHE_SPACE\": \"$VLLM_CPU_KVCACHE_SPACE\", \"VLLM_CPU_OMP_THREADS_BIND\": \"$VLLM_CPU_OMP_THREADS_BIND\", \"VLLM_CPU_NUM_OF_RESERVED_CPU\": \"0\", \"TORCH_EXTENSIONS_DIR\": \"$TORCH_EXTENSIONS_DIR\", \"TOKENIZERS_PARALLELISM\": \"false\"}}" \
    -- python "$EXAMPLE" --run-dir "$PWD/runs" "${ARGS[@]}"
echo "[main job] finished in $(( $(date +%s) - start )) s"
