#!/usr/bin/env python3
"""scripts/golden/derive_hybrid_models.py: tiny GGUF models for the hybrid architectures that
../shared/golden has no golden for, derived from its qwen35moe model (random weights, F16/F32,
the stories260K vocabulary), so llama.cpp can make their goldens (scripts/golden/make_goldens.sh).

- qwen3next: the same weights in Qwen3-Next's layout: ssm_beta and ssm_alpha fused into
  ssm_ba, per key-head group [beta (H_v/H_k rows) | alpha (H_v/H_k rows)]; plain NEOX
  RoPE (no rope.dimension_sections). llama.cpp maps value head h to key head h / (H_v/H_k)
  there (repeat-interleave), not h % H_k as for qwen35moe, so the logits differ.
- qwen35 (dense): each layer's FFN is one SwiGLU made of the shared expert followed by the
  first K routed experts, side by side (ffn_gate/up/down of width 64·(1+K)); router dropped.
  K is the "seed": scripts/golden/make_goldens.sh takes the first K whose greedy steps all
  have a top-2 margin >= 0.05, as the shared goldens' seeds were chosen.

Usage: derive_hybrid_models.py SRC.gguf OUT_DIR [K]  (writes OUT_DIR/qwen3next.gguf, OUT_DIR/qwen35.gguf)
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter


def field_value(f):
    t = f.types[0]
    if t == GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8"), t, None
    if t == GGUFValueType.ARRAY:
        sub = f.types[1]
        if sub == GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data], t, sub
        return [f.parts[i].tolist()[0] for i in f.data], t, sub
    return f.parts[f.data[0]].tolist()[0], t, None


def dense_ffn(tensors, layer, k):
    """The layer's dense SwiGLU: shared expert, then routed experts 0..k-1 (gate/up rows, down columns)."""
    p = f"blk.{layer}."
    out = {}
    for kind, axis in (("gate", 0), ("up", 0), ("down", 1)):
        parts = [np.array(tensors[p + f"ffn_{kind}_shexp.weight"].data)]
        stacked = np.array(tensors[p + f"ffn_{kind}_exps.weight"].data)  # [n_expert][out][in]
        parts += [stacked[e] for e in range(k)]
        out[p + f"ffn_{kind}.weight"] = np.concatenate(parts, axis=axis)
    return out


def derive(src, path, arch, dense, k=0):
    r = GGUFReader(src)
    old = r.fields["general.architecture"].parts[r.fields["general.architecture"].data[0]].tobytes().decode()
    w = GGUFWriter(path, arch)
    meta = {}
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        val, t, sub = field_value(f)
        key = key.replace(old + ".", arch + ".", 1)
        meta[key] = val
        if arch == "qwen3next" and key.endswith("rope.dimension_sections"):
            continue
        if dense and key.split(".", 1)[-1] in ("expert_count", "expert_used_count", "expert_feed_forward_length",
                                               "expert_shared_feed_forward_length"):
            continue
        if dense and key.endswith(".feed_forward_length"):
            val = int(r.fields[old + ".expert_shared_feed_forward_length"].parts[-1][0]) * (1 + k)
        if key == "general.name":
            val = "tiny-random-" + arch
        w.add_key_value(key, val, t, sub_type=sub)
    hk = int(meta[arch + ".ssm.group_count"])
    hv = int(meta[arch + ".ssm.time_step_rank"])
    rep = hv // hk
    tensors = {t.name: t for t in r.tensors}
    for t in r.tensors:
        name, data = t.name, np.array(t.data)
        if dense and any(s in name for s in ("ffn_gate_inp", "_exps", "_shexp")):
            if name.endswith("ffn_gate_shexp.weight"):
                for n, d in dense_ffn(tensors, int(name.split(".")[1]), k).items():
                    w.add_tensor(n, d)
            continue
        if arch == "qwen3next" and name.endswith("ssm_alpha.weight"):
            continue
        if arch == "qwen3next" and name.endswith("ssm_beta.weight"):
            alpha = np.array(tensors[name.replace("ssm_beta", "ssm_alpha")].data)
            rows = []
            for g in range(hk):
                rows.append(data[g * rep:(g + 1) * rep])
                rows.append(alpha[g * rep:(g + 1) * rep])
            data, name = np.concatenate(rows, axis=0), name.replace("ssm_beta", "ssm_ba")
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    src, out = sys.argv[1], sys.argv[2]
    derive(src, out + "/qwen3next.gguf", "qwen3next", dense=False)
    derive(src, out + "/qwen35.gguf", "qwen35", dense=True, k=int(sys.argv[3]) if len(sys.argv) > 3 else 0)
