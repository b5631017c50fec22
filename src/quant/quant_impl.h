// quant/quant_impl: private to quant/: the per-type reference routines behind
// quantize_row/dequantize_row, and the rounding helpers they share. n is always a multiple
// of the type's block size here (checked by the dispatcher in quant.cpp).
//
// Byte-exactness of the quantizers with ggml depends on float expressions being evaluated
// as written: these files must not be built with FMA contraction (GCC's C++ default
// -ffp-contract=fast only contracts when the target has FMA, i.e. under -mfma/-march=native;
// the generic x86-64 build has none). Decoding does not depend on it (exact products).
#pragma once
#include <cstdint>
#include <cstring>

#include "quant/blocks.h"

namespace sluice::quant_detail {

// ggml's nearest_int: round to nearest, ties to even, by adding 1.5*2^23 so the FPU's
// round-to-nearest-even puts the integer in the low mantissa bits. Valid for
// |f| <= 4194303 (ggml asserts this); outside that range the result is garbage but there
// is no UB. Must be used wherever ggml uses it: lrintf/roundf differ on ties.
inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

// C's float -> int truncation as ggml's (int8_t)(x)/(uint8_t)(x) casts use it, but defined
// for every input: in-range values truncate toward zero exactly like the cast; NaN and
// out-of-range values (only reachable with non-finite input) give 0 instead of UB.
inline int trunc_to_int(float f) { return (f > -2147483520.f && f < 2147483520.f) ? static_cast<int>(f) : 0; }

void dequantize_q4_0(const block_q4_0* x, float* y, int64_t n);
void dequantize_q4_1(const block_q4_1* x, float* y, int64_t n);
void dequantize_q5_0(const block_q5_0* x, float* y, int64_t n);
void dequantize_q5_1(const block_q5_1* x, float* y, int64_t n);
void dequantize_q8_0(const block_q8_0* x, float* y, int64_t n);
void dequantize_q8_a(const block_q8_a* x, float* y, int64_t n);
void quantize_q4_0(const float* x, block_q4_0* y, int64_t n);
void quantize_q4_1(const float* x, block_q4_1* y, int64_t n);
void quantize_q5_0(const float* x, block_q5_0* y, int64_t n);
void quantize_q5_1(const float* x, block_q5_1* y, int64_t n);
void quantize_q8_0(const float* x, block_q8_0* y, int64_t n);
void quantize_q8_a(const float* x, block_q8_a* y, int64_t n);

void dequantize_q2_K(const block_q2_K* x, float* y, int64_t n);
void dequantize_q3_K(const block_q3_K* x, float* y, int64_t n);
void dequantize_q4_K(const block_q4_K* x, float* y, int64_t n);
void dequantize_q5_K(const block_q5_K* x, float* y, int64_t n);
void dequantize_q6_K(const block_q6_K* x, float* y, int64_t n);
void dequantize_q8_K(const block_q8_K* x, float* y, int64_t n);
void quantize_q2_K(const float* x, block_q2_K* y, int64_t n);
void quantize_q3_K(const float* x, block_q3_K* y, int64_t n);
void quantize_q4_K(const float* x, block_q4_K* y, int64_t n);
void quantize_q5_K(const float* x, block_q5_K* y, int64_t n);
void quantize_q6_K(const float* x, block_q6_K* y, int64_t n);
void quantize_q8_K(const float* x, block_q8_K* y, int64_t n);

void dequantize_iq4_nl(const block_iq4_nl* x, float* y, int64_t n);
void dequantize_iq4_xs(const block_iq4_xs* x, float* y, int64_t n);
void quantize_iq4_nl(const float* x, block_iq4_nl* y, int64_t n);
void quantize_iq4_xs(const float* x, block_iq4_xs* y, int64_t n);

}  // namespace sluice::quant_detail
