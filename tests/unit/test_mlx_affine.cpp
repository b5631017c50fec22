// tests/unit/test_mlx_affine: MLX checkpoints' building blocks — the safetensors reader
// (format/safetensors.h) on a file MLX wrote and on hostile buffers, and the MLX affine
// dequantizer (quant/mlx_affine.h) against mx.dequantize's own output for every bit width and
// group size MLX writes (tests/data/mlx/affine.safetensors, scripts/golden/make_mlx_affine.py);
// and the repack of 2..5-bit groups into GGUF Q4_1/Q5_1 blocks and of 6- and 8-bit groups into
// Sluice's Q8_A blocks (format/hf_folder loads MLX folders so), bit-identical to the float32
// dequantizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/safetensors.h"
#include "quant/blocks.h"
#include "quant/mlx_affine.h"
#include "quant/quant.h"

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

// Scales/biases as 16-bit values of `t` (F16 or BF16) or F32, from fp16 values v.
std::vector<uint8_t> store_as(DType t, const std::vector<uint16_t>& fp16) {
  std::vector<uint8_t> out(fp16.size() * (t == DType::F32 ? 4 : 2));
  for (size_t i = 0; i < fp16.size(); ++i) {
    const float x = fp16_to_fp32(fp16[i]);
    if (t == DType::F32) {
      std::memcpy(out.data() + 4 * i, &x, 4);
    } else {
      const uint16_t h = t == DType::F16 ? fp16[i] : fp32_to_bf16(x);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(MlxAffine, RepacksIntoQ4_1Q5_1AndQ8_ABitIdentically) {
  std::mt19937 rng(7);
  int repacked = 0;
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int group : {32, 64, 128}) {
      for (DType st : {DType::F16, DType::BF16, DType::F32}) {
        const MlxAffineFormat f{bits, group, st};
        const auto type = mlx_affine_repack_type(f);
        ASSERT_TRUE(type.has_value()) << bits;
        EXPECT_EQ(*type, bits >= 6 ? DType::Q8_A : bits == 5 ? DType::Q5_1 : DType::Q4_1);
        const int64_t n = 256, n_groups = n / group;
        std::vector<uint32_t> codes(static_cast<size_t>(mlx_affine_row_words(f, n)));
        for (auto& w : codes) w = static_cast<uint32_t>(rng());
        // fp16 values (negative scales too), with bf16 precision where the scales are bf16, so
        // that every one is an fp16 value and a bf16 one.
        std::vector<uint16_t> sc, bi;
        std::normal_distribution<float> nd(0.0f, 0.05f);
        for (int64_t g = 0; g < n_groups; ++g) {
          sc.push_back(fp32_to_fp16(bf16_to_fp32(fp32_to_bf16(nd(rng)))));
          bi.push_back(fp32_to_fp16(bf16_to_fp32(fp32_to_bf16(8 * nd(rng)))));
        }
        const auto s = store_as(st, sc), b = store_as(st, bi);
        std::vector<uint8_t> blocks(dtype_row_bytes(*type, n));
        ASSERT_TRUE(mlx_affine_repack_row(f, *type, codes.data(), s.data(), b.data(), n, blocks.data()));
        std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
        dequantize_row(*type, blocks.data(), got.data(), n);
        mlx_affine_dequantize_row_f32(f, codes.data(), s.data(), b.data(), n, want.data());
        EXPECT_TRUE(same_bits(got, want)) << bits << "-bit g" << group << " " << dtype_name(st);
        ++repacked;
        if (bits == 4 && group == 64 && st == DType::F16) {
          // Negative control: nibbles in element order (2j low, 2j+1 high) instead of ggml's.
          auto* blk = reinterpret_cast<block_q4_1*>(blocks.data());
          for (int64_t k = 0; k < n / 32; ++k) {
            uint8_t q[32];
            for (int j = 0; j < 16; ++j) {
              q[j] = blk[k].qs[j] & 0x0F;
              q[j + 16] = blk[k].qs[j] >> 4;
            }
            for (int j = 0; j < 16; ++j) blk[k].qs[j] = static_cast<uint8_t>(q[2 * j] | (q[2 * j + 1] << 4));
          }
          dequantize_row(*type, blocks.data(), got.data(), n);
          EXPECT_FALSE(same_bits(got, want)) << "the nibble order does not matter?";
        }
        if (bits == 8 && group == 32 && st == DType::F16) {
          // Negative control: the codes taken as signed bytes (Q8_0's reading).
          auto* blk = reinterpret_cast<block_q8_a*>(blocks.data());
          for (int64_t k = 0; k < n / 32; ++k)
            for (uint8_t& q : blk[k].qs) q = static_cast<uint8_t>(static_cast<int8_t>(q) + 128);
          dequantize_row(*type, blocks.data(), got.data(), n);
          EXPECT_FALSE(same_bits(got, want)) << "the codes' sign does not matter?";
        }
        if (st == DType::BF16) {
          // A bf16 scale outside fp16's range (1e-6 is below its subnormals' precision; 1e5 past
          // its max) has no exact Q4_1/Q5_1 block: the repack says so.
          for (float bad : {1e-6f, 1e5f}) {
            auto s2 = s;
            const uint16_t h = fp32_to_bf16(bad);
            std::memcpy(s2.data() + 2 * (n_groups - 1), &h, 2);
            EXPECT_FALSE(mlx_affine_repack_row(f, *type, codes.data(), s2.data(), b.data(), n, blocks.data())) << bad;
            // The check made before any row is converted (a folder's deferred experts) agrees.
            EXPECT_FALSE(mlx_affine_groups_fp16_exact(f, s2.data(), b.data(), n_groups)) << bad;
          }
          EXPECT_TRUE(mlx_affine_groups_fp16_exact(f, s.data(), b.data(), n_groups));
        }
      }
    }
  }
  EXPECT_EQ(repacked, 6 * 3 * 3);
  EXPECT_THROW(mlx_affine_repack_row({6, 64, DType::F16}, DType::Q4_1, nullptr, nullptr, nullptr, 64, nullptr), Error);
  EXPECT_THROW(mlx_affine_repack_row({4, 64, DType::F16}, DType::Q8_A, nullptr, nullptr, nullptr, 64, nullptr), Error);
}

// The bf16 -> fp16 exactness test by fields (what a bf16-scaled folder's load runs per group)
// against the round trip through float, on every one of the 65536 bf16 values.
TEST(MlxAffine, Bf16ExactFp16ByFieldsIsTheRoundTrip) {
  int exact = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float x = bf16_to_fp32(static_cast<uint16_t>(h));
    const uint16_t r = fp32_to_fp16(x);
    const float back = fp16_to_fp32(r);
    const bool want = back == x && std::signbit(back) == std::signbit(x);  // NaN: never equal
    const auto got = mlx_bf16_exact_fp16(static_cast<uint16_t>(h));
    ASSERT_EQ(got.has_value(), want) << std::hex << h << " " << x;
    if (got) {
      ASSERT_EQ(*got, r) << std::hex << h << " " << x;
      ++exact;
    }
  }
  // Counted by hand, per sign: fp16's 30 normal binades x 128 mantissas; in its subnormal range
  // the binades 2^-15..2^-17 whole (128 each) and then 64, 32, ..., 1 (2^-18..2^-24: the
  // mantissa's low bits must be zero); zero and inf. 2 x (3840 + 384 + 127 + 2) = 8706.
  EXPECT_EQ(exact, 8706);
}

