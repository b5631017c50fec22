// tests/fuzz/gguf_seeds: writes the seed corpus of gguf_libfuzzer (scripts/fuzz runs it; the
// convention is that tests/fuzz/NAME_seeds.cpp, when present, fills NAME_libfuzzer's seeds).
// Every seed is a valid GGUF of a few KiB, so libFuzzer mutates headers rather than spending
// its time in megabytes of tensor data:
//  - one shrunk copy of each GGUF given on the command line (a folder: every *.gguf under it,
//    e.g. ../shared, which holds the goldens, stories260K and the tokenizer-only vocab files): all of its metadata (the same
//    keys, types and order; arrays cut to their first 8 items, so the tokenizer keys stay but
//    small) and up to 12 of its tensors with their types, n_dims and first bytes, each shrunk
//    to one block per row and at most 2 rows per dimension;
//  - a hand-made file with one key of every value type, a nested array and a 64-byte alignment.
//
//   gguf_seeds OUT_DIR [MODEL.gguf | DIR ...]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "format/gguf.h"

namespace {

using sluice::GgufArray;
using sluice::GgufType;
using sluice::GgufValue;

constexpr size_t kMaxItems = 8;     // array items kept per array (tokenizer.ggml.tokens has thousands)
constexpr size_t kMaxTensors = 12;  // tensors kept per model

GgufValue shrink(const GgufValue& v) {
  if (v.type != GgufType::ARRAY) return v;
  const auto& a = *std::get<std::shared_ptr<GgufArray>>(v.v);
  auto out = std::make_shared<GgufArray>();
  out->elem_type = a.elem_type;
  for (size_t i = 0; i < std::min(kMaxItems, a.items.size()); ++i) out->items.push_back(shrink(a.items[i]));
  GgufValue r;
  r.type = GgufType::ARRAY;
  r.v = out;
  return r;
}

void shrink_model(const std::string& in, const std::string& out) {
  sluice::GgufFile f(in);
  sluice::GgufWriter w;
  for (const auto& kv : f.metadata()) {
    if (kv.first == "general.alignment") continue;  // the writer owns it (set_alignment)
    w.set(kv.first, shrink(kv.second));
  }
  if (f.alignment() != 32) w.set_alignment(f.alignment());
  size_t n = 0;
  for (const sluice::TensorView& t : f.tensors()) {
    if (n++ == kMaxTensors) break;
    std::vector<int64_t> ne(static_cast<size_t>(t.n_dims));
    for (size_t d = 0; d < ne.size(); ++d)
      ne[d] = d == 0 ? sluice::dtype_traits(t.type).block_size : std::min<int64_t>(t.ne[d], 2);
    if (ne.empty()) ne.push_back(1);
    size_t nbytes = sluice::dtype_row_bytes(t.type, ne[0]);
    for (size_t d = 1; d < ne.size(); ++d) nbytes *= static_cast<size_t>(ne[d]);
    std::vector<uint8_t> data(nbytes, 0);
    std::memcpy(data.data(), t.data, std::min(nbytes, t.nbytes));
    w.add_tensor(t.name, t.type, ne, data.data(), data.size());
  }
  w.write(out);
}

void every_type(const std::string& out) {
  sluice::GgufWriter w;
  w.set_alignment(64);
  auto put = [&](const char* key, GgufType t, auto x) {
    GgufValue v;
    v.type = t;
    v.v = x;
    w.set(key, v);
  };
  put("t.u8", GgufType::UINT8, uint8_t{200});
  put("t.i8", GgufType::INT8, int8_t{-7});
  put("t.u16", GgufType::UINT16, uint16_t{60000});
  put("t.i16", GgufType::INT16, int16_t{-300});
  w.set_u32("t.u32", 123456);
  w.set_i32("t.i32", -5);
  w.set_f32("t.f32", 1.5f);
  w.set_bool("t.bool", true);
  w.set_string("t.str", "hello \"gguf\"\n");
  w.set_u64("t.u64", 1ull << 40);
  put("t.i64", GgufType::INT64, int64_t{-(1ll << 40)});
  put("t.f64", GgufType::FLOAT64, 2.25);
  w.set_string_array("t.strs", {"a", "", "ccc"});
  w.set_f32_array("t.f32s", {0.5f, -1.0f});
  w.set_i32_array("t.i32s", {1, 2, 3});
  auto inner = std::make_shared<GgufArray>();
  inner->elem_type = GgufType::UINT32;
  for (uint32_t i = 0; i < 3; ++i) {
    GgufValue e;
    e.type = GgufType::UINT32;
    e.v = i;
    inner->items.push_back(e);
  }
  auto outer = std::make_shared<GgufArray>();
  outer->elem_type = GgufType::ARRAY;
  GgufValue in_v;
  in_v.type = GgufType::ARRAY;
  in_v.v = inner;
  outer->items = {in_v, in_v};
  GgufValue out_v;
  out_v.type = GgufType::ARRAY;
  out_v.v = outer;
  w.set("t.nested", out_v);
  const float f32[4] = {1, 2, 3, 4};
  w.add_tensor("a.f32", sluice::DType::F32, {4}, f32, sizeof f32);
  std::vector<uint8_t> q(sluice::dtype_row_bytes(sluice::DType::Q8_0, 32) * 2, 1);
  w.add_tensor("b.q8_0", sluice::DType::Q8_0, {32, 2}, q.data(), q.size());
  w.write(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR [MODEL.gguf | DIR ...]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  int written = 0;
  try {
    every_type((dir / "every_type.gguf").string());
    ++written;
  } catch (const sluice::Error& e) {
    std::fprintf(stderr, "gguf_seeds: every_type: %s\n", e.what());
    return 1;
  }
  std::vector<std::filesystem::path> inputs;
  for (int i = 2; i < argc; ++i) {
    const std::filesystem::path p = argv[i];
    if (!std::filesystem::is_directory(p)) {
      inputs.push_back(p);
      continue;
    }
    for (const auto& e : std::filesystem::recursive_directory_iterator(p))
      if (e.is_regular_file() && e.path().extension() == ".gguf") inputs.push_back(e.path());
  }
  std::sort(inputs.begin(), inputs.end());
  for (const auto& p : inputs) {
    // Seed names carry the parent folder: ../shared/golden/*/model.gguf all share a file name.
    const std::string name = p.parent_path().filename().string() + "_" + p.stem().string() + ".gguf";
    try {
      shrink_model(p.string(), (dir / name).string());
      ++written;
    } catch (const sluice::Error& e) {
      std::fprintf(stderr, "gguf_seeds: skipping %s: %s\n", p.c_str(), e.what());
    }
  }
  std::printf("gguf_seeds: %d seeds in %s\n", written, dir.c_str());
  return 0;
}
