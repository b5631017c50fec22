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

  python3 -m venv /tmp/mlxvenv && /tmp/mlxvenv/bin/pip install mlx mlx-cpu mlx-lm tokenizers numpy
  /tmp/mlxvenv/bin/python scripts/golden/make_hf_folders.py ../shared/corpus/stories-sampled.txt tests/data/hf
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


def main():
    corpus, root = sys.argv[1], sys.argv[2]
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
        m.set_dtype(mx.float32)
        ids = tok.encode(TEXT).ids
        logits = m(mx.array([ids]))[0].astype(mx.float32)
        cur, greedy = list(ids), []
        for _ in range(16):
            nxt = int(mx.argmax(m(mx.array([cur]))[0, -1]).item())
            greedy.append(nxt)
            cur.append(nxt)
        golden = {"text": TEXT, "ids": ids, "greedy": greedy, "logits": np.array(logits).round(6).tolist(),
                  "chat_ids": tok.encode("<|im_start|>user\nHi<|im_end|>\n").ids}
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump(golden, f)
        print(arch, "vocab", vocab, "ids", len(ids), "greedy", greedy)


if __name__ == "__main__":
    main()
