// tests/unit/test_gguf: GGUF writer -> reader round trips, the real stories260K file, and a
// corrupt-file set where every error must name the field and its byte offset. Corrupt files
// are made by writing a valid file and patching bytes at offsets found by walking its layout
// (GgufLayout below), not at hard-coded positions. Also runs the mutation fuzz loop.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "format/gguf.h"
#include "format/mapped_file.h"
#include "fuzz/gguf_mutate.h"
#include "test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

std::string tmp_path(const std::string& name) {
  return (fs::path(::testing::TempDir()) / ("sluice_gguf_" + std::to_string(::getpid()) + "_" + name)).string();
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  ASSERT_TRUE(out.good()) << path;
}

uint64_t rd_u64(const std::vector<uint8_t>& b, size_t pos) {
  uint64_t v;
  std::memcpy(&v, b.data() + pos, 8);
  return v;
}
uint32_t rd_u32(const std::vector<uint8_t>& b, size_t pos) {
  uint32_t v;
  std::memcpy(&v, b.data() + pos, 4);
  return v;
}
void wr_u64(std::vector<uint8_t>& b, size_t pos, uint64_t v) { std::memcpy(b.data() + pos, &v, 8); }
void wr_u32(std::vector<uint8_t>& b, size_t pos, uint32_t v) { std::memcpy(b.data() + pos, &v, 4); }

// Byte positions of every field of a *valid* file, found by a walk independent of the reader.
struct GgufLayout {
  struct Kv {
    std::string key;
    size_t key_pos, type_pos, value_pos;
  };
  struct Tensor {
    std::string name;
    size_t name_pos, ndims_pos, ne_pos, type_pos, offset_pos;
  };
  std::vector<Kv> kvs;
  std::vector<Tensor> tensors;
  size_t header_end = 0;

  const Kv& kv(std::string_view k) const {
    for (const auto& x : kvs)
      if (x.key == k) return x;
    throw std::runtime_error("layout: no key " + std::string(k));
  }
  const Tensor& tensor(std::string_view n) const {
    for (const auto& x : tensors)
      if (x.name == n) return x;
    throw std::runtime_error("layout: no tensor " + std::string(n));
  }
};

size_t skip_value(const std::vector<uint8_t>& b, size_t pos, uint32_t type) {
  switch (type) {
    case 0:
    case 1:
    case 7: return pos + 1;
    case 2:
    case 3: return pos + 2;
    case 4:
    case 5:
    case 6: return pos + 4;
    case 10:
    case 11:
    case 12: return pos + 8;
    case 8: return pos + 8 + rd_u64(b, pos);
    case 9: {
      uint32_t et = rd_u32(b, pos);
      uint64_t n = rd_u64(b, pos + 4);
      pos += 12;
      for (uint64_t i = 0; i < n; ++i) pos = skip_value(b, pos, et);
      return pos;
    }
  }
  throw std::runtime_error("layout: bad type");
}

GgufLayout walk(const std::vector<uint8_t>& b) {
  GgufLayout l;
  uint64_t n_tensors = rd_u64(b, 8), n_kv = rd_u64(b, 16);
  size_t pos = 24;
  for (uint64_t i = 0; i < n_kv; ++i) {
    GgufLayout::Kv kv;
    kv.key_pos = pos;
    uint64_t len = rd_u64(b, pos);
    kv.key.assign(reinterpret_cast<const char*>(b.data() + pos + 8), len);
    pos += 8 + len;
    kv.type_pos = pos;
    uint32_t type = rd_u32(b, pos);
    pos += 4;
    kv.value_pos = pos;
    pos = skip_value(b, pos, type);
    l.kvs.push_back(kv);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufLayout::Tensor t;
    t.name_pos = pos;
    uint64_t len = rd_u64(b, pos);
    t.name.assign(reinterpret_cast<const char*>(b.data() + pos + 8), len);
    pos += 8 + len;
    t.ndims_pos = pos;
    uint32_t nd = rd_u32(b, pos);
    pos += 4;
    t.ne_pos = pos;
    pos += 8 * nd;
    t.type_pos = pos;
    pos += 4;
    t.offset_pos = pos;
    pos += 8;
    l.tensors.push_back(t);
  }
  l.header_end = pos;
  return l;
}

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + salt);
  return v;
}

// The small valid file every corruption case starts from.
std::vector<uint8_t> small_file_bytes() {
  static const std::vector<uint8_t> bytes = [] {
    GgufWriter w;
    // A long first value keeps the later header fields past the "count cannot fit" checks,
    // so truncating there reports the field itself.
    w.set_string("general.description", std::string(160, 'd'));
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.block_count", 3);
    w.set_string_array("tokenizer.ggml.tokens", {"a", "bb", "ccc"});
    w.set_u32("dup.aaa", 1);
    w.set_u32("dup.bbb", 2);
    w.set_bool("flag", true);
    auto a = pattern(4 * 2 * 4, 1), b = pattern(2 * 18, 2), c = pattern(8 * 2, 3);
    w.add_tensor("a", DType::F32, {4, 2}, a.data(), a.size());
    w.add_tensor("b", DType::Q4_0, {32, 2}, b.data(), b.size());
    w.add_tensor("c", DType::F16, {8}, c.data(), c.size());
    std::string p = tmp_path("small_seed.gguf");
    w.write(p);
    auto out = test::read_file_bytes(p);
    fs::remove(p);
    return out;
  }();
  return bytes;
}

// Parses `bytes` from a file and requires a sluice::Error naming the path, every needle and
// "at byte <at>".
void expect_error(const std::vector<uint8_t>& bytes, const std::vector<std::string>& needles, std::optional<size_t> at,
                  const std::string& name) {
  std::string p = tmp_path(name + ".gguf");
  write_bytes(p, bytes);
  try {
    GgufFile f(p);
    ADD_FAILURE() << name << ": expected an error, file parsed";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(p), std::string::npos) << name << ": no path in: " << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << name << ": no '" << n << "' in: " << msg;
    if (at) {
      std::string want = "at byte " + std::to_string(*at) + ")";
      EXPECT_NE(msg.find(want), std::string::npos) << name << ": no '" << want << "' in: " << msg;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << name << ": non-sluice exception: " << e.what();
  }
  fs::remove(p);
}

