// tests/kernels/kernel_test_util: what every kernel parity test needs — the NMSE metric
// (as llama.cpp's test-backend-ops), seeded Gaussian inputs, and the ISA levels to sweep.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/attn_kernels.h"
#include "core/cpu_features.h"
#include "core/tensor.h"
#include "kernels/parity_tolerances.h"
#include "quant/mlx_affine.h"
#include "quant/quant.h"

namespace sluice::test {

// Σ(got-ref)² / Σ ref²; 0 for two all-zero vectors, +inf when anything is not finite.
inline double nmse(const std::vector<float>& ref, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  if (ref.size() != got.size()) return INFINITY;
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::isfinite(num) ? num / den : INFINITY;
}

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A weight matrix of type t with ne = [n_in, n_out] (view.name "w"), from seeded Gaussian
// floats of the given scale: copied for F32, otherwise through quant/'s encoder.
struct RandomMatrix {
  std::vector<uint8_t> bytes, planes;
  TensorView view;
  // t an MLX affine type (DType::MLX_A*): groups of `group` with scales and biases of
  // `scale_type` in planes of their own, as a folder keeps them.
  RandomMatrix(DType t, int64_t n_in, int64_t n_out, uint32_t seed, float scale = 1.0f, int group = 64,
               DType scale_type = DType::BF16) {
    const std::vector<float> f = randn(static_cast<size_t>(n_in * n_out), seed, scale);
    const size_t rb = dtype_row_bytes(t, n_in);
    bytes.resize(rb * static_cast<size_t>(n_out));
    MlxAffineFormat af{dtype_affine_bits(t), group, scale_type};
    const size_t gb = dtype_is_affine(t) ? static_cast<size_t>(n_in / group) * (scale_type == DType::F32 ? 4 : 2) : 0;
    planes.resize(2 * gb * static_cast<size_t>(n_out));
    for (int64_t r = 0; r < n_out; ++r) {
      if (t == DType::F32)
        std::memcpy(bytes.data() + r * rb, f.data() + r * n_in, rb);
      else if (dtype_is_affine(t))
        mlx_affine_quantize_row(af, f.data() + r * n_in, n_in, reinterpret_cast<uint32_t*>(bytes.data() + r * rb),
                                planes.data() + r * gb, planes.data() + (n_out + r) * gb);
      else
        quantize_row(t, f.data() + r * n_in, bytes.data() + r * rb, n_in);
    }
    // Aggregate init: assigning a literal to view.name trips GCC 12's -Wrestrict false
    // positive (GCC bug 105329) at -O3.
    view = TensorView{"w", t, 2, {n_in, n_out, 1, 1}, bytes.data(), bytes.size()};
    if (dtype_is_affine(t))
      view.affine = {planes.data(), planes.data() + gb * static_cast<size_t>(n_out), gb, group, scale_type};
  }
};

// The kernel levels this machine can run (generic always; AVX2 / AVX-512 when present), less
// those SLUICE_TEST_ISAS (comma-separated names) leaves out: the Avx512Emulated test sets it to
// "avx512", as its other levels are the native ones sluice_tests already ran. A name that is no
// level, or a list that leaves none, throws: a loop over no level would pass without testing.
inline std::vector<CpuIsa> available_isas() {
  std::vector<CpuIsa> wanted = {CpuIsa::generic, CpuIsa::avx2, CpuIsa::avx512};
  if (const char* only = std::getenv("SLUICE_TEST_ISAS")) {
    wanted.clear();
    const std::string list = only;
    for (size_t at = 0; at <= list.size();) {
      const size_t end = std::min(list.find(',', at), list.size());
      const auto isa = cpu_isa_from_name(std::string_view(list).substr(at, end - at));
      if (!isa)
        throw std::invalid_argument("SLUICE_TEST_ISAS='" + list + "': '" + list.substr(at, end - at) +
                                    "' is no ISA level");
      wanted.push_back(*isa);
      at = end + 1;
    }
  }
  std::vector<CpuIsa> v;
  for (CpuIsa i : wanted)
    if (cpu_isa_available(i)) v.push_back(i);
  if (v.empty()) throw std::runtime_error("SLUICE_TEST_ISAS leaves no ISA level this machine runs");
  return v;
}

// The cpu backend's attention against ref at ISA level isa with a V of type v: kTolAttention,
// or kTolAttentionIntV where that level sums such a V on integers (parity_tolerances.h).
inline double attention_tol(CpuIsa isa, DType v) {
  return cpu::attn_kernels_for(isa).axpy_i16(v) ? kTolAttentionIntV : kTolAttention;
}

}  // namespace sluice::test
