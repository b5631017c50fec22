// backends/cpu/attn_kernels_avx512: attn_kernels.h for AVX-512 F/BW/VL/DQ (built with those
// flags; selected only after cpu_isa_available(CpuIsa::avx512)). 16 lanes. tq2/tq3/tq4 look
// up a 16-entry table with one vpermps (which reads only the low 4 index bits; tq2/tq3's
// tables repeat their 4/8 centroids), tq8 gathers from the 256-entry codebook.
// Score tiles of 2 positions × 8 heads (16 accumulators + 8 queries + 1 decoded K vector of
// the 32 zmm registers: a GQA-8 group reads each K vector once per tile); V tiles of 8 heads
// × 2 vectors.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 headers: see kernels_avx512.cpp
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/cpu/attn_kernels.h"
#include "core/cpu_features.h"
#include "quant/blocks.h"

namespace sluice::cpu {
namespace avx512_attn {

constexpr const char* kAttnName = "avx512";
void q8_0_scores(const uint8_t* k, size_t ks, int64_t P, const block_q8_0* q, int64_t G, int64_t D, float* s,
                 size_t lds);
constexpr decltype(AttnKernels::q8_0_scores) kQ8Scores = q8_0_scores;
void axpy_i16_q8(const float* a, size_t lda, const uint8_t* v, size_t vs, int64_t P, int64_t G, int64_t D, float* y);
void axpy_i16_q4(const float* a, size_t lda, const uint8_t* v, size_t vs, int64_t P, int64_t G, int64_t D, float* y);
constexpr AttnAxpyI16 kAxpyI16Q8 = axpy_i16_q8, kAxpyI16Q4 = axpy_i16_q4;
constexpr bool kAxpyI16NeedsVnni = true;  // vpdpwssd

struct Simd {
  static constexpr int W = 16;
  static constexpr int kScoreTT = 8, kScoreAcc = 16, kAxpyTT = 8, kAxpyU = 2;
  using V = __m512;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float a) { return _mm512_set1_ps(a); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V a) { _mm512_storeu_ps(p, a); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  // Lanes i and i ^ L exchanged (L = 1, 2, 4, 8): the in-vector butterfly partner.
  template <int L>
  static V swap(V a) {
    static_assert(L == 1 || L == 2 || L == 4 || L == 8);
    if constexpr (L == 1)
      return _mm512_permute_ps(a, 0xB1);
    else if constexpr (L == 2)
      return _mm512_permute_ps(a, 0x4E);
    else if constexpr (L == 4)
      return _mm512_shuffle_f32x4(a, a, 0xB1);
    else
      return _mm512_shuffle_f32x4(a, a, 0x4E);
  }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float half(uint16_t h) { return _cvtsh_ss(h); }
  static V load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V from_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static V ubits(const uint8_t* p, int shift, int mask) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_srli_epi32(v, static_cast<unsigned>(shift)), _mm512_set1_epi32(mask)));
  }
  // kernels_avx512.cpp's reduce_add (so scores equal Kernels::dot_f32's).
  static float reduce_add(V a) { return _mm512_reduce_add_ps(a); }
  // out[k] = reduce_add(a[k]) for 16 vectors at once, bit for bit: the same pairing as GCC's
  // _mm512_reduce_add_ps — lane i + (i+8), then i + (i+4), then 0+2 | 1+3, then the two
  // (float addition is commutative, so only the pairing matters) — done on 16 vectors
  // transposed, 45 shuffles and adds instead of ~7 per vector. Score tiles are 16
  // accumulators of 8 steps each at D = 128, so the reductions were a third of the work.
  static constexpr int kReduceN = 16;
  static void reduce_n(const V* a, float* out) {
    V b[8], c[4], d[2];
    for (int m = 0; m < 8; ++m)  // b[m] = [a[2m] lo + hi | a[2m+1] lo + hi]
      b[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44),
                           _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE));
    for (int m = 0; m < 4; ++m)  // c[m] quarter q = a[4m + q]: i + (i+4)
      c[m] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0x88),
                           _mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0xDD));
    for (int m = 0; m < 2; ++m)  // per quarter q: [a[8m+q] 0+2, 1+3, a[8m+4+q] 0+2, 1+3]
      d[m] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * m], c[2 * m + 1], 0x44),
                           _mm512_shuffle_ps(c[2 * m], c[2 * m + 1], 0xEE));
    // lane 4q + s = the sum of a[4s + q]
    const V e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
    alignas(64) float t[16];
    _mm512_store_ps(t, e);
    for (int k = 0; k < 16; ++k) out[k] = t[4 * (k % 4) + k / 4];
  }

  struct Tab {
    __m512 t;  // t16
    const float* cb;
  };
  static Tab tab(const float* t16, const float* cb) { return {_mm512_loadu_ps(t16), cb}; }
  // 16 indices of B bits at p (2·B bytes, read exactly).
  template <int B>
  static V lookup(const Tab& t, const uint8_t* p) {
    if constexpr (B == 8) {
      const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm512_i32gather_ps(idx, t.cb, 4);
    } else if constexpr (B == 4) {  // lanes 0..7 from bytes 0..3, 8..15 from bytes 4..7
      uint32_t lo, hi;
      std::memcpy(&lo, p, 4);
      std::memcpy(&hi, p + 4, 4);
      const __m512i w = _mm512_inserti32x8(_mm512_set1_epi32(static_cast<int>(lo)),
                                           _mm256_set1_epi32(static_cast<int>(hi)), 1);
      const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
      return _mm512_permutexvar_ps(_mm512_srlv_epi32(w, sh), t.t);
    } else if constexpr (B == 3) {  // lanes 0..9 at bits 3j of bytes 0..3, 10..15 at 3j-16 of bytes 2..5
      uint32_t lo, hi;
      std::memcpy(&lo, p, 4);
      std::memcpy(&hi, p + 2, 4);
      const __m512i w = _mm512_mask_blend_epi32(0xFC00, _mm512_set1_epi32(static_cast<int>(lo)),
                                                _mm512_set1_epi32(static_cast<int>(hi)));
      const __m512i sh = _mm512_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 14, 17, 20, 23, 26, 29);
      return _mm512_permutexvar_ps(_mm512_srlv_epi32(w, sh), t.t);
    } else {  // B == 2: 4 bytes
      uint32_t w;
      std::memcpy(&w, p, 4);
      const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      return _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(w)), sh), t.t);
    }
  }
};

