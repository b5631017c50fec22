// tests/kernels/parity_tolerances: the NMSE limits of a backend's ops against the ref oracle,
// one set for every backend that keeps activations in float32 (cpu: test_backend_parity.cpp,
// cuda: test_cuda_parity.cpp, whose header says why each bound also covers its kernels).
// NMSE = Σ(backend - ref)² / Σ ref²; float32 has ε = 2^-24 ≈ 6e-8 (ε² ≈ 3.6e-15).
#pragma once

namespace sluice {

// matmul, any weight type: both backends see the same decoded float weights (F16/BF16
// conversion is exact; quantized rows go through dequantize_row or a decoder proven
// bit-identical to it by KernelQuant.FastPathsBitExact), so the only difference is the
// float32 accumulation of the cpu vs float64 in ref. With W-lane partial sums each holding
// K/W terms the expected NMSE is ~ε²·K/W, ~1e-14 for K = 4096; observed ≤ 1e-13, up to 2e-12
// when a shape has a single output (n_out = 1, T = 1), where NMSE is the squared relative
// error of one dot product and cancellation in that dot inflates it. 1e-10 keeps 50x
// headroom over the worst case and still catches a slightly wrong row: one row of 64 scaled
// by 1.01 gives ~1e-7 (MatmulNegativeControlPerturbedRow).
inline constexpr double kTolMatmul = 1e-10;
// rms_norm: float32 sum of squares and one float32 scale per row: a few ulps; observed
// ≤ 1e-14.
inline constexpr double kTolRmsNorm = 1e-12;
// rope: cos/sin come from double angles (the same expression as ref) rounded once to float,
// then a float rotation (2 products + 1 sum): ~2 ulps per element; observed ≤ 3e-15.
inline constexpr double kTolRope = 1e-12;
// softmax/swiglu/gelu: the vector exp is a Cephes polynomial good to ~2 ulps (libm expf at
// the generic level), then a division; the softmax sum is float32 over up to 32000 terms.
// Observed ≤ 2e-13 (softmax), ≤ 1e-14 (swiglu, gelu).
inline constexpr double kTolElementwise = 1e-11;
// attention: float32 dot products (~1e-14), online softmax rescaling by e^(m_old - m_new)
// (a few extra ulps per block of 64 positions) and a float32 weighted V sum over up to
// N = 300 positions; observed ≤ 3e-13. 1e-10 follows the matmul headroom policy, and an
// off-by-one causal limit gives ~3e-3 (AttentionNegativeControlCausalOffByOne).
inline constexpr double kTolAttention = 1e-10;
// attention over a q8_0 / q4_0 V at a level whose V sums run on integers (attn_kernels.h's
// axpy_i16): each weight is rounded to int16 steps of its (query head, block, 64 positions)
// chunk's largest, off by at most mx/65534. With one dominant position (y ~ mx·v) and 63
// others at any weight, y's error is ~ sqrt(64)·mx/(65534·sqrt(3))·|v|: NMSE ≲ 64/(3·65534²)
// ≈ 5e-9; observed ≤ 4.5e-9 (BackendParity.Attention's short q8_0 rows, where one position
// dominates), ≤ 8e-10 elsewhere (8-bit weights gave 1e-4, a one-position shift ~1e-3).
inline constexpr double kTolAttentionIntV = 1e-8;
// add, get_rows, store_row: exact operations (IEEE add, exact conversions, the same
// quantize_row), so the tolerance is zero: bitwise equality.

}  // namespace sluice