// On MLX's own codes and scales (the fixture): f16/bf16 groups repack exactly.
TEST(MlxAffine, RepacksMlxCodes) {
  const SafetensorsFile f(kFixture);
  int checked = 0;
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (const char* dt : {"float16", "bfloat16"}) {
      const std::string name = "b" + std::to_string(bits) + "_g64_" + dt;
      const StTensor *w = f.find(name + ".weight"), *s = f.find(name + ".scales"), *b = f.find(name + ".biases");
      ASSERT_TRUE(w && s && b) << name;
      const int64_t n = w->shape[1] * 32 / bits;
      const MlxAffineFormat fmt{bits, 64, *st_dtype_to_dtype(s->dtype)};
      const auto type = *mlx_affine_repack_type(fmt);
      std::vector<uint8_t> blocks(dtype_row_bytes(type, n));
      std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      const size_t sb = st_dtype_size(s->dtype);
      for (int64_t r = 0; r < w->shape[0]; ++r) {
        const auto* codes = reinterpret_cast<const uint32_t*>(w->data) + r * w->shape[1];
        const uint8_t *sr = s->data + r * (n / 64) * sb, *br = b->data + r * (n / 64) * sb;
        ASSERT_TRUE(mlx_affine_repack_row(fmt, type, codes, sr, br, n, blocks.data())) << name;
        dequantize_row(type, blocks.data(), got.data(), n);
        mlx_affine_dequantize_row_f32(fmt, codes, sr, br, n, want.data());
        EXPECT_TRUE(same_bits(got, want)) << name << " row " << r;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 12);
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
      {file_of(R"({"__metadata__":null})", 0), ""},  // valid: what mx.save_safetensors writes without metadata
      {file_of(R"({"__metadata__":[1]})", 0), "__metadata__ is not an object"},
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


// The encoder (`sluice synth --format mlx`): every element decodes within half a step of itself
// (the step being the group's stored scale), every
// group's codes reach 0 and the top code within one (the range is used), and the scales and biases are fp16
// values, so the folder loader repacks the rows exactly. Negative control: decoding the same
// codes at one bit fewer is far off.
TEST(MlxAffine, QuantizesWithinHalfAStepAndRepacks) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int group : {32, 64, 128}) {
      for (DType st : {DType::BF16, DType::F16, DType::F32}) {
        const MlxAffineFormat f{bits, group, st};
        const int64_t n = 256, ng = n / group;
        std::vector<float> x(n), back(n);
        for (float& v : x) v = nd(rng);
        std::fill(x.begin() + group, x.begin() + 2 * group, 0.0f);  // a constant group: scale 0
        const size_t ss = st == DType::F32 ? 4 : 2;
        std::vector<uint32_t> codes(static_cast<size_t>(mlx_affine_row_words(f, n)));
        std::vector<uint8_t> sc(ng * ss), bi(ng * ss);
        mlx_affine_quantize_row(f, x.data(), n, codes.data(), sc.data(), bi.data());
        mlx_affine_dequantize_row_f32(f, codes.data(), sc.data(), bi.data(), n, back.data());
        const std::string what = std::to_string(bits) + " bits, group " + std::to_string(group) + " " +
                                 std::string(dtype_name(st));
        for (int64_t g = 0; g < ng; ++g) {
          float scale, lo = x[g * group], hi = lo;
          for (int64_t i = 0; i < group; ++i) lo = std::min(lo, x[g * group + i]), hi = std::max(hi, x[g * group + i]);
          if (st == DType::F32) {
            std::memcpy(&scale, sc.data() + 4 * g, 4);
          } else {
            uint16_t h;
            std::memcpy(&h, sc.data() + 2 * g, 2);
            scale = st == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
          }
          const float tol = 0.5f * scale * (1 + 1e-5f) + 1e-7f;
          for (int64_t i = 0; i < group; ++i)
            ASSERT_LE(std::abs(back[g * group + i] - x[g * group + i]), tol) << what << " group " << g << " elem " << i;
          if (hi > lo) {
            int64_t qmin = 255, qmax = 0;
            for (int64_t i = 0; i < group; ++i) {
              const int64_t bit = (g * group + i) * bits;
              const uint64_t two = codes[bit / 32] |
                                   (bit / 32 + 1 < int64_t(codes.size()) ? uint64_t(codes[bit / 32 + 1]) << 32 : 0);
              const int64_t q = int64_t((two >> (bit % 32)) & ((1u << bits) - 1));
              qmin = std::min(qmin, q), qmax = std::max(qmax, q);
            }
            // The range is used: code 0 and the top one, give or take one where the stored bias or
            // scale moved by a bf16 step (near a whole code at 8 bits).
            EXPECT_LE(qmin, 1) << what;
            EXPECT_GE(qmax, (1 << bits) - 2) << what;
          }
        }
        if (const auto type = mlx_affine_repack_type(f)) {
          std::vector<uint8_t> blocks(dtype_row_bytes(*type, n));
          EXPECT_TRUE(mlx_affine_repack_row(f, *type, codes.data(), sc.data(), bi.data(), n, blocks.data())) << what;
        }
        if (bits > 2) {  // negative control: the codes read at one bit fewer
          const MlxAffineFormat wrong{bits - 1, group, st};
          std::vector<float> off(n);
          mlx_affine_dequantize_row_f32(wrong, codes.data(), sc.data(), bi.data(), n, off.data());
          double err = 0;
          for (int64_t i = 0; i < n; ++i) err = std::max(err, double(std::abs(off[i] - x[i])));
          EXPECT_GT(err, 0.01) << what;
        }
      }
    }
  }
}

