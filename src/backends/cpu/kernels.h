// backends/cpu/kernels: the table of inner loops the cpu backend calls, one instance per ISA
// level (kernels_generic.cpp, kernels_avx2.cpp, kernels_avx512.cpp; the last two are built
// with their ISA flags by CMake and must only be called after a CPUID check).
//
// Determinism contract, shared by all levels: every dot product is accumulated in one
// vector of W lanes (W = 8 generic/AVX2, 16 AVX-512), walking the row in W-element steps
// (the tail zero-padded), then reduced in a fixed order. So a dot's value depends only on
// its two operands, never on which rows or tokens are computed alongside it, on the tile
// shape, or on the thread that runs it.
//
// Legend: n = elements per row, ldw/ldx/ldy = row strides in elements.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace sluice::cpu {

// Asks for [p, p + n) in L1 ahead of its use: the decode row paths call it on the next
// row (or group of rows) while they compute the current one. Intel Xeon's prefetchers lose
// the stream of a kernel that reads a few KiB per row between longer computations: a
// 2048 × 131072 Q8_0 matrix from DRAM, 1 thread, 6.8 GB/s without it and 13.7 GB/s with it
// (2 threads 12.9 vs 27.4, the read bandwidth measured beside it 25.6).
inline void prefetch_lines(const void* p, size_t n) {
  for (size_t o = 0; o < n; o += 64) __builtin_prefetch(static_cast<const char*>(p) + o);
}

// Fast paths for one quantized weight type. Both produce exactly the floats of quant/'s
// dequantize_row (same operations, same rounding, no fused multiply-add), so the cpu
// backend's results do not depend on which path ran.
struct QuantOps {
  // Decode n elements (a whole number of blocks) of one row.
  void (*decode)(const void* src, float* dst, int64_t n);
  // y[r] = Σ_i W_r[i]·x[i] for n_rows rows, row_bytes apart: decodes block by block into
  // L1 and accumulates exactly as gemm_f32 would on the decoded rows (one token).
  void (*gemv)(const void* w, size_t row_bytes, int64_t n_rows, const float* x, int64_t n, float* y);
};

struct Kernels {
  CpuIsa isa;
  int lanes;  // W above

  // y[t*ldy + r] = Σ_i W_r[i]·x[t*ldx + i] for r < n_rows, t < n_tok, W_r = w + r*ldw.
  // W is F32, F16 (IEEE half) or BF16; converting a half or bf16 to float is exact, so the
  // three variants give identical results for the same values.
  void (*gemm_f32)(const float* w, size_t ldw, int64_t n_rows, const float* x, size_t ldx, int64_t n_tok, int64_t n,
                   float* y, size_t ldy);
  void (*gemm_f16)(const uint16_t* w, size_t ldw, int64_t n_rows, const float* x, size_t ldx, int64_t n_tok, int64_t n,
                   float* y, size_t ldy);
  void (*gemm_bf16)(const uint16_t* w, size_t ldw, int64_t n_rows, const float* x, size_t ldx, int64_t n_tok, int64_t n,
                    float* y, size_t ldy);
  // Σ a[i]·b[i] (same accumulation as gemm), a F32 or F16.
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  float (*dot_f16)(const uint16_t* a, const float* b, int64_t n);
  // y += a·x, x F32 or F16.
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n);
  void (*axpy_f16)(float a, const uint16_t* x, float* y, int64_t n);
  // y += Σ_j a[j]·X_j over n_rows rows X_j = x + j·ldx, applied row after row to each
  // element: bitwise the same as n_rows axpy calls, but y stays in registers.
  void (*axpy_rows_f32)(const float* a, const float* x, size_t ldx, int64_t n_rows, float* y, int64_t n);
  void (*axpy_rows_f16)(const float* a, const uint16_t* x, size_t ldx, int64_t n_rows, float* y, int64_t n);
  // C[i·ldc + j] += Σ_p A[i·lda + p]·B[p·ldb + j] for i < m, j < n, p < k: a row-major product
  // accumulated into C, each element's sum fused-multiply-added in increasing p from C's value
  // (so a C zeroed first gets exactly that sum). For the small dense products of the chunked
  // delta rule; a block of C rows × columns stays in registers while B's rows stream past.
  void (*matmul_acc_f32)(const float* a, size_t lda, const float* b, size_t ldb, float* c, size_t ldc, int64_t m,
                         int64_t n, int64_t k);
  // Conversions (F16 rounds to nearest even, as F16C and quant/'s fp32_to_fp16).
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n);
  void (*f32_to_f16)(const float* x, uint16_t* y, int64_t n);
  void (*bf16_to_f32)(const uint16_t* x, float* y, int64_t n);
  // Σ x[i]²
  float (*sum_sq)(const float* x, int64_t n);
  // y = x·s·w (w may be null: y = x·s). y may alias x.
  void (*scale_mul)(const float* x, float s, const float* w, float* y, int64_t n);
  float (*max)(const float* x, int64_t n);
  // x[i] = exp(x[i] - m) in place; returns Σ x[i] (after).
  float (*exp_sub_sum)(float* x, float m, int64_t n);
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);
  // min(silu(g), limit) · clamp(u, -limit, limit): Backend::swiglu with a clamp (limit > 0).
  void (*swiglu_limit)(const float* gate, const float* up, float* out, int64_t n, float limit);
  void (*gelu)(const float* x, float* out, int64_t n);
  void (*add)(const float* a, const float* b, float* out, int64_t n);

  // Quantized fast paths; a null decode means "none at this level: use dequantize_row".
  // (Q5_0/Q5_1 have none: their fifth bits are spread across a 32-bit word per block.)
  QuantOps q8_0, q4_0, q4_1, q8_a, q2_K, q3_K, q4_K, q5_K, q6_K;

  // The fast path for t, or nullptr.
  const QuantOps* quant(DType t) const {
    const QuantOps* q = nullptr;
    switch (t) {
      case DType::Q8_0: q = &q8_0; break;
      case DType::Q4_0: q = &q4_0; break;
      case DType::Q4_1: q = &q4_1; break;
      case DType::Q8_A: q = &q8_a; break;
      case DType::Q2_K: q = &q2_K; break;
      case DType::Q3_K: q = &q3_K; break;
      case DType::Q4_K: q = &q4_K; break;
      case DType::Q5_K: q = &q5_K; break;
      case DType::Q6_K: q = &q6_K; break;
      default: break;
    }
    return q && q->decode ? q : nullptr;
  }
};

