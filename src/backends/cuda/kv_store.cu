// backends/cuda/kv_store: store_row's encoders on the device (KV-cache writes) for F16, BF16,
// Q8_0 and Q4_0, bit-exact with quant/'s reference encoders (quant.cpp, fp16.cpp): the same
// float expressions in the same order, every product and sum spelled with __f*_rn so nvcc
// cannot contract them into FMAs, IEEE division, roundf (ties away from zero) where ggml uses
// roundf, and truncation where it casts. One difference is documented, not tested: a NaN
// input becomes the canonical half NaN 0x7fff/0xffff here (the host keeps payload bits); NaN
// activations are a bug upstream either way.
// Legend: n = elements of the row (a multiple of 32 for the block types).
#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;

// fp16.cpp fp32_to_bf16: round to nearest even, NaN made quiet.
__device__ __forceinline__ uint16_t f2bf(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64u);
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

// A block's fp16 scale, its first two bytes, as one 16-bit store (blocks are 18 or 34 bytes and
// rows start on even addresses, so b is 2-byte aligned). Two byte stores of the converted half
// (b[0] = h & 0xFF, b[1] = h >> 8) left the low byte 0 on an H100 (every Q8_0 and Q4_0 block of
// CudaParity.GetRowsAndStoreRowBitExact): nvcc 13.0 emits st.global.u8 of the cvt.rn.f16
// register, which ptxas turns into F2I.U8.F16 (the half's VALUE as an integer, 0 for |d| < 1)
// on sm_80, sm_89 and sm_90 alike (cuobjdump -sass). The 16-bit store has no such conversion.
__device__ __forceinline__ void store_scale(uint8_t* b, uint16_t h) { *reinterpret_cast<uint16_t*>(b) = h; }

__global__ void store_f16_kernel(const float* src, uint16_t* dst, int64_t n, int bf16) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = bf16 ? f2bf(src[i]) : f2h(src[i]);
}

// One thread per 32-element block (quantize_q8_0).
__global__ void store_q8_0_kernel(const float* src, uint8_t* dst, int64_t nb) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= nb) return;
  uint8_t* b = dst + i * 34;
  store_scale(b, q8_0_encode(src + i * 32, reinterpret_cast<int8_t*>(b + 2)));
}

// One thread per 32-element block (quantize_q4_0): the value of largest magnitude, with its
// sign, maps to -8.
__global__ void store_q4_0_kernel(const float* src, uint8_t* dst, int64_t nb) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= nb) return;
  const float* x = src + i * 32;
  uint8_t* b = dst + i * 18;
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  const float d = __fdiv_rn(max, -8.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  store_scale(b, f2h(d));
  for (int j = 0; j < 16; ++j) {
    const int q0 = clampi(trunc_to_int(__fadd_rn(__fmul_rn(x[j], id), 8.5f)), 0, 15);
    const int q1 = clampi(trunc_to_int(__fadd_rn(__fmul_rn(x[j + 16], id), 8.5f)), 0, 15);
    b[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

}  // namespace

bool store_type_supported(DType t) {
  return t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 || t == DType::Q4_0;
}

void store_row(const float* src, DType t, void* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  switch (t) {
    case DType::F16:
    case DType::BF16:
      store_f16_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, static_cast<uint16_t*>(dst), n, t == DType::BF16);
      break;
    case DType::Q8_0: {
      const int64_t nb = n / 32;
      store_q8_0_kernel<<<static_cast<unsigned>((nb + kThreads - 1) / kThreads), kThreads, 0, s>>>(
          src, static_cast<uint8_t*>(dst), nb);
      break;
    }
    case DType::Q4_0: {
      const int64_t nb = n / 32;
      store_q4_0_kernel<<<static_cast<unsigned>((nb + kThreads - 1) / kThreads), kThreads, 0, s>>>(
          src, static_cast<uint8_t*>(dst), nb);
      break;
    }
    default: break;  // the caller checked store_type_supported
  }
}

}  // namespace sluice::cuda
