#!/usr/bin/env bash
# scripts/golden/make_goldens.sh: remakes the goldens under tests/data/golden (qwen3next,
# qwen35, deepseek2-yarn, qwen3-yarn, qwen3moe-iq4_xs) and the GGUF LoRA golden under tests/data/lora-gguf with llama.cpp. Not run by CI: llama.cpp takes ~15 minutes to build on 2 cores.
#
#   LLAMA_SRC: a llama.cpp source tree (the one vendored in llama-cpp-python 0.3.36 from PyPI,
#              commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f: `pip download --no-deps
#              --no-binary :all: llama-cpp-python==0.3.36`, then vendor/llama.cpp)
#   LLAMA_BUILD: its CMake build (Release, GGML_NATIVE=ON, target llama)
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${LLAMA_SRC:?set LLAMA_SRC to a llama.cpp source tree}"
: "${LLAMA_BUILD:?set LLAMA_BUILD to its build directory}"
lib=$(dirname "$(find "$LLAMA_BUILD" -name 'libllama.so' | head -1)")
tool=$(mktemp -d)/llama_logits
g++ -O2 -std=c++17 scripts/golden/llama_logits.cpp -I"$LLAMA_SRC/include" -I"$LLAMA_SRC/ggml/include" \
  -L"$lib" -lllama -Wl,-rpath,"$lib" -o "$tool"
# The prompt of the shared goldens: BOS + the first 23 ids of their text (stories260K vocab).
prompt=$(.venv/bin/python -c "import json; print(','.join(map(str, json.load(open('../shared/golden/qwen35moe/input.json'))['tokens'])))")
work=$(mktemp -d)
min_margin() { .venv/bin/python -c "import json,sys; print(min(json.load(open(sys.argv[1]))['margins']))" "$1"; }
# K (derive_hybrid_models.py) is the seed: the first whose 32 greedy steps all have margin >= 0.05.
for k in 0 1 2 3 4 5 6 7; do
  .venv/bin/python scripts/golden/derive_hybrid_models.py ../shared/golden/qwen35moe/model.gguf "$work" "$k"
  for arch in qwen3next qwen35; do
    out=tests/data/golden/$arch
    [ "$arch" = qwen3next ] && [ "$k" != 0 ] && continue  # its weights do not depend on K
    mkdir -p "$out"
    cp "$work/$arch.gguf" "$out/model.gguf"
    "$tool" "$out/model.gguf" "$out" 32 "$prompt" 2>/dev/null
    echo "$arch (K=$k): min greedy margin $(min_margin "$out/greedy.json")"
  done
  .venv/bin/python -c "import json,sys; sys.exit(min(json.load(open('tests/data/golden/qwen35/greedy.json'))['margins']) < 0.05)" && break
done

# The YaRN goldens (tests/data/golden/{deepseek2,qwen3}-yarn): a shared GGUF with the
# rope.scaling keys of their derive.json added; the test builds the same file itself.
for n in deepseek2-yarn qwen3-yarn; do
  .venv/bin/python scripts/golden/gguf_with_keys.py "tests/data/golden/$n/derive.json" "$work/$n.gguf"
  "$tool" "$work/$n.gguf" "tests/data/golden/$n" 32 "$prompt" 2>/dev/null
  echo "$n: min greedy margin $(min_margin "tests/data/golden/$n/greedy.json")"
done

# The IQ4 golden (tests/data/golden/qwen3moe-iq4_xs): the shared qwen3moe quantized by llama-quantize
# (its build dir must hold llama-quantize: target llama-quantize).
q=tests/data/golden/qwen3moe-iq4_xs
mkdir -p "$q"
"$(find "$LLAMA_BUILD" -name llama-quantize -type f | head -1)" --pure --allow-requantize \
  ../shared/golden/qwen3moe/model.gguf "$q/model.gguf" IQ4_XS >/dev/null 2>&1
"$tool" "$q/model.gguf" "$q" 32 "$prompt" 2>/dev/null
echo "qwen3moe-iq4_xs: min greedy margin $(min_margin "$q/greedy.json")"

# The GGUF LoRA golden (tests/data/lora-gguf): stories260K with make_gguf_lora.py's adapter
# applied by llama.cpp (llama_set_adapters_lora, scale 1), the same prompt.
.venv/bin/python scripts/golden/make_gguf_lora.py tests/data/lora-gguf/stories260K-lora.gguf
.venv/bin/python scripts/golden/make_gguf_lora.py tests/data/lora-gguf/stories260K-lora-f32.gguf --f32
for g in golden:stories260K-lora golden-f32:stories260K-lora-f32; do
  mkdir -p "tests/data/lora-gguf/${g%%:*}"
  "$tool" ../shared/models/stories260K.gguf "tests/data/lora-gguf/${g%%:*}" 32 "$prompt" \
    "tests/data/lora-gguf/${g#*:}.gguf" 2>/dev/null
  echo "lora-gguf ${g%%:*}: min greedy margin $(min_margin "tests/data/lora-gguf/${g%%:*}/greedy.json")"
done