bool value_eq(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.v.index() != b.v.index()) return false;
  if (a.type != GgufType::ARRAY) return a.v == b.v;
  const auto& x = std::get<std::shared_ptr<GgufArray>>(a.v);
  const auto& y = std::get<std::shared_ptr<GgufArray>>(b.v);
  if (x->elem_type != y->elem_type || x->items.size() != y->items.size()) return false;
  for (size_t i = 0; i < x->items.size(); ++i)
    if (!value_eq(x->items[i], y->items[i])) return false;
  return true;
}

template <class T>
GgufValue arr(GgufType t, std::vector<T> xs) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = t;
  for (const auto& x : xs) a->items.push_back(GgufValue{t, static_cast<T>(x)});  // static_cast: vector<bool> proxies
  return GgufValue{GgufType::ARRAY, a};
}
GgufValue arr_of(GgufType t, std::vector<GgufValue> xs) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = t;
  a->items = std::move(xs);
  return GgufValue{GgufType::ARRAY, a};
}

std::vector<std::pair<std::string, GgufValue>> every_value() {
  using T = GgufType;
  return {
      {"t.u8", {T::UINT8, uint8_t{200}}},
      {"t.i8", {T::INT8, int8_t{-5}}},
      {"t.u16", {T::UINT16, uint16_t{65535}}},
      {"t.i16", {T::INT16, int16_t{-32768}}},
      {"t.u32", {T::UINT32, uint32_t{4000000000u}}},
      {"t.i32", {T::INT32, int32_t{-123456}}},
      {"t.f32", {T::FLOAT32, 3.25f}},
      {"t.bool", {T::BOOL, true}},
      {"t.bool0", {T::BOOL, false}},
      {"t.str", {T::STRING, std::string("he said \"hi\"\n\ttab \xe2\x96\x81")}},
      {"t.str_empty", {T::STRING, std::string()}},
      {"t.u64", {T::UINT64, uint64_t{0xfedcba9876543210ull}}},
      {"t.i64", {T::INT64, int64_t{std::numeric_limits<int64_t>::min()}}},
      {"t.f64", {T::FLOAT64, 1e-300}},
      {"a.u8", arr<uint8_t>(T::UINT8, {0, 1, 255})},
      {"a.i8", arr<int8_t>(T::INT8, {-128, 0, 127})},
      {"a.u16", arr<uint16_t>(T::UINT16, {1, 2})},
      {"a.i16", arr<int16_t>(T::INT16, {-1, 2})},
      {"a.u32", arr<uint32_t>(T::UINT32, {7, 8, 9})},
      {"a.i32", arr<int32_t>(T::INT32, {-1, 0, 1})},
      {"a.f32", arr<float>(T::FLOAT32, {0.5f, -2.0f})},
      {"a.bool", arr<bool>(T::BOOL, {true, false, true})},
      {"a.str", arr<std::string>(T::STRING, {"x", "", "zz"})},
      {"a.u64", arr<uint64_t>(T::UINT64, {1ull << 63})},
      {"a.i64", arr<int64_t>(T::INT64, {-(1ll << 40)})},
      {"a.f64", arr<double>(T::FLOAT64, {2.5, -0.0})},
      {"a.empty", arr<uint64_t>(T::UINT64, {})},
      {"a.nested_i32",
       arr_of(T::ARRAY, {arr<int32_t>(T::INT32, {1, 2}), arr<int32_t>(T::INT32, {3}), arr<int32_t>(T::INT32, {})})},
      {"a.nested3",
       arr_of(T::ARRAY, {arr_of(T::ARRAY, {arr<std::string>(T::STRING, {"deep"}), arr<float>(T::FLOAT32, {1.0f})}),
                         arr_of(T::ARRAY, {})})},
  };
}

// ---------------------------------------------------------------------------------------

TEST(GgufTypes, Names) {
  EXPECT_EQ(gguf_type_name(GgufType::UINT8), "uint8");
  EXPECT_EQ(gguf_type_name(GgufType::INT8), "int8");
  EXPECT_EQ(gguf_type_name(GgufType::UINT16), "uint16");
  EXPECT_EQ(gguf_type_name(GgufType::INT16), "int16");
  EXPECT_EQ(gguf_type_name(GgufType::UINT32), "uint32");
  EXPECT_EQ(gguf_type_name(GgufType::INT32), "int32");
  EXPECT_EQ(gguf_type_name(GgufType::FLOAT32), "float32");
  EXPECT_EQ(gguf_type_name(GgufType::BOOL), "bool");
  EXPECT_EQ(gguf_type_name(GgufType::STRING), "string");
  EXPECT_EQ(gguf_type_name(GgufType::ARRAY), "array");
  EXPECT_EQ(gguf_type_name(GgufType::UINT64), "uint64");
  EXPECT_EQ(gguf_type_name(GgufType::INT64), "int64");
  EXPECT_EQ(gguf_type_name(GgufType::FLOAT64), "float64");
  EXPECT_EQ(gguf_type_name(static_cast<GgufType>(99)), "unknown");
}

TEST(GgufTypes, ValueToString) {
  EXPECT_EQ((GgufValue{GgufType::UINT8, uint8_t{200}}.to_string()), "200");
  EXPECT_EQ((GgufValue{GgufType::INT8, int8_t{-5}}.to_string()), "-5");
  EXPECT_EQ((GgufValue{GgufType::BOOL, true}.to_string()), "true");
  EXPECT_EQ((GgufValue{GgufType::FLOAT32, 1e-5f}.to_string()), "1e-05");
  EXPECT_EQ((GgufValue{GgufType::STRING, std::string("a\"b\nc")}.to_string()), "\"a\\\"b\\nc\"");
  std::vector<int32_t> ten(10, 7);
  EXPECT_EQ(arr<int32_t>(GgufType::INT32, ten).to_string(3), "[7, 7, 7, ... (10 items)]");
  EXPECT_EQ(arr_of(GgufType::ARRAY, {arr<std::string>(GgufType::STRING, {"x"}), arr<int32_t>(GgufType::INT32, {})})
                .to_string(),
            "[[\"x\"], []]");
}

