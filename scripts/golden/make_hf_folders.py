#!/usr/bin/env python3
"""scripts/golden/make_hf_folders.py: tiny Hugging Face model folders and MLX's logits for them,
the golden of format/hf_folder (tests/models/test_hf_folder.cpp).

For llama and qwen3 a folder tests/data/hf/<arch>/ holds config.json, model.safetensors (random
weights stored as bf16, as HF checkpoints are), tokenizer.json (a byte-level BPE of 400 tokens
trained by `tokenizers` on ../shared/corpus, SmolLM2's pre-tokenizer: digits split, then
byte-level), tokenizer_config.json (chat template, bos/eos) and generation_config.json; and
golden.json: the token ids `tokenizers` gives for a text, and MLX-LM's logits for them (the
model run in float32 on the bf16 weights, so activations are not rounded to bf16) and its 16
greedy tokens.

Then MLX-quantized copies of them, made by mlx-lm's own converter (mlx_lm.convert: the float
folder loaded, nn.quantize'd, saved with its config.json "quantization", tokenizer files
rewritten by transformers), with golden.json from MLX-LM's float32 run of the quantized folder
(set_dtype(float32) widens scales and biases, so quantized_matmul computes scale*q + bias in
float32): llama-q4 and qwen3-q4 (4 bits, groups of 64, embeddings and lm_head too) and
llama-mixed (per-module overrides: 3 bits g32 by default, v_proj 5 bits, down_proj 6 bits g64,
lm_head 8 bits g32, embed_tokens 2 bits g32, layer 0's k_proj left bf16).

  python3 -m venv /tmp/mlxvenv && /tmp/mlxvenv/bin/pip install mlx mlx-cpu mlx-lm tokenizers numpy
  /tmp/mlxvenv/bin/python scripts/golden/make_hf_folders.py ../shared/corpus/stories-sampled.txt tests/data/hf [--quantized-only | --moe-only | --hybrids-only | --mixtral-only | --deepseek-only | --yarn-only |
  --kimi-only | --ling3-only]
(made with mlx 0.32.4, mlx-lm 0.32.2, tokenizers 0.23.3)
"""
import json
import os
import sys

import mlx.core as mx
import numpy as np
from mlx_lm.utils import load
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

