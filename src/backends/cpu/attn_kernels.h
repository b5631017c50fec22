// backends/cpu/attn_kernels: the fused inner loops of attention over a compressed KV cache
// (q8_0, q4_0 and the rotated-codebook tq2/tq3/tq4/tq8 and grouped tq2g/tq3g/tq4g of
// kvcodec/kvcodec.h): QK^T scores
// and the weighted V sum read straight from the stored blocks, several positions and several
// query heads per call, with no per-position decode call and no dequantized copy. One table
// per ISA level (attn_kernels_generic.cpp is the scalar twin of attn_kernels_avx2.cpp and
// attn_kernels_avx512.cpp, which CMake builds with their ISA flags); kept apart from
// kernels.h so the attention and matmul kernels can change independently.
//
// Legend: P = positions (cache rows) per call, G = query heads of one KV head (the GQA group),
// D = head dim, W = vector lanes (8 generic/AVX2, 16 AVX-512). "Head" = the bytes of one KV
// head in one cache row: D/32 whole blocks for q8_0/q4_0 (block_q8_0/block_q4_0), or a tq
// head (fp16 γ, then D·bits index bits; tqNg: D/32 groups of an fp16 scale and 32·bits index
// bits, kvcodec.h).
//
// Arithmetic contract (what the parity tests hold them to):
//   - each element is decoded exactly as quant/'s dequantize_row (f16: exact; q8_0: q·d;
//     q4_0: (q-8)·d) or as TqCodec::decode_head_rotated (the centroid cb[idx]; tqNg: s·cb[idx]);
//   - a score is one dot product accumulated in one W-lane vector in W-element steps and
//     reduced with the same tree as Kernels::dot_f32 (kernels.h), then multiplied by γ for
//     tq; so it equals dot_f32(decoded head, q) (·γ), whatever P, G or the tile shape;
//   - the V sum adds the positions in order to each element, y = fma(a_j(·γ_j), v_j, y), as
//     Kernels::axpy_f32 on the decoded head would.
// q8_0 has no scores here: a q8_0 K is scored on int8 (attention.cpp: the query quantized to
// Q8_0, kernels.h's Q8Ops gemm with the K heads as weight rows), as llama.cpp scores it.
// So at one ISA level a result depends only on its operands (never on the thread count or
// on which positions or heads share a call), and equals the path it replaces (decode a head,
// then Kernels::dot_f32 / axpy_f32; for f16, Kernels::gemm_f16 / axpy_rows_f16) bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "core/dtype.h"

namespace sluice {
struct block_q8_0;  // quant/blocks.h
}