TEST(GgufRoundTrip, EveryValueTypeAndGetter) {
  std::string p = tmp_path("values.gguf");
  {
    GgufWriter w;
    for (auto& [k, v] : every_value()) w.set(k, v);
    w.set_u32("s.u32", 11);
    w.set_i32("s.i32", -11);
    w.set_u64("s.u64", 1ull << 50);
    w.set_f32("s.f32", 0.125f);
    w.set_bool("s.bool", true);
    w.set_string("s.str", "hello");
    w.set_string_array("s.strs", {"<unk>", "<s>", "\xe2\x96\x81the"});
    w.set_f32_array("s.f32s", {1.5f, -2.5f});
    w.set_i32_array("s.i32s", {3, -4, 5});
    w.set_u32("s.u32", 12);  // setting twice replaces in place
    auto d = pattern(4 * 3, 9);
    w.add_tensor("w", DType::F32, {3}, d.data(), d.size());
    w.write(p);
  }
  GgufFile f(p);
  EXPECT_EQ(f.version(), 3u);
  auto want = every_value();
  for (auto& [k, v] : want) {
    const GgufValue* got = f.find(k);
    ASSERT_NE(got, nullptr) << k;
    EXPECT_TRUE(value_eq(*got, v)) << k << ": " << got->to_string() << " vs " << v.to_string();
  }
  // File order is preserved; the replaced key kept its first position.
  ASSERT_EQ(f.metadata().size(), want.size() + 9);
  EXPECT_EQ(f.metadata()[0].first, "t.u8");
  EXPECT_EQ(f.metadata()[want.size()].first, "s.u32");

  EXPECT_EQ(f.get_u32("s.u32"), 12u);
  EXPECT_EQ(f.get_u32_or("s.u32", 5), 12u);
  EXPECT_EQ(f.get_u32_or("absent", 5), 5u);
  EXPECT_EQ(f.get_i32("s.i32"), -11);
  EXPECT_EQ(f.get_u64("s.u64"), 1ull << 50);
  EXPECT_EQ(f.get_f32("s.f32"), 0.125f);
  EXPECT_EQ(f.get_f32_or("absent", 2.0f), 2.0f);
  EXPECT_EQ(f.get_f32_or("s.f32", 2.0f), 0.125f);
  EXPECT_TRUE(f.get_bool("s.bool"));
  EXPECT_FALSE(f.get_bool("t.bool0"));
  EXPECT_TRUE(f.get_bool_or("absent", true));
  EXPECT_TRUE(f.get_bool_or("s.bool", false));
  EXPECT_EQ(f.get_string("s.str"), "hello");
  EXPECT_EQ(f.get_string_or("absent", "dflt"), "dflt");
  EXPECT_EQ(f.get_string_or("s.str", "dflt"), "hello");
  EXPECT_EQ(f.get_string_array("s.strs"), (std::vector<std::string>{"<unk>", "<s>", "\xe2\x96\x81the"}));
  EXPECT_EQ(f.get_f32_array("s.f32s"), (std::vector<float>{1.5f, -2.5f}));
  EXPECT_EQ(f.get_i32_array("s.i32s"), (std::vector<int32_t>{3, -4, 5}));
  EXPECT_TRUE(f.get_i32_array("a.i32") == (std::vector<int32_t>{-1, 0, 1}));
  EXPECT_TRUE(f.has("t.f64"));
  EXPECT_FALSE(f.has("nope"));

  // Wrong types name the file, key, expected and actual type.
  auto expect_msg = [&](auto fn, std::vector<std::string> needles) {
    try {
      fn();
      ADD_FAILURE() << "no error; wanted " << needles[0];
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(p), std::string::npos) << m;
      for (auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "no '" << n << "' in: " << m;
    }
  };
  expect_msg([&] { f.get_u32("s.i32"); }, {"'s.i32'", "type int32", "expected uint32"});
  expect_msg([&] { f.get_i32("s.u32"); }, {"'s.u32'", "type uint32", "expected int32"});
  expect_msg([&] { f.get_u64("s.u32"); }, {"expected uint64"});
  expect_msg([&] { f.get_f32("t.f64"); }, {"type float64", "expected float32"});
  expect_msg([&] { f.get_bool("t.u8"); }, {"type uint8", "expected bool"});
  expect_msg([&] { f.get_string("s.strs"); }, {"type array of string", "expected string"});
  expect_msg([&] { f.get_u32_or("s.str", 1); }, {"'s.str'", "type string", "expected uint32"});
  expect_msg([&] { f.get_f32_or("s.str", 1); }, {"expected float32"});
  expect_msg([&] { f.get_bool_or("s.str", true); }, {"expected bool"});
  expect_msg([&] { f.get_string_or("s.u32", ""); }, {"expected string"});
  expect_msg([&] { f.get_i32_array("s.f32s"); }, {"type array of float32", "expected array of int32"});
  expect_msg([&] { f.get_f32_array("s.i32s"); }, {"expected array of float32"});
  expect_msg([&] { f.get_string_array("s.str"); }, {"type string", "expected array of string"});
  expect_msg([&] { f.get_i32_array("a.u32"); }, {"array of uint32"});
  expect_msg([&] { f.get_u32("absent.key"); }, {"missing key 'absent.key'"});
  expect_msg([&] { f.get_string_array("absent.key"); }, {"missing key 'absent.key'"});
  expect_msg([&] { f.tensor("nope"); }, {"missing tensor nope"});
  fs::remove(p);
}