// The writer: what it writes the reader takes back (names, dtypes, shapes, bytes, metadata), and
// a writer destroyed before finish() leaves no file behind; writing past the declared bytes or
// finishing short fails naming the tensor.
TEST(Safetensors, WriterRoundTripsThroughTheReader) {
  const std::string path = ::testing::TempDir() + "/sluice_writer_test.safetensors";
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<uint32_t> b = {7, 8};
  {
    SafetensorsWriter w;
    w.add("layer.a", StDtype::F32, {2, 3});
    w.add("layer.b", StDtype::U32, {1, 2});
    w.begin(path, {{"format", "mlx"}});
    w.write(a.data(), 8);  // in pieces
    w.write(reinterpret_cast<const uint8_t*>(a.data()) + 8, 16);
    w.write(b.data(), 8);
    EXPECT_THROW(w.write(b.data(), 1), Error);
    w.finish();
  }
  const SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("format"), "mlx");
  ASSERT_EQ(f.tensors().size(), 2u);
  const StTensor* ta = f.find("layer.a");
  ASSERT_TRUE(ta);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(ta->data, a.data(), 24), 0);
  EXPECT_EQ(f.find("layer.b")->dtype, StDtype::U32);
  EXPECT_EQ(std::memcmp(f.find("layer.b")->data, b.data(), 8), 0);
  {
    SafetensorsWriter w;
    w.add("x", StDtype::F32, {4});
    w.begin(path);
    w.write(a.data(), 4);
    try {
      w.finish();
      ADD_FAILURE() << "finish() with 4 of 16 bytes written";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'x' incomplete"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(path)) << "an unfinished file was left behind";
}

}  // namespace
}  // namespace sluice