namespace sluice::cpu {

struct AttnKvOps {
  // s[g·lds + j] = γ_j · Σ_i K_j[i]·q[g·D + i] for j < P, g < G; K_j is the head at
  // k + j·k_stride; γ_j = 1 for f16/q8_0/q4_0. cb: the tq codebook (2^bits floats; tq3s: the
  // 16 centroids of its 4-bit half, then the 4 of its 2-bit half, tq_split_codebook; unused for
  // f16/q8_0/q4_0). D must be a multiple of 32 (tq3s: of 64).
  void (*scores)(const uint8_t* k, size_t k_stride, int64_t P, const float* q, int64_t G, int64_t D, const float* cb,
                 float* s, size_t lds) = nullptr;
  // y[g·D + i] += Σ_j (a[g·lda + j]·γ_j)·V_j[i] for g < G, positions j < P in order;
  // V_j is the head at v + j·v_stride. D a multiple of 32.
  void (*axpy)(const float* a, size_t lda, const uint8_t* v, size_t v_stride, int64_t P, int64_t G, int64_t D,
               const float* cb, float* y) = nullptr;
};

// The most blocks per head q8_0_scores takes (heads up to 1024 elements).
constexpr int64_t kQ8ScoresMaxBlocks = 32;

// A q8_0 or q4_0 V's sum on integers (AttnKernels::q8_0_axpy_i16 / q4_0_axpy_i16): what
// AttnKvOps::axpy computes, y[g·D + i] += Σ_j a[g·lda + j]·V_j[i], with the weights rounded to
// int16 so that the products are VNNI's (vpdpwssd: 2 positions of 16 elements per
// instruction, on the stored codes, instead of one float FMA per element and position after
// a decode). The rounding: positions in chunks of kAxpyI16Chunk from the call's first, and per
// chunk, query row g and block b (elements 32b .. 32b+31):
//   w_j = a[g·lda + j]·d_(j,b)          (float product; d the block's fp16 scale)
//   mx  = max_j |w_j|; if !(mx >= kAxpyI16MinScale) the block adds nothing
//   q_j = nearbyint(w_j·(32767/mx))     (32767/mx and the product rounded to float)
//   S_i = Σ_j q_j·c_(j,i), Z = Σ_j q_j  (exact int32; c the stored code: the q4_0 nibble
//         0..15, the q8_0 byte -127..127)
//   y_i = fma(float(S_i - o·Z), mx/32767, y_i)   (o = 8 for q4_0, 0 for q8_0)
// Each weight is off by at most mx/65534: with 8-bit weights instead (vpdpbusd, twice the
// positions per instruction) SmolLM2's KLD grew 2-4% on a q4_0 V and 32% on a q8_0 V, so
// 16 bits. Every level that has it gives the same bits (exact integers, the same single
// float roundings).
constexpr int64_t kAxpyI16Chunk = 64;
constexpr float kAxpyI16MinScale = 1e-30f;  // 32767/mx stays finite; smaller weights are 0
using AttnAxpyI16 = void (*)(const float* a, size_t lda, const uint8_t* v, size_t v_stride, int64_t P, int64_t G,
                             int64_t D, float* y);

struct AttnKernels {
  const char* name;  // "generic", "avx2", "avx512"
  AttnKvOps f16, q8_0, q4_0, tq2, tq3, tq4, tq8, tq2g, tq3g, tq4g, tq3s;
  // A q8_0 K's scores against G query rows quantized to Q8_0 (D/32 blocks each, row g at
  // q + g·D/32): s[g·lds + j] for j < P = the dot Q8Ops::gemm (kernels.h) gives for head j
  // (at k + j·k_stride) as weight row and row g as activation, bit for bit: the same exact
  // block sums in the same float order, with the rows of a GQA group in vector lanes instead
  // of one row at a time. D a multiple of 32, at most 32·kQ8ScoresMaxBlocks. Null (generic):
  // Q8Ops::gemm itself.
  void (*q8_0_scores)(const uint8_t* k, size_t k_stride, int64_t P, const block_q8_0* q, int64_t G, int64_t D, float* s,
                      size_t lds) = nullptr;
  // Backend::kv_rotate: x [n] in place, each block of B elements (a power of two) -> R·x with
  // R = H_B·diag(s)·scale, or R^T·x = diag(s)·H_B·x·scale when inverse (s null: all 1; scale
  // = 1/sqrt(B)). The butterflies of kvcodec's fwht, same pairs in the same order, in float.
  void (*rotate)(float* x, int64_t n, int64_t B, const float* s, bool inverse, float scale) = nullptr;
  // The V sums on integers (above; D a multiple of 32, at most 32·kQ8ScoresMaxBlocks), or
  // null at a level without them: AVX-512's run vpdpwssd and need VNNI (axpy_i16 asks the
  // CPU); AVX2 and generic keep float V sums (without a multiply-accumulate of int16 pairs the
  // integers save nothing: the scalar twin is 2.6x slower than the generic float sums).
  AttnAxpyI16 q8_0_axpy_i16 = nullptr, q4_0_axpy_i16 = nullptr;
  bool axpy_i16_needs_vnni = false;
  AttnAxpyI16 axpy_i16(DType t) const;
  // The ops for a KV type (kvcodec.h ids), or nullptr (f32: read in place by Kernels'
  // gemm_f32/axpy_rows_f32; bf16: decoded a head at a time). q8_0's scores are null (above).
  const AttnKvOps* get(DType t) const;
};

// The scalar twin of the integer V sums (the contract above, one element at a time), for
// q8_0 or q4_0 (null otherwise): what every level's axpy_i16 must equal bit for bit.
AttnAxpyI16 attn_axpy_i16_twin(DType t);

// tq3s's cb (above): tq_group_codebook(4) then tq_group_codebook(2), 20 floats.
const float* tq_split_codebook();

const AttnKernels& attn_kernels_generic();
const AttnKernels& attn_kernels_avx2();    // call only if cpu_isa_available(CpuIsa::avx2)
const AttnKernels& attn_kernels_avx512();  // call only if cpu_isa_available(CpuIsa::avx512)
const AttnKernels& attn_kernels_for(CpuIsa isa);

}  // namespace sluice::cpu
