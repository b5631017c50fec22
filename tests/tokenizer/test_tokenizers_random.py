#!/usr/bin/env python3
"""tests/tokenizer/test_tokenizers_random.py: Sluice's tokenizer.json reader (`sluice tokenize
--jsonl`) against Hugging Face `tokenizers` on random strings: 100,000 for each real vocabulary in
../shared/models/vocab (Qwen3: NFC normalizer, Qwen2 split regex; Llama 3; Llama 2's SentencePiece
vocabulary as the Llama 2-style tokenizer.json transformers writes for it, byte_fallback BPE: built
here from ggml-vocab-llama-spm.gguf, and checked once against sentencepiece itself, 20,000/20,000)
and 25,000 for each of: that vocabulary with a Metaspace pre-tokenizer (prepend_scheme "always",
then "first"), and the test folders (SmolLM's digits pre-tokenizer; Qwen3.5's, as mlx_lm.convert
rewrote it). The
strings mix scripts, digits, punctuation, whitespace runs and line breaks, contractions in any
case, decomposed accents and stray combining marks (NFC changes them), emoji sequences and the
tokenizers' own added tokens. Negative control: Qwen3's `tokenizers` with its normalizer taken
away must disagree with Sluice on strings NFC changes. Any other mismatch fails, printed.

  .venv/bin/python tests/tokenizer/test_tokenizers_random.py build/ci/sluice
"""
import functools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB = os.path.join(ROOT, "..", "shared", "models", "vocab")

WORD_POOLS = [
    "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~",
    "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßÀÉÎÕÜ", "абвгдежзийклмнопрстуфхцчшщъыьэюяЖЩЯ", "αβγδεζηθικλμνξοπρστυφχψωΩΣ",
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年", "あいうえおかきくけこさしすせそアイウエオカキ", "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "אבגדהוזחטיכלמנסעפצקרשת", "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह", "กขฃคฅฆงจฉชซฌญฎฏฐฑฒณดตถทธนบปผฝพฟภมยรลวศษสหฬอฮ",
    "😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰😍🤩👍👋🎉🔥💯🚀",
]
SEPARATORS = [" ", " ", " ", "  ", "\n", "\r\n", "\t", "\n\n", " \n", "   ", ""]
EXTRAS = ["'s", "'T", "'LL", "'re", "'Ve", "'m", "'D", "e\u0301", "a\u0308", "o\u0302", "\u0332", "\u0301\u0301",
          "\u0915\u094d\u0937", "👨\u200d👩\u200d👧", "👍🏽", "\u00a0", "\u3000", "\u200b", "12345", "3.14", "1,000,000"]


def random_string(rng, special):
    # rng.random() and rng.choices() rather than randint()/choice() per character: generating the
    # strings took most of this test's time.
    rand = rng.random

    def pick(seq):
        return seq[int(rand() * len(seq))]

    parts = []
    for _ in range(1 + int(rand() * 10)):
        r = rand()
        if r < 0.12:
            parts.append(pick(EXTRAS))
        elif r < 0.14 and special:
            parts.append(pick(special))
        else:
            parts.append("".join(rng.choices(pick(WORD_POOLS), k=1 + int(rand() * 8))))
        parts.append(pick(SEPARATORS))
    return "".join(parts)


def sluice_ids(cli, folder, texts):
    """Sluice's ids of each text, one `sluice tokenize --jsonl` run."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
        path = f.name
    try:
        out = subprocess.run([cli, "tokenize", "-m", folder, "--jsonl", "-f", path], capture_output=True, check=True,
                             text=True, encoding="utf-8").stdout
    finally:
        os.remove(path)
    return [json.loads(line) for line in out.splitlines()]


def folder_for(tokenizer_json, config_json=None):
    """A folder holding only the tokenizer files (sluice tokenize reads no weights)."""
    d = tempfile.mkdtemp(prefix="sluice_tok_")
    with open(tokenizer_json, encoding="utf-8") as f, open(os.path.join(d, "tokenizer.json"), "w",
                                                            encoding="utf-8") as g:
        g.write(f.read())
    if config_json and os.path.exists(config_json):
        with open(config_json, encoding="utf-8") as f, open(os.path.join(d, "tokenizer_config.json"), "w",
                                                            encoding="utf-8") as g:
            g.write(f.read())
    with open(os.path.join(d, "config.json"), "w") as g:
        g.write("{}")
    return d


@functools.lru_cache
def spm_vocab_and_merges(gguf_path):
    """The tokens, types, vocab and merges of a GGUF's SentencePiece vocabulary (tokens, scores,
    types), the merges extracted as transformers' SentencePieceExtractor does (every split of a
    token into two tokens, ordered by the token's score); once per file, as it takes seconds."""
    import gguf
    r = gguf.GGUFReader(gguf_path)
    f = r.fields["tokenizer.ggml.tokens"]
    toks = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    sf, tf = r.fields["tokenizer.ggml.scores"], r.fields["tokenizer.ggml.token_type"]
    scores = [float(sf.parts[i][0]) for i in sf.data]
    types = [int(tf.parts[i][0]) for i in tf.data]
    vocab = {t: i for i, t in enumerate(toks)}
    merges = []
    for piece, score in zip(toks, scores):
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        merges.extend(sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]])))
    merges = [(a, b) for a, b, _ in sorted(merges, key=lambda m: m[2], reverse=True)]
    return toks, types, vocab, merges


