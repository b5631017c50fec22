#!/usr/bin/env python3
"""tests/tokenizer/test_tiktoken_random.py: Sluice's reader of Kimi's tiktoken tokenizer (a
folder's tiktoken.model + tokenizer_config.json with tokenizer_class TikTokenTokenizer; `sluice
tokenize --jsonl`) against the `tiktoken` package running Kimi's split pattern (tokenization_kimi.py's
pat_str, class intersections and all) on 60,000 random strings of many scripts, 5,000 of them Han
run into other letters.

No Kimi vocabulary is available offline, so the test makes one: byte-level BPE ranks trained here
on the shared corpus and on random multi-script text (1,500 merges), then 400 extra tokens that
are random pieces of training words (tokens no merge sequence builds, and tokens with several
splits into two tokens: where tiktoken's rules differ from merge-list BPE), then tokens across Han/letter boundaries, then Kimi's 256
special ids (a few named, the rest <|reserved_token_ID|>). Negative control: tiktoken with the
pattern's Han exclusions taken out must disagree with Sluice on strings where Han meets other
letters.

  .venv/bin/python tests/tokenizer/test_tiktoken_random.py build/ci/sluice
"""
import base64
import collections
import json
import os
import random
import shutil
import sys
import tempfile

import regex
import tiktoken

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tokenizers_random import ROOT, random_string, sluice_ids  # noqa: E402

KIMI_PAT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"""
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"""
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
# The negative control's pattern: letters without the Han exclusion.
PLAIN_PAT = KIMI_PAT.replace("&&[^\\p{Han}]", "")
NAMED = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "[UNK]"]


def train_ranks(texts, n_merges, n_extra, rng):
    """Byte-level BPE ranks: the 256 bytes, n_merges trained merges (most frequent pair first over
    the words Kimi's pattern splits), then n_extra random pieces of training words."""
    split = regex.compile(KIMI_PAT)
    words = collections.Counter(w.encode("utf-8") for t in texts for w in split.findall(t))
    ranks = {bytes([b]): b for b in range(256)}
    seqs = {w: [bytes([c]) for c in w] for w in words}
    # The pair counts are kept up to date as merges rewrite words, and where[pair] holds (a
    # superset of) the words that contain the pair: only those are rewritten. Recounting every
    # pair of every word after each merge took over a minute.
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for w, s in seqs.items():
        for p in zip(s, s[1:]):
            pairs[p] += words[w]
            where[p].add(w)
    for _ in range(n_merges):
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        ranks[a + b] = len(ranks)
        for w in where.pop((a, b)):
            s, n = seqs[w], words[w]
            for p in zip(s, s[1:]):
                pairs[p] -= n
                if pairs[p] == 0:
                    del pairs[p]
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
            for p in zip(out, out[1:]):
                pairs[p] += n
                where[p].add(w)
    pool = [w for w in words if len(w) >= 3]
    while n_extra > 0:
        w = rng.choice(pool)
        i = rng.randrange(len(w) - 1)
        piece = w[i:i + rng.randint(2, 8)]
        if len(piece) >= 2 and piece not in ranks:
            ranks[piece] = len(ranks)
            n_extra -= 1
    return ranks


def write_folder(ranks):
    d = tempfile.mkdtemp(prefix="sluice_tiktoken_")
    with open(os.path.join(d, "tiktoken.model"), "w") as f:
        for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(tok).decode()} {r}\n")
    n = len(ranks)
    tc = {"tokenizer_class": "TikTokenTokenizer", "bos_token": "[BOS]", "eos_token": "[EOS]",
          "added_tokens_decoder": {str(n + i): {"content": t, "special": True} for i, t in enumerate(NAMED)}}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write("{}")
    return d


HAN = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年"
LETTERS = ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "абвгдЖЩЯ", "αβγΩΣ", "àéîõüÀÉ",
           "あいうアイウ", "\u0301\u0308"]


def han_mix(rng):
    """Han next to other letters and marks with no space between: where the pattern's Han
    exclusions decide the split."""
    parts = []
    for _ in range(rng.randint(2, 6)):
        r = rng.random()
        pool = HAN[:12] if r < 0.4 else "abcdefghijABCDEFGHIJ" if r < 0.7 else rng.choice(LETTERS)
        parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 4))))
        if rng.random() < 0.2:
            parts.append(rng.choice([" ", "'s", "'LL", "1", "."]))
    return "".join(parts)


def specials(n):
    names = {n + i: t for i, t in enumerate(NAMED)}
    return {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(n, n + 256)}


def main():
    cli = sys.argv[1]
    rng = random.Random(11)
    with open(os.path.join(ROOT, "..", "shared", "corpus", "stories-sampled.txt"), encoding="utf-8") as f:
        corpus = f.read()
    train = [corpus] + [random_string(rng, []) for _ in range(3000)]
    ranks = train_ranks(train, 1500, 400, rng)
    # Tokens across a Han/letter boundary (each Han character a token, then letter + Han and Han +
    # letter): Kimi's pattern never lets a piece hold one, the negative control's pattern does.
    def add(t):
        if t not in ranks:
            ranks[t] = len(ranks)
    for c in HAN:
        add(c.encode()[:2])
        add(c.encode())
    for c in HAN[:12]:
        for x in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ":
            add(x.encode() + c.encode())
            add(c.encode() + x.encode())
    n = len(ranks)
    enc = tiktoken.Encoding("kimi-test", pat_str=KIMI_PAT, mergeable_ranks=ranks, special_tokens=specials(n))
    plain = tiktoken.Encoding("plain-test", pat_str=PLAIN_PAT, mergeable_ranks=ranks, special_tokens=specials(n))
    special_texts = NAMED + ["<|reserved_token_%d|>" % (n + 100)]
    texts = [random_string(rng, special_texts) for _ in range(55000)]
    texts += [han_mix(rng) for _ in range(5000)]
    folder = write_folder(ranks)
    try:
        got = sluice_ids(cli, folder, texts)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    want = [enc.encode(t, allowed_special="all") for t in texts]
    bad = [i for i in range(len(texts)) if got[i] != want[i]]
    print(f"kimi tiktoken ({n} tokens + 256 special): {len(texts) - len(bad)}/{len(texts)} random strings match "
          f"tiktoken")
    for i in bad[:5]:
        print(f"  {texts[i]!r}\n    sluice   {got[i]}\n    tiktoken {want[i]}")
    # Negative control: without the Han exclusions tiktoken splits Han next to other letters
    # differently, and the comparison must see it.
    differ = sum(1 for i, t in enumerate(texts) if plain.encode(t, allowed_special="all") != got[i])
    print(f"negative control: {differ} strings differ from tiktoken without the Han exclusions")
    return 1 if bad or differ < 1000 else 0


if __name__ == "__main__":
    sys.exit(main())
