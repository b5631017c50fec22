// backends/cpu/attn_kernels_avx2: attn_kernels.h for AVX2 + FMA + F16C (built with those
// flags; selected only after cpu_isa_available(CpuIsa::avx2)). 8 lanes. tq lookups: tq2/tq3
// index an 8-entry table with one vpermps (which reads only the low 3 index bits), tq4 does
// two and blends on index bit 3, tq8 gathers from the 256-entry codebook.
// Score tiles of 2 positions × 4 heads (8 accumulators + 4 queries + 1 decoded K vector of
// the 16 ymm registers); V tiles of 4 heads × 2 vectors.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/cpu/attn_kernels.h"
#include "quant/blocks.h"

namespace sluice::cpu {
namespace avx2_attn {

constexpr const char* kAttnName = "avx2";
void q8_0_scores(const uint8_t* k, size_t ks, int64_t P, const block_q8_0* q, int64_t G, int64_t D, float* s,
                 size_t lds);
constexpr decltype(AttnKernels::q8_0_scores) kQ8Scores = q8_0_scores;
// No int8 V sums at this level (attn_kernels.h): its V sums are float.
constexpr AttnAxpyI16 kAxpyI16Q8 = nullptr, kAxpyI16Q4 = nullptr;
constexpr bool kAxpyI16NeedsVnni = false;

struct Simd {
  static constexpr int W = 8;
  // One position per score tile (4 query heads), 8 query heads per V tile of one vector: on Zen 1
  // (1 thread, 64 positions of 128 from L1, GMAC/s) f16 scores 9.9-10.0 -> 11.3, V sums f16 11.2-11.8
  // -> 12.3-12.4, q8_0 7.7-8.5 -> 9.4-9.7, q4_0 6.2 -> 7.5-7.7, tq4 4.9 -> 7.0, tq4g 4.4 -> 6.7 against 2
  // positions x 4 heads and 4 heads x 2 vectors; decode at depth 4096 (q30 synth, 2 threads) spent
  // 37-38 -> 29-31 ms per token attending. Each score's and V element's sums are the same either way.
  static constexpr int kScoreTT = 4, kScoreAcc = 4, kAxpyTT = 8, kAxpyU = 1;
  using V = __m256;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float a) { return _mm256_set1_ps(a); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V a) { _mm256_storeu_ps(p, a); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  // Lanes i and i ^ L exchanged (L = 1, 2, 4): the in-vector butterfly partner.
  template <int L>
  static V swap(V a) {
    static_assert(L == 1 || L == 2 || L == 4);
    if constexpr (L == 1)
      return _mm256_permute_ps(a, 0xB1);
    else if constexpr (L == 2)
      return _mm256_permute_ps(a, 0x4E);
    else
      return _mm256_permute2f128_ps(a, a, 0x01);
  }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float half(uint16_t h) { return _cvtsh_ss(h); }
  static V load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static V from_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V ubits(const uint8_t* p, int shift, int mask) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, shift), _mm256_set1_epi32(mask)));
  }
  // The tree of kernels_avx2.cpp's reduce_add (so scores equal Kernels::dot_f32's).
  static float reduce_add(V a) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
  // out[k] = reduce_add(a[k]) for 8 vectors at once, bit for bit (the same pairing: i +
  // (i+4), then 0+2 | 1+3, then the two), transposed: 21 shuffles and adds instead of ~6 per
  // vector.
  static constexpr int kReduceN = 8;
  static void reduce_n(const V* a, float* out) {
    V b[4], c[2];
    for (int m = 0; m < 4; ++m)  // b[m] = [a[2m] lo + hi | a[2m+1] lo + hi]
      b[m] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * m], a[2 * m + 1], 0x20),
                           _mm256_permute2f128_ps(a[2 * m], a[2 * m + 1], 0x31));
    for (int m = 0; m < 2; ++m)  // half h: [a[4m+h] 0+2, 1+3, a[4m+2+h] 0+2, 1+3]
      c[m] = _mm256_add_ps(_mm256_shuffle_ps(b[2 * m], b[2 * m + 1], 0x44),
                           _mm256_shuffle_ps(b[2 * m], b[2 * m + 1], 0xEE));
    // lane 4h + s = the sum of a[2s + h]
    const V e = _mm256_add_ps(_mm256_shuffle_ps(c[0], c[1], 0x88), _mm256_shuffle_ps(c[0], c[1], 0xDD));
    alignas(32) float t[8];
    _mm256_store_ps(t, e);
    for (int k = 0; k < 8; ++k) out[k] = t[4 * (k % 2) + k / 2];
  }

  struct Tab {
    __m256 lo, hi;  // t16[0..7], t16[8..15]
    const float* cb;
  };
  static Tab tab(const float* t16, const float* cb) { return {_mm256_loadu_ps(t16), _mm256_loadu_ps(t16 + 8), cb}; }
  // 8 indices of B bits at p (8·B/8 = B bytes, read exactly).
  template <int B>
  static V lookup(const Tab& t, const uint8_t* p) {
    if constexpr (B == 8) {
      const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      return _mm256_i32gather_ps(t.cb, idx, 4);
    } else {
      // The B bytes that hold the 8 indices, read as whole loads: a 2- or 3-byte memcpy into a
      // 4-byte word reloaded at once misses store-to-load forwarding (AVX2 tq3 ran at half
      // the speed of the decode path that way).
      uint32_t w;
      if constexpr (B == 4) {
        std::memcpy(&w, p, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, p, 2);
        w = B == 3 ? h | static_cast<uint32_t>(p[2]) << 16 : h;
      }
      const __m256i sh = _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B);
      const __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), sh);
      const V lo = _mm256_permutevar8x32_ps(t.lo, idx);
      if constexpr (B < 4) return lo;  // t16 repeats the 2^B centroids: bits above B ignored
      const V hi = _mm256_permutevar8x32_ps(t.hi, idx);
      return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));  // on index bit 3
    }
  }
};

#include "backends/cpu/attn_kernels_impl.h"
#include "backends/cpu/attn_q8_scores_impl.h"

void q8_0_scores(const uint8_t* k, size_t ks, int64_t P, const block_q8_0* q, int64_t G, int64_t D, float* s,
                 size_t lds) {
  q8_0_scores_hadd(k, ks, P, q, G, D, s, lds);
}

}  // namespace avx2_attn

const AttnKernels& attn_kernels_avx2() { return avx2_attn::kAttnTable; }

}  // namespace sluice::cpu