TEXT = "Once upon a time, Lily saw 12 birds in the park. She smiled."
# Combining marks that NFC leaves alone (U+0332 composes with nothing): the folder's NFC
# normalizer, which sluice does not apply, changes nothing here.
MARKS_TEXT = "the cat\u0332s and dog\u0332s ran, q\u0332uite \u0332fast"
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def make_tokenizer(corpus, out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([corpus], trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    return tok


def config_for(arch, vocab):
    c = {"vocab_size": vocab, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
         "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "max_position_embeddings": 512, "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 2,
         "torch_dtype": "bfloat16"}
    if arch == "llama":
        c.update({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    else:
        c.update({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "head_dim": 16,
                  "tie_word_embeddings": True})
    return c


def greedy_margins(m, ids, n=16):
    """n greedy tokens after ids (the whole sequence re-run each step) and each step's top1 - top2 gap."""
    cur, greedy, margins = list(ids), [], []
    for _ in range(n):
        row = np.array(m(mx.array([cur]))[0, -1].astype(mx.float32))
        top = np.sort(row)[-2:]
        nxt = int(np.argmax(row))
        greedy.append(nxt)
        margins.append(float(top[1] - top[0]))
        cur.append(nxt)
    return greedy, margins


def write_golden(out, tok, m):
    """MLX-LM's float32 logits of TEXT and 16 greedy tokens for the model m loaded from out."""
    m.set_dtype(mx.float32)
    ids = tok.encode(TEXT).ids
    logits = m(mx.array([ids]))[0].astype(mx.float32)
    greedy, _ = greedy_margins(m, ids)
    golden = {"text": TEXT, "ids": ids, "greedy": greedy, "logits": np.array(logits).round(6).tolist(),
              "chat_ids": tok.encode("<|im_start|>user\nHi<|im_end|>\n").ids}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)
    return greedy


def mixed_predicate(path, module):
    if path == "model.layers.0.self_attn.k_proj":
        return False  # left in bf16: a folder mixing float and quantized linears
    if "v_proj" in path:
        return {"group_size": 32, "bits": 5}
    if "down_proj" in path:
        return {"group_size": 64, "bits": 6}
    if path == "lm_head":
        return {"group_size": 32, "bits": 8}
    if path == "model.embed_tokens":
        return {"group_size": 32, "bits": 2}
    return True  # the default: 3 bits, groups of 32


def quantize_folder(src, out, bits=4, group=64, pred=None):
    """mlx_lm.convert of folder src into out (replaced), without its README and, the weights being
    one file, its index (which adds nothing)."""
    import shutil
    from mlx_lm.convert import convert
    shutil.rmtree(out, ignore_errors=True)
    convert(src, out, quantize=True, q_bits=bits, q_group_size=group, quant_predicate=pred)
    for junk in ["README.md", "model.safetensors.index.json"]:
        if os.path.exists(os.path.join(out, junk)):
            os.remove(os.path.join(out, junk))


def clear_model(path, ids):
    """MLX-LM's model of folder path in float32 if its 16 greedy steps from ids all have a top1 -
    top2 gap of at least 0.02 (tiny random models have near-ties that float rounding flips), else
    None."""
    m, _ = load(path)
    m.set_dtype(mx.float32)
    return m if min(greedy_margins(m, ids)[1]) >= 0.02 else None


def make_quantized(root):
    for name, src, bits, group, pred in [("llama-q4", "llama", 4, 64, None), ("qwen3-q4", "qwen3", 4, 64, None),
                                         ("llama-mixed", "llama", 3, 32, mixed_predicate)]:
        out = os.path.join(root, name)
        quantize_folder(os.path.join(root, src), out, bits, group, pred)
        tok = Tokenizer.from_file(os.path.join(root, src, "tokenizer.json"))
        m, _ = load(out)
        print(name, "greedy", write_golden(out, tok, m))


def make_moe(root):
    """qwen3moe(-q4): a Qwen3-MoE folder (every layer sparse, 8 experts, top 2, renormalized; the
    router mlp.gate at 8 bits in -q4), through make_moe_folder."""
    from mlx_lm.models import qwen3_moe
    tok = Tokenizer.from_file(os.path.join(root, "qwen3", "tokenizer.json"))
    cfg = config_for("qwen3", tok.get_vocab_size())
    cfg.update({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 8,
                "num_experts_per_tok": 2, "moe_intermediate_size": 64, "decoder_sparse_step": 1,
                "mlp_only_layers": [], "norm_topk_prob": True})
    make_moe_folder(root, "qwen3moe", qwen3_moe, cfg, 1002)


def random_weights(model, norm):
    """The model's parameters drawn again, as bf16: RMSNorm weights by norm(shape) (near 1), router
    weights of std 0.15 (spread, token-driven choices), conv1d 0.3, the rest 0.08; a hybrid's A_log
    and dt_bias as initialized (decays of a sensible range), f32 as mlx-lm keeps A_log."""
    import mlx.utils
    weights = {}
    for k, v in dict(mlx.utils.tree_flatten(model.parameters())).items():
        if k.endswith("A_log") or k.endswith("dt_bias"):
            weights[k] = v.astype(mx.float32)
            continue
        if k.endswith("norm.weight"):
            v = norm(v.shape)
        elif k.endswith("mlp.gate.weight"):
            v = 0.15 * mx.random.normal(v.shape)
        elif k.endswith("conv1d.weight"):
            v = 0.3 * mx.random.normal(v.shape)
        else:
            v = 0.08 * mx.random.normal(v.shape)
        weights[k] = v.astype(mx.bfloat16)
    return weights


def make_moe_folder(root, name, module, cfg, seed0, tweak=None):
    """A MoE folder `name` from mlx-lm's class `module` with the qwen3 folder's tokenizer and random
    bf16 weights (router weights of std 0.15: spread, token-driven choices; a hybrid's A_log and
    dt_bias as initialized, f32, as mlx-lm's cast_predicate keeps A_log), stored as mlx-lm keeps
    them (experts stacked as switch_mlp, conv1d [C, K, 1], RMSNorm weights as the multiplier); and
    name-q4: mlx_lm.convert at 4 bits g64 with the model's own quant_predicate. Tiny random
    models have near-ties that float rounding flips: the seed is the first from seed0 whose
    greedy steps, float and 4-bit, all have a top1 - top2 gap of at least 0.02."""
    import shutil
    src, out, q = os.path.join(root, "qwen3"), os.path.join(root, name), os.path.join(root, name + "-q4")
    os.makedirs(out, exist_ok=True)
    for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]:
        shutil.copy(os.path.join(src, f), os.path.join(out, f))
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    ids = tok.encode(TEXT).ids
    for seed in range(seed0, seed0 + 100):
        mx.random.seed(seed)
        model = module.Model(module.ModelArgs.from_dict(cfg))
        weights = random_weights(model, lambda shape: 1.0 + 0.1 * mx.random.normal(shape))
        if tweak:
            tweak(weights)
        mx.save_safetensors(os.path.join(out, "model.safetensors"), weights, metadata={"format": "pt"})
        m = clear_model(out, ids)
        if m is None:
            continue
        quantize_folder(out, q)
        mq = clear_model(q, ids)
        if mq is not None:
            break
    else:
        sys.exit(f"make_moe_folder {name}: no seed in {seed0}..{seed0 + 99} gives greedy gaps >= 0.02")
    print(name, "seed", seed, "greedy", write_golden(out, tok, m))
    print(name + "-q4 greedy", write_golden(q, tok, mq))
    return q


# The hybrids' shared shape: 4 layers, three Gated DeltaNet (2 key heads, 4 value heads: the
# value-to-key head mapping shows) and one gated full attention (partial rotary 0.25), every
# layer sparse (8 experts of width 32, top 2, renormalized) with a sigmoid-gated shared expert.
HYBRID = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "rms_norm_eps": 1e-6, "max_position_embeddings": 512, "tie_word_embeddings": False,
          "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
          "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "num_experts": 8,
          "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
          "norm_topk_prob": True}


def make_qwen35moe(root):
    """qwen35moe(-q4): Qwen3.5-MoE (mlx-lm's qwen3_5_moe: model_type and the language model's
    settings in text_config, weights under language_model., RoPE in rope_parameters). The
    converter rewrites tokenizer.json with Qwen3.5's pre-tokenizer (combining marks kept inside
    words) and an NFC normalizer: golden.json of -q4 adds `tokenizers`' ids of a text with marks."""
    from mlx_lm.models import qwen3_5_moe
    tok = Tokenizer.from_file(os.path.join(root, "qwen3", "tokenizer.json"))
    text = dict(HYBRID, model_type="qwen3_5_moe_text", vocab_size=tok.get_vocab_size(),
                rope_parameters={"type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": [1, 1, 0]})
    cfg = {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
           "tie_word_embeddings": False, "text_config": text}
    q = make_moe_folder(root, "qwen35moe", qwen3_5_moe, cfg, 2000)
    qtok = Tokenizer.from_file(os.path.join(q, "tokenizer.json"))
    with open(os.path.join(q, "golden.json")) as f:
        g = json.load(f)
    g["marks_text"] = MARKS_TEXT
    g["marks_ids"] = qtok.encode(MARKS_TEXT).ids
    with open(os.path.join(q, "golden.json"), "w") as f:
        json.dump(g, f)


def make_hf_layout(root, src_name, name, module, seed0, to_hf):
    """name: the folder src_name's model as transformers writes it (no mlx-lm on the way), with
    new random weights: to_hf(mlx_weights) gives the stored tensors. Its conv1d is [C, 1, K] and
    its RMSNorm weights (not the DeltaNet's gated one) are stored as the offset from 1; norms are
    1 + k/128 for small integers k, so that w - 1 and mlx-lm's bf16 (w - 1) + 1 are both exact and
    its sanitize gives the weights back bit for bit. Golden: MLX-LM loading this folder (its
    sanitize undoes every one of these)."""
    import shutil
    src, out = os.path.join(root, src_name), os.path.join(root, name)
    os.makedirs(out, exist_ok=True)
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]:
        shutil.copy(os.path.join(src, f), os.path.join(out, f))
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    ids = tok.encode(TEXT).ids
    offset_norms = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
                    ".q_norm.weight", ".k_norm.weight")
    for seed in range(seed0, seed0 + 100):
        mx.random.seed(seed)
        model = module.Model(module.ModelArgs.from_dict(cfg))
        mlx_w = random_weights(model, lambda shape: 1.0 + mx.round(0.1 * 128 * mx.random.normal(shape)) / 128)
        for k, v in mlx_w.items():
            if k.endswith("conv1d.weight"):
                mlx_w[k] = v.moveaxis(2, 1)  # [C, K, 1] -> [C, 1, K]
            elif any(k.endswith(sfx) for sfx in offset_norms):
                mlx_w[k] = v - 1.0
        mx.save_safetensors(os.path.join(out, "model.safetensors"), to_hf(mlx_w), metadata={"format": "pt"})
        m = clear_model(out, ids)
        if m is not None:
            break
    else:
        sys.exit(f"make_hf_layout {name}: no seed in {seed0}..{seed0 + 99} gives greedy gaps >= 0.02")
    print(name, "seed", seed, "greedy", write_golden(out, tok, m))


