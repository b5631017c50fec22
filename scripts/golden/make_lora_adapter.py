#!/usr/bin/env python3
"""scripts/golden/make_lora_adapter.py: an MLX-LM LoRA adapter for the tiny llama folder and
MLX's logits with it applied, the golden of format/lora (tests/models/test_hf_folder.cpp); and
likewise tests/data/hf/qwen35moe-lora for the Qwen3.5-MoE folder (CONFIG_QWEN35) and
tests/data/hf/kimi-linear-lora for the Kimi Linear folder (CONFIG_KIMI), bailingmoe3-lora for the
Ling 3 folder (CONFIG_LING3), qwen3moe-lora, qwen3next-lora and qwen3next-lora-qkvz (CONFIG_QWEN3MOE,
CONFIG_QWEN3NEXT, CONFIG_QWEN3NEXT_QKVZ).

tests/data/hf/llama-lora/ holds what `mlx_lm.lora` writes: adapter_config.json (num_layers,
lora_parameters: rank, scale, dropout, keys) and adapters.safetensors (lora_a [in, r] and
lora_b [r, out] of each adapted linear, named by module path). Training would start lora_b at
zero; here both are random (seeded) so the adapter changes every adapted output. golden.json:
the token ids, MLX-LM's float32 logits of tests/data/hf/llama loaded with this adapter
(mlx_lm.utils.load(..., adapter_path=...)), and 16 greedy tokens, as make_hf_folders.py writes
them for the folders. The seed is the first from 7 up whose 16 greedy steps all have a top-2
logit margin of at least 0.01 (seed 7's first step was a 9e-5 near tie), so a float-order
difference cannot flip the golden's greedy tokens.

  /tmp/mlxvenv/bin/python scripts/golden/make_lora_adapter.py tests/data/hf [--qwen35moe-only | --kimi-only | --ling3-only | --qwen3-moe-only]
(made with mlx 0.32.4, mlx-lm 0.32.2, tokenizers 0.23.3; the venv as in make_hf_folders.py)
"""
import json
import os
import sys

import mlx.core as mx
import mlx.utils
from mlx_lm.tuner.utils import linear_to_lora_layers
from mlx_lm.utils import load
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_hf_folders import write_golden  # noqa: E402

# The last layer only (num_layers 1 of 2), three of its linears: layer 0 must stay as it was.
CONFIG = {"fine_tune_type": "lora", "num_layers": 1,
          "lora_parameters": {"rank": 4, "scale": 2.0, "dropout": 0.0,
                              "keys": ["self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"]}}


# qwen35moe-lora: the last two layers (a Gated DeltaNet and the full attention), an attention
# projection, the DeltaNet's in and out projections and the shared expert's down projection.
CONFIG_QWEN35 = {"fine_tune_type": "lora", "num_layers": 2,
                 "lora_parameters": {"rank": 4, "scale": 2.0, "dropout": 0.0,
                                     "keys": ["self_attn.q_proj", "linear_attn.in_proj_qkv", "linear_attn.out_proj",
                                              "mlp.shared_expert.down_proj"]}}

# kimi-linear-lora: the last two layers (a KDA layer and the MLA layer): q_proj of both kinds,
# the KDA's decay-gate input, MLA's latent projection, both o_proj and the shared expert's up.
CONFIG_KIMI = {"fine_tune_type": "lora", "num_layers": 2,
               "lora_parameters": {"rank": 4, "scale": 2.0, "dropout": 0.0,
                                   "keys": ["self_attn.q_proj", "self_attn.o_proj", "self_attn.f_a_proj",
                                            "self_attn.kv_a_proj_with_mqa", "mlp.shared_experts.up_proj"]}}

# bailingmoe3-lora: the last three layers (a KDA layer and both MLA layers): the KDA's q_proj,
# g_proj of both kinds (the KDA output gate and MLA's head-wise gate: one name, two tensors),
# MLA's q_b_proj and dense, and the shared expert's down projection.
CONFIG_LING3 = {"fine_tune_type": "lora", "num_layers": 3,
                "lora_parameters": {"rank": 4, "scale": 2.0, "dropout": 0.0,
                                    "keys": ["attention.q_proj", "attention.g_proj", "attention.q_b_proj",
                                             "attention.dense", "mlp.shared_experts.down_proj"]}}

# qwen3moe-lora: both layers' attention projections, q_proj and o_proj.
CONFIG_QWEN3MOE = {"fine_tune_type": "lora", "num_layers": 2,
                   "lora_parameters": {"rank": 4, "scale": 2.0, "dropout": 0.0,
                                       "keys": ["self_attn.q_proj", "self_attn.o_proj"]}}

