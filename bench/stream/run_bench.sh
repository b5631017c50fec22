#!/usr/bin/env bash
# bench/stream/run_bench.sh: decode speed of a model larger than memory, --experts stream vs
# --experts mmap, inside a memory cgroup (v1), with the page cache dropped before each run,
# against the disk's plain sequential O_DIRECT read bandwidth on the same file.
#
# Needs root (cgroup, drop_caches, read_ahead_kb). Writes the model with `sluice synth` if it
# is missing (qwen3-30b-a3b shape, Q4_K_M: ~17 GB at 48 layers). read_ahead_kb is set to 128
# for the mmap run (the common distribution default) and restored on exit.
#
# Random-weight routing is not real routing: experts are picked nearly uniformly and
# independently per token, so hit rate ~ budget / expert bytes and the predictor's recall says
# little about a trained model. The numbers measure the I/O path, not the predictor.
#
#   LAYERS=48 LIMIT=8G CACHE=5G NTOK=8 bench/stream/run_bench.sh
set -euo pipefail

SLUICE=${SLUICE:-build-stream/sluice}
LAYERS=${LAYERS:-48}
MODEL=${MODEL:-/work/bench-stream/qwen3-30b-a3b-L${LAYERS}-q4_k_m.gguf}
LIMIT=${LIMIT:-8G}        # memory cgroup limit
CACHE=${CACHE:-5G}        # --expert-cache
NTOK=${NTOK:-8}           # tokens generated per run
THREADS=${THREADS:-2}
# Sampling at temperature 1 (seed 1): greedy decoding of a random-weight model soon repeats one
# token, and a repeated token routes to the same experts every step, which any cache serves
# from memory; sampled tokens keep the routing moving, as real text does.
TEMP=${TEMP:-1}
PROMPT=${PROMPT:-"Once upon a time"}
CG=/sys/fs/cgroup/memory/sluice

mkdir -p "$(dirname "$MODEL")"
if [ ! -f "$MODEL" ]; then
  # --fast: pooled blocks (same bytes per weight, written at disk speed; see `sluice synth --help`).
  "$SLUICE" synth --fast --preset qwen3-30b-a3b --layers "$LAYERS" --type q4_k_m -q -o "$MODEL"
fi
ls -l "$MODEL"

dev=$(lsblk -no pkname "$(df --output=source "$MODEL" | tail -1)" 2>/dev/null || true)
[ -n "$dev" ] || dev=$(basename "$(df --output=source "$MODEL" | tail -1)")
RA=/sys/block/$dev/queue/read_ahead_kb
ra0=$(cat "$RA")
restore() { echo "$ra0" > "$RA"; }
trap restore EXIT

mkdir -p "$CG"
echo "$LIMIT" > "$CG/memory.limit_in_bytes"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
cg_report() {
  # failcnt: times the cgroup hit its limit and had to reclaim (page cache, under mmap).
  echo "cgroup: max usage $(( $(cat $CG/memory.max_usage_in_bytes) / 1048576 )) MiB of $LIMIT, failcnt $(cat $CG/memory.failcnt)"
}
run() {
  echo "== $*"
  drop
  echo 0 > "$CG/memory.max_usage_in_bytes"
  echo 0 > "$CG/memory.failcnt"
  /usr/bin/time -f "wall %e s, max RSS %M kB" \
    sh -c 'echo $$ > '"$CG"'/cgroup.procs; exec "$@"' sh \
    "$SLUICE" run -m "$MODEL" -p "$PROMPT" -n "$NTOK" --temp "$TEMP" -s 1 --ignore-eos -t "$THREADS" "$@" > /dev/null
  cg_report
}

echo "load: $(cut -d" " -f1-3 /proc/loadavg) on $(nproc) cores (other work shares them: tok/s is noisy)"
echo "== sequential O_DIRECT read of the same file (dd bs=4M, 4 GiB)"
drop
dd if="$MODEL" of=/dev/null bs=4M iflag=direct count=1024 2>&1 | tail -1

echo "read_ahead_kb: $ra0 (stream runs), 128 (mmap run)"
run --experts stream --expert-cache "$CACHE"
run --experts stream --expert-cache "$CACHE" --no-prefetch
echo 128 > "$RA"
run --experts mmap
restore