TEST(GgufRoundTrip, U32PerLayer) {
  std::string p = tmp_path("per_layer.gguf");
  {
    GgufWriter w;
    w.set_u32("u", 7);
    w.set_i32("i", 8);
    w.set_i32("neg", -1);
    w.set("au", arr<uint32_t>(GgufType::UINT32, {1, 2, 3}));
    w.set_i32_array("ai", {4, 5, 6});
    w.set_i32_array("ai_neg", {4, -5, 6});
    w.set_i32_array("ai_short", {4, 5});
    w.set_f32_array("af", {1, 2, 3});
    w.set_string("s", "x");
    w.set("u64", GgufValue{GgufType::UINT64, uint64_t{3}});
    w.write(p);
  }
  GgufFile f(p);
  EXPECT_EQ(f.get_u32_per_layer("u", 3), (std::vector<uint32_t>{7, 7, 7}));
  EXPECT_EQ(f.get_u32_per_layer("i", 2), (std::vector<uint32_t>{8, 8}));
  EXPECT_EQ(f.get_u32_per_layer("au", 3), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(f.get_u32_per_layer("ai", 3), (std::vector<uint32_t>{4, 5, 6}));
  for (const char* bad : {"neg", "ai_neg", "af", "s", "u64", "missing"}) {
    try {
      f.get_u32_per_layer(bad, 3);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
  try {
    f.get_u32_per_layer("ai_short", 3);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 values but the model has 3 layers"), std::string::npos) << e.what();
  }
  fs::remove(p);
}

TEST(GgufRoundTrip, TensorsShapesAlignmentAndData) {
  for (size_t align : {size_t{32}, size_t{64}, size_t{1}}) {
    std::string p = tmp_path("tensors.gguf");
    struct Spec {
      std::string name;
      DType type;
      std::vector<int64_t> ne;
    };
    std::vector<Spec> specs = {{"f32.1d", DType::F32, {5}},
                               {"f16.2d", DType::F16, {3, 7}},
                               {"q4_0", DType::Q4_0, {64, 3}},
                               {"q4_K.3d", DType::Q4_K, {256, 2, 4}},
                               {"q8_0.4d", DType::Q8_0, {32, 1, 2, 3}},
                               {"empty", DType::F32, {4, 0}},
                               {"bf16", DType::BF16, {9}}};
    std::vector<std::vector<uint8_t>> datas;
    {
      GgufWriter w;
      if (align != 32) w.set_alignment(align);
      w.set_string("general.architecture", "test");
      for (size_t i = 0; i < specs.size(); ++i) {
        const auto& tr = dtype_traits(specs[i].type);
        size_t n = static_cast<size_t>(specs[i].ne[0] / tr.block_size) * tr.block_bytes;
        for (size_t d = 1; d < specs[i].ne.size(); ++d) n *= static_cast<size_t>(specs[i].ne[d]);
        datas.push_back(pattern(n, static_cast<uint8_t>(i)));
        w.add_tensor(specs[i].name, specs[i].type, specs[i].ne, datas.back().data(), n);
      }
      w.write(p);
    }
    GgufFile f(p);
    EXPECT_EQ(f.alignment(), align);
    EXPECT_EQ(f.data_offset() % align, 0u);
    ASSERT_EQ(f.tensors().size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const TensorView& t = f.tensors()[i];
      SCOPED_TRACE(specs[i].name);
      EXPECT_EQ(t.name, specs[i].name);
      EXPECT_EQ(&f.tensor(specs[i].name), &t);
      EXPECT_EQ(t.type, specs[i].type);
      EXPECT_EQ(t.n_dims, static_cast<int>(specs[i].ne.size()));
      for (int d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], d < t.n_dims ? specs[i].ne[static_cast<size_t>(d)] : 1);
      ASSERT_EQ(t.nbytes, datas[i].size());
      if (t.nbytes > 0) {  // memcmp(null, 0) is UB
        EXPECT_EQ(std::memcmp(t.data, datas[i].data(), t.nbytes), 0);
      }
      size_t off = static_cast<size_t>(static_cast<const uint8_t*>(t.data) - f.base());
      EXPECT_EQ((off - f.data_offset()) % align, 0u);
      EXPECT_LE(off + t.nbytes, f.file_size());
    }
    EXPECT_EQ(f.find_tensor("nope"), nullptr);
    fs::remove(p);
  }
}

// The anonymous kB of the mapping that holds p (/proc/self/smaps), -1 if none is found.
long anonymous_kb_at(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) {  // a mapping's first line
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("Anonymous:", 0) == 0) {
      return std::atol(line.c_str() + 10);
    }
  }
  return -1;
}

// release_pages: the whole pages inside a tensor go back to the file, its bytes read the same.
TEST(GgufFile, ReleasedPagesReadTheFileBytes) {
  const std::string p = tmp_path("release.gguf");
  const auto big = pattern(size_t{1} << 20, 7), small = pattern(100, 8);
  {
    GgufWriter w;
    w.set_string("general.architecture", "test");
    w.add_tensor("small", DType::F32, {25}, small.data(), small.size());
    w.add_tensor("big", DType::F32, {int64_t{1} << 18}, big.data(), big.size());
    w.write(p);
  }
  for (const auto load : {GgufFile::Load::read, GgufFile::Load::map}) {
    GgufFile f(p, load);
    const TensorView& b = f.tensor("big");
    const TensorView& s = f.tensor("small");
    EXPECT_EQ(f.release_pages(s.data, s.nbytes), 0u);  // no whole page inside 100 bytes
    const auto* mid = static_cast<const uint8_t*>(b.data) + b.nbytes / 2;
    // Read into memory: anonymous pages until released (the check below can fail).
    if (load == GgufFile::Load::read) {
      EXPECT_GT(anonymous_kb_at(mid), 0);
    }
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t got = f.release_pages(b.data, b.nbytes);
    EXPECT_GE(got, b.nbytes - 2 * page);
    EXPECT_LE(got, b.nbytes);
    EXPECT_EQ(std::memcmp(b.data, big.data(), big.size()), 0);
    EXPECT_EQ(std::memcmp(s.data, small.data(), small.size()), 0);
    if (load == GgufFile::Load::read) {
      // The middle of the tensor is no longer anonymous memory (the file's pages, read above).
      EXPECT_EQ(anonymous_kb_at(mid), 0) << "the copy's pages are still there";
    }
    // Outside the file: nothing to give back.
    EXPECT_EQ(f.release_pages(big.data(), big.size()), 0u);
  }
  // Memory-backed (the same file's bytes): nothing to give back, the bytes stay.
  const std::vector<uint8_t> file = test::read_file_bytes(p);
  auto m = GgufFile::from_memory(file.data(), file.size(), "mem");
  const TensorView& mb = m->tensor("big");
  EXPECT_EQ(m->release_pages(mb.data, mb.nbytes), 0u);
  EXPECT_EQ(std::memcmp(mb.data, big.data(), big.size()), 0);
  fs::remove(p);
}

TEST(GgufWriter, StreamingMatchesInMemory) {
  auto a = pattern(4 * 64, 1), b = pattern(18 * 4, 2);
  std::string p1 = tmp_path("mem.gguf"), p2 = tmp_path("stream.gguf");
  {
    GgufWriter w;
    w.set_string("general.architecture", "x");
    w.add_tensor("a", DType::F32, {64}, a.data(), a.size());
    w.add_tensor("b", DType::Q4_0, {32, 4}, b.data(), b.size());
    w.write(p1);
  }
  {
    GgufWriter w;
    w.set_string("general.architecture", "x");
    w.add_tensor_info("a", DType::F32, {64});
    w.add_tensor_info("b", DType::Q4_0, {32, 4});
    w.begin(p2);
    w.write_tensor_data("a", a.data(), a.size());
    w.write_tensor_data("b", b.data(), b.size());
    w.finish();
  }
  auto b1 = test::read_file_bytes(p1), b2 = test::read_file_bytes(p2);
  EXPECT_EQ(b1, b2);
  EXPECT_EQ(b1.size() % 32, 0u);  // the last tensor is padded too
  GgufFile f(p2);
  EXPECT_EQ(std::memcmp(f.tensor("b").data, b.data(), b.size()), 0);
  fs::remove(p1);
  fs::remove(p2);
}