# qwen3next-lora: the last two layers' attention q_proj, the DeltaNet's out_proj and the shared
# expert's up projection.
CONFIG_QWEN3NEXT = {"fine_tune_type": "lora", "num_layers": 2,
                    "lora_parameters": {"rank": 4, "scale": 2.0, "dropout": 0.0,
                                        "keys": ["self_attn.q_proj", "linear_attn.out_proj",
                                                 "mlp.shared_expert.up_proj"]}}

# qwen3moe-lora-experts: what `mlx_lm.lora` does without keys: every linear of the adapted
# layers (both), the experts' SwitchLinears (LoRASwitchLinear: lora_a [E, r, in], lora_b
# [E, out, r]) and the router included.
CONFIG_QWEN3MOE_ALL = {"fine_tune_type": "lora", "num_layers": 2,
                       "lora_parameters": {"rank": 4, "scale": 2.0, "dropout": 0.0}}

# qwen3next-lora-qkvz: the DeltaNet's fused input projections of the last two layers,
# in_proj_qkvz (split at load into attn_qkv and attn_gate: so is its B) and in_proj_ba (read
# fused as it is).
CONFIG_QWEN3NEXT_QKVZ = {"fine_tune_type": "lora", "num_layers": 2,
                         "lora_parameters": {"rank": 4, "scale": 2.0, "dropout": 0.0,
                                             "keys": ["linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba"]}}


def greedy_margin(model, ids):
    """The smallest top-2 logit gap over 16 greedy steps from ids (float32)."""
    model.set_dtype(mx.float32)
    cur, worst = list(ids), float("inf")
    for _ in range(16):
        last = model(mx.array([cur]))[0, -1]
        top = mx.sort(last)[-2:]
        worst = min(worst, float((top[1] - top[0]).item()))
        cur.append(int(mx.argmax(last).item()))
    return worst


def make(root, base_name, out_name, config, seed0):
    base, out = os.path.join(root, base_name), os.path.join(root, out_name)
    os.makedirs(out, exist_ok=True)
    tok = Tokenizer.from_file(os.path.join(base, "tokenizer.json"))
    from make_hf_folders import TEXT
    for seed in range(seed0, seed0 + 100):
        model, _ = load(base)
        model.freeze()
        linear_to_lora_layers(model, config["num_layers"], config["lora_parameters"])
        mx.random.seed(seed)
        adapters = {}
        for k, v in mlx.utils.tree_flatten(model.trainable_parameters()):
            adapters[k] = (0.1 * mx.random.normal(v.shape)).astype(mx.float32)
        model.load_weights(list(adapters.items()), strict=False)
        margin = greedy_margin(model, tok.encode(TEXT).ids)
        print(out_name, "seed", seed, "greedy margin", margin)
        if margin >= 0.01:
            break
    mx.save_safetensors(os.path.join(out, "adapters.safetensors"), adapters)
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print("adapted:", sorted(adapters))
    # The oracle: MLX-LM loads the base folder with the adapter, as a user would.
    m, _ = load(base, adapter_path=out)
    print("greedy", write_golden(out, tok, m))


def main():
    root = sys.argv[1]
    if "--kimi-only" in sys.argv:
        make(root, "kimi-linear", "kimi-linear-lora", CONFIG_KIMI, 7)
        return
    if "--qwen3-moe-only" in sys.argv:
        make(root, "qwen3moe", "qwen3moe-lora", CONFIG_QWEN3MOE, 7)
        make(root, "qwen3next", "qwen3next-lora", CONFIG_QWEN3NEXT, 7)
        return
    if "--qwen3moe-experts-only" in sys.argv:
        make(root, "qwen3moe", "qwen3moe-lora-experts", CONFIG_QWEN3MOE_ALL, 7)
        return
    if "--qwen3next-qkvz-only" in sys.argv:
        make(root, "qwen3next", "qwen3next-lora-qkvz", CONFIG_QWEN3NEXT_QKVZ, 7)
        return
    if "--ling3-only" in sys.argv:
        make(root, "bailingmoe3", "bailingmoe3-lora", CONFIG_LING3, 7)
        return
    if "--qwen35moe-only" not in sys.argv:
        make(root, "llama", "llama-lora", CONFIG, 7)
    make(root, "qwen35moe", "qwen35moe-lora", CONFIG_QWEN35, 7)
    make(root, "kimi-linear", "kimi-linear-lora", CONFIG_KIMI, 7)
    make(root, "bailingmoe3", "bailingmoe3-lora", CONFIG_LING3, 7)
    make(root, "qwen3moe", "qwen3moe-lora", CONFIG_QWEN3MOE, 7)
    make(root, "qwen3next", "qwen3next-lora", CONFIG_QWEN3NEXT, 7)
    make(root, "qwen3next", "qwen3next-lora-qkvz", CONFIG_QWEN3NEXT_QKVZ, 7)
    make(root, "qwen3moe", "qwen3moe-lora-experts", CONFIG_QWEN3MOE_ALL, 7)


if __name__ == "__main__":
    main()