// Int8 dot-product paths (kernels_q8_impl.h): the weight row against activations quantized
// once per token to `act` (Q8_K for the K-quants, Q8_0 for Q4_0/Q8_0), as ggml's
// ggml_vec_dot_<w>_<act>. They read each weight byte once and never form floats of the
// weights; the result differs from the float path by the activation rounding (~0.4% per
// element). Determinism: each dot's value depends only on its two operands.
// Prefill tiles (kernels_q8_ktiles_impl.h, kernels_q8_tiles32_impl.h: "row-interleaved tiles"):
// kQ8TileRows weight rows repacked so that one 64-byte vector holds 4 consecutive inputs of each of
// 16 rows. A vpdpbusd of that vector with 4 broadcast activation bytes then gives 16 rows' partial
// sums in 16 lanes: no horizontal sums, sub-block scales applied per lane, and each unpacked weight
// vector is reused by several tokens. The repack is paid once per 16 rows and call, so one token
// (decode, bandwidth-bound) keeps the row path; from two tokens on, tiles win (1 thread, Zen 4,
// 2048×768 Q4_K, 768×2048 Q6_K, 2048×768 Q8_0 in GMAC/s, tiles vs rows: 47 vs 35, 31 vs 27, 32 vs
// 24 at 2 tokens; 110 vs 51, 100 vs 55 at 16; Q8_0 76 vs 35 at 32).
//
// Numerics: a tile computes for row r and token t, (super-)block by (super-)block,
//   acc = fma(float(sumi), d_r·d_t, acc)   (Q4_K then also acc = fma(-float(mins), dmin_r·d_t, acc))
// with sumi (Q6_K: the -32 offset included) and mins exact int32 sums. The row path (Q8Ops::gemm)
// accumulates the same exact sums in another float order, so the two agree to float
// rounding (~1e-7 relative), not bitwise: a token's result depends on whether its batch used
// tiles. Thread counts still never change a result (tiles start at multiples of 16 rows).
// Levels: AVX-512 VNNI, the generic scalar twin, and without VNNI (AVX2) the K-quant tiles of
// kernels_q8_tiles_avx2.h: vpmaddubsw pairs added in 16 bits over a whole sub-block, one
// vpmaddwd by the scales, weights unpacked once per call into L1 (Zen 3, 1 thread, 2048×768,
// 32 tokens: Q4_K 74 vs 40 GMAC/s for rows, Q6_K 54-64 vs 45).
constexpr int64_t kQ8TileRows = 16;
// Tiles from 9 tokens by default: a few tokens (several sequences decoding together) are bound by
// reading the weights, and a tile's repack then costs more than its dot products save. 12-layer
// qwen3-30b-a3b Q4_K_M, 2 threads, AMD EPYC Zen 4: 4 sequences 95 aggregate t/s with the row
// path vs 57 with tiles from 2 tokens, 8 sequences 105 vs 97, 16 sequences 103 vs 124 (before
// the packs prefetched; the VNNI K-quant tiles now start earlier: Q8TileOps::min_tokens).
constexpr int64_t kQ8TileMinTokens = 9;
// Σ of a Q8_0 activation block's 32 quants (exact): what every row of the 32-block types
// with a min needs (Σa·m), and the tiles' offset correction (Q8TileOps::act_sums).
inline int32_t q8_0_quant_sum(const block_q8_0& b) {
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) s += b.qs[j];
  return s;
}

