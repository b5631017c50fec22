// backends/cpu/kernels_avx512: the kernel table for AVX-512 F/BW/VL/DQ (built with those
// flags; selected only after cpu_isa_available(CpuIsa::avx512)). 16 lanes, tiles of 4 rows ×
// 4 tokens (16 accumulators + 5 operands of the 32 zmm registers).
// GCC 12's AVX-512 intrinsic headers initialize their "undefined" vectors as `__Y = __Y`,
// which -Wuninitialized flags once inlined (GCC bug 105593, fixed in GCC 13). The warning
// location is inside the header, so it must be silenced before the include.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
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
namespace avx512_isa {

constexpr CpuIsa kIsa = CpuIsa::avx512;

struct Simd {
  static constexpr int W = 16;
  static constexpr int kTileTok = 4;
  using V = __m512;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float a) { return _mm512_set1_ps(a); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V a) { _mm512_storeu_ps(p, a); }
  static V load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store_f16(uint16_t* p, V a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static V load_bf16(const uint16_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  // The explicit-rounding multiply is a builtin GCC cannot contract with the subtraction
  // into an FMA (it may do that to plain vector mul + sub under -ffp-contract=fast).
  static V mul_sub(V a, V b, V c) {
    return _mm512_sub_ps(_mm512_mul_round_ps(a, b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), c);
  }
  static V from_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static V ubits(const uint8_t* p, int shift, int mask) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_srli_epi32(v, static_cast<unsigned>(shift)), _mm512_set1_epi32(mask)));
  }
  static float half(uint16_t h) { return _cvtsh_ss(h); }
  static float reduce_add(V a) { return _mm512_reduce_add_ps(a); }
  static float reduce_max(V a) { return _mm512_reduce_max_ps(a); }
  // exp: the same Cephes scheme as the AVX2 level, with scalef for 2^n (handles the
  // subnormal range exactly instead of flushing n = -127 to zero).
  static V exp(V x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.3762626647949f)), _mm512_set1_ps(88.0f));
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    V p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
  }
};

#include "backends/cpu/kernels_impl.h"

}  // namespace avx512_isa

// Two int8 tables: AVX-512 F/BW/VL/DQ does not imply VNNI (Skylake-X lacks it), so the
// dpbusd variant is chosen only when CPUID reports avx512_vnni.
namespace avx512_q8 {
inline float q8_half(uint16_t h) { return _cvtsh_ss(h); }
#define SLUICE_Q8_SIMD 1
#define SLUICE_Q8_VNNI 0
#define SLUICE_Q8_AVX512 1
#include "backends/cpu/kernels_q8_impl.h"
#undef SLUICE_Q8_SIMD
#undef SLUICE_Q8_VNNI
#undef SLUICE_Q8_AVX512
constexpr Q8Kernels kTable = q8_table("avx512");
}  // namespace avx512_q8

namespace avx512_q8_vnni {
inline float q8_half(uint16_t h) { return _cvtsh_ss(h); }
#define SLUICE_Q8_SIMD 1
#define SLUICE_Q8_VNNI 1
#define SLUICE_Q8_AVX512 1
#include "backends/cpu/kernels_q8_impl.h"
#undef SLUICE_Q8_SIMD
#undef SLUICE_Q8_VNNI
#undef SLUICE_Q8_AVX512
constexpr Q8Kernels kTable = q8_table("avx512-vnni");
}  // namespace avx512_q8_vnni

const Kernels& kernels_avx512() { return avx512_isa::kTable; }
const Q8Kernels& q8_kernels_avx512() { return cpu_features().avx512vnni ? avx512_q8_vnni::kTable : avx512_q8::kTable; }

}  // namespace sluice::cpu