def spm_tokenizer_json(gguf_path, out_dir, metaspace=None):
    """A Llama 2-style tokenizer.json (BPE with byte_fallback, the legacy Prepend + Replace
    normalizer; or, with metaspace "always" / "first", a Metaspace pre-tokenizer as newer files
    have) from the SentencePiece vocabulary of a GGUF: what convert_slow_tokenizer writes for
    Llama 2."""
    from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers
    toks, types, vocab, merges = spm_vocab_and_merges(gguf_path)
    tok = Tokenizer(models.BPE(vocab, merges, unk_token=toks[0], fuse_unk=True, byte_fallback=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=metaspace, split=False)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(toks, types) if ty == 3])
    path = os.path.join(out_dir, f"tokenizer-{metaspace or 'legacy'}.json")
    tok.save(path)
    return path


def check(cli, name, tokenizer_json, config_json, n, seed):
    hf = Tokenizer.from_file(tokenizer_json)
    special = [t.content for t in hf.get_added_tokens_decoder().values()][:50]
    rng = random.Random(seed)
    texts = [random_string(rng, special) for _ in range(n)]
    folder = folder_for(tokenizer_json, config_json)
    try:
        got = sluice_ids(cli, folder, texts)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    bad = [i for i in range(n) if got[i] != want[i]]
    print(f"{name}: {n - len(bad)}/{n} random strings match tokenizers")
    for i in bad[:5]:
        print(f"  {texts[i]!r}\n    sluice     {got[i]}\n    tokenizers {want[i]}")
    return texts, got, bad


def main():
    cli = sys.argv[1]
    cases = [
        ("qwen3 (151k, NFC)", os.path.join(VOCAB, "qwen3-tokenizer.json"),
         os.path.join(VOCAB, "qwen3-tokenizer_config.json"), 100000, 1),
        ("llama3 (128k)", os.path.join(VOCAB, "llama3-tokenizer.json"),
         os.path.join(VOCAB, "llama3-tokenizer_config.json"), 100000, 2),
        ("tests/data/hf/llama (smollm digits)", os.path.join(ROOT, "tests/data/hf/llama/tokenizer.json"), None, 25000,
         3),
        ("tests/data/hf/qwen35moe-q4 (qwen35, NFC)", os.path.join(ROOT, "tests/data/hf/qwen35moe-q4/tokenizer.json"),
         None, 25000, 4),
    ]
    spm_dir = tempfile.mkdtemp(prefix="sluice_spm_")
    try:
        spm = os.path.join(VOCAB, "ggml-vocab-llama-spm.gguf")
        cases.append(("llama-spm (32k, SentencePiece-style BPE, byte fallback)", spm_tokenizer_json(spm, spm_dir), None,
                      100000, 5))
        for seed, scheme in [(6, "always"), (7, "first")]:
            cases.append((f"llama-spm, Metaspace {scheme}", spm_tokenizer_json(spm, spm_dir, scheme), None, 25000, seed))
        return run(cli, cases)
    finally:
        shutil.rmtree(spm_dir, ignore_errors=True)


def run(cli, cases):
    failed = False
    for name, tj, tc, n, seed in cases:
        if not os.path.exists(tj):
            print(f"{name}: {tj} missing")
            return 1
        texts, got, bad = check(cli, name, tj, tc, n, seed)
        failed |= bool(bad)
        if seed == 1:
            # Negative control: without its NFC normalizer `tokenizers` must disagree with Sluice
            # on the strings NFC changes (so the comparison above can fail).
            hf = Tokenizer.from_file(tj)
            hf.normalizer = None
            plain = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
            differ = sum(1 for i in range(len(texts)) if plain[i] != got[i])
            print(f"negative control: {differ} strings differ from tokenizers without NFC")
            failed |= differ < 1000
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