TEST(GgufWriter, MisuseIsReported) {
  auto a = pattern(16, 1);
  std::string p = tmp_path("misuse.gguf");
  GgufWriter w;
  w.add_tensor_info("a", DType::F32, {4});
  w.add_tensor_info("b", DType::F32, {4});
  EXPECT_THROW(w.add_tensor_info("a", DType::F32, {4}), Error);              // duplicate
  EXPECT_THROW(w.add_tensor_info("q", DType::Q4_0, {33}), Error);            // not a block multiple
  EXPECT_THROW(w.add_tensor_info("z", DType::F32, {1, 1, 1, 1, 1}), Error);  // 5 dims
  EXPECT_THROW(w.add_tensor_info("n", DType::F32, {-1}), Error);
  EXPECT_THROW(w.add_tensor_info("m", DType::Q8_A, {32}), Error);         // Sluice's own type: no GGUF reader knows it
  EXPECT_THROW(w.add_tensor("s", DType::F32, {4}, a.data(), 15), Error);  // size mismatch
  EXPECT_THROW(w.set_alignment(48), Error);
  EXPECT_THROW(w.set("bad", GgufValue{GgufType::UINT32, int32_t{1}}), Error);  // tag vs variant
  EXPECT_THROW(w.write(p), Error);                                             // infos without data
  EXPECT_THROW(w.write_tensor_data("a", a.data(), 16), Error);                 // before begin
  w.begin(p);
  EXPECT_THROW(w.write_tensor_data("b", a.data(), 16), Error);  // out of order
  EXPECT_THROW(w.write_tensor_data("a", a.data(), 8), Error);   // wrong size
  w.write_tensor_data("a", a.data(), 16);
  try {
    w.finish();
    ADD_FAILURE() << "finish with a tensor missing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
  w.write_tensor_data("b", a.data(), 16);
  w.finish();
  GgufFile f(p);
  EXPECT_EQ(f.tensors().size(), 2u);
  fs::remove(p);
}

TEST(GgufWriter, WriteErrorsNameThePath) {
  auto a = pattern(1 << 16, 1);
  GgufWriter w;
  w.add_tensor("a", DType::F32, {1 << 14}, a.data(), a.size());
  try {
    w.write("/nonexistent-dir-sluice/x.gguf");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir-sluice/x.gguf: cannot create"), std::string::npos)
        << e.what();
  }
  // /dev/full fails every write with ENOSPC: the disk-full path.
  if (fs::exists("/dev/full")) {
    GgufWriter w2;
    w2.add_tensor("a", DType::F32, {1 << 14}, a.data(), a.size());
    try {
      w2.write("/dev/full");
      ADD_FAILURE();
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("/dev/full"), std::string::npos) << m;
      EXPECT_NE(m.find(std::strerror(ENOSPC)), std::string::npos) << m;
    }
    EXPECT_TRUE(fs::exists("/dev/full"));  // never unlinks what it did not create
  }
}

TEST(GgufReader, FromMemoryMatchesFile) {
  auto bytes = small_file_bytes();
  auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "mem.gguf");
  EXPECT_EQ(f->path(), "mem.gguf");
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensor("c").data, bytes.data() + f->data_offset() + 96);  // a: 32 B at 0, b: 36 B at 32, c at 96
}

TEST(GgufReader, Version2) {
  auto bytes = small_file_bytes();
  wr_u32(bytes, 4, 2);
  std::string p = tmp_path("v2.gguf");
  write_bytes(p, bytes);
  GgufFile f(p);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get_u32("llama.block_count"), 3u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "bb", "ccc"}));
  EXPECT_EQ(f.tensors().size(), 3u);
  fs::remove(p);
}

TEST(GgufReader, OpenErrors) {
  try {
    GgufFile f("/nonexistent-sluice.gguf");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-sluice.gguf: cannot open"), std::string::npos) << e.what();
  }
  std::string d = tmp_path("dir");
  fs::create_directories(d);
  EXPECT_THROW(GgufFile f(d), Error);
  fs::remove(d);
  expect_error({}, {"magic", "truncated"}, 0, "empty");
}

TEST(GgufReader, Stories260K) {
  std::string p = std::string(SLUICE_SHARED_DIR) + "/models/stories260K.gguf";
  if (!fs::exists(p))
    GTEST_SKIP() << "\n\n*** ../shared/models/stories260K.gguf NOT FOUND at " << p
                 << " — the real-file GGUF test did NOT run ***\n\n";
  GgufFile f(p);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.metadata().size(), 19u);
  ASSERT_EQ(f.tensors().size(), 48u);
  for (const auto& t : f.tensors()) EXPECT_EQ(t.type, DType::F32) << t.name;
  EXPECT_EQ(f.data_offset(), 14176u);
  EXPECT_EQ(f.get_u32("llama.block_count"), 5u);
  EXPECT_EQ(f.get_u32("llama.embedding_length"), 64u);
  EXPECT_EQ(f.get_u32_per_layer("llama.attention.head_count_kv", 5), (std::vector<uint32_t>(5, 4)));
  EXPECT_EQ(f.get_u32_per_layer("llama.feed_forward_length", 5), (std::vector<uint32_t>(5, 172)));
  EXPECT_FLOAT_EQ(f.get_f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 512u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")[1], "<s>");
  EXPECT_EQ(f.get_f32_array("tokenizer.ggml.scores").size(), 512u);
  EXPECT_EQ(f.get_i32_array("tokenizer.ggml.token_type").size(), 512u);
  const TensorView& emb = f.tensor("token_embd.weight");
  EXPECT_EQ(emb.n_dims, 2);
  EXPECT_EQ(emb.ne[0], 64);
  EXPECT_EQ(emb.ne[1], 512);
  EXPECT_EQ(f.tensor("blk.0.ffn_down.weight").ne[0], 172);
  // The manifest says the last tensor ends exactly at EOF, and output == token_embd (tied).
  const TensorView& last = f.tensors().back();
  EXPECT_EQ(static_cast<const uint8_t*>(last.data) + last.nbytes, f.base() + f.file_size());
  const TensorView& out = f.tensor("output.weight");
  ASSERT_EQ(out.nbytes, emb.nbytes);
  EXPECT_EQ(std::memcmp(out.data, emb.data, emb.nbytes), 0);
}

