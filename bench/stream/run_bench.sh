#!/usr/bin/env bash
# bench/stream/run_bench.sh: decode speed of a model larger than memory, --experts stream vs
# --experts mmap, inside a memory cgroup (v1), with the page cache dropped before each run,
# against the disk's plain sequential O_DIRECT read bandwidth on the same file.
#
# Needs root (cgroup, drop_caches, read_ahead_kb). Writes the model with `sluice synth` if it
# is missing (qwen3-30b-a3b shape, Q4_K_M: ~17 GB at 48 layers). read_ahead_kb is set to 128
# for the mmap run (the common distribution default) and restored on exit.
#
# Random-weight routing is not real routing: with synth's depth-scaled residual writers the
# routing is token-driven and spread over the experts (the busiest expert of a layer gets ~2x
# its uniform share), consecutive tokens share experts near chance, and the layer-ahead
# predictor's recall (~99%) is far better than a trained model's, because the residual stream
# barely moves between layers. The numbers measure the I/O path and the cache, not the predictor.
#
# `sluice run` prints the whole decode's rate and the steady state's (the second half of the
# decode: the first tokens fill the cache). RUNS picks the runs (default: stream nopf mmap;
# also nogate: prefetch reading every guess, as before the prefetch gate; plain: the experts in
# the file mapping without any advice, demand-paged as llama.cpp's are; llamacpp: llama.cpp
# through llama-cpp-python in the same cgroup, needs LLAMACPP_PY; llamabench: llama.cpp's llama-bench
# binary, LLAMA_BENCH, mmap and repack off).
#
#   LAYERS=48 LIMIT=8G CACHE=auto NTOK=64 bench/stream/run_bench.sh
#   RUNS="mmap llamacpp" LLAMACPP_PY=/tmp/llvenv/bin/python bench/stream/run_bench.sh
set -euo pipefail

SLUICE=${SLUICE:-build-stream/sluice}
LAYERS=${LAYERS:-48}
MODEL=${MODEL:-/work/bench-stream/qwen3-30b-a3b-L${LAYERS}-q4_k_m.gguf}
LIMIT=${LIMIT:-8G}        # memory cgroup limit
CACHE=${CACHE:-auto}      # --expert-cache (auto: 90% of the cgroup limit less the dense weights and 512 MiB)
NTOK=${NTOK:-8}           # tokens generated per run
THREADS=${THREADS:-2}
# Sampling at temperature 1 (seed 1): greedy decoding of a random-weight model soon repeats one
# token, and a repeated token routes to the same experts every step, which any cache serves
# from memory; sampled tokens keep the routing moving, as real text does.
TEMP=${TEMP:-1}
PROMPT=${PROMPT:-"Once upon a time"}
RUNS=${RUNS:-"stream nopf mmap"}
LLAMACPP_PY=${LLAMACPP_PY:-/tmp/llvenv/bin/python}
LLAMA_BENCH=${LLAMA_BENCH:-llama-bench}  # a llama.cpp build's llama-bench, for RUNS=llamabench
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
in_cgroup() {
  drop
  echo 0 > "$CG/memory.max_usage_in_bytes"
  echo 0 > "$CG/memory.failcnt"
  /usr/bin/time -f "wall %e s, user %U s, sys %S s, max RSS %M kB" \
    sh -c 'echo $$ > '"$CG"'/cgroup.procs; exec "$@"' sh "$@" > /dev/null
  cg_report
}
run() {
  echo "== $*"
  in_cgroup "$SLUICE" run -m "$MODEL" -p "$PROMPT" -n "$NTOK" --temp "$TEMP" -s 1 --ignore-eos -t "$THREADS" "$@"
}

echo "load: $(cut -d" " -f1-3 /proc/loadavg) on $(nproc) cores (other work shares them: tok/s is noisy)"
echo "== sequential O_DIRECT read of the same file (dd bs=4M, 4 GiB)"
drop
dd if="$MODEL" of=/dev/null bs=4M iflag=direct count=1024 2>&1 | tail -1

echo "read_ahead_kb: $ra0 (stream runs), 128 (mmap and llama.cpp runs)"
for r in $RUNS; do
  case $r in
    stream) run --experts stream --expert-cache "$CACHE" ;;
    nopf) run --experts stream --expert-cache "$CACHE" --no-prefetch ;;
    nogate) run --experts stream --expert-cache "$CACHE" --no-prefetch-gate ;;
    mmap) echo 128 > "$RA"; run --experts mmap; restore ;;
    # plain demand paging, as llama.cpp does: the experts stay in the file mapping, no advice;
    # --no-repack, since interleaving every matrix would copy the whole model into memory
    plain) echo 128 > "$RA"; run --experts resident --mmap --no-repack; restore ;;
    llamacpp)
      echo "== llama.cpp (llama-cpp-python, use_mmap), random token ids"
      echo 128 > "$RA"
      in_cgroup "$LLAMACPP_PY" "$(dirname "$0")/llamacpp_decode.py" -m "$MODEL" -t "$THREADS" -n "$NTOK"
      restore ;;
    # llama.cpp's own llama-bench binary (LLAMA_BENCH): mmap, repack off (its repack copies the
    # weights into anonymous memory, which a memory limit cannot page back to the file)
    llamabench)
      echo "== llama-bench ($LLAMA_BENCH): mmap, --repack 0, tg$NTOK"
      echo 128 > "$RA"
      in_cgroup sh -c 'exec "$0" "$@" 1>&2' "$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -p 0 -n "$NTOK" -r 1 \
        -lm mmap --repack 0
      restore ;;
    *) echo "unknown run '$r' (stream nopf nogate mmap plain llamacpp llamabench)"; exit 1 ;;
  esac
done
