#!/usr/bin/env bash
# scripts/golden/make_iq4_golden.sh: remakes tests/data/iq4 (ggml's IQ4_NL / IQ4_XS bytes for a
# fixed input, the oracle of tests/unit/test_quant.cpp's QuantOracle.Iq4MatchesGgml). Not run by
# CI. Compiles llama.cpp's ggml-quants.c alone, for the baseline x86-64 target (no FMA
# contraction: the build whose bytes src/quant mirrors), in a few seconds.
#
#   LLAMA_SRC: a llama.cpp source tree (the one vendored in llama-cpp-python 0.3.36 from PyPI,
#              commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f: `pip download --no-deps
#              --no-binary :all: llama-cpp-python==0.3.36`, then vendor/llama.cpp)
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${LLAMA_SRC:?set LLAMA_SRC to a llama.cpp source tree}"
work=$(mktemp -d)
g="$LLAMA_SRC/ggml"
gcc -O2 -c -I"$g/include" -I"$g/src" -I"$g/src/ggml-cpu" "$g/src/ggml-quants.c" -o "$work/q.o"
gcc -O2 -w scripts/golden/iq4_quantize_oracle.c "$work/q.o" -lm -o "$work/oracle"
out=tests/data/iq4
mkdir -p "$out"
# 32 rows of 256: gaussian, laplace, uniform, one 20-sigma outlier per 64, scales spanning
# 1e-3..1e3 per row, a positive offset, then edge rows (all zero, constant, a lone value,
# fp16-subnormal scales, values near the fp16 limit, a zero 32-block inside a normal row).
.venv/bin/python - "$out/input.f32" <<'PY'
import sys
import numpy as np
r = np.random.default_rng(20261203)
rows = []
for _ in range(4): rows.append(r.standard_normal(256))
for _ in range(4): rows.append(r.laplace(size=256))
for _ in range(4): rows.append(r.uniform(-1, 1, 256))
for _ in range(4):
    v = r.standard_normal(256); v[::64] *= 20; rows.append(v)
for k in range(6): rows.append(10.0 ** (k - 3) * r.standard_normal(256))
for _ in range(2): rows.append(0.5 + np.abs(r.standard_normal(256)))
rows.append(np.zeros(256))
rows.append(np.full(256, 3.0))
v = np.zeros(256); v[77] = -1.0; rows.append(v)
rows.append(np.ldexp(np.arange(256) - 128.0, -30))
rows.append(60000.0 * np.sin(np.arange(256)))
v = r.standard_normal(256); v[64:96] = 0; rows.append(v)
v = r.standard_normal(256); v[::2] = -v[1::2]; rows.append(v)
rows.append(r.standard_normal(256) * np.repeat(10.0 ** r.uniform(-2, 2, 8), 32))
np.concatenate(rows).astype(np.float32).tofile(sys.argv[1])
PY
"$work/oracle" "$out/input.f32" "$out/iq4_nl.bin" "$out/iq4_xs.bin"
ls -l "$out"