// ---------------------------------------------------------------------------------------
// Corrupt files. Each case patches the small valid file and checks field name + byte offset.

TEST(GgufCorrupt, SeedIsValid) {
  auto bytes = small_file_bytes();
  auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "seed");
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->data_offset(), (walk(bytes).header_end + 31) / 32 * 32);
}

TEST(GgufCorrupt, Truncated) {
  auto bytes = small_file_bytes();
  auto l = walk(bytes);
  auto cut = [&](size_t n) {
    return std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
  };
  expect_error(cut(2), {"magic", "truncated"}, 0, "cut_magic");
  expect_error(cut(6), {"version", "truncated"}, 4, "cut_version");
  expect_error(cut(12), {"tensor count", "truncated"}, 8, "cut_tensor_count");
  // Cut inside kv 2's key length.
  const auto& kv2 = l.kvs[2];
  expect_error(cut(kv2.key_pos + 4), {"metadata kv 2 key string length", "truncated"}, kv2.key_pos, "cut_key_len");
  // Cut inside the bytes of the "llama" string value: the length is read, the bytes are not there.
  const auto& arch = l.kv("general.architecture");
  expect_error(cut(arch.value_pos + 10), {"metadata key 'general.architecture' string length 5 exceeds"},
               arch.value_pos, "cut_string");
  // Cut inside the token array: item 2's string.
  const auto& tok = l.kv("tokenizer.ggml.tokens");
  size_t item2 = tok.value_pos + 12 + (8 + 1) + (8 + 2);
  expect_error(cut(item2 + 3), {"tokenizer.ggml.tokens' array length 3 of string cannot fit"}, tok.value_pos + 4,
               "cut_array_count");
  expect_error(cut(item2 + 9), {"metadata key 'tokenizer.ggml.tokens' item 2 string length 3 exceeds"}, item2,
               "cut_array_item");
  // Cut inside tensor 1's type field.
  const auto& tb = l.tensor("b");
  expect_error(cut(tb.type_pos + 2), {"tensor 1 'b' type", "truncated"}, tb.type_pos, "cut_tensor_type");
  // Cut inside the data section: tensor c no longer fits.
  const auto& tc = l.tensor("c");
  size_t data_start = (l.header_end + 31) / 32 * 32;
  expect_error(cut(data_start + rd_u64(bytes, tc.offset_pos) + 2),
               {"tensor 2 'c' data [offset 96, 16 bytes]", "ends past end of file"}, tc.offset_pos, "cut_data");
  // Cut exactly at the end of the header: the data section is missing.
  expect_error(cut(l.header_end), {"tensor 0 'a' data", "ends past end of file"}, l.tensors[0].offset_pos,
               "cut_header_end");
}

TEST(GgufCorrupt, TensorDataPastEnd) {
  auto bytes = small_file_bytes();
  auto l = walk(bytes);
  const auto& tc = l.tensor("c");
  wr_u64(bytes, tc.offset_pos, 1u << 20);
  expect_error(bytes,
               {"tensor 2 'c' data [offset 1048576, 16 bytes] ends past end of file (size " +
                std::to_string(bytes.size())},
               tc.offset_pos, "data_past_end");
  // An offset near 2^64 must not wrap around when added to the data section start.
  wr_u64(bytes, tc.offset_pos, 0xffffffffffffffe0ull);
  expect_error(bytes, {"tensor 2 'c' data", "ends past end of file"}, tc.offset_pos, "data_offset_wrap");
}

TEST(GgufCorrupt, AbsurdCounts) {
  auto bytes = small_file_bytes();
  auto l = walk(bytes);
  auto b = bytes;
  wr_u64(b, 8, 1ull << 40);
  expect_error(b, {"tensor count 1099511627776 cannot fit"}, 8, "tensor_count");
  b = bytes;
  wr_u64(b, 16, 0xffffffffffffffffull);
  expect_error(b, {"metadata kv count 18446744073709551615 cannot fit"}, 16, "kv_count");
  b = bytes;
  const auto& tok = l.kv("tokenizer.ggml.tokens");
  wr_u64(b, tok.value_pos + 4, 1ull << 60);
  expect_error(b, {"metadata key 'tokenizer.ggml.tokens' array length 1152921504606846976 of string cannot fit"},
               tok.value_pos + 4, "array_len");
}

TEST(GgufCorrupt, AbsurdStringLength) {
  auto bytes = small_file_bytes();
  auto l = walk(bytes);
  auto b = bytes;
  const auto& arch = l.kv("general.architecture");
  wr_u64(b, arch.value_pos, 1ull << 62);
  expect_error(b, {"metadata key 'general.architecture' string length 4611686018427387904 exceeds"}, arch.value_pos,
               "value_len");
  b = bytes;
  wr_u64(b, l.kvs[1].key_pos, 0xffffffffffffffffull);
  expect_error(b, {"metadata kv 1 key string length 18446744073709551615 exceeds"}, l.kvs[1].key_pos, "key_len");
  b = bytes;
  wr_u64(b, l.tensor("b").name_pos, 1ull << 33);
  expect_error(b, {"tensor 1 name string length 8589934592 exceeds"}, l.tensor("b").name_pos, "name_len");
}

