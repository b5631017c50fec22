#!/usr/bin/env python3
"""scripts/golden/make_mlx_affine.py: MLX's own quantize/dequantize as test data for
quant/mlx_affine and format/safetensors (tests/unit/test_mlx_affine.cpp).

For every bit width MLX writes (2, 3, 4, 5, 6, 8) and group size (32, 64, 128) with f32 scales,
and for group size 64 with f16 and bf16 scales, a [3, 256] normal weight is quantized by
mx.quantize; the file holds NAME.weight (uint32 codes), NAME.scales, NAME.biases and
NAME.expected (mx.dequantize's output, cast to float32), NAME = b{bits}_g{group}_{dtype}.
Written by mx.save_safetensors, so the reader is checked on MLX's writer too.

  python3 -m venv /tmp/mlxvenv && /tmp/mlxvenv/bin/pip install mlx mlx-cpu numpy
  /tmp/mlxvenv/bin/python scripts/golden/make_mlx_affine.py tests/data/mlx/affine.safetensors
(made with mlx 0.32.4, mlx-cpu 0.32.4)
"""
import sys

import mlx.core as mx


def main():
    out = sys.argv[1]
    mx.random.seed(20261201)
    w = mx.random.normal((3, 256))
    arrays = {}
    combos = [(b, g, mx.float32) for b in (2, 3, 4, 5, 6, 8) for g in (32, 64, 128)]
    combos += [(b, 64, t) for b in (2, 3, 4, 5, 6, 8) for t in (mx.float16, mx.bfloat16)]
    for bits, group, dtype in combos:
        name = f"b{bits}_g{group}_{str(dtype).split('.')[-1]}"
        q, s, b = mx.quantize(w.astype(dtype), group_size=group, bits=bits)
        arrays[name + ".weight"] = q
        arrays[name + ".scales"] = s
        arrays[name + ".biases"] = b
        arrays[name + ".expected"] = mx.dequantize(q, s, b, group_size=group, bits=bits).astype(mx.float32)
    mx.save_safetensors(out, arrays, metadata={"format": "mlx", "made_by": "scripts/golden/make_mlx_affine.py"})


if __name__ == "__main__":
    main()