struct Q8TileOps {
  // Bytes of one packed tile of n inputs (a whole number of super-blocks).
  size_t (*bytes)(int64_t n) = nullptr;
  // Packs rows [0, nr) (nr ≤ kQ8TileRows; missing rows are zero) of w, row_bytes apart.
  void (*pack)(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) = nullptr;
  // y[t*ldy + r] = dot(W_r, A_t) for r < nr, t < n_tok (A_t = a + t*a_row_bytes, as gemm).
  // sums: with act_sums, the exact Σ of each 32-block's quants of A_t at sums[t·(n/32) + i]
  // (q8_0_quant_sum, by the backend once per matmul, not once per 16 rows); else unread (may be null).
  void (*gemm)(const uint8_t* tile, int64_t n, const void* a, size_t a_row_bytes, const int32_t* sums, int64_t n_tok,
               float* y, size_t ldy, int64_t nr) = nullptr;
  bool act_sums = false;
  // The AMX tiles (kernels_amx.cpp) instead: bytes, pack and gemm null, gemm_rows packs and
  // multiplies rows [0, nr) of w in one pass, y[t*ldy + r] = dot(W_r, A_t), reading the
  // activations as act_pack repacked them (once per matmul: all n_tok tokens of the quantized
  // rows a, into act_bytes(n, n_tok) bytes, 64-byte aligned). Bitwise the scalar twin's results.
  void (*gemm_rows)(const void* w, size_t row_bytes, int64_t nr, int64_t n, const void* packed_a, int64_t n_tok,
                    float* y, size_t ldy) = nullptr;
  size_t (*act_bytes)(int64_t n, int64_t n_tok) = nullptr;
  void (*act_pack)(const void* a, size_t a_row_bytes, int64_t n, int64_t n_tok, uint8_t* out) = nullptr;
  // The smallest batch these tiles take by default (CpuBackendOptions::q8_tile_min_tokens
  // overrides it): where they start to beat the row path at this level (kQ8TileMinTokens unless
  // measured otherwise, see q8_table).
  int64_t min_tokens = kQ8TileMinTokens;
  bool any() const { return gemm || gemm_rows; }
};

struct Q8Ops {
  DType act = DType::F32;  // activation block type; F32 = no int8 path for this weight type
  // y[t*ldy + r] = dot(W_r, A_t) for r < n_rows, t < n_tok, W_r = w + r*row_bytes,
  // A_t = a + t*a_row_bytes (n elements quantized to act).
  void (*gemm)(const void* w, size_t row_bytes, int64_t n_rows, const void* a, size_t a_row_bytes, int64_t n_tok,
               int64_t n, float* y, size_t ldy) = nullptr;
  Q8TileOps tile;  // tile.gemm null: no tiled path for this type at this level
  // The same products from the interleaved layout (TensorView::rows16, quant/rows16.h): rows
  // [0, nr) of the groups at w16 (nr a multiple of 16), any n_tok, y[t*ldy + r]. The same
  // integer sums and float operations as tile.gemm, so bitwise its results at every batch
  // size. sums: where tile.act_sums, each token's 32-block sums as tile.gemm takes them (the
  // caller's, made once per activation: a decode step calls this per 16 rows), or null (made
  // here). Null: this level reads the rows (the backend ignores rows16).
  void (*rows16)(const void* w16, int64_t nr, int64_t n, const void* a, size_t a_row_bytes, const int32_t* sums,
                 int64_t n_tok, float* y, size_t ldy) = nullptr;
};