#include "backends/cpu/attn_kernels_impl.h"
#include "backends/cpu/attn_q8_scores_impl.h"
#include "backends/cpu/attn_v_i16_impl.h"

// vpdpbusd where the CPU has AVX-512 VNNI (the table is constant-initialized, so the check
// is made here, once).
void q8_0_scores(const uint8_t* k, size_t ks, int64_t P, const block_q8_0* q, int64_t G, int64_t D, float* s,
                 size_t lds) {
  static const bool vnni = cpu_features().avx512vnni;
  vnni ? q8_0_scores_vnni(k, ks, P, q, G, D, s, lds) : q8_0_scores_hadd(k, ks, P, q, G, D, s, lds);
}

// The integer V sums with vpdpwssd: AttnKernels::axpy_i16 gives them out only where the CPU
// has AVX-512 VNNI (axpy_i16_needs_vnni).
void axpy_i16_q8(const float* a, size_t lda, const uint8_t* v, size_t vs, int64_t P, int64_t G, int64_t D, float* y) {
  vi16_axpy<false>(a, lda, v, vs, P, G, D, y);
}
void axpy_i16_q4(const float* a, size_t lda, const uint8_t* v, size_t vs, int64_t P, int64_t G, int64_t D, float* y) {
  vi16_axpy<true>(a, lda, v, vs, P, G, D, y);
}

}  // namespace avx512_attn

const AttnKernels& attn_kernels_avx512() { return avx512_attn::kAttnTable; }

}  // namespace sluice::cpu
