// core/dtype: the traits table. Block sizes and byte counts follow ggml's block structs
// (ggml-common.h): e.g. Q4_K = 2 fp16 (d, dmin) + 12 bytes of 6-bit scales + 128 nibble bytes.
#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cctype>
#include <string>

namespace sluice {
namespace {
constexpr int64_t QK_K = 256;
constexpr std::array<DTypeTraits, 29> kTraits = {{
    {DType::F32, "f32", 1, 4, false},
    {DType::F16, "f16", 1, 2, false},
    {DType::Q4_0, "q4_0", 32, 2 + 16, true},
    {DType::Q4_1, "q4_1", 32, 2 + 2 + 16, true},
    {DType::Q5_0, "q5_0", 32, 2 + 4 + 16, true},
    {DType::Q5_1, "q5_1", 32, 2 + 2 + 4 + 16, true},
    {DType::Q8_0, "q8_0", 32, 2 + 32, true},
    {DType::Q8_1, "q8_1", 32, 2 + 2 + 32, true},
    {DType::Q2_K, "q2_K", QK_K, QK_K / 16 + QK_K / 4 + 2 + 2, true},
    {DType::Q3_K, "q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2, true},
    {DType::Q4_K, "q4_K", QK_K, 2 + 2 + 12 + QK_K / 2, true},
    {DType::Q5_K, "q5_K", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2, true},
    {DType::Q6_K, "q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, true},
    {DType::Q8_K, "q8_K", QK_K, 4 + QK_K + QK_K / 16 * 2, true},
    {DType::IQ4_NL, "iq4_nl", 32, 2 + 16, true},
    {DType::IQ4_XS, "iq4_xs", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2, true},
    {DType::I8, "i8", 1, 1, false},
    {DType::I16, "i16", 1, 2, false},
    {DType::I32, "i32", 1, 4, false},
    {DType::I64, "i64", 1, 8, false},
    {DType::F64, "f64", 1, 8, false},
    {DType::BF16, "bf16", 1, 2, false},
    {DType::Q8_A, "q8_a", 32, 2 + 2 + 32, true},
    // The codes only: a row's scales and biases are TensorView::affine's.
    {DType::MLX_A2, "mlx_a2", 32, 8, true},
    {DType::MLX_A3, "mlx_a3", 32, 12, true},
    {DType::MLX_A4, "mlx_a4", 32, 16, true},
    {DType::MLX_A5, "mlx_a5", 32, 20, true},
    {DType::MLX_A6, "mlx_a6", 32, 24, true},
    {DType::MLX_A8, "mlx_a8", 32, 32, true},
}};
}  // namespace

std::optional<DTypeTraits> dtype_traits_of(uint32_t id) {
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

const DTypeTraits& dtype_traits(DType t) {
  for (const auto& tr : kTraits)
    if (tr.type == t) return tr;
  assert(false && "dtype missing from traits table");
  return kTraits[0];
}

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& t : kTraits) {
    std::string n(t.name);
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
    if (n == lower) return t.type;
  }
  return std::nullopt;
}

size_t dtype_row_bytes(DType t, int64_t n) {
  const auto& tr = dtype_traits(t);
  assert(n % tr.block_size == 0);
  return static_cast<size_t>(n / tr.block_size) * tr.block_bytes;
}

}  // namespace sluice
