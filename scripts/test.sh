#!/usr/bin/env bash
# Install everything, lint with ruff, then run the whole test suite (unit, integration, slow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source "${RTI_VENV:-.venv}/bin/activate"
source scripts/cpu_env.sh
ruff check .
exec python -m pytest "${@:-tests}"