def make_qwen35moe_hf(root):
    """qwen35moe-hf: Qwen3.5-MoE as transformers writes it: keys under model.language_model.,
    experts fused as experts.gate_up_proj [E, 2·width, hidden] and experts.down_proj."""
    from mlx_lm.models import qwen3_5_moe

    def to_hf(w):
        hf = {}
        for k, v in w.items():
            n = k.replace("language_model.model.", "model.language_model.").replace("language_model.lm_head", "lm_head")
            if ".mlp.switch_mlp.gate_proj.weight" in n:
                up = w[k.replace("gate_proj", "up_proj")]
                hf[n.replace("switch_mlp.gate_proj.weight", "experts.gate_up_proj")] = mx.concatenate([v, up], axis=1)
            elif ".mlp.switch_mlp.down_proj.weight" in n:
                hf[n.replace("switch_mlp.down_proj.weight", "experts.down_proj")] = v
            elif ".mlp.switch_mlp.up_proj.weight" not in n:
                hf[n] = v
        return hf

    make_hf_layout(root, "qwen35moe", "qwen35moe-hf", qwen3_5_moe, 4000, to_hf)


def make_qwen3next_hf(root):
    """qwen3next-hf: Qwen3-Next as transformers writes it: every expert's matrices one by one
    (mlp.experts.N.{gate,up,down}_proj.weight)."""
    from mlx_lm.models import qwen3_next

    def to_hf(w):
        hf = {}
        for k, v in w.items():
            if ".mlp.switch_mlp." in k:
                for e in range(v.shape[0]):
                    hf[k.replace("switch_mlp.", f"experts.{e}.")] = v[e]
            else:
                hf[k] = v
        return hf

    make_hf_layout(root, "qwen3next", "qwen3next-hf", qwen3_next, 5000, to_hf)


