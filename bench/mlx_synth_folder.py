#!/usr/bin/env python3
"""bench/mlx_synth_folder.py: a Qwen3-MoE MLX 4-bit (or --bits 2..8) folder of random weights at real shapes, for
decode speed on a folder (`sluice bench -m DIR`), beside `sluice synth`'s GGUF of the same shapes.

The folder is what mlx_lm.convert writes for qwen3_moe at 4 bits, groups of 64 (every linear and
the embeddings; the routers mlp.gate at 8 bits, as mlx-lm's quant_predicate): uint32 codes,
bf16 scales and biases chosen to be fp16 values, so sluice repacks them exactly (Q4_1 for 2-4 bits, Q5_1
for 5, its own Q8_A for 6 and 8). The
tokenizer is tests/data/hf/qwen3's (400 tokens): the vocabulary is tiny, so compare speeds per
byte read, not per token. numpy only (no mlx); the tensors are written one after another.

  .venv/bin/python bench/mlx_synth_folder.py OUT_DIR [--layers 12] [--bits 4]   # qwen3-30b-a3b shapes: 4.2 GB at 12 layers, 4 bits
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2048, 32, 4, 128
EXPERTS, TOP_K, EXPERT_FF = 128, 8, 768
GROUP = 64


def bf16_bytes(a):
    """float32 array -> bf16 bytes (the values are chosen bf16-exact)."""
    return (np.asarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()


def quantized(rng, shape, bits):
    """(codes, scales, biases) of an MLX affine matrix [..., out, in]: uniform codes, scale 2^-7
    per group and bias -scale·(2^bits - 1)/2 (zero-mean weights), all fp16- and bf16-exact."""
    *lead, out, inp = shape
    codes = rng.integers(0, 2**32, size=(*lead, out, inp * bits // 32), dtype=np.uint32)
    scale = np.full((*lead, out, inp // GROUP), 2.0**-7, dtype=np.float32)
    bias = -scale * ((2**bits - 1) / 2)
    return codes, scale, bias


def main():
    out = sys.argv[1]
    layers = int(sys.argv[sys.argv.index("--layers") + 1]) if "--layers" in sys.argv else 12
    bits = int(sys.argv[sys.argv.index("--bits") + 1]) if "--bits" in sys.argv else 4
    if bits not in (2, 3, 4, 5, 6, 8):
        sys.exit(f"--bits {bits}: MLX writes 2, 3, 4, 5, 6 or 8")
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "hf", "qwen3")
    os.makedirs(out, exist_ok=True)
    for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]:
        shutil.copy(os.path.join(root, f), os.path.join(out, f))
    vocab = json.load(open(os.path.join(root, "config.json")))["vocab_size"]
    quant = {"group_size": GROUP, "bits": bits, "mode": "affine"}
    for l in range(layers):
        quant[f"model.layers.{l}.mlp.gate"] = {"group_size": GROUP, "bits": 8}
    cfg = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": vocab,
           "hidden_size": HIDDEN, "num_hidden_layers": layers, "intermediate_size": 6144,
           "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
           "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
           "tie_word_embeddings": False, "num_experts": EXPERTS, "num_experts_per_tok": TOP_K,
           "moe_intermediate_size": EXPERT_FF, "decoder_sparse_step": 1, "mlp_only_layers": [],
           "norm_topk_prob": True, "quantization": quant, "quantization_config": quant}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)

    # (name, dtype, shape, bytes-producing function), in file order.
    rng = np.random.default_rng(1)
    entries = []

    def linear(name, shape, bits=bits):
        *lead, o, i = shape
        entries.append((name + ".weight", "U32", [*lead, o, i * bits // 32], ("codes", shape, bits)))
        entries.append((name + ".scales", "BF16", [*lead, o, i // GROUP], ("scales", shape, bits)))
        entries.append((name + ".biases", "BF16", [*lead, o, i // GROUP], ("biases", shape, bits)))

    def norm(name, n):
        entries.append((name, "BF16", [n], ("ones", [n], 0)))

    linear("model.embed_tokens", [vocab, HIDDEN])
    linear("lm_head", [vocab, HIDDEN])
    norm("model.norm.weight", HIDDEN)
    for l in range(layers):
        p = f"model.layers.{l}."
        norm(p + "input_layernorm.weight", HIDDEN)
        norm(p + "post_attention_layernorm.weight", HIDDEN)
        norm(p + "self_attn.q_norm.weight", HEAD_DIM)
        norm(p + "self_attn.k_norm.weight", HEAD_DIM)
        linear(p + "self_attn.q_proj", [HEADS * HEAD_DIM, HIDDEN])
        linear(p + "self_attn.k_proj", [KV_HEADS * HEAD_DIM, HIDDEN])
        linear(p + "self_attn.v_proj", [KV_HEADS * HEAD_DIM, HIDDEN])
        linear(p + "self_attn.o_proj", [HIDDEN, HEADS * HEAD_DIM])
        linear(p + "mlp.gate", [EXPERTS, HIDDEN], bits=8)
        linear(p + "mlp.switch_mlp.gate_proj", [EXPERTS, EXPERT_FF, HIDDEN])
        linear(p + "mlp.switch_mlp.up_proj", [EXPERTS, EXPERT_FF, HIDDEN])
        linear(p + "mlp.switch_mlp.down_proj", [EXPERTS, HIDDEN, EXPERT_FF])

    sizes = {"U32": 4, "BF16": 2}
    header, at = {"__metadata__": {"format": "mlx"}}, 0
    for name, dt, shape, _ in entries:
        n = int(np.prod(shape)) * sizes[dt]
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + n]}
        at += n
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        cache = {}
        for k, (name, dt, shape, (kind, full, bits)) in enumerate(entries):
            if kind == "ones":
                f.write(bf16_bytes(np.ones(shape, dtype=np.float32)))
            elif kind == "codes":
                cache = dict(zip(("codes", "scales", "biases"), quantized(rng, full, bits)))
                f.write(cache["codes"].tobytes())
            else:
                f.write(bf16_bytes(cache[kind]))
            if k % 50 == 0:
                print(f"\r{at and f.tell() * 100 // at}% written", end="", file=sys.stderr)
    print(f"\r{out}: {at / 1e9:.2f} GB of tensors, {layers} layers", file=sys.stderr)


if __name__ == "__main__":
    main()
