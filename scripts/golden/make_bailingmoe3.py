#!/usr/bin/env python3
"""scripts/golden/make_bailingmoe3.py: a tiny random Ling 3 model (GGUF arch `bailingmoe3`, HF
BailingMoeV3ForCausalLM), in the tensor layout and metadata llama.cpp's converter
(conversion/bailingmoe3.py) writes, with the stories260K tokenizer (as make_kimi_linear.py, whose
tokenizer copy it shares), so llama.cpp can make its golden (tests/data/golden/bailingmoe3/README.md).

Shape: n_embd 128, 5 layers: 0-2 and 4 Kimi Delta Attention (KDA, head_count_kv 0), 3 MLA with
RoPE (NORM, adjacent pairs) and a head-wise sigmoid output gate (head_count_kv 1); layer 0 has a
dense SwiGLU FFN (256, leading_dense_block_count 1), layers 1-4 an MoE FFN: 16 experts (32 wide)
in 4 groups, 2 groups used, top-4, sigmoid gating with a selection bias (exp_probs_b),
renormalised, scaled by expert_weights_scale 2.5, plus one shared expert of width 64
(expert_shared_feed_forward_length).
  KDA: 4 heads x 32, short conv kernel 4 on q, k and v; the "safe" decay gate is full rank:
  g = lower_bound * sigmoid(A_h * (W_f x + dt_bias)) (kda.gate_lower_bound -5; the converter
  stores A_h = exp(A_log) in ssm_a, ne [1, H]); the output gate is full rank (ssm_g_a [E->H*32],
  sigmoid) after a per-head RMSNorm (ssm_norm).
  MLA: 4 heads, no q compression (attn_q), kv_lora 64, qk_nope 32, qk_rope 16, v_head 32,
  attn_k_b / attn_v_b split; attn_gate [E->H] scales each head's output by sigmoid(W_gate x).

Scaling as make_kimi_linear.py: matrices N(0, gain^2/fan_in), gain 0.5 (1 for the MLA q, kv_a,
k_b, 4 for the LM head, 1.5 for the router), norms 1 + N(0, 0.05^2), embeddings N(0, 0.5^2),
conv taps N(0, 1/K). Decay: A_log ~ U(log 1, log 2), dt_bias ~ U(-4, -2), so a step's log-decay
is about -5*sigmoid(-3) ~ -0.2 (exp ~ 0.6..0.97). attn_gate gain 2 so the heads' gates differ.
Matrices F16; norms, biases, conv taps, ssm_a and the router F32.

--clamp-mrope: the variant of tests/data/golden/bailingmoe3-clamp: SwiGLU clamps per layer
(swiglu_clamp_exp for the routed experts, swiglu_clamp_shexp for the shared experts and the
dense FFN of layer 0; small enough that most up values are clipped) and the VL files' mrope
sections (rope.dimension_sections [3, 2, 2, 0]: llama.cpp then rotates NEOX pairs).

Usage: make_bailingmoe3.py OUT.gguf [SEED] [--clamp-mrope]
"""
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_kimi_linear import TOKENIZER_SRC, field_value  # noqa: E402

ARCH = "bailingmoe3"

E, L_COUNT, H, D, K = 128, 5, 4, 32, 4  # n_embd, layers, heads, KDA head dim, conv kernel
MLA_LAYERS = [3]
N_FF, N_DENSE_LEAD = 256, 1
N_EXP, N_EXP_USED, N_FF_EXP, N_SHARED, N_FF_SHEXP = 16, 4, 32, 1, 64
N_GROUP, N_GROUP_USED = 4, 2
KV_LORA, QK_NOPE, QK_ROPE, V_HEAD = 64, 32, 16, 32
LOWER_BOUND = -5.0
CLAMP_EXP = [0.0, 0.35, 0.3, 0.25, 0.4]     # layer 0 is dense: no routed experts to clamp
CLAMP_SHEXP = [0.3, 0.45, 0.4, 0.35, 0.5]   # layer 0: its dense FFN
ROPE_SECTIONS = [3, 2, 2, 0]


