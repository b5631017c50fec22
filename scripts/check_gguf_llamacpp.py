#!/usr/bin/env python3
"""check_gguf_llamacpp: reads a GGUF with gguf-py (llama.cpp's own Python reader, PyPI `gguf`)
and checks it against what llama.cpp's loader expects for the architectures `sluice synth`
writes (llama with or without experts, qwen3, qwen3moe, olmoe, deepseek2, qwen35moe, qwen3next,
kimi-linear, bailingmoe3):

  * metadata value types exactly as llama_model_loader::get_key accepts them: u32 for counts
    and lengths, f32 for eps / freq_base / expert_weights_scale, bool for expert_weights_norm;
  * the keys llama.cpp requires for the architecture (llama-model.cpp load_hparams);
  * the exact set of tensor names and their ggml shapes (create_tensors: a missing tensor, a
    wrong shape and an extra tensor are all load errors in llama.cpp);
  * norms, biases and routers in F32; each row a whole number of blocks of its type; tensor
    data inside the file and aligned;
  * the tokenizer arrays as long as token_embd has rows.

This is an independent re-statement of llama.cpp's rules (written from llama.cpp's source, not
from Sluice's loader), so a synth file that passes here and loads in Sluice agrees with both.
Usage: check_gguf_llamacpp.py FILE [FILE ...]   (exit status 1 if any check fails)
"""
import sys

import gguf
from gguf import GGUFValueType as VT

# ggml block sizes of the types synth writes (ggml.h / ggml-common.h).
BLOCK = {"F32": 1, "F16": 1, "BF16": 1, "Q4_0": 32, "Q4_1": 32, "Q5_0": 32, "Q5_1": 32, "Q8_0": 32,
         "Q2_K": 256, "Q3_K": 256, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256}

U32_KEYS = ["vocab_size", "context_length", "embedding_length", "block_count", "feed_forward_length",
            "attention.head_count", "attention.head_count_kv", "attention.key_length", "attention.value_length",
            "rope.dimension_count", "expert_count", "expert_used_count", "expert_feed_forward_length",
            "expert_shared_count", "leading_dense_block_count", "attention.q_lora_rank", "attention.kv_lora_rank",
            "attention.key_length_mla", "attention.value_length_mla", "expert_gating_func", "expert_group_count",
            "expert_group_used_count", "expert_shared_feed_forward_length", "ssm.conv_kernel", "ssm.state_size",
            "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size", "full_attention_interval", "kda.head_dim"]
F32_KEYS = ["attention.layer_norm_rms_epsilon", "rope.freq_base", "expert_weights_scale", "kda.gate_lower_bound"]
BOOL_KEYS = ["expert_weights_norm", "kda.safe_gate"]
KDA_ARCHS = ("kimi-linear", "bailingmoe3")


