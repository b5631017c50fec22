#!/usr/bin/env python3
"""Fits the tqNg codebooks of src/kvcodec/kvcodec.cpp (kGroupHalf2/3/4); not part of the build.

A tqNg group is 32 rotated coordinates y coded as s*c[idx], c symmetric with largest centroid 1,
s the fp16 scale among 33 candidates 0.6..1.2 x max|y| that gives the least squared error (the
encoder's search, kvcodec.cpp encode_group). Lloyd iterations with that search inside, started
from the Lloyd-Max quantizer of N(0,1): code every group of the sample with the current
codebook, move each centroid to the s^2-weighted mean of the normalized values y/s in its cell
(the squared error in y is s^2 (y/s - c)^2); then symmetrize and divide by the largest. (Started
from uniform levels instead, 8 rounds end elsewhere: 4-bit MSE 0.00606 against 0.00584.) The sample is N(0,1): after the random-sign Hadamard
rotation a head's coordinates are close to Gaussian whatever the head (kvcodec.h). Fitting on
SmolLM2-135M's rotated keys instead gave the same centroids to 0.003.

Usage: scripts/kv_codebook_fit.py [--rounds 8]   (needs numpy; prints the positive halves)
"""
import argparse
import math

import numpy as np

GROUP, STEPS, LO, HI = 32, 33, 0.6, 1.2


def code(y, cb):
    """Per group of GROUP: the searched scale s [n] and the chosen centroids [n, GROUP]. The
    candidates are f x max|y| / max|c| (max|c| is 1 once fitted)."""
    amax = np.abs(y).max(1) / np.abs(cb).max()
    bounds = (cb[1:] + cb[:-1]) / 2
    best_err = np.full(len(y), np.inf)
    best_s = np.zeros(len(y))
    best_c = np.zeros_like(y)
    for f in np.linspace(LO, HI, STEPS):
        s = (amax * f).astype(np.float16).astype(np.float64)
        s = np.where(s > 0, s, 1e-30)
        c = cb[np.searchsorted(bounds, y / s[:, None])]
        err = ((y - s[:, None] * c) ** 2).sum(1)
        better = err < best_err
        best_err[better], best_s[better], best_c[better] = err[better], s[better], c[better]
    return best_s, best_c


def lloyd_max_gaussian(bits, iters=300):
    """kvcodec.cpp's lloyd_max_gaussian: centroids at the Gaussian mean of each cell."""
    levels = 1 << bits
    cdf = np.vectorize(lambda x: 0.5 * math.erfc(-x / math.sqrt(2)))
    pdf = lambda x: np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    c = np.linspace(-2.5, 2.5, levels)
    for _ in range(iters):
        b = np.concatenate([[-np.inf], (c[1:] + c[:-1]) / 2, [np.inf]])
        c = (pdf(b[:-1]) - pdf(b[1:])) / (cdf(b[1:]) - cdf(b[:-1]))
    return c


def fit(bits, rounds, y):
    levels = 1 << bits
    cb = lloyd_max_gaussian(bits)
    for _ in range(rounds):
        s, _ = code(y, cb)
        u = (y / s[:, None]).ravel()
        w = np.repeat(s**2, GROUP)
        idx = np.searchsorted((cb[1:] + cb[:-1]) / 2, u)
        cb = np.sort([np.average(u[idx == i], weights=w[idx == i]) if (idx == i).any() else cb[i]
                      for i in range(levels)])
    half = (np.abs(cb[levels // 2:]) + np.abs(cb[:levels // 2][::-1])) / 2
    return half / half.max()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args()
    y = np.random.default_rng(0).standard_normal((20000 * 64 // GROUP, GROUP))  # 20000 heads of 64
    for bits in (2, 3, 4):
        print(bits, np.round(fit(bits, a.rounds, y), 4).tolist())


if __name__ == "__main__":
    main()
