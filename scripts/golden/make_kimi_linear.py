#!/usr/bin/env python3
"""scripts/golden/make_kimi_linear.py: a tiny random Kimi Linear model (GGUF arch `kimi-linear`),
in the tensor layout and metadata llama.cpp's converter (conversion/kimi_linear.py) writes, with
the stories260K tokenizer copied from ../shared/golden/qwen35moe/model.gguf, so llama.cpp can
make its golden (tests/data/golden/kimi-linear/README.md).

Shape: n_embd 128, 4 layers: 0-2 Kimi Delta Attention (KDA), 3 MLA without RoPE (the converter
marks it with head_count_kv 1, the KDA layers with 0); layer 0 has a dense SwiGLU FFN (256,
leading_dense_block_count 1), layers 1-3 an MoE FFN: 8 experts (64 wide) top-2, sigmoid gating
with a selection bias (exp_probs_b), renormalised, scaled by expert_weights_scale 2.5, plus one
shared expert.
  KDA: 4 heads x 32 (kda.head_dim), short conv kernel 4 on q, k and v separately; the decay gate
  is low-rank (ssm_f_a [E->32], ssm_f_b [32->H*32]) with a per-channel dt bias and a per-head
  A = -exp(A_log) (the converter stores -exp(A_log) in ssm_a); the output gate is low-rank
  (ssm_g_a, ssm_g_b) with a per-head RMSNorm (ssm_norm).
  MLA: 4 heads, no q compression (attn_q), kv_lora 64, qk_nope 32, qk_rope 16 (no RoPE applied:
  Kimi's MLA has none), v_head 32; attn_kv_b already split into attn_k_b / attn_v_b (absorbed).

Scaling as ../shared/golden/README.md: matrices N(0, gain^2/fan_in), gain 0.5 (1 for the MLA
q and kv_a, 4 for the LM head, 1.5 for the sigmoid router), norms 1 + N(0, 0.05^2), embeddings
N(0, 0.5^2); the short-conv taps N(0, 1/K). Decay: A_log ~ U(log 1, log 4), dt_bias = the
inverse softplus of U(0.01, 0.1), so a step keeps exp(-A*softplus(dt)) ~ 0.6..0.99 of the state.
Matrices F16; norms, biases, conv taps, ssm_a and the router F32.

Usage: make_kimi_linear.py OUT.gguf [SEED]   (tokenizer from TOKENIZER_SRC below)
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

TOKENIZER_SRC = "/work/shared/golden/qwen35moe/model.gguf"
ARCH = "kimi-linear"

E, L_COUNT, H, D, K = 128, 4, 4, 32, 4  # n_embd, layers, heads, KDA head dim, conv kernel
KDA_LAYERS = [0, 1, 2]
N_FF, N_DENSE_LEAD = 256, 1
N_EXP, N_EXP_USED, N_FF_EXP, N_SHARED = 8, 2, 64, 1
KV_LORA, QK_NOPE, QK_ROPE, V_HEAD = 64, 32, 16, 32


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


def make(path, seed):
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
    u32 = GGUFValueType.UINT32
    w.add_key_value("general.name", "tiny-random-kimi-linear", GGUFValueType.STRING)
    w.add_key_value(a + "vocab_size", n_vocab, u32)
    w.add_key_value(a + "context_length", 512, u32)
    w.add_key_value(a + "embedding_length", E, u32)
    w.add_key_value(a + "block_count", L_COUNT, u32)
    w.add_key_value(a + "feed_forward_length", N_FF, u32)
    w.add_key_value(a + "attention.head_count", H, u32)
    w.add_key_value(a + "attention.head_count_kv", [0 if l in KDA_LAYERS else 1 for l in range(L_COUNT)],
                    GGUFValueType.ARRAY, sub_type=u32)
    w.add_key_value(a + "attention.layer_norm_rms_epsilon", 1e-5, GGUFValueType.FLOAT32)
    # MLA in its absorbed form: one latent "head" of [kv_lora | k_rope] keys, kv_lora values.
    w.add_key_value(a + "attention.kv_lora_rank", KV_LORA, u32)
    w.add_key_value(a + "attention.key_length", KV_LORA + QK_ROPE, u32)
    w.add_key_value(a + "attention.value_length", KV_LORA, u32)
    w.add_key_value(a + "attention.key_length_mla", QK_NOPE + QK_ROPE, u32)
    w.add_key_value(a + "attention.value_length_mla", V_HEAD, u32)
    w.add_key_value(a + "rope.dimension_count", QK_ROPE, u32)
    w.add_key_value(a + "ssm.conv_kernel", K, u32)
    w.add_key_value(a + "kda.head_dim", D, u32)
    w.add_key_value(a + "expert_count", N_EXP, u32)
    w.add_key_value(a + "expert_used_count", N_EXP_USED, u32)
    w.add_key_value(a + "expert_feed_forward_length", N_FF_EXP, u32)
    w.add_key_value(a + "expert_shared_count", N_SHARED, u32)
    w.add_key_value(a + "leading_dense_block_count", N_DENSE_LEAD, u32)
    w.add_key_value(a + "expert_weights_scale", 2.5, GGUFValueType.FLOAT32)
    w.add_key_value(a + "expert_weights_norm", True, GGUFValueType.BOOL)
    w.add_key_value(a + "expert_gating_func", 2, u32)  # sigmoid
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
        if l in KDA_LAYERS:
            for n in ("q", "k", "v"):
                w.add_tensor(p + f"attn_{n}.weight", mat(HD, E))
            for n in ("q", "k", "v"):  # ggml ne [K, 1, H*D, 1], as the converter writes it
                w.add_tensor(p + f"ssm_conv1d_{n}.weight",
                             (rng.standard_normal((1, HD, 1, K)) / np.sqrt(K)).astype(np.float32))
            w.add_tensor(p + "ssm_f_a.weight", mat(D, E))
            w.add_tensor(p + "ssm_f_b.weight", mat(HD, D))
            w.add_tensor(p + "ssm_beta.weight", mat(H, E))
            a_log = rng.uniform(np.log(1.0), np.log(4.0), H)
            w.add_tensor(p + "ssm_a", (-np.exp(a_log)).reshape(1, 1, H, 1).astype(np.float32))
            dt = rng.uniform(0.01, 0.1, HD)
            w.add_tensor(p + "ssm_dt.bias", np.log(np.expm1(dt)).astype(np.float32))
            w.add_tensor(p + "ssm_g_a.weight", mat(D, E))
            w.add_tensor(p + "ssm_g_b.weight", mat(HD, D))
            w.add_tensor(p + "ssm_norm.weight", norm(D))
            w.add_tensor(p + "attn_output.weight", mat(E, HD))
        else:
            w.add_tensor(p + "attn_q.weight", mat(H * (QK_NOPE + QK_ROPE), E, 1.0))
            w.add_tensor(p + "attn_kv_a_mqa.weight", mat(KV_LORA + QK_ROPE, E, 1.0))
            w.add_tensor(p + "attn_kv_a_norm.weight", norm(KV_LORA))
            # per head: k_b [kv_lora][qk_nope] (ggml ne [qk_nope, kv_lora, H]), v_b [v_head][kv_lora]
            w.add_tensor(p + "attn_k_b.weight", mat(KV_LORA, QK_NOPE, 1.0, H))
            w.add_tensor(p + "attn_v_b.weight", mat(V_HEAD, KV_LORA, 0.5, H))
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
            fs = N_FF_EXP * N_SHARED
            w.add_tensor(p + "ffn_gate_shexp.weight", mat(fs, E))
            w.add_tensor(p + "ffn_up_shexp.weight", mat(fs, E))
            w.add_tensor(p + "ffn_down_shexp.weight", mat(E, fs))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    make(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
