#!/usr/bin/env python3
"""bench/stream/replicate_layers.py: write an N-layer GGUF from a short one by repeating its
blocks (blk.i -> blk.(j*n + i)), at disk speed.

Why: `sluice synth --preset qwen3-30b-a3b --layers 48 --type q4_k_m` quantizes 30 G random
weights with the reference quantizers (~10 MB/s on 2 busy cores here: about an hour). For an
I/O benchmark the weights only need the real shapes, types and sizes: synth one layer, then
repeat it. Every (layer, expert) is still a distinct byte range of the file, so the streaming
cache sees the full model; routing differs per layer because each layer sees a different
residual stream (but random-weight routing is not real routing either way).

  .venv/bin/python bench/stream/replicate_layers.py in.gguf out.gguf 48
"""
import struct
import sys

from gguf import GGUFReader


def main() -> None:
    src, dst, n_out = sys.argv[1], sys.argv[2], int(sys.argv[3])
    r = GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    n_in = int(r.fields[f"{arch}.block_count"].parts[-1][0])
    align = int(r.fields["general.alignment"].parts[-1][0]) if "general.alignment" in r.fields else 32

    kv = bytearray()
    n_kv = 0
    for name, f in r.fields.items():
        if name.startswith("GGUF."):  # the reader's view of the header, not key/value pairs
            continue
        parts = [bytes(p) for p in f.parts]
        if name == f"{arch}.block_count":
            parts[-1] = struct.pack("<I", n_out)
        kv += b"".join(parts)
        n_kv += 1

    out = []  # (name, ne, type, data)
    for t in r.tensors:
        if not t.name.startswith("blk."):
            out.append((t.name, [int(x) for x in t.shape], int(t.tensor_type), t.data))
    for j in range(n_out):
        prefix = f"blk.{j % n_in}."
        for t in r.tensors:
            if t.name.startswith(prefix):
                out.append((f"blk.{j}.{t.name[len(prefix):]}", [int(x) for x in t.shape], int(t.tensor_type), t.data))

    info = bytearray()
    offset = 0
    offsets = []
    for name, ne, typ, data in out:
        nb = name.encode()
        info += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne))
        info += b"".join(struct.pack("<Q", d) for d in ne)
        info += struct.pack("<IQ", typ, offset)
        offsets.append(offset)
        offset += data.nbytes
        offset = (offset + align - 1) // align * align

    with open(dst, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(out), n_kv))
        f.write(kv)
        f.write(info)
        f.write(b"\0" * ((-f.tell()) % align))
        start = f.tell()
        for (name, ne, typ, data), off in zip(out, offsets):
            f.write(b"\0" * (start + off - f.tell()))
            f.write(memoryview(data).cast("B") if data.flags["C_CONTIGUOUS"] else data.tobytes())
        f.write(b"\0" * ((-f.tell()) % align))
    print(f"{dst}: {len(out)} tensors, {n_out} layers from {n_in}, {start + offset} bytes")


if __name__ == "__main__":
    main()
