#!/usr/bin/env python3
"""Fits the tqNg codebooks of src/kvcodec/kvcodec.cpp (kGroupHalf2/3/4); not part of the build.

A tqNg group is 32 rotated coordinates y coded as s*c[idx], c symmetric with largest centroid 1,
s the fp16 scale among 33 candidates 0.6..1.2 x max|y| that gives the least squared error (the
encoder's search, kvcodec.cpp encode_group). Lloyd iterations with that search inside: code
every group of the sample with the current codebook, move each centroid to the s^2-weighted
mean of the normalized values y/s in its cell (the squared error in y is s^2 (y/s - c)^2),
symmetrize, divide by the largest. The sample is N(0,1): after the random-sign Hadamard
rotation a head's coordinates are close to Gaussian whatever the head (kvcodec.h). Fitting on
SmolLM2-135M's rotated keys instead gave the same centroids to 0.003.

Usage: scripts/kv_codebook_fit.py [--rounds 8]   (needs numpy; prints the positive halves)
"""
import argparse

import numpy as np

GROUP, STEPS, LO, HI = 32, 33, 0.6, 1.2


def code(y, cb):
    """Per group of GROUP: the searched scale s [n] and the chosen centroids [n, GROUP]."""
    amax = np.abs(y).max(1)
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


def fit(bits, rounds, y):
    levels = 1 << bits
    cb = np.linspace(-1, 1, levels)
    for _ in range(rounds):
        s, _ = code(y, cb)
        u = (y / s[:, None]).ravel()
        w = np.repeat(s**2, GROUP)
        idx = np.searchsorted((cb[1:] + cb[:-1]) / 2, u)
        cb = np.array([np.average(u[idx == i], weights=w[idx == i]) if (idx == i).any() else cb[i]
                       for i in range(levels)])
        half = (np.abs(cb[levels // 2:]) + np.abs(cb[:levels // 2][::-1])) / 2
        cb = np.concatenate([-half[::-1], half]) / half.max()
    return cb[levels // 2:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args()
    y = np.random.default_rng(0).standard_normal((20000 * 64 // GROUP, GROUP))
    for bits in (2, 3, 4):
        print(bits, np.round(fit(bits, a.rounds, y), 4).tolist())


if __name__ == "__main__":
    main()
