// tests/unit/test_mlx_affine: MLX checkpoints' building blocks — the safetensors reader
// (format/safetensors.h) on a file MLX wrote and on hostile buffers, and the MLX affine
// dequantizer (quant/mlx_affine.h) against mx.dequantize's own output for every bit width and
// group size MLX writes (tests/data/mlx/affine.safetensors, scripts/golden/make_mlx_affine.py).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/safetensors.h"
#include "quant/mlx_affine.h"

namespace sluice {
namespace {

const std::string kFixture = std::string(SLUICE_SOURCE_DIR) + "/tests/data/mlx/affine.safetensors";

TEST(MlxAffine, DequantizesAsMlxForEveryFormat) {
  const SafetensorsFile f(kFixture);
  EXPECT_EQ(f.metadata().at("format"), "mlx");
  int checked = 0;
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int group : {32, 64, 128}) {
      for (const char* dt : {"float32", "float16", "bfloat16"}) {
        const std::string name = "b" + std::to_string(bits) + "_g" + std::to_string(group) + "_" + dt;
        const StTensor* w = f.find(name + ".weight");
        if (!w) continue;  // f16/bf16 only at group 64
        const StTensor *s = f.find(name + ".scales"), *b = f.find(name + ".biases"), *e = f.find(name + ".expected");
        ASSERT_TRUE(s && b && e) << name;
        ASSERT_EQ(w->dtype, StDtype::U32) << name;
        const int64_t rows = e->shape[0], n = e->shape[1];
        MlxAffineFormat fmt{bits, group, *st_dtype_to_dtype(s->dtype)};
        mlx_affine_check(fmt, n);
        ASSERT_EQ(w->shape[1], mlx_affine_row_words(fmt, n)) << name;
        const size_t sb = st_dtype_size(s->dtype);
        std::vector<float> out(static_cast<size_t>(n)), want(static_cast<size_t>(n));
        double worst = 0;
        for (int64_t r = 0; r < rows; ++r) {
          mlx_affine_dequantize_row(fmt, reinterpret_cast<const uint32_t*>(w->data) + r * w->shape[1],
                                    s->data + r * (n / group) * sb, b->data + r * (n / group) * sb, n, out.data());
          std::memcpy(want.data(), e->data + r * n * 4, static_cast<size_t>(n) * 4);
          for (int64_t i = 0; i < n; ++i) {
            const float ours = out[static_cast<size_t>(i)];
            worst = std::max(worst, static_cast<double>(std::abs(ours - want[static_cast<size_t>(i)])));
          }
        }
        EXPECT_EQ(worst, 0.0) << name;
        ++checked;
        // Negative control: the codes read MSB-first inside each word give other numbers.
        if (bits == 4 && group == 64 && std::string(dt) == "float32") {
          std::vector<uint32_t> swapped(static_cast<size_t>(w->shape[1]));
          std::memcpy(swapped.data(), w->data, swapped.size() * 4);
          for (auto& word : swapped)
            word = (word >> 28) | ((word >> 20) & 0xF0) | ((word >> 12) & 0xF00) | ((word >> 4) & 0xF000) |
                   ((word << 4) & 0xF0000) | ((word << 12) & 0xF00000) | ((word << 20) & 0xF000000) | (word << 28);
          mlx_affine_dequantize_row(fmt, swapped.data(), s->data, b->data, n, out.data());
          std::memcpy(want.data(), e->data, static_cast<size_t>(n) * 4);
          double diff = 0;
          for (int64_t i = 0; i < n; ++i) diff = std::max(diff, double(std::abs(out[size_t(i)] - want[size_t(i)])));
          EXPECT_GT(diff, 0.1) << "nibble order does not matter?";
        }
      }
    }
  }
  EXPECT_EQ(checked, 18 + 12);
  EXPECT_THROW(mlx_affine_check({7, 64, DType::F16}, 128), Error);
  EXPECT_THROW(mlx_affine_check({4, 48, DType::F16}, 96), Error);
  EXPECT_THROW(mlx_affine_check({4, 64, DType::F16}, 96), Error);
}

// A buffer: 8-byte length, the header, then `data` bytes.
std::vector<uint8_t> file_of(const std::string& header, size_t data) {
  std::vector<uint8_t> b(8 + header.size() + data, 0);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

std::string error_of(const std::vector<uint8_t>& b) {
  try {
    SafetensorsFile::from_memory(b.data(), b.size(), "x.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, ReadsAValidFile) {
  const auto b = file_of(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                         R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},"e":{"dtype":"I8","shape":[0],)"
                         R"("data_offsets":[32,32]},"__metadata__":{"k":"v"}})",
                         32);
  auto f = SafetensorsFile::from_memory(b.data(), b.size(), "x.safetensors");
  ASSERT_EQ(f->tensors().size(), 3u);
  const StTensor* a = f->find("a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ(a->data, b.data() + 8 + (b.size() - 8 - 32));
  EXPECT_EQ(f->metadata().at("k"), "v");
  EXPECT_EQ(f->find("zz"), nullptr);
}

TEST(Safetensors, RefusesHostileHeadersNamingWhatIsWrong) {
  const std::pair<std::vector<uint8_t>, const char*> cases[] = {
      {std::vector<uint8_t>{1, 2, 3}, "too short"},
      {file_of("{}", 0), ""},  // valid: no tensors
      {[] {
         auto b = file_of("{}", 0);
         b[0] = 200;
         return b;
       }(),
       "runs past the end of the file"},
      {[] {
         auto b = file_of("{}", 0);
         b[6] = 1;
         return b;
       }(),
       "above the limit"},
      {file_of("{\"a\":", 0), "not valid JSON"},
      {file_of("{\"a\":9e99999}", 0), "not valid JSON"},  // a number past double (found by fuzzing)
      {file_of("[1]", 0), "not an object"},
      {file_of(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4), "dtype 'F33'"},
      {file_of(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "shape[0] = -1"},
      {file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
       "is 8 bytes but data_offsets [0, 4] hold 4"},
      {file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 4), "run past the data's 4 bytes"},
      {file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4), "ends before it begins"},
      {file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4), "not [begin, end]"},
      {file_of(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           8),
       "overlap"},
      {file_of(
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
           4),
       "names 'a' twice"},
      {file_of(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}})", 4),
       "too many elements"},
      {file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", 4), "unexpected field 'extra'"},
      {file_of(R"({"__metadata__":{"k":1}})", 0), "__metadata__['k'] is not a string"},
  };
  for (const auto& [bytes, want] : cases) {
    const std::string err = error_of(bytes);
    if (*want == '\0') {
      EXPECT_EQ(err, "");
      continue;
    }
    EXPECT_NE(err.find(want), std::string::npos) << "want '" << want << "', got: " << err;
    EXPECT_NE(err.find("x.safetensors"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace sluice
