// tests/kernels/test_cuda_decoders: the CUDA kernels' block decoders (backends/cuda/common.cuh),
// compiled here as host code, must reproduce quant/'s dequantize_row bit for bit for every
// weight type, and the KV-cache element loads likewise for every cache type. Runs on every
// machine: this is the part of the device code that can be proven without a GPU; the kernels
// around it are proven by test_cuda_parity.cpp on one.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "quant/quant.h"

// What the device provides, as host functions: exactly rounded float ops (the host build has
// no FMA contraction: generic x86-64, see quant/quant_impl.h) and bit casts.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
namespace sluice::cuda {
inline float h2f(uint16_t h) { return fp16_to_fp32(h); }
}  // namespace sluice::cuda

#define SLUICE_CUDA_HOST_EMULATION 1
#include "backends/cuda/common.cuh"

namespace sluice {
namespace {

// Random blocks (every bit pattern of quants and scales) with finite random scales.
std::vector<uint8_t> random_row(DType t, int64_t n, std::mt19937& rng) {
  const auto& tr = dtype_traits(t);
  std::vector<uint8_t> w(dtype_row_bytes(t, n));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  std::normal_distribution<float> nd(0.0f, 0.01f);
  for (size_t blk = 0; blk < w.size() / tr.block_bytes; ++blk) {
    uint8_t* b = w.data() + blk * tr.block_bytes;
    auto put = [&](size_t off) {
      const uint16_t h = fp32_to_fp16(nd(rng));
      std::memcpy(b + off, &h, 2);
    };
    switch (t) {
      case DType::Q6_K:
      case DType::Q3_K: put(tr.block_bytes - 2); break;
      case DType::Q2_K: put(tr.block_bytes - 4), put(tr.block_bytes - 2); break;
      case DType::Q4_1:
      case DType::Q5_1:
      case DType::Q4_K:
      case DType::Q5_K: put(0), put(2); break;
      case DType::Q8_K: {
        const float d = nd(rng);
        std::memcpy(b, &d, 4);
        break;
      }
      default: put(0);
    }
  }
  return w;
}

template <DType T>
void decode_with_kernel_decoder(const uint8_t* row, int64_t n, float* y) {
  constexpr int QK = cuda::QBlock<T>::QK, BB = cuda::QBlock<T>::BB;
  for (int64_t b = 0; b < n / QK; ++b)
    for (int j8 = 0; j8 < QK / 8; ++j8) cuda::dequant8<T>(row + b * BB, j8, y + b * QK + 8 * j8);
}

template <DType T>
void check_type(std::mt19937& rng) {
  const int64_t n = cuda::QBlock<T>::QK == 256 ? 1024 : 160;
  for (int rep = 0; rep < 20; ++rep) {
    const auto w = random_row(T, n, rng);
    std::vector<float> want(static_cast<size_t>(n)), got(want.size(), -1.0f);
    dequantize_row(T, w.data(), want.data(), n);
    decode_with_kernel_decoder<T>(w.data(), n, got.data());
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << dtype_name(T) << " rep " << rep;
  }
}

TEST(CudaDecoders, BitExactWithQuantForEveryWeightType) {
  std::mt19937 rng(11);
  check_type<DType::Q4_0>(rng);
  check_type<DType::Q4_1>(rng);
  check_type<DType::Q5_0>(rng);
  check_type<DType::Q5_1>(rng);
  check_type<DType::Q8_0>(rng);
  check_type<DType::Q2_K>(rng);
  check_type<DType::Q3_K>(rng);
  check_type<DType::Q4_K>(rng);
  check_type<DType::Q5_K>(rng);
  check_type<DType::Q6_K>(rng);
  check_type<DType::Q8_K>(rng);
  check_type<DType::IQ4_NL>(rng);
  check_type<DType::IQ4_XS>(rng);
}

TEST(CudaDecoders, KvElementLoadsBitExact) {
  std::mt19937 rng(12);
  const int64_t n = 96;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    std::vector<uint8_t> w;
    if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> f(static_cast<size_t>(n));
      for (auto& x : f) x = nd(rng);
      w.resize(dtype_row_bytes(t, n));
      quantize_row(t, f.data(), w.data(), n);
    } else {
      w = random_row(t, n, rng);
    }
    std::vector<float> want(static_cast<size_t>(n)), got(want.size());
    dequantize_row(t, w.data(), want.data(), n);
    for (int64_t i = 0; i < n; ++i) got[i] = cuda::load_kv(t, w.data(), i);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << dtype_name(t);
  }
}

// A wrong decoder must be caught: Q4_K with the sub-block scales swapped pairwise differs.
TEST(CudaDecoders, NegativeControlWrongSubBlock) {
  std::mt19937 rng(13);
  const auto w = random_row(DType::Q4_K, 256, rng);
  std::vector<float> want(256), got(256);
  dequantize_row(DType::Q4_K, w.data(), want.data(), 256);
  for (int j8 = 0; j8 < 32; ++j8) cuda::dequant8<DType::Q4_K>(w.data(), j8 ^ 4, got.data() + 8 * j8);
  EXPECT_NE(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
}

}  // namespace
}  // namespace sluice
