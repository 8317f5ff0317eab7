#!/usr/bin/env bash
# The two-stage Navigation warm start of SmolLM2, resumable: record oracle demonstrations,
# SFT with a checkpoint every few steps, evaluate, export the policy; stage 2 starts from
# stage 1's export. Run the same command again after an interruption: a finished stage is
# skipped, an unfinished one resumes from its newest checkpoint.
#   bash scripts/warm_start.sh navigation [OUT_DIR]     # default OUT_DIR: runs/warm_start-navigation
#   WARM_START_STAGES=1 bash scripts/warm_start.sh navigation   # stop after stage 1
# The policies are OUT_DIR/stage1-policy and OUT_DIR/stage2-policy (plain HF folders: --model DIR).
# Sized for a 2-core CPU (96 + 48 demonstrations of ~4.6K and ~6K tokens); a machine with
# more compute can raise both counts (160 + 100 took greedy p@1 on 35 test tasks 0 -> 11.4).
set -euo pipefail
cd "$(dirname "$0")/.."
ENV_NAME="${1:-navigation}"
OUT="${2:-runs/warm_start-$ENV_NAME}"
[ "$ENV_NAME" = navigation ] || { echo "warm_start.sh: only 'navigation' has a recipe" >&2; exit 2; }
bash scripts/setup.sh
source "${RTI_VENV:-.venv}/bin/activate"
source scripts/cpu_env.sh
# bf16 only where the CPU computes it natively (AMX or AVX-512 BF16); elsewhere it is emulated,
# far slower than fp32
DTYPE=float32
if [ -z "${RTI_NO_BF16:-}" ] && grep -qE 'amx_bf16|avx512_bf16' /proc/cpuinfo; then DTYPE=bfloat16; fi
COMMON=(--language en --page-size 3 --poi-extensions base --max-model-len 8192 --max-new-tokens 320
        --max-turns 14 --learner-backend torch --learner-dtype "$DTYPE" --share-prefix --pack-sequences
        --sft-epochs 1 --sft-lr 5e-5 --sft-checkpoint-every 10 --checkpoint-keep 2
        --eval-tasks 35 --eval-samples 1 --eval-temperature 0 --iterations 0 --run-dir "$OUT")

stage() {  # stage NAME ARGS...: skipped when its export is complete, resumed when its run exists
    local name=$1; shift
    local policy="$OUT/$name-policy"
    if [ -f "$policy/.complete" ]; then echo "$name: done ($policy)"; return; fi
    local resume=()
    [ -d "$OUT/$name" ] && resume=(--resume "$OUT/$name")
    rm -rf "$policy"  # an export that was cut short
    python examples/navigation.py "${COMMON[@]}" --run-name "$name" "${resume[@]}" "$@" --export-policy "$policy"
    touch "$policy/.complete"
}
START=$(date +%s)
stage stage1 --no-base-eval --warmup-sft "${STAGE1_DEMOS:-96}" --sft-max-waypoints 4 --sft-batch-size 2
if [ "${WARM_START_STAGES:-2}" -ge 2 ]; then
    stage stage2 --model "$OUT/stage1-policy" --no-base-eval --warmup-sft "${STAGE2_DEMOS:-48}" --sft-max-waypoints 6 \
        --sft-batch-size 1
fi
echo "warm start: done in $OUT ($(( ($(date +%s) - START) / 60 )) min this call)"