def make_qwen3next(root):
    """qwen3next(-q4): Qwen3-Next (mlx-lm's qwen3_next: a flat config; in_proj_qkvz and in_proj_ba
    fuse q, k, v, z and beta, alpha per key-head group)."""
    from mlx_lm.models import qwen3_next
    tok = Tokenizer.from_file(os.path.join(root, "qwen3", "tokenizer.json"))
    cfg = dict(HYBRID, model_type="qwen3_next", architectures=["Qwen3NextForCausalLM"],
               vocab_size=tok.get_vocab_size(), intermediate_size=128, rope_theta=10000.0,
               partial_rotary_factor=0.25, decoder_sparse_step=1, mlp_only_layers=[])
    make_moe_folder(root, "qwen3next", qwen3_next, cfg, 3000)


def redraw(suffix, std, dtype):
    """A make_moe_folder tweak: the weights whose names end in suffix drawn again, N(0, std²)."""
    def tweak(w):
        for k in w:
            if k.endswith(suffix):
                w[k] = (std * mx.random.normal(w[k].shape)).astype(dtype)
    return tweak


def make_mixtral(root):
    """mixtral(-q4): a Mixtral (mlx-lm's mixtral: experts under block_sparse_moe, stacked as
    switch_mlp; the top-2 router logits softmaxed), 2 layers, 8 experts of width 64, routers of
    std 0.15, with qwen3's tokenizer."""
    from mlx_lm.models import mixtral
    tok = Tokenizer.from_file(os.path.join(root, "qwen3", "tokenizer.json"))
    cfg = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "vocab_size": tok.get_vocab_size(),
           "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_local_experts": 8, "num_experts_per_tok": 2, "rms_norm_eps": 1e-5,
           "rope_theta": 1e6, "max_position_embeddings": 512, "tie_word_embeddings": False}

    make_moe_folder(root, "mixtral", mixtral, cfg, 8000, redraw("block_sparse_moe.gate.weight", 0.15, mx.bfloat16))