class Checker:
    def __init__(self, path):
        self.path = path
        self.errors = []
        self.r = gguf.GGUFReader(path)
        self.fields = self.r.fields

    def err(self, msg):
        self.errors.append(msg)

    def types(self, key):
        f = self.fields.get(key)
        return None if f is None else [t for t in f.types]

    def val(self, key, default=None):
        f = self.fields.get(key)
        if f is None:
            return default
        return f.contents()

    def check_type(self, key, want):
        t = self.types(key)
        if t is None:
            return
        # Per-layer keys may be arrays of the scalar type in real files.
        if t[0] == VT.ARRAY:
            if len(t) < 2 or t[1] != want:
                self.err(f"{key}: array of {[x.name for x in t[1:]]}, llama.cpp expects {want.name}")
        elif t[0] != want:
            self.err(f"{key}: stored as {t[0].name}, llama.cpp expects {want.name}")

    def run(self):
        arch = self.val("general.architecture")
        if self.types("general.architecture") != [VT.STRING]:
            self.err("general.architecture missing or not a string")
            return self.errors
        for k in ("general.file_type", "general.quantization_version", "general.alignment"):
            self.check_type(k, VT.UINT32)
        a = arch + "."
        for k in U32_KEYS:
            self.check_type(a + k, VT.UINT32)
        for k in F32_KEYS:
            self.check_type(a + k, VT.FLOAT32)
        for k in BOOL_KEYS:
            self.check_type(a + k, VT.BOOL)
        # get_key_or_arr(LLM_KV_ROPE_DIMENSION_SECTIONS, hparams.rope_sections, 4): int32 array of 4.
        sec = self.types(a + "rope.dimension_sections")
        if sec is not None:
            if sec != [VT.ARRAY, VT.INT32]:
                self.err(f"{a}rope.dimension_sections: {[x.name for x in sec]}, llama.cpp expects an INT32 array")
            elif len(self.fields[a + "rope.dimension_sections"].data) != 4:
                self.err(f"{a}rope.dimension_sections: not 4 entries")
        for k in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                  "tokenizer.ggml.padding_token_id", "tokenizer.ggml.seperator_token_id"):
            self.check_type(k, VT.UINT32)

        required = ["context_length", "embedding_length", "block_count", "attention.head_count",
                    "attention.layer_norm_rms_epsilon", "feed_forward_length"]
        if arch not in ("llama", "qwen3", "qwen3moe", "olmoe", "deepseek2", "qwen35moe", "qwen3next") + KDA_ARCHS:
            self.err(f"architecture {arch} is not one synth writes")
            return self.errors
        n_layer = self.val(a + "block_count", 0)
        if arch in ("qwen3moe", "olmoe", "deepseek2", "qwen35moe", "qwen3next") + KDA_ARCHS:
            required += ["expert_count", "expert_used_count"]
        if arch in KDA_ARCHS:
            # src/models/kimi-linear.cpp / bailingmoe3.cpp load_arch_hparams (get_key without
            # `false`), and head_count_kv, whose per-layer 0 marks the recurrent (KDA) layers.
            required += ["attention.key_length_mla", "attention.value_length_mla", "attention.kv_lora_rank",
                         "ssm.conv_kernel", "kda.head_dim", "expert_feed_forward_length", "expert_shared_count",
                         "expert_gating_func", "attention.head_count_kv"]
            if arch == "bailingmoe3":
                required += ["kda.gate_lower_bound", "leading_dense_block_count"]
        if arch in ("qwen35moe", "qwen3next"):
            required += ["ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", "ssm.group_count"]
        if arch == "qwen35moe":  # llama.cpp's qwen3next reads no sections (plain NEOX RoPE)
            required += ["rope.dimension_sections"]
        if arch == "deepseek2":
            required += ["attention.kv_lora_rank", "expert_feed_forward_length", "expert_shared_count",
                         "attention.key_length_mla", "attention.value_length_mla", "expert_gating_func"]
            if n_layer not in (26, 27):  # llama.cpp's "lite" test; every other depth needs the key
                required.append("attention.q_lora_rank")
        for k in required:
            if a + k not in self.fields:
                self.err(f"missing key {a + k} (llama.cpp requires it for {arch})")
        if self.errors:
            return self.errors

        self.check_tensors(arch, a)
        self.check_tokenizer()
        return self.errors

    def expected_tensors(self, arch, a):
        g = lambda k, d=None: self.val(a + k, d)
        E, L, H = g("embedding_length"), g("block_count"), g("attention.head_count")
        Hkv = g("attention.head_count_kv", H)
        n_ff = g("feed_forward_length")
        n_exp, n_used = g("expert_count", 0), g("expert_used_count", 0)
        emb = next((t for t in self.r.tensors if t.name == "token_embd.weight"), None)
        if emb is None:
            self.err("missing tensor token_embd.weight")
            return {}
        V = int(emb.shape[1])
        exp = {"token_embd.weight": (E, V), "output_norm.weight": (E,)}
        if any(t.name == "output.weight" for t in self.r.tensors):
            exp["output.weight"] = (E, V)
        for l in range(L):
            p = f"blk.{l}."
            exp[p + "attn_norm.weight"] = (E,)
            if arch in ("qwen35moe", "qwen3next"):
                self.expected_qwen35moe_layer(exp, a, l, E, H, Hkv, n_exp, fused_ba=arch == "qwen3next")
                continue
            if arch in KDA_ARCHS:
                self.expected_kda_layer(exp, arch, a, l, E, H, n_ff, n_exp)
                continue
            exp[p + "ffn_norm.weight"] = (E,)
            if arch == "deepseek2":
                rope = g("rope.dimension_count")
                k_mla, v_mla = g("attention.key_length_mla"), g("attention.value_length_mla")
                q_lora, kv_lora = g("attention.q_lora_rank", 0), g("attention.kv_lora_rank")
                nope = k_mla - rope
                if q_lora > 0:
                    exp[p + "attn_q_a_norm.weight"] = (q_lora,)
                    exp[p + "attn_q_a.weight"] = (E, q_lora)
                    exp[p + "attn_q_b.weight"] = (q_lora, H * k_mla)
                else:
                    exp[p + "attn_q.weight"] = (E, H * k_mla)
                exp[p + "attn_kv_a_mqa.weight"] = (E, kv_lora + rope)
                exp[p + "attn_kv_a_norm.weight"] = (kv_lora,)
                exp[p + "attn_k_b.weight"] = (nope, kv_lora, H)
                exp[p + "attn_v_b.weight"] = (kv_lora, v_mla, H)
                exp[p + "attn_output.weight"] = (H * v_mla, E)
                if l < g("leading_dense_block_count", 0):
                    exp[p + "ffn_gate.weight"] = (E, n_ff)
                    exp[p + "ffn_up.weight"] = (E, n_ff)
                    exp[p + "ffn_down.weight"] = (n_ff, E)
                else:
                    fe, ns = g("expert_feed_forward_length"), g("expert_shared_count")
                    exp[p + "ffn_gate_inp.weight"] = (E, n_exp)
                    if any(t.name == p + "exp_probs_b.bias" for t in self.r.tensors):  # TENSOR_NOT_REQUIRED
                        exp[p + "exp_probs_b.bias"] = (n_exp,)
                    exp[p + "ffn_gate_exps.weight"] = (E, fe, n_exp)
                    exp[p + "ffn_up_exps.weight"] = (E, fe, n_exp)
                    exp[p + "ffn_down_exps.weight"] = (fe, E, n_exp)
                    exp[p + "ffn_gate_shexp.weight"] = (E, fe * ns)
                    exp[p + "ffn_up_shexp.weight"] = (E, fe * ns)
                    exp[p + "ffn_down_shexp.weight"] = (fe * ns, E)
                continue
            hk = g("attention.key_length", E // H)
            hv = g("attention.value_length", hk)
            exp[p + "attn_q.weight"] = (E, H * hk)
            exp[p + "attn_k.weight"] = (E, Hkv * hk)
            exp[p + "attn_v.weight"] = (E, Hkv * hv)
            exp[p + "attn_output.weight"] = (H * hv, E)
            if arch in ("qwen3", "qwen3moe"):
                exp[p + "attn_q_norm.weight"] = (hk,)
                exp[p + "attn_k_norm.weight"] = (hk,)
            if arch == "olmoe":
                # llama.cpp's olmoe creates wq/wo as [n_embd, n_embd] and both norms as
                # [n_embd] (so it needs n_head * head_dim == n_embd and n_head_kv == n_head).
                exp[p + "attn_q.weight"] = (E, E)
                exp[p + "attn_output.weight"] = (E, E)
                exp[p + "attn_q_norm.weight"] = (E,)
                exp[p + "attn_k_norm.weight"] = (E,)
            if n_exp > 0:
                # llama (Mixtral) and olmoe: experts of width feed_forward_length; qwen3moe:
                # expert_feed_forward_length (default n_ff / n_expert_used).
                fe = g("expert_feed_forward_length", n_ff // n_used) if arch == "qwen3moe" else n_ff
                exp[p + "ffn_gate_inp.weight"] = (E, n_exp)
                exp[p + "ffn_gate_exps.weight"] = (E, fe, n_exp)
                exp[p + "ffn_up_exps.weight"] = (E, fe, n_exp)
                exp[p + "ffn_down_exps.weight"] = (fe, E, n_exp)
            else:
                exp[p + "ffn_gate.weight"] = (E, n_ff)
                exp[p + "ffn_up.weight"] = (E, n_ff)
                exp[p + "ffn_down.weight"] = (n_ff, E)
        return exp

    def expected_qwen35moe_layer(self, exp, a, l, E, H, Hkv, n_exp, fused_ba=False):
        # create_tensors, LLM_ARCH_QWEN35MOE: recurrent_layer_arr[l] = (l + 1) % full_attention_interval != 0.
        # LLM_ARCH_QWEN3NEXT (src/models/qwen3next.cpp): the same, but ssm_ba {n_embd, 2 * ssm_dt_rank}
        # for ssm_beta + ssm_alpha.
        g = lambda k, d=None: self.val(a + k, d)
        p = f"blk.{l}."
        exp[p + "post_attention_norm.weight"] = (E,)
        if (l + 1) % g("full_attention_interval", 4) == 0:
            hk = g("attention.key_length", E // H)
            hv = g("attention.value_length", hk)
            exp[p + "attn_q.weight"] = (E, hk * H * 2)  # q and its output gate
            exp[p + "attn_k.weight"] = (E, Hkv * hk)
            exp[p + "attn_v.weight"] = (E, Hkv * hv)
            exp[p + "attn_output.weight"] = (hk * H, E)
            exp[p + "attn_q_norm.weight"] = (hk,)
            exp[p + "attn_k_norm.weight"] = (hk,)
        else:
            dk, inner, hv_n, hk_n = g("ssm.state_size"), g("ssm.inner_size"), g("ssm.time_step_rank"), g("ssm.group_count")
            if fused_ba:  # qwen3next's loader takes the value head dim from ssm.state_size, not inner_size
                inner = dk * hv_n
            conv_dim = 2 * dk * hk_n + inner
            exp[p + "attn_qkv.weight"] = (E, conv_dim)
            exp[p + "attn_gate.weight"] = (E, inner)
            exp[p + "ssm_conv1d.weight"] = (g("ssm.conv_kernel"), conv_dim)
            exp[p + "ssm_dt.bias"] = (hv_n,)
            exp[p + "ssm_a"] = (hv_n,)
            if fused_ba:
                exp[p + "ssm_ba.weight"] = (E, 2 * hv_n)
            else:
                exp[p + "ssm_beta.weight"] = (E, hv_n)
                exp[p + "ssm_alpha.weight"] = (E, hv_n)
            exp[p + "ssm_norm.weight"] = (inner // hv_n,)
            exp[p + "ssm_out.weight"] = (inner, E)
        fe, fs = g("expert_feed_forward_length"), g("expert_shared_feed_forward_length")
        exp[p + "ffn_gate_inp.weight"] = (E, n_exp)
        exp[p + "ffn_gate_exps.weight"] = (E, fe, n_exp)
        exp[p + "ffn_up_exps.weight"] = (E, fe, n_exp)
        exp[p + "ffn_down_exps.weight"] = (fe, E, n_exp)
        exp[p + "ffn_gate_inp_shexp.weight"] = (E,)
        exp[p + "ffn_gate_shexp.weight"] = (E, fs)
        exp[p + "ffn_up_shexp.weight"] = (E, fs)
        exp[p + "ffn_down_shexp.weight"] = (fs, E)

    def expected_kda_layer(self, exp, arch, a, l, E, H, n_ff, n_exp):
        # src/models/kimi-linear.cpp and bailingmoe3.cpp load_arch_tensors (llama.cpp 0c1e5709):
        # is_recr(l) = head_count_kv[l] == 0. The 4-D conv taps and Kimi's 4-D ssm_a may also be
        # stored with the trailing 1 dropped (quantized files); synth writes the converter's shape.
        g = lambda k, d=None: self.val(a + k, d)
        p = f"blk.{l}."
        hkv = g("attention.head_count_kv")
        recurrent = (hkv[l] if isinstance(hkv, list) else hkv) == 0
        D, K = g("kda.head_dim"), g("ssm.conv_kernel")
        I = H * D
        kimi = arch == "kimi-linear"
        if recurrent:
            for n in ("q", "k", "v"):
                exp[p + f"ssm_conv1d_{n}.weight"] = (K, 1, I, 1)
                exp[p + f"attn_{n}.weight"] = (E, I)
            exp[p + "ssm_beta.weight"] = (E, H)
            exp[p + "ssm_dt.bias"] = (I,)
            exp[p + "ssm_norm.weight"] = (D,)
            exp[p + "attn_output.weight"] = (I, E)
            if kimi:
                exp[p + "ssm_f_a.weight"] = (E, D)
                exp[p + "ssm_f_b.weight"] = (D, I)
                exp[p + "ssm_g_a.weight"] = (E, D)
                exp[p + "ssm_g_b.weight"] = (D, I)
                exp[p + "ssm_a"] = (1, H, 1, 1)
            else:
                exp[p + "ssm_f_a.weight"] = (E, I)
                exp[p + "ssm_g_a.weight"] = (E, I)
                exp[p + "ssm_a"] = (1, H)
        else:
            rope, kv_lora = g("rope.dimension_count"), g("attention.kv_lora_rank")
            k_mla, v_mla = g("attention.key_length_mla"), g("attention.value_length_mla")
            # bailingmoe3 reads q_lora_rank; kimi-linear decides by attn_q_a_norm being present.
            q_lora = g("attention.q_lora_rank", 0)
            if kimi:
                qan = next((t for t in self.r.tensors if t.name == p + "attn_q_a_norm.weight"), None)
                q_lora = int(qan.shape[0]) if qan is not None else 0
            if q_lora > 0:
                exp[p + "attn_q_a.weight"] = (E, q_lora)
                exp[p + "attn_q_a_norm.weight"] = (q_lora,)
                exp[p + "attn_q_b.weight"] = (q_lora, H * k_mla)
            else:
                exp[p + "attn_q.weight"] = (E, H * k_mla)
            exp[p + "attn_kv_a_mqa.weight"] = (E, kv_lora + rope)
            exp[p + "attn_kv_a_norm.weight"] = (kv_lora,)
            exp[p + "attn_k_b.weight"] = (k_mla - rope, kv_lora, H)
            exp[p + "attn_v_b.weight"] = (kv_lora, v_mla, H)
            if not kimi:
                exp[p + "attn_gate.weight"] = (E, H)
            exp[p + "attn_output.weight"] = (H * v_mla, E)
        exp[p + "ffn_norm.weight"] = (E,)
        if l < g("leading_dense_block_count", 0):
            exp[p + "ffn_gate.weight"] = (E, n_ff)
            exp[p + "ffn_up.weight"] = (E, n_ff)
            exp[p + "ffn_down.weight"] = (n_ff, E)
        else:
            fe, ns = g("expert_feed_forward_length"), g("expert_shared_count")
            fs = fe * max(ns, 1) if kimi else g("expert_shared_feed_forward_length", fe * max(1, ns))
            exp[p + "ffn_gate_inp.weight"] = (E, n_exp)
            exp[p + "exp_probs_b.bias"] = (n_exp,)
            exp[p + "ffn_gate_exps.weight"] = (E, fe, n_exp)
            exp[p + "ffn_up_exps.weight"] = (E, fe, n_exp)
            exp[p + "ffn_down_exps.weight"] = (fe, E, n_exp)
            exp[p + "ffn_gate_shexp.weight"] = (E, fs)
            exp[p + "ffn_up_shexp.weight"] = (E, fs)
            exp[p + "ffn_down_shexp.weight"] = (fs, E)

    def check_tensors(self, arch, a):
        exp = self.expected_tensors(arch, a)
        got = {t.name: t for t in self.r.tensors}
        for name, shape in exp.items():
            t = got.get(name)
            if t is None:
                self.err(f"missing tensor {name}")
            elif tuple(int(x) for x in t.shape) != tuple(shape):
                self.err(f"tensor {name}: shape {tuple(int(x) for x in t.shape)}, llama.cpp expects {shape}")
        for name in got:
            if name not in exp:
                self.err(f"unexpected tensor {name} (llama.cpp: wrong number of tensors)")
        align = self.val("general.alignment", 32)
        size = len(self.r.data)
        for t in self.r.tensors:
            tname = t.tensor_type.name
            if tname not in BLOCK:
                self.err(f"tensor {t.name}: type {tname} is not one synth writes")
                continue
            if int(t.shape[0]) % BLOCK[tname]:
                self.err(f"tensor {t.name}: row of {int(t.shape[0])} is not a whole number of {tname} blocks")
            one_d = len(t.shape) == 1
            if (one_d or "_norm.weight" in t.name or "ffn_gate_inp" in t.name) and tname != "F32":
                self.err(f"tensor {t.name}: {tname}, llama.cpp/llama-quantize keep norms, biases and routers F32")
            if "ssm_conv1d" in t.name and tname != "F32":
                self.err(f"tensor {t.name}: {tname}, llama-quantize never quantizes ssm_conv1d (F32 from the converter)")
            if t.data_offset % align:
                self.err(f"tensor {t.name}: data at {t.data_offset} is not {align}-aligned")
            if t.data_offset + t.n_bytes > size:
                self.err(f"tensor {t.name}: data runs past the end of the file")

    def check_tokenizer(self):
        emb = next(t for t in self.r.tensors if t.name == "token_embd.weight")
        V = int(emb.shape[1])
        toks = self.fields.get("tokenizer.ggml.tokens")
        if toks is None or self.types("tokenizer.ggml.tokens") != [VT.ARRAY, VT.STRING]:
            self.err("tokenizer.ggml.tokens missing or not a string array")
            return
        if len(toks.data) != V:
            self.err(f"tokenizer.ggml.tokens has {len(toks.data)} entries, token_embd has {V} rows")
        for k, want in (("tokenizer.ggml.scores", VT.FLOAT32), ("tokenizer.ggml.token_type", VT.INT32)):
            f = self.fields.get(k)
            if f is None:
                continue
            if self.types(k) != [VT.ARRAY, want]:
                self.err(f"{k}: {[x.name for x in self.types(k)]}, llama.cpp expects an array of {want.name}")
            elif len(f.data) != V:
                self.err(f"{k} has {len(f.data)} entries for {V} tokens")
        texts = toks.contents()
        if len(set(texts)) != len(texts):
            self.err("tokenizer.ggml.tokens has duplicate texts")


def main(paths):
    bad = 0
    for p in paths:
        errs = Checker(p).run()
        if errs:
            bad += 1
            print(f"FAIL {p}")
            for e in errs:
                print(f"  {e}")
        else:
            print(f"ok   {p}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
