#!/usr/bin/env python3
"""quant_oracle: an independent decoder/encoder for ggml block types, used by
tests/unit/test_quant.cpp to check src/quant/ bit for bit.

It uses gguf-py (the `gguf` PyPI package, maintained in llama.cpp's gguf-py/), whose
numpy (de)quantizers were written separately from ggml's C code and from ours.

Modes (all outputs are little-endian raw files, float32 for values):

  quant_oracle.py gguf MODEL.gguf OUTDIR
      For every tensor: OUTDIR/<i>.raw (the tensor's bytes as stored), OUTDIR/<i>.f32
      (gguf-py's dequantization, only for types it can decode), and OUTDIR/index.tsv with
      lines "<i>\t<name>\t<type name>\t<type id>\t<n elements>\t<has f32: 0/1>".
  quant_oracle.py dequant TYPE IN.raw OUT.f32
      Decode a file of whole blocks of TYPE (ggml name, e.g. q4_K).
  quant_oracle.py quantize TYPE IN.f32 OUT.raw
      Encode with gguf-py's quantizer (it implements bf16, q4_0, q4_1, q5_0, q5_1, q8_0).
  quant_oracle.py batch JOBS.tsv
      Run many of the above in one process (numpy import dominates the run time); each
      line is one command's arguments, tab-separated. Exits non-zero on the first failure.
  quant_oracle.py can-quantize TYPE
      Exit 0 if gguf-py can quantize TYPE, 1 if not.
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import quants


def qtype(name: str) -> QT:
    for t in QT:
        if t.name.lower() == name.lower():
            return t
    raise SystemExit(f"quant_oracle: unknown type {name!r}")


def can_quantize(t: QT) -> bool:
    # gguf-py raises NotImplementedError from quantize_blocks for decode-only types; probe.
    if t in (QT.F32, QT.F16):
        return True
    block, _ = gguf.GGML_QUANT_SIZES[t]
    try:
        quants.quantize(np.zeros((1, block), dtype=np.float32), t)
        return True
    except (NotImplementedError, KeyError):
        return False


def dequant_bytes(raw: np.ndarray, t: QT) -> np.ndarray:
    if t == QT.F32:
        return raw.view(np.float32).copy()
    if t == QT.F16:
        return raw.view(np.float16).astype(np.float32)
    block, size = gguf.GGML_QUANT_SIZES[t]
    if raw.size % size:
        raise SystemExit(f"quant_oracle: {raw.size} bytes is not a whole number of {t.name} blocks ({size} B)")
    return quants.dequantize(raw.reshape(-1, size), t).reshape(-1).astype(np.float32, copy=False)


def cmd_dequant(tname: str, src: str, dst: str) -> None:
    t = qtype(tname)
    raw = np.fromfile(src, dtype=np.uint8)
    dequant_bytes(raw, t).tofile(dst)


def cmd_quantize(tname: str, src: str, dst: str) -> None:
    t = qtype(tname)
    x = np.fromfile(src, dtype=np.float32)
    block, _ = gguf.GGML_QUANT_SIZES[t]
    out = quants.quantize(x.reshape(-1, block), t)
    np.ascontiguousarray(out).view(np.uint8).tofile(dst)


def cmd_gguf(path: str, outdir: str) -> None:
    os.makedirs(outdir, exist_ok=True)
    r = gguf.GGUFReader(path)
    lines = []
    for i, ti in enumerate(r.tensors):
        t = QT(int(ti.tensor_type))
        raw = np.ascontiguousarray(ti.data).view(np.uint8).reshape(-1)
        raw.tofile(os.path.join(outdir, f"{i}.raw"))
        has = 0
        try:
            dequant_bytes(raw, t).tofile(os.path.join(outdir, f"{i}.f32"))
            has = 1
        except NotImplementedError:
            pass
        lines.append(f"{i}\t{ti.name}\t{t.name}\t{int(t)}\t{int(ti.n_elements)}\t{has}\n")
    with open(os.path.join(outdir, "index.tsv"), "w") as f:
        f.writelines(lines)


def run(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    mode, args = argv[0], argv[1:]
    if mode == "gguf" and len(args) == 2:
        cmd_gguf(*args)
    elif mode == "dequant" and len(args) == 3:
        cmd_dequant(*args)
    elif mode == "quantize" and len(args) == 3:
        cmd_quantize(*args)
    elif mode == "can-quantize" and len(args) == 1:
        raise SystemExit(0 if can_quantize(qtype(args[0])) else 1)
    elif mode == "batch" and len(args) == 1:
        with open(args[0]) as f:
            for line in f:
                line = line.rstrip("\n")
                if line:
                    run(line.split("\t"))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    run(sys.argv[1:])
