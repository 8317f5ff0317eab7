#!/usr/bin/env bash
# The Navigation warm start of SmolLM2 in parts, resumable across machines: each part records
# its oracle demonstrations and trains a rank-8 LoRA adapter on the previous part's policy
# (SFT, a checkpoint every few steps). Its adapter is kept in ADAPTERS in bf16 (5 MB) and the
# part's policy is always the previous one with that kept adapter merged in, so a later call
# on a fresh machine rebuilds the finished parts in seconds, exactly, and trains only the
# rest. The last part's policy is evaluated (greedy, first 35 test tasks).
#   bash scripts/warm_start.sh navigation [OUT_DIR]     # default OUT_DIR: runs/warm_start-navigation
#   WARM_START_PARTS=2 bash scripts/warm_start.sh navigation   # stop after the first two parts
#   bash scripts/warm_start.sh --keep-progress navigation [OUT_DIR]  # after stopping it mid-part
# A part is sized to fit a session, but one cut off can be kept: --keep-progress copies its
# newest checkpoint (a few steps back at most; tens of MB) next to the kept adapters, and the
# next call, on any machine, resumes the part from there.
# The final policy is OUT_DIR/policy (a plain HF folder: --model DIR). The parts split the
# two-stage recipe (96 demonstrations of <= 4 waypoints, ~4.6K tokens, 2 per step; then 48 of
# <= 6 waypoints, ~6K tokens, 1 per step), passed over twice, into pieces of under an hour on
# 2 CPU cores each (about 10 minutes where the learner has native bf16); the optimiser starts
# afresh with each part's adapter.
set -euo pipefail
cd "$(dirname "$0")/.."
KEEP_PROGRESS=
if [ "${1:-}" = --keep-progress ]; then KEEP_PROGRESS=1; shift; fi
ENV_NAME="${1:-navigation}"
OUT="${2:-runs/warm_start-$ENV_NAME}"
ADAPTERS="${WARM_START_ADAPTERS:-results/navigation-cpu/warm_start}"
[ "$ENV_NAME" = navigation ] || { echo "warm_start.sh: only 'navigation' has a recipe" >&2; exit 2; }
bash scripts/setup.sh
source "${RTI_VENV:-.venv}/bin/activate"
source scripts/cpu_env.sh
mkdir -p "$OUT" "$ADAPTERS"
# The learner trains in bf16 only where the CPU computes it natively (AMX or AVX-512 BF16;
# elsewhere it is emulated, far slower than fp32). The policies are always merged in fp32, so
# a part's policy is the same numbers on every machine, whichever dtype trained its adapter.
DTYPE=float32
if [ -z "${RTI_NO_BF16:-}" ] && grep -qE 'amx_bf16|avx512_bf16' /proc/cpuinfo; then DTYPE=bfloat16; fi
COMMON=(--language en --page-size 3 --poi-extensions base --max-model-len 8192 --max-new-tokens 320
        --max-turns 14 --learner-backend torch --learner-dtype "$DTYPE" --lora-rank 8 --share-prefix --pack-sequences
        --sft-epochs 1 --sft-lr 2e-4 --sft-checkpoint-every 4 --checkpoint-keep 2
        --eval-tasks 35 --eval-samples 1 --eval-temperature 0 --iterations 0 --run-dir "$OUT")
# Two epochs over the same demonstrations: after one (the first six parts) the policy wrote the
# format but dropped stops, repeated searches and never planned a route (greedy 0/35,
# eval-epoch1.json), so the recipe passes over them a second time.
#     name       first  count  max waypoints  batch
PARTS=("stage1a     0 24 4 2" "stage1b    24 24 4 2" "stage1c    48 24 4 2" "stage1d    72 24 4 2"
       "stage2a     0 24 6 1" "stage2b    24 24 6 1"
       "e2-stage1a  0 24 4 2" "e2-stage1b 24 24 4 2" "e2-stage1c 48 24 4 2" "e2-stage1d 72 24 4 2"
       "e2-stage2a  0 24 6 1" "e2-stage2b 24 24 6 1")

merge() {  # merge BASE ADAPTER OUT: the policy folder OUT (fp32), marked complete
    python -c "import sys; from rti_actors.lora import merge_adapter; merge_adapter(*sys.argv[1:4])" "$1" "$2" "$3"
    touch "$3/.complete"
}
# the last line only: a first import of DeepSpeed writes a warning to stdout
PREV=$(python -c "from policies.models import load_model; print(load_model('smollm2-135m-instruct'))" | tail -n 1)
DONE=0
for spec in "${PARTS[@]}"; do
    read -r name first count waypoints batch <<< "$spec"
    policy="$OUT/$name-policy" kept="$ADAPTERS/$name"
    if [ -f "$policy/.complete" ]; then
        echo "$name: done ($policy)"
    elif [ -f "$kept/adapter_model.safetensors" ]; then
        rm -rf "$policy"
        merge "$PREV" "$kept" "$policy"
        echo "$name: rebuilt from its kept adapter ($kept)"
    elif [ -n "$KEEP_PROGRESS" ]; then  # the first unfinished part
        python scripts/warm_start_part.py --progress keep "$OUT/$name" "$OUT/$name.seconds" "$kept"
        exit 0
    else
        [ "${WARM_START_PARTS:-${#PARTS[@]}}" -gt "$DONE" ] || { echo "warm start: stopped after $DONE parts"; exit 0; }
        if ! compgen -G "$OUT/$name/checkpoints/*" > /dev/null; then
            python scripts/warm_start_part.py --progress restore "$OUT/$name" "$OUT/$name.seconds" "$kept"
        fi
        resume=()  # from the newest checkpoint; a run killed before its first one starts again
        if compgen -G "$OUT/$name/checkpoints/*" > /dev/null; then resume=(--resume "$OUT/$name"); else rm -rf "$OUT/$name"; fi
        rm -rf "$policy"  # an export that was cut short
        start=$(date +%s)
        echo "$start" > "$OUT/$name.started"  # --keep-progress counts a call it cut short from here
        python examples/navigation.py "${COMMON[@]}" --model "$PREV" --run-name "$name" "${resume[@]}" --no-base-eval \
            --no-sft-eval --warmup-sft "$count" --sft-first "$first" --sft-max-waypoints "$waypoints" \
            --sft-batch-size "$batch" --export-policy "$policy"
        echo $(( $(date +%s) - start )) >> "$OUT/$name.seconds"  # every call's share, resumes included
        rm -f "$OUT/$name.started"
        python scripts/warm_start_part.py "$OUT/$name" "$OUT/$name.seconds" "$spec" "$policy/adapter" "$kept"
        rm -rf "$policy"  # the part's policy is the kept adapter's, as on a fresh machine
        merge "$PREV" "$kept" "$policy"
    fi
    PREV="$policy" DONE=$((DONE + 1))
done
rm -rf "$OUT/policy" && cp -r "$PREV" "$OUT/policy"
if [ ! -f "$ADAPTERS/eval.json" ]; then  # the last part's policy, greedy on the fixed slice
    rm -rf "$OUT/eval"
    python examples/navigation.py "${COMMON[@]}" --model "$OUT/policy" --run-name eval --record-eval
    python -c "import json, sys; s = json.load(open(sys.argv[1]))['base']; s.pop('table'); print(json.dumps(s, indent=2))" \
        "$OUT/eval/evaluations.json" > "$ADAPTERS/eval.json"
fi
echo "warm start: done, policy in $OUT/policy; greedy on the first 35 test tasks: $(tr -d ' \n' < "$ADAPTERS/eval.json")"
