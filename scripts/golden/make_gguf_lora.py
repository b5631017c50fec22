#!/usr/bin/env python3
"""scripts/golden/make_gguf_lora.py: a llama.cpp LoRA GGUF adapter for ../shared's stories260K,
the input of the GGUF LoRA golden (tests/data/lora-gguf, tests/models/test_lora_gguf.cpp).

Written with gguf-py as llama.cpp's convert_lora_to_gguf.py writes adapters: general.type
"adapter", general.architecture "llama", adapter.type "lora", adapter.lora.alpha 16, and per
adapted tensor NAME the factors NAME.lora_a (ggml [in, r]) and NAME.lora_b ([r, out]), rank 8,
so llama.cpp's scale is alpha / r = 2. Factor types: F32 on attn_q / attn_v / ffn_up of every
layer, F16 on blk.0.ffn_down, Q8_0 lora_a (F32 lora_b) on blk.1.attn_output, and F32 on
output.weight: every path of the loader; with --f32, the same factors all in F32 (llama.cpp
rounds its activations to F16 / Q8_0 for F16 / Q8_0 factors, so only this one is held to the
base model's tolerance). Seeded, so the file is the same on every run.

  .venv/bin/python scripts/golden/make_gguf_lora.py tests/data/lora-gguf/stories260K-lora.gguf
  .venv/bin/python scripts/golden/make_gguf_lora.py tests/data/lora-gguf/stories260K-lora-f32.gguf --f32
  .venv/bin/python scripts/golden/make_gguf_lora.py tests/data/lora-gguf/qwen3moe-lora-experts.gguf --experts

--experts: an adapter for ../shared/golden/qwen3moe/model.gguf (qwen3moe: n_embd 256, 2 layers, 8
experts of 64) on the stacked experts, as llama.cpp's build_lora_mm_id reads them: per adapted
NAME = blk.L.ffn_{gate,up,down}_exps.weight, NAME.lora_a ggml [in, r, E] and NAME.lora_b
[r, out, E] (expert e's A and B are slice e), F32, rank 8, alpha 16; plus a 2-D pair on
blk.0.attn_q.weight.

The golden beside it is llama.cpp's (scripts/golden/llama_logits.cpp with the adapter as its
fifth argument; the README there has the commands).
"""
import sys

import gguf
import numpy as np

N_LAYER, N_EMBD, N_FF, N_KV, N_VOCAB, RANK = 5, 64, 172, 32, 512, 8


def experts(out):
    e_embd, e_ff, n_exp = 256, 64, 8
    rng = np.random.default_rng(3005)
    w = gguf.GGUFWriter(out, "qwen3moe")
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 16.0)
    w.add_tensor("blk.0.attn_q.weight.lora_a", (0.1 * rng.standard_normal((RANK, e_embd))).astype(np.float32))
    w.add_tensor("blk.0.attn_q.weight.lora_b", (0.1 * rng.standard_normal((e_embd, RANK))).astype(np.float32))
    for l in range(2):
        for name, n_in, n_out in ((f"blk.{l}.ffn_gate_exps.weight", e_embd, e_ff),
                                  (f"blk.{l}.ffn_up_exps.weight", e_embd, e_ff),
                                  (f"blk.{l}.ffn_down_exps.weight", e_ff, e_embd)):
            # numpy [E, r, in] is ggml [in, r, E]; [E, out, r] is [r, out, E].
            w.add_tensor(name + ".lora_a", (0.1 * rng.standard_normal((n_exp, RANK, n_in))).astype(np.float32))
            w.add_tensor(name + ".lora_b", (0.1 * rng.standard_normal((n_exp, n_out, RANK))).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    if "--experts" in sys.argv:
        return experts(sys.argv[1])
    out, all_f32 = sys.argv[1], "--f32" in sys.argv
    rng = np.random.default_rng(260)
    w = gguf.GGUFWriter(out, "llama")
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 16.0)
    targets = []  # (name, in, out, a type, b type)
    for l in range(N_LAYER):
        targets += [(f"blk.{l}.attn_q.weight", N_EMBD, N_EMBD, "f32", "f32"),
                    (f"blk.{l}.attn_v.weight", N_EMBD, N_KV, "f32", "f32"),
                    (f"blk.{l}.ffn_up.weight", N_EMBD, N_FF, "f32", "f32")]
    targets += [("blk.0.ffn_down.weight", N_FF, N_EMBD, "f16", "f16"),
                ("blk.1.attn_output.weight", N_EMBD, N_EMBD, "q8_0", "f32"),
                ("output.weight", N_EMBD, N_VOCAB, "f32", "f32")]
    for name, n_in, n_out, ta, tb in targets:
        a = (0.15 * rng.standard_normal((RANK, n_in))).astype(np.float32)   # ggml [in, r]
        b = (0.15 * rng.standard_normal((n_out, RANK))).astype(np.float32)  # ggml [r, out]
        for suffix, x, t0 in ((".lora_a", a, ta), (".lora_b", b, tb)):
            # The values the F16 / Q8_0 factors hold, so --f32 writes exactly the same factors.
            if t0 == "q8_0":
                x = gguf.quants.dequantize(gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0),
                                           gguf.GGMLQuantizationType.Q8_0)
            elif t0 == "f16":
                x = x.astype(np.float16).astype(np.float32)
            t = "f32" if all_f32 else t0
            if t == "f16":
                w.add_tensor(name + suffix, x.astype(np.float16))
            elif t == "q8_0":
                q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
                w.add_tensor(name + suffix, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            else:
                w.add_tensor(name + suffix, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