def make_deepseek_v3(root):
    """deepseek2(-q4): a DeepSeek-V3 (mlx-lm's deepseek_v3: MLA with q_lora 64, kv_lora 64, nope 32,
    rope 16 (traditional pairs), v 32, kv_b_proj stored as embed_q / unembed_out; a dense first
    layer, then 8 experts in 2 groups (1 used) top 2, sigmoid with a random selection bias,
    renormalized, scale 2.5, one shared expert), 3 layers, with qwen3's tokenizer."""
    from mlx_lm.models import deepseek_v3
    tok = Tokenizer.from_file(os.path.join(root, "qwen3", "tokenizer.json"))
    cfg = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "vocab_size": tok.get_vocab_size(),
           "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 3,
           "num_attention_heads": 4, "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 8,
           "routed_scaling_factor": 2.5, "kv_lora_rank": 64, "q_lora_rank": 64, "qk_rope_head_dim": 16,
           "v_head_dim": 32, "qk_nope_head_dim": 32, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
           "norm_topk_prob": True, "n_group": 2, "topk_group": 1, "num_experts_per_tok": 2, "moe_layer_freq": 1,
           "first_k_dense_replace": 1, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "rope_scaling": None, "attention_bias": False, "tie_word_embeddings": False}

    make_moe_folder(root, "deepseek2", deepseek_v3, cfg, 9000, redraw("e_score_correction_bias", 0.1, mx.float32))


def make_kimi_linear(root):
    """kimi-linear(-q4): Kimi Linear (mlx-lm's kimi_linear): layers 1-3 KDA (2 heads of 32, short
    convs of 4, low-rank gates), layer 4 MLA without RoPE (kv_lora 64, nope 64, rope 16, v 32:
    embed_q / unembed_out stored per head, quantized 3-D in -q4); a dense first layer, then 8
    experts in 2 groups (1 used) top-2, sigmoid with a selection bias, renormalized, scaled 2.5,
    one shared expert. dt_bias and the selection bias drawn at random (mlx-lm initializes them
    to 0, which would hide a mapping that drops them)."""
    from mlx_lm.models import kimi_linear
    tok = Tokenizer.from_file(os.path.join(root, "qwen3", "tokenizer.json"))
    cfg = {"model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"], "vocab_size": tok.get_vocab_size(),
           "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 2,
           "head_dim": 32, "intermediate_size": 128, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
           "model_max_length": 512, "tie_word_embeddings": False,
           "linear_attn_config": {"num_heads": 2, "head_dim": 32, "short_conv_kernel_size": 4,
                                  "kda_layers": [1, 2, 3], "full_attn_layers": [4]},
           "kv_lora_rank": 64, "qk_nope_head_dim": 64, "qk_rope_head_dim": 16, "v_head_dim": 32,
           "mla_use_nope": True, "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1,
           "moe_intermediate_size": 32, "moe_router_activation_func": "sigmoid", "moe_renormalize": True,
           "routed_scaling_factor": 2.5, "first_k_dense_replace": 1, "moe_layer_freq": 1,
           "use_grouped_topk": True, "num_expert_group": 2, "topk_group": 1}

    def tweak(w):
        for k in w:
            if k.endswith("dt_bias"):
                w[k] = (-3.0 + 0.5 * mx.random.normal(w[k].shape)).astype(mx.float32)
            elif k.endswith("e_score_correction_bias"):
                w[k] = (0.1 * mx.random.normal(w[k].shape)).astype(mx.float32)
            elif k.endswith("conv.weight"):
                w[k] = (0.3 * mx.random.normal(w[k].shape)).astype(mx.bfloat16)

    make_moe_folder(root, "kimi-linear", kimi_linear, cfg, 6000, tweak)


