// backends/cpu/kernels_avx2: the kernel table for AVX2 + FMA + F16C (built with those flags;
// selected only after cpu_isa_available(CpuIsa::avx2)). 8 lanes, tiles of 4 rows × 2 tokens
// (8 accumulators + 3 operands of the 16 ymm registers).
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"
#include "quant/blocks.h"

#define SLUICE_CPU_QUANT_FAST_PATHS 1

namespace sluice::cpu {
namespace avx2_isa {

constexpr CpuIsa kIsa = CpuIsa::avx2;

struct Simd {
  static constexpr int W = 8;
  static constexpr int kTileTok = 2;
  using V = __m256;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float a) { return _mm256_set1_ps(a); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V a) { _mm256_storeu_ps(p, a); }
  static V load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store_f16(uint16_t* p, V a) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static V load_bf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  // GCC may contract a vector mul followed by a sub into one FMA (-ffp-contract=fast is the
  // C++ default); the empty asm makes the product opaque so it is rounded on its own.
  static V mul_sub(V a, V b, V c) {
    V p = _mm256_mul_ps(a, b);
    __asm__("" : "+x"(p));
    return _mm256_sub_ps(p, c);
  }
  static V from_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V ubits(const uint8_t* p, int shift, int mask) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, shift), _mm256_set1_epi32(mask)));
  }
  static float half(uint16_t h) { return _cvtsh_ss(h); }
  // Lanes (0+4), (2+6), (1+5), (3+7), then pairwise: the tree the generic level copies.
  static float reduce_add(V a) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));  // i + (i+4)
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                               // (0+2), (1+3)
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
  static float reduce_max(V a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  }
  // exp as Cephes expf / sse_mathfun exp_ps: e^x = 2^n · e^r, r = x - n·ln2 (ln2 split in two
  // for an exact product), e^r by a degree-6 polynomial; ~1-2 ulp. Inputs are clamped to
  // [-88.38, 88]; below -87.3 the result underflows to (near) zero, as exp does.
  static V exp(V x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f)), _mm256_set1_ps(88.0f));
    const V n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    V p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    // 2^n built in the exponent field; n = -127 gives 0 (exponent field 0).
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
};

#include "backends/cpu/kernels_impl.h"

}  // namespace avx2_isa

namespace avx2_q8 {
inline float q8_half(uint16_t h) { return _cvtsh_ss(h); }
#define SLUICE_Q8_SIMD 1
#define SLUICE_Q8_VNNI 0
#define SLUICE_Q8_AVX512 0
#include "backends/cpu/kernels_q8_impl.h"
#undef SLUICE_Q8_SIMD
#undef SLUICE_Q8_VNNI
#undef SLUICE_Q8_AVX512
constexpr Q8Kernels kTable = q8_table("avx2");
}  // namespace avx2_q8

const Kernels& kernels_avx2() { return avx2_isa::kTable; }
const Q8Kernels& q8_kernels_avx2() { return avx2_q8::kTable; }

}  // namespace sluice::cpu
