#!/usr/bin/env bash
# Install everything, lint with ruff, check the import layers (pyproject.toml's
# [tool.importlinter]), then run the whole test suite (unit, integration, slow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source "${RTI_VENV:-.venv}/bin/activate"
source scripts/cpu_env.sh
ruff check .
lint-imports --no-cache
exec python -m pytest "${@:-tests}"