def make_ling3(root):
    """bailingmoe3(-q4): the Ling 3 hybrid (model_type bailing_hybrid, BailingMoeV3ForCausalLM: mlx-lm's
    bailing_moe_v3): 5 layers in groups of 4, so KDA, KDA, KDA, MLA, MLA (the last after the
    last whole group); KDA 4 heads of 32 with the safe gate; MLA with q_lora 128, kv_lora 64,
    nope 32, rope 16 (NORM pairs), v 48 and a head-wise gate; a dense first layer, then 16
    experts in 4 groups (2 used) top 4, sigmoid with a random selection bias, scale 2.5, one
    shared expert of 128. Every width differs, so a swapped or transposed tensor cannot bind.
    A_log ~ log U(1, 2), dt_bias ~ U(-4, -2) (f32), as the GGUF golden's generator draws them."""
    from mlx_lm.models import bailing_moe_v3
    tok = Tokenizer.from_file(os.path.join(root, "qwen3", "tokenizer.json"))
    cfg = {"model_type": "bailing_hybrid", "architectures": ["BailingMoeV3ForCausalLM"],
           "vocab_size": tok.get_vocab_size(), "hidden_size": 64, "num_hidden_layers": 5, "layer_group_size": 4,
           "num_attention_heads": 4, "head_dim": 32, "short_conv_kernel_size": 4, "kda_safe_gate": True,
           "kda_lower_bound": -5.0, "no_kda_lora": True, "q_lora_rank": 128, "kv_lora_rank": 64,
           "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 48, "rope_theta": 10000.0,
           "rope_interleave": True, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
           "first_k_dense_replace": 1, "intermediate_size": 128, "num_experts": 16, "num_experts_per_tok": 4,
           "n_group": 4, "topk_group": 2, "moe_intermediate_size": 64, "num_shared_experts": 1,
           "moe_shared_expert_intermediate_size": 128, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
           "score_function": "sigmoid", "gated_attention_proj_granularity_type": "head_wise",
           "tie_word_embeddings": False}

    def tweak(w):
        for k in w:
            if k.endswith("A_log"):
                w[k] = mx.log(mx.random.uniform(1.0, 2.0, w[k].shape)).astype(mx.float32)
            elif k.endswith("dt_bias"):
                w[k] = mx.random.uniform(-4.0, -2.0, w[k].shape).astype(mx.float32)
            elif k.endswith("expert_bias"):
                w[k] = (0.1 * mx.random.normal(w[k].shape)).astype(mx.float32)

    make_moe_folder(root, "bailingmoe3", bailing_moe_v3, cfg, 7000, tweak)


def make_kimi_linear_hf(root):
    """kimi-linear-hf: the kimi-linear folder's weights as transformers' Kimi Linear checkpoints
    store them (mlx-lm's sanitize maps them back): the KDA convs as q/k/v_conv1d [C, 1, K],
    dt_bias [H, D], MLA's kv_b_proj [H·(nope + v), kv_lora] in place of embed_q / unembed_out,
    and the MoE layers under block_sparse_moe (gate with its e_score_correction_bias,
    shared_experts, experts.E.w1 / w3 / w2 one by one). Golden: MLX-LM loading this folder."""
    import shutil
    src, out = os.path.join(root, "kimi-linear"), os.path.join(root, "kimi-linear-hf")
    os.makedirs(out, exist_ok=True)
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]:
        shutil.copy(os.path.join(src, f), os.path.join(out, f))
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    heads, nope, vdim = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    w = mx.load(os.path.join(src, "model.safetensors"))
    hf = {}
    for k, v in w.items():
        if k.endswith("_conv.conv.weight"):
            hf[k.replace("_conv.conv.weight", "_conv1d.weight")] = v.moveaxis(2, 1)  # [C, K, 1] -> [C, 1, K]
        elif k.endswith("self_attn.dt_bias"):
            hf[k] = v.reshape(cfg["linear_attn_config"]["num_heads"], -1)
        elif k.endswith("self_attn.embed_q.weight"):
            wk, wv = v.swapaxes(-1, -2), w[k.replace("embed_q", "unembed_out")]  # [H, nope, L], [H, v, L]
            hf[k.replace("embed_q", "kv_b_proj")] = mx.concatenate([wk, wv], axis=1).reshape(heads * (nope + vdim), -1)
        elif k.endswith("self_attn.unembed_out.weight"):
            continue
        elif k.endswith("mlp.e_score_correction_bias"):
            hf[k.replace("mlp.", "block_sparse_moe.gate.")] = v
        elif ".mlp.switch_mlp." in k:
            proj = {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}[k.split(".")[-2]]
            for e in range(v.shape[0]):
                hf[k.split(".mlp.")[0] + f".block_sparse_moe.experts.{e}.{proj}.weight"] = v[e]
        elif ".mlp.gate.weight" in k or ".mlp.shared_experts." in k:
            hf[k.replace(".mlp.", ".block_sparse_moe.")] = v
        else:
            hf[k] = v
    mx.save_safetensors(os.path.join(out, "model.safetensors"), hf, metadata={"format": "pt"})
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    m, _ = load(out)
    print("kimi-linear-hf greedy", write_golden(out, tok, m))