def make(path, seed, clamp_mrope=False):
    rng = np.random.default_rng(seed)
    tok = GGUFReader(TOKENIZER_SRC)
    n_vocab = len(tok.fields["tokenizer.ggml.tokens"].data)

    def mat(n_out, n_in, gain=0.5, *shape_pre):
        # ggml ne = [n_in, n_out, ...]; numpy shape is the reverse.
        return (rng.standard_normal((*shape_pre, n_out, n_in)) * gain / np.sqrt(n_in)).astype(np.float16)

    def norm(n):
        return (1.0 + 0.05 * rng.standard_normal(n)).astype(np.float32)

    w = GGUFWriter(path, ARCH)
    a = ARCH + "."
    u32, f32 = GGUFValueType.UINT32, GGUFValueType.FLOAT32
    w.add_key_value("general.name", "tiny-random-bailingmoe3", GGUFValueType.STRING)
    w.add_key_value(a + "vocab_size", n_vocab, u32)
    w.add_key_value(a + "context_length", 512, u32)
    w.add_key_value(a + "embedding_length", E, u32)
    w.add_key_value(a + "block_count", L_COUNT, u32)
    w.add_key_value(a + "feed_forward_length", N_FF, u32)
    w.add_key_value(a + "attention.head_count", H, u32)
    w.add_key_value(a + "attention.head_count_kv", [1 if l in MLA_LAYERS else 0 for l in range(L_COUNT)],
                    GGUFValueType.ARRAY, sub_type=u32)
    w.add_key_value(a + "attention.layer_norm_rms_epsilon", 1e-6, f32)
    w.add_key_value(a + "rope.freq_base", 10000.0, f32)
    w.add_key_value(a + "attention.kv_lora_rank", KV_LORA, u32)
    w.add_key_value(a + "attention.key_length", KV_LORA + QK_ROPE, u32)
    w.add_key_value(a + "attention.value_length", KV_LORA, u32)
    w.add_key_value(a + "attention.key_length_mla", QK_NOPE + QK_ROPE, u32)
    w.add_key_value(a + "attention.value_length_mla", V_HEAD, u32)
    w.add_key_value(a + "rope.dimension_count", QK_ROPE, u32)
    w.add_key_value(a + "ssm.conv_kernel", K, u32)
    w.add_key_value(a + "kda.head_dim", D, u32)
    w.add_key_value(a + "kda.safe_gate", True, GGUFValueType.BOOL)
    w.add_key_value(a + "kda.gate_lower_bound", LOWER_BOUND, f32)
    w.add_key_value(a + "expert_count", N_EXP, u32)
    w.add_key_value(a + "expert_used_count", N_EXP_USED, u32)
    w.add_key_value(a + "expert_group_count", N_GROUP, u32)
    w.add_key_value(a + "expert_group_used_count", N_GROUP_USED, u32)
    w.add_key_value(a + "expert_feed_forward_length", N_FF_EXP, u32)
    w.add_key_value(a + "expert_shared_feed_forward_length", N_FF_SHEXP, u32)
    w.add_key_value(a + "expert_shared_count", N_SHARED, u32)
    w.add_key_value(a + "leading_dense_block_count", N_DENSE_LEAD, u32)
    w.add_key_value(a + "expert_weights_scale", 2.5, f32)
    w.add_key_value(a + "expert_weights_norm", True, GGUFValueType.BOOL)
    w.add_key_value(a + "expert_gating_func", 2, u32)  # sigmoid
    if clamp_mrope:
        w.add_key_value(a + "swiglu_clamp_exp", CLAMP_EXP, GGUFValueType.ARRAY, sub_type=f32)
        w.add_key_value(a + "swiglu_clamp_shexp", CLAMP_SHEXP, GGUFValueType.ARRAY, sub_type=f32)
        w.add_key_value(a + "rope.dimension_sections", ROPE_SECTIONS, GGUFValueType.ARRAY,
                        sub_type=GGUFValueType.INT32)
    for key, f in tok.fields.items():
        if key.startswith("tokenizer."):
            val, t, sub = field_value(f)
            w.add_key_value(key, val, t, sub_type=sub)

    w.add_tensor("token_embd.weight", (0.5 * rng.standard_normal((n_vocab, E))).astype(np.float16))
    w.add_tensor("output_norm.weight", norm(E))
    w.add_tensor("output.weight", mat(n_vocab, E, 4.0))
    HD = H * D
    for l in range(L_COUNT):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", norm(E))
        if l not in MLA_LAYERS:
            for n in ("q", "k", "v"):
                w.add_tensor(p + f"attn_{n}.weight", mat(HD, E))
            for n in ("q", "k", "v"):  # ggml ne [K, 1, H*D, 1], as the converter writes it
                w.add_tensor(p + f"ssm_conv1d_{n}.weight",
                             (rng.standard_normal((1, HD, 1, K)) / np.sqrt(K)).astype(np.float32))
            w.add_tensor(p + "ssm_f_a.weight", mat(HD, E))
            w.add_tensor(p + "ssm_beta.weight", mat(H, E))
            a_log = rng.uniform(np.log(1.0), np.log(2.0), H)
            w.add_tensor(p + "ssm_a", np.exp(a_log).reshape(H, 1).astype(np.float32))  # ne [1, H]
            w.add_tensor(p + "ssm_dt.bias", rng.uniform(-4.0, -2.0, HD).astype(np.float32))
            w.add_tensor(p + "ssm_g_a.weight", mat(HD, E))
            w.add_tensor(p + "ssm_norm.weight", norm(D))
            w.add_tensor(p + "attn_output.weight", mat(E, HD))
        else:
            w.add_tensor(p + "attn_q.weight", mat(H * (QK_NOPE + QK_ROPE), E, 1.0))
            w.add_tensor(p + "attn_kv_a_mqa.weight", mat(KV_LORA + QK_ROPE, E, 1.0))
            w.add_tensor(p + "attn_kv_a_norm.weight", norm(KV_LORA))
            w.add_tensor(p + "attn_k_b.weight", mat(KV_LORA, QK_NOPE, 1.0, H))
            w.add_tensor(p + "attn_v_b.weight", mat(V_HEAD, KV_LORA, 0.5, H))
            w.add_tensor(p + "attn_gate.weight", mat(H, E, 2.0))
            w.add_tensor(p + "attn_output.weight", mat(E, H * V_HEAD))
        w.add_tensor(p + "ffn_norm.weight", norm(E))
        if l < N_DENSE_LEAD:
            w.add_tensor(p + "ffn_gate.weight", mat(N_FF, E))
            w.add_tensor(p + "ffn_up.weight", mat(N_FF, E))
            w.add_tensor(p + "ffn_down.weight", mat(E, N_FF))
        else:
            w.add_tensor(p + "ffn_gate_inp.weight", mat(N_EXP, E, 1.5).astype(np.float32))
            w.add_tensor(p + "exp_probs_b.bias", (0.1 * rng.standard_normal(N_EXP)).astype(np.float32))
            w.add_tensor(p + "ffn_gate_exps.weight", mat(N_FF_EXP, E, 0.5, N_EXP))
            w.add_tensor(p + "ffn_up_exps.weight", mat(N_FF_EXP, E, 0.5, N_EXP))
            w.add_tensor(p + "ffn_down_exps.weight", mat(E, N_FF_EXP, 0.5, N_EXP))
            w.add_tensor(p + "ffn_gate_shexp.weight", mat(N_FF_SHEXP, E))
            w.add_tensor(p + "ffn_up_shexp.weight", mat(N_FF_SHEXP, E))
            w.add_tensor(p + "ffn_down_shexp.weight", mat(E, N_FF_SHEXP))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    args = [x for x in sys.argv[1:] if x != "--clamp-mrope"]
    make(args[0], int(args[1]) if len(args) > 1 else 1, "--clamp-mrope" in sys.argv)
