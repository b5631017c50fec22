// core/fp16: IEEE binary16 and bfloat16 <-> binary32, bit-exact with ggml (fp16.cpp says how).
// In core because every layer meets these types: weights (quant/), KV rows, safetensors norms.
#pragma once
#include <cstdint>

namespace sluice {

// IEEE half <-> float (round to nearest even, as F16C / ggml's GGML_FP32_TO_FP16).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
// bfloat16 <-> float (round to nearest even; NaN kept quiet), as ggml_fp32_to_bf16.
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace sluice