# RoPE scaling cases: (folder, rope_scaling). DeepSeek-V3's own YaRN (factor 40 over 4096,
# mscale = mscale_all_dim = 1: the attention scale grows by (0.1·ln 40 + 1)²), and Qwen3's
# (factor 4 over 4096, no mscale_all_dim: cos and sin grow by 0.1·ln 4 + 1).
YARN_CASES = [
    ("deepseek2", {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
                   "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}),
    ("qwen3", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}),
]


def make_yarn_goldens(root):
    """<folder>/golden-yarn.json: MLX-LM's run of the folder's weights with config.json's
    rope_scaling set as YARN_CASES says (the golden keeps it: the test applies it to a copy)."""
    import shutil
    import tempfile
    for name, scaling in YARN_CASES:
        src = os.path.join(root, name)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, name)
            shutil.copytree(src, out, ignore=shutil.ignore_patterns("golden*.json"))
            with open(os.path.join(out, "config.json")) as f:
                cfg = json.load(f)
            cfg["rope_scaling"] = scaling
            with open(os.path.join(out, "config.json"), "w") as f:
                json.dump(cfg, f, indent=2)
            tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
            m, _ = load(out)
            greedy = write_golden(out, tok, m)
            with open(os.path.join(out, "golden.json")) as f:
                g = json.load(f)
        g["rope_scaling"] = scaling
        with open(os.path.join(src, "golden-yarn.json"), "w") as f:
            json.dump(g, f)
        print(name, "yarn greedy", greedy)


def main():
    corpus, root = sys.argv[1], sys.argv[2]
    # One family only, from the folders already there (the later ones take qwen3's tokenizer).
    only = {"--quantized-only": [make_quantized], "--moe-only": [make_moe],
            "--hybrids-only": [make_qwen35moe, make_qwen35moe_hf, make_qwen3next, make_qwen3next_hf],
            "--mixtral-only": [make_mixtral], "--deepseek-only": [make_deepseek_v3], "--kimi-only": [make_kimi_linear, make_kimi_linear_hf],
            "--ling3-only": [make_ling3], "--yarn-only": [make_yarn_goldens]}
    for flag, makers in only.items():
        if flag in sys.argv:
            for make in makers:
                make(root)
            return
    for seed, arch in enumerate(["llama", "qwen3"]):
        out = os.path.join(root, arch)
        os.makedirs(out, exist_ok=True)
        tok = make_tokenizer(corpus, out)
        vocab = tok.get_vocab_size()
        cfg = config_for(arch, vocab)
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "add_bos_token": False,
                       "chat_template": CHAT_TEMPLATE, "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
        with open(os.path.join(out, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 0, "eos_token_id": [2, 0]}, f, indent=2)
        # Random weights in the model's own layout, via mlx-lm's model class, saved as bf16.
        from mlx_lm.models import llama, qwen3
        mod = llama if arch == "llama" else qwen3
        mx.random.seed(1000 + seed)
        model = mod.Model(mod.ModelArgs.from_dict(cfg))
        params = dict(mx.utils.tree_flatten(model.parameters())) if hasattr(mx, "utils") else None
        import mlx.utils
        params = dict(mlx.utils.tree_flatten(model.parameters()))
        weights = {}
        for k, v in params.items():
            if k.endswith("norm.weight"):  # RMSNorm weights near 1, not all exactly 1
                v = 1.0 + 0.1 * mx.random.normal(v.shape)
            else:
                v = 0.08 * mx.random.normal(v.shape)
            weights[k] = v.astype(mx.bfloat16)
        mx.save_safetensors(os.path.join(out, "model.safetensors"), weights, metadata={"format": "pt"})
        # The oracle: MLX-LM loads the folder as a user would, then runs in float32.
        m, _ = load(out)
        print(arch, "vocab", vocab, "greedy", write_golden(out, tok, m))
    make_quantized(root)
    make_moe(root)
    make_qwen35moe(root)
    make_qwen35moe_hf(root)
    make_qwen3next(root)
    make_qwen3next_hf(root)
    make_mixtral(root)
    make_deepseek_v3(root)
    make_kimi_linear(root)
    make_kimi_linear_hf(root)
    make_ling3(root)
    make_yarn_goldens(root)


if __name__ == "__main__":
    main()