TEST(GgufCorrupt, UnknownTypeIds) {
  auto bytes = small_file_bytes();
  auto l = walk(bytes);
  auto b = bytes;
  wr_u32(b, l.tensor("b").type_pos, 99);
  expect_error(b, {"tensor 1 'b' type id 99 is not a known ggml type"}, l.tensor("b").type_pos, "tensor_type");
  b = bytes;
  wr_u32(b, l.tensor("a").type_pos, 4);  // ggml's removed Q4_2: not in the table
  expect_error(b, {"tensor 0 'a' type id 4"}, l.tensor("a").type_pos, "tensor_type_4");
  b = bytes;
  wr_u32(b, l.tensor("a").type_pos, static_cast<uint32_t>(DType::Q8_A));  // Sluice's own: never in a file
  expect_error(b, {"tensor 0 'a' type id 1024 is not a known ggml type"}, l.tensor("a").type_pos, "tensor_type_q8_a");
  b = bytes;
  const auto& bc = l.kv("llama.block_count");
  wr_u32(b, bc.type_pos, 13);
  expect_error(b, {"metadata key 'llama.block_count' value type 13 is not a GGUF value type"}, bc.type_pos, "kv_type");
  b = bytes;
  const auto& tok = l.kv("tokenizer.ggml.tokens");
  wr_u32(b, tok.value_pos, 0x80000000u);
  expect_error(b, {"metadata key 'tokenizer.ggml.tokens' array element type 2147483648"}, tok.value_pos, "elem_type");
}

TEST(GgufCorrupt, MisalignedDataOffset) {
  auto bytes = small_file_bytes();
  auto l = walk(bytes);
  const auto& tc = l.tensor("c");
  wr_u64(bytes, tc.offset_pos, rd_u64(bytes, tc.offset_pos) + 4);
  expect_error(bytes, {"tensor 2 'c' offset 100 is not a multiple of the alignment 32"}, tc.offset_pos, "misaligned");
}

TEST(GgufCorrupt, DuplicateTensorNameAndKey) {
  auto bytes = small_file_bytes();
  auto l = walk(bytes);
  auto b = bytes;
  b[l.tensor("b").name_pos + 8] = 'a';
  expect_error(b, {"tensor 1 'a' name is duplicated (also tensor 0)"}, l.tensor("b").name_pos, "dup_tensor");
  b = bytes;
  const auto& kb = l.kv("dup.bbb");
  std::memcpy(b.data() + kb.key_pos + 8, "dup.aaa", 7);
  expect_error(b, {"metadata key 'dup.aaa' is duplicated"}, kb.key_pos, "dup_key");
}

TEST(GgufCorrupt, BadMagicAndVersion) {
  auto bytes = small_file_bytes();
  auto b = bytes;
  b[3] = 'X';
  expect_error(b, {"bad magic", "GGUX"}, 0, "magic");
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {  // 0x03000000: a big-endian v3 file
    b = bytes;
    wr_u32(b, 4, v);
    expect_error(b, {"unsupported GGUF version " + std::to_string(v)}, 4, "version" + std::to_string(v));
  }
}

TEST(GgufCorrupt, BadNDims) {
  auto bytes = small_file_bytes();
  auto l = walk(bytes);
  for (uint32_t nd : {0u, 5u, 0xffffffffu}) {
    auto b = bytes;
    wr_u32(b, l.tensor("a").ndims_pos, nd);
    expect_error(b, {"tensor 0 'a' n_dims " + std::to_string(nd) + " is outside 1..4"}, l.tensor("a").ndims_pos,
                 "ndims" + std::to_string(nd));
  }
}

TEST(GgufCorrupt, NeNotMultipleOfBlockSize) {
  auto bytes = small_file_bytes();
  auto l = walk(bytes);
  wr_u64(bytes, l.tensor("b").ne_pos, 48);
  expect_error(bytes, {"tensor 1 'b' ne[0] = 48 is not a multiple of the block size 32 of type q4_0"},
               l.tensor("b").ne_pos, "ne_block");
}

TEST(GgufCorrupt, DimensionOverflow) {
  auto bytes = small_file_bytes();
  auto l = walk(bytes);
  const auto& ta = l.tensor("a");  // F32, 2 dims
  auto b = bytes;
  wr_u64(b, ta.ne_pos, 1ull << 40);
  wr_u64(b, ta.ne_pos + 8, 1ull << 40);
  expect_error(b, {"tensor 0 'a' dimensions", "overflow", "element count"}, ta.ne_pos + 8, "elements_overflow");
  b = bytes;  // 2^62 elements fit int64, but 2^64 bytes do not fit size_t
  wr_u64(b, ta.ne_pos, 1ull << 62);
  wr_u64(b, ta.ne_pos + 8, 1);
  expect_error(b, {"tensor 0 'a' dimensions", "overflow", "byte size"}, ta.ne_pos, "bytes_overflow");
  b = bytes;
  wr_u64(b, ta.ne_pos + 8, 0xffffffffffffffffull);
  expect_error(b, {"tensor 0 'a' ne[1] = -1 is negative"}, ta.ne_pos + 8, "negative_ne");
  b = bytes;  // large but representable: caught by the bounds check instead
  wr_u64(b, ta.ne_pos, 1ull << 30);
  expect_error(b, {"tensor 0 'a' data", "ends past end of file"}, ta.offset_pos, "huge_tensor");
}

TEST(GgufCorrupt, BadValues) {
  auto bytes = small_file_bytes();
  auto l = walk(bytes);
  auto b = bytes;
  const auto& flag = l.kv("flag");
  b[flag.value_pos] = 2;
  expect_error(b, {"metadata key 'flag' bool value 2 is neither 0 nor 1"}, flag.value_pos, "bool");
  // general.alignment: wrong type, zero, not a power of two.
  auto with_alignment = [&](GgufValue v) {
    GgufWriter w;
    w.set("general.alignment", GgufValue{GgufType::UINT32, uint32_t{32}});
    auto d = pattern(16, 0);
    w.add_tensor("t", DType::F32, {4}, d.data(), d.size());
    std::string p = tmp_path("align_src.gguf");
    w.write(p);
    auto out = test::read_file_bytes(p);
    fs::remove(p);
    auto lay = walk(out);
    const auto& kv = lay.kv("general.alignment");
    if (v.type == GgufType::UINT32)
      wr_u32(out, kv.value_pos, std::get<uint32_t>(v.v));
    else
      wr_u32(out, kv.type_pos, static_cast<uint32_t>(GgufType::INT32));
    return std::make_pair(out, kv.value_pos);
  };
  auto [a0, p0] = with_alignment(GgufValue{GgufType::UINT32, uint32_t{0}});
  expect_error(a0, {"'general.alignment' value 0 is not a nonzero power of two"}, p0, "align0");
  auto [a3, p3] = with_alignment(GgufValue{GgufType::UINT32, uint32_t{48}});
  expect_error(a3, {"'general.alignment' value 48 is not a nonzero power of two"}, p3, "align48");
  auto [ai, pi] = with_alignment(GgufValue{GgufType::INT32, int32_t{32}});
  expect_error(ai, {"'general.alignment' has type int32, expected uint32"}, pi, "align_i32");
}

