#!/usr/bin/env bash
# bench/run.sh: synthesizes the benchmark models and runs `sluice bench` over them (the
# llama-bench-style table, achieved GB/s vs the bandwidth measured in the same run, and the
# per-stage profile). Never run in CI: it writes ~6 GB of models and takes minutes.
#   bench/run.sh [BUILD_DIR] [MODEL_DIR]     (defaults: build-perf, /tmp/sluice-bench)
# Env: THREADS (default 1,2), REPS (default 5), KEEP=1 keeps the models afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-perf}
DIR=${2:-/tmp/sluice-bench}
THREADS=${THREADS:-1,2}
REPS=${REPS:-5}
SLUICE="$BUILD/sluice"
mkdir -p "$DIR"

need_gb=8
avail_gb=$(df -BG --output=avail "$DIR" | tail -1 | tr -dc 0-9)
if (( avail_gb < need_gb )); then
  echo "bench/run.sh: $DIR has ${avail_gb}G free, need ${need_gb}G" >&2
  exit 1
fi

synth() {  # name, then synth arguments
  local out="$DIR/$1.gguf"; shift
  [[ -f "$out" ]] || "$SLUICE" synth "$@" -q -o "$out"
  echo "$out"
}

M1=$(synth qwen3moe-30b-a3b-12l-q4_k_m --arch qwen3moe --preset qwen3-30b-a3b --layers 12 --type q4_k_m)
M2=$(synth qwen3moe-30b-a3b-12l-q8_0 --arch qwen3moe --preset qwen3-30b-a3b --layers 12 --type q8_0)
M3=$(synth olmoe-1b-7b-q4_k_m --arch olmoe --preset olmoe-1b-7b --type q4_k_m)

"$SLUICE" bench --membw -t "$THREADS" -r "$REPS"
"$SLUICE" bench -m "$M1" -m "$M2" -m "$M3" -p 512 -n 128 -r "$REPS" -t "$THREADS" --profile

if [[ "${KEEP:-0}" != 1 ]]; then rm -f "$M1" "$M2" "$M3"; fi