// Rows of one MLX affine matrix (DType::MLX_A*, TensorView::affine) where the file keeps them:
// row r's codes at codes + r·code_row_bytes, its n / group_size scales and biases (scale_type)
// at scales / biases + r·group_row_bytes.
struct AffineRows {
  const uint8_t* codes = nullptr;
  size_t code_row_bytes = 0;
  const uint8_t* scales = nullptr;
  const uint8_t* biases = nullptr;
  size_t group_row_bytes = 0;
  int bits = 4, group_size = 64;
  DType scale_type = DType::F16;
};

// One token's affine activation row per 64 inputs (kernels_q8_affine_impl.h): 64 quants, 16
// lane scales, 16 lane sums.
constexpr int64_t kAffineChunk = 64;
constexpr size_t kAffineChunkBytes = 64 + 16 * 4 + 16 * 4;
// Bytes of one token's activation row of n inputs (n a multiple of kAffineChunk).
constexpr size_t affine_act_bytes(int64_t n) { return static_cast<size_t>(n / kAffineChunk) * kAffineChunkBytes; }

// The int8 path of the affine types (kernels_q8_affine_impl.h): activations prepared once per
// token into affine_act_bytes(n) bytes (n a multiple of 64; the layout depends on the code width),
// then y[t·ldy + r] = dot(W_r, A_t) for r < n_rows, t < n_tok.
struct AffineOps {
  void (*act_prepare)(const float* x, int64_t n, int bits, uint8_t* out) = nullptr;
  void (*gemm)(const AffineRows& w, int64_t n_rows, const uint8_t* a, size_t a_row_bytes, int64_t n_tok, int64_t n,
               float* y, size_t ldy) = nullptr;
};

struct Q8Kernels {
  const char* name;  // "generic", "avx2", "avx512", "avx512-vnni"
  Q8Ops q4_0, q4_1, q5_0, q5_1, q8_a, q8_0, q4_K, q5_K, q6_K, q2_K, q3_K, iq4_nl, iq4_xs;
  // quantize_row(Q8_K, x, y, n) with vectors: the same bytes for finite x (tested); null = use
  // quantize_row. Prefill quantizes each token once per matmul, 3 times per routed expert.
  void (*quantize_q8_K)(const float* x, void* y, int64_t n) = nullptr;
  // quantize_row(Q8_0, x, y, n) likewise (the activations of the 32-block types).
  void (*quantize_q8_0)(const float* x, void* y, int64_t n) = nullptr;
  AffineOps affine;
  const Q8Ops* get(DType t) const {
    const Q8Ops* q = nullptr;
    switch (t) {
      case DType::Q4_0: q = &q4_0; break;
      case DType::Q4_1: q = &q4_1; break;
      case DType::Q5_0: q = &q5_0; break;
      case DType::Q5_1: q = &q5_1; break;
      case DType::Q8_A: q = &q8_a; break;
      case DType::Q8_0: q = &q8_0; break;
      case DType::Q4_K: q = &q4_K; break;
      case DType::Q5_K: q = &q5_K; break;
      case DType::Q6_K: q = &q6_K; break;
      case DType::Q2_K: q = &q2_K; break;
      case DType::Q3_K: q = &q3_K; break;
      case DType::IQ4_NL: q = &iq4_nl; break;
      case DType::IQ4_XS: q = &iq4_xs; break;
      default: break;
    }
    return q && q->gemm ? q : nullptr;
  }
};

// The generic level is the scalar twin of the SIMD levels (same integer sums); the avx512
// level uses VNNI (dpbusd) only where cpu_features() reports it.
const Q8Kernels& q8_kernels_generic();
const Q8Kernels& q8_kernels_avx2();
const Q8Kernels& q8_kernels_avx512();
const Q8Kernels& q8_kernels_for(CpuIsa isa);
// The avx512-vnni table with AMX-INT8 prefill tiles for Q4_K, Q5_K and Q6_K (kernels_amx.cpp),
// or null where the CPU lacks AMX-INT8 (or VNNI, VBMI) or the kernel refuses the tile state.
const Q8Kernels* q8_kernels_amx();
// Multiply-adds of `iters` rounds of four independent tdpbssd (16×16×64 each) on this thread,
// for the AMX peak of `sluice bench`; 0 (and nothing run) where q8_kernels_amx() is null.
double amx_int8_macs(int64_t iters);

const Kernels& kernels_generic();
const Kernels& kernels_avx2();    // call only if cpu_isa_available(CpuIsa::avx2)
const Kernels& kernels_avx512();  // call only if cpu_isa_available(CpuIsa::avx512)
const Kernels& kernels_for(CpuIsa isa);

}  // namespace sluice::cpu