TEST(GgufCorrupt, DeepNesting) {
  // 100 nested arrays, built by hand (the writer refuses more than 16 levels).
  std::vector<uint8_t> b(24, 0);
  wr_u32(b, 0, 0x46554747);
  wr_u32(b, 4, 3);
  wr_u64(b, 8, 0);
  wr_u64(b, 16, 1);
  auto put = [&](const void* p, size_t n) {
    b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  uint64_t klen = 1;
  put(&klen, 8);
  b.push_back('k');
  uint32_t t = 9;
  put(&t, 4);
  for (int i = 0; i < 100; ++i) {
    uint32_t et = 9;
    uint64_t n = 1;
    put(&et, 4);
    put(&n, 8);
  }
  expect_error(b, {"metadata key 'k'", "nested deeper than 16"}, std::nullopt, "deep");
}

// ---------------------------------------------------------------------------------------
// Mutation fuzz: every malformed input must end in sluice::Error (or parse), never another
// exception or a crash. Runs under ASan/UBSan in the sanitizer build.

void fuzz_run(const std::vector<uint8_t>& seed, size_t hot, int iters, uint64_t rng_seed, int file_every) {
  fuzz::GgufMutator mut(rng_seed);
  int parsed = 0, rejected = 0;
  std::string p = tmp_path("fuzz.gguf");
  for (int i = 0; i < iters; ++i) {
    auto m = mut.mutate(seed, hot);
    try {
      // Mostly from memory (fast); every `file_every`th input goes through the mmap path.
      if (file_every > 0 && i % file_every == 0) {
        write_bytes(p, m);
        GgufFile f(p);
        fuzz::gguf_touch_all(f);
      } else {
        auto f = GgufFile::from_memory(m.data(), m.size(), "fuzz");
        fuzz::gguf_touch_all(*f);
      }
      ++parsed;
    } catch (const Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      FAIL() << "iteration " << i << " (rng seed " << rng_seed << "): non-sluice exception " << e.what();
    }
  }
  fs::remove(p);
  // Both outcomes must occur, or the mutator is not exercising the parser.
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, iters / 4);
}

TEST(GgufFuzz, MutatedSmallFile) {
  auto seed = small_file_bytes();
  fuzz_run(seed, walk(seed).header_end, 3000, 12345, 50);
}

TEST(GgufFuzz, MutatedEveryValueFile) {
  std::string p = tmp_path("fuzz_values.gguf");
  GgufWriter w;
  for (auto& [k, v] : every_value()) w.set(k, v);
  auto d = pattern(2 * 18 * 18, 1);
  w.add_tensor("q", DType::Q4_0, {64, 18}, d.data(), d.size());
  w.write(p);
  auto seed = test::read_file_bytes(p);
  fs::remove(p);
  fuzz_run(seed, walk(seed).header_end, 3000, 777, 0);
}

TEST(GgufFuzz, MutatedStories260K) {
  std::string p = std::string(SLUICE_SHARED_DIR) + "/models/stories260K.gguf";
  if (!fs::exists(p)) GTEST_SKIP() << "\n\n*** stories260K.gguf NOT FOUND at " << p << " — fuzz on it skipped ***\n\n";
  auto seed = test::read_file_bytes(p);
  GgufFile f(p);
  fuzz_run(seed, f.data_offset(), 300, 4242, 0);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Load::read (the resident policy's default) gives exactly the bytes, tensors and metadata of
// Load::map, reports progress up to the file size, and the weights are read-only.
TEST(GgufLoad, ReadEqualsMap) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/models/stories260K.gguf";
  GgufFile mapped(path);
  size_t last = 0, calls = 0;
  GgufFile read(path, GgufFile::Load::read, [&](size_t done, size_t total) {
    EXPECT_EQ(total, mapped.file_size());
    EXPECT_GT(done, last);
    last = done;
    ++calls;
  });
  EXPECT_EQ(last, mapped.file_size());
  EXPECT_GE(calls, 1u);
  ASSERT_EQ(read.file_size(), mapped.file_size());
  EXPECT_NE(read.base(), mapped.base());
  EXPECT_EQ(std::memcmp(read.base(), mapped.base(), read.file_size()), 0);
  ASSERT_EQ(read.tensors().size(), mapped.tensors().size());
  for (size_t i = 0; i < read.tensors().size(); ++i) {
    EXPECT_EQ(read.tensors()[i].name, mapped.tensors()[i].name);
    EXPECT_EQ(static_cast<const uint8_t*>(read.tensors()[i].data) - read.base(),
              static_cast<const uint8_t*>(mapped.tensors()[i].data) - mapped.base());
  }
  EXPECT_EQ(read.metadata().size(), mapped.metadata().size());
  // Read-only like the mapping: a write must fault (checked in a child so the test survives).
  EXPECT_DEATH(const_cast<uint8_t*>(read.base())[0] = 0, "");
}

// drop_mapped_pages (a folder's converted sources leave the process): only the whole pages
// inside the range, only inside the mapping, and the bytes read the same afterwards (they come
// back from the file).
TEST(MappedFile, DroppedPagesReadBackFromTheFile) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE)), n = 16 * page;
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  const std::string path = (test::scratch_dir() / "mapped-file-drop.bin").string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
  size_t size = 0;
  const int fd = open_regular_file(path, &size);
  ASSERT_EQ(size, n);
  const uint8_t* base = map_file_readonly(fd, size, path);
  EXPECT_EQ(std::memcmp(base, bytes.data(), n), 0);                          // every page resident first
  EXPECT_EQ(drop_mapped_pages(base, size, base + 100, 5 * page), 4 * page);  // pages 1..4 of a range in 0..5
  EXPECT_EQ(drop_mapped_pages(base, size, base + 100, page), 0u);            // no whole page inside
  EXPECT_EQ(drop_mapped_pages(base, size, base + 8 * page, 9 * page), 0u);   // past the mapping
  EXPECT_EQ(drop_mapped_pages(base, size, bytes.data(), page), 0u);          // not in it at all
  EXPECT_EQ(drop_mapped_pages(base, size, base, n), n);
  EXPECT_EQ(std::memcmp(base, bytes.data(), n), 0);
  ::munmap(const_cast<uint8_t*>(base), size);
  ::close(fd);
}

}  // namespace
}  // namespace sluice
