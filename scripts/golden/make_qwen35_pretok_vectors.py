#!/usr/bin/env python3
"""scripts/golden/make_qwen35_pretok_vectors.py: token ids by `tokenizers` for random strings
under Qwen3.5's pre-tokenizer (combining marks kept inside words), the oracle of sluice's
`qwen35` pre-tokenizer (tests/unit/test_tokenizer_bpe.cpp). The vocabulary and merges are
Qwen3's (../shared/models/vocab/qwen3-tokenizer.json, which Qwen3.5 keeps), its Split regex
replaced by the one Qwen3.5's tokenizer.json carries. The strings mix letters of several
scripts, combining marks (after letters, after spaces, at the start), digits, punctuation,
spaces, tabs and newlines; each is NFC-normalized first (the file's NFC normalizer, which sluice
does not apply, then changes nothing). Writes tests/data/tokenizer/qwen35-marks.{inp,out} in
llama.cpp's vector format (cases separated by "\\n__ggml_vocab_test__\\n"; one line of ids each).

  /tmp/mlxvenv/bin/python scripts/golden/make_qwen35_pretok_vectors.py ../shared/models/vocab/qwen3-tokenizer.json tests/data/tokenizer
(made with tokenizers 0.23.3)
"""
import json
import os
import random
import sys
import unicodedata

from tokenizers import Tokenizer

QWEN35 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
          "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
N = 2000

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" + "αβγδεζηθ" + "абвгдеж" + "नमसतकप" + "ภาษไทย" + "日本語中文" + "한국어"
MARKS = [chr(c) for c in list(range(0x0300, 0x0370)) + [0x0332, 0x0901, 0x0902, 0x093F, 0x094D, 0x0E31, 0x0E34, 0x0E48,
                                                           0x20D7, 0x3099]]
OTHER = list("0123456789") + list(" .,;:!?'\"()-_/\\@#$%&*+=<>[]{}|~`") + [" ", " ", "  ", "\t", "\n", "\r\n", "'s", "'LL"]


def random_string(rng):
    out = []
    for _ in range(rng.randint(1, 24)):
        r = rng.random()
        if r < 0.45:
            out.append(rng.choice(LETTERS))
        elif r < 0.7:
            out.append(rng.choice(MARKS))
        else:
            out.append(rng.choice(OTHER))
    return unicodedata.normalize("NFC", "".join(out))


def main():
    src, out_dir = sys.argv[1], sys.argv[2]
    t = json.load(open(src))
    t["normalizer"] = None
    t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = QWEN35
    tok = Tokenizer.from_str(json.dumps(t))
    rng = random.Random(35)
    cases = []
    while len(cases) < N:
        s = random_string(rng)
        if s not in cases:
            cases.append(s)
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, "qwen35-marks")
    with open(base + ".inp", "w", encoding="utf-8", newline="") as f:
        f.write("\n__ggml_vocab_test__\n".join(cases) + "\n__ggml_vocab_test__\n")
    with open(base + ".out", "w") as f:
        for s in cases:
            f.write("".join(" " + str(i) for i in tok.encode(s, add_special_tokens=False).ids) + "\n")
    print(base, len(cases), "cases")


if __name__ == "__main__":
    main()
