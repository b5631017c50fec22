#!/usr/bin/env bash
# scripts/golden/compare_synth_llamacpp.sh: checks that llama.cpp loads a `sluice synth` file of a
# full-size preset and agrees with Sluice on it: the prompt's logits (NMSE, max |Δ|, argmax) and
# 8 greedy tokens, on the cpu and cpu-exact backends. Not run by CI (needs a llama.cpp build).
#
#   LLAMA_SRC, LLAMA_BUILD as for make_goldens.sh (llama.cpp 0c1e570, the llama-cpp-python 0.3.36 sdist)
#   usage: compare_synth_llamacpp.sh PRESET LAYERS [TYPE]     e.g. kimi-linear-48b-a3b 4 q4_k_m
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${LLAMA_SRC:?set LLAMA_SRC to a llama.cpp source tree}"
: "${LLAMA_BUILD:?set LLAMA_BUILD to its build directory}"
preset=$1 layers=$2 type=${3:-q4_k_m}
lib=$(dirname "$(find "$LLAMA_BUILD" -name 'libllama.so' | head -1)")
work=$(mktemp -d)
g++ -O2 -std=c++17 scripts/golden/llama_logits.cpp -I"$LLAMA_SRC/include" -I"$LLAMA_SRC/ggml/include" \
  -L"$lib" -lllama -Wl,-rpath,"$lib" -o "$work/llama_logits"
build/release/sluice synth --preset "$preset" --layers "$layers" --type "$type" --fast -q -o "$work/model.gguf"
prompt=$(.venv/bin/python -c "import json; print(','.join(map(str, json.load(open('../shared/golden/qwen35moe/input.json'))['tokens'])))")
"$work/llama_logits" "$work/model.gguf" "$work" 8 "$prompt" 2>/dev/null >/dev/null
for be in cpu cpu-exact; do
  build/release/sluice eval -m "$work/model.gguf" --tokens "$prompt" --backend "$be" -t 2 --greedy 8 \
    --logits "$work/$be.bin" 2>/dev/null >"$work/$be.json"
  .venv/bin/python - "$work" "$be" "$preset" <<'PY'
import json, sys
import numpy as np
work, be, preset = sys.argv[1:]
want = np.fromfile(f"{work}/logits.f32.bin", dtype=np.float32)
got = np.fromfile(f"{work}/{be}.bin", dtype=np.float32)
n = len(json.load(open(f"{work}/greedy.json"))["prompt_tokens"])
want, got = want.reshape(n, -1), got.reshape(n, -1)
# synth pads the 512-token tokenizer with LM-head rows of zeros: compare the real rows.
want, got = want[:, :512], got[:, :512]
nmse = float(((want - got) ** 2).sum() / (want ** 2).sum())
top1 = int((want.argmax(1) == got.argmax(1)).sum())
g_want = json.load(open(f"{work}/greedy.json"))["generated"]
g_got = json.load(open(f"{work}/{be}.json"))["generated"]
print(f"{preset} {be}: logit rms {np.sqrt((want ** 2).mean()):.2f}, NMSE {nmse:.2e}, "
      f"max |d| {np.abs(want - got).max():.3f}, argmax {top1}/{n}, greedy {'equal' if g_want == g_got else 'DIFFERENT'} "
      f"({g_got} vs llama.cpp {g_want})")
sys.exit(0 if top1 == n and g_want == g_got and nmse < 1e-3 else 1)
PY
done
rm -rf "$work"
