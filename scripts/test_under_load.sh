#!/usr/bin/env bash
# The whole test suite beside a busy machine: LOAD busy-looping processes (default: one per
# core) at the tests' own priority, so every test's processes get about half the CPU they get
# alone. A test that passes alone and fails here depends on timing. Arguments go to pytest.
# Ray starts its workers at nice 15, where a busy loop at nice 0 leaves an actor about 3 % of
# a core instead of half; the workers run at nice 0 here, as the loops and the tests do.
# vLLM's and torch's thread teams wait at every barrier for their slowest thread, so a busy
# neighbour slows a test several times over, not twice; the per-test hang limit (pyproject's
# pytest timeout) is raised to HANG_S (default 2 hours) here, so it still catches hangs only.
#   bash scripts/test_under_load.sh                 # everything, 2 busy processes on 2 cores
#   LOAD=4 bash scripts/test_under_load.sh tests/integration/test_luffy.py
set -euo pipefail
cd "$(dirname "$0")/.."
load=${LOAD:-$(nproc)}
pids=()
stop_load() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap stop_load EXIT
for _ in $(seq "$load"); do
    python3 -c "while True: pass" &
    pids+=($!)
done
export RAY_worker_niceness=0
export PYTEST_ADDOPTS="--timeout=${HANG_S:-7200} ${PYTEST_ADDOPTS:-}"  # a --timeout among the arguments wins
echo "test_under_load: $load busy processes (${pids[*]}) beside the suite" >&2
bash scripts/test.sh "$@"
