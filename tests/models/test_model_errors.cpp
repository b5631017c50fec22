// tests/models/test_model_errors: a GGUF that parses but does not describe a model Sluice can
// run correctly gets an error naming the file and the key or tensor, never wrong output.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "core/error.h"
#include "format/gguf.h"
#include "models/model.h"
#include "test_util.h"

namespace sluice::test_model_errors {
namespace {

namespace fs = std::filesystem;

// Copies stories260K into a temp file, letting `edit` change metadata and tensors on the way.
std::string rewrite_stories(const std::string& name, const std::function<void(GgufWriter&)>& extra_meta,
                            const std::function<bool(const TensorView&)>& keep_tensor = nullptr,
                            const std::string& skip_key = "") {
  GgufFile in(test::shared_dir() + "/models/stories260K.gguf");
  GgufWriter w;
  for (const auto& [k, v] : in.metadata())
    if (k != skip_key) w.set(k, v);
  extra_meta(w);
  for (const auto& t : in.tensors()) {
    if (keep_tensor && !keep_tensor(t)) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    w.add_tensor(t.name, t.type, ne, t.data, t.nbytes);
  }
  const std::string path = (test::scratch_dir() / ("sluice_model_err_" + name + ".gguf")).string();
  w.write(path);
  return path;
}

void expect_load_error(const std::string& path, const std::vector<std::string>& needles) {
  try {
    Model::load(path);
    ADD_FAILURE() << "loaded without error: " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
  }
  fs::remove(path);
}

// RoPE scaling Sluice does not compute is refused, not ignored (linear and YaRN run: goldens in
// test_repo_goldens and test_hf_folder).
TEST(ModelErrors, UnknownRopeScalingIsRefusedNotIgnored) {
  SLUICE_REQUIRE_SHARED();
  auto p = rewrite_stories("longrope", [](GgufWriter& w) { w.set_string("llama.rope.scaling.type", "longrope"); });
  expect_load_error(p, {"rope.scaling.type", "longrope", "none, linear or yarn"});
  p = rewrite_stories("yarn_factor", [](GgufWriter& w) {
    w.set_string("llama.rope.scaling.type", "yarn");
    w.set_f32("llama.rope.scaling.factor", 0.5f);
  });
  expect_load_error(p, {"rope.scaling.factor", "0.5"});
}

TEST(ModelErrors, MissingTensorIsNamed) {
  SLUICE_REQUIRE_SHARED();
  auto p = rewrite_stories(
      "missing", [](GgufWriter&) {}, [](const TensorView& t) { return t.name != "blk.3.ffn_up.weight"; });
  expect_load_error(p, {"blk.3.ffn_up.weight"});
}

TEST(ModelErrors, MissingKeyIsNamed) {
  SLUICE_REQUIRE_SHARED();
  auto p = rewrite_stories(
      "nokey", [](GgufWriter&) {}, nullptr, "llama.attention.layer_norm_rms_epsilon");
  expect_load_error(p, {"llama.attention.layer_norm_rms_epsilon"});
}

TEST(ModelErrors, WrongHeadCountIsCaughtByShapeCheck) {
  SLUICE_REQUIRE_SHARED();
  // 8 heads of 8 dims -> with head_count_kv 2 the K projection must have 16 rows, not 32.
  auto p = rewrite_stories("kvheads", [](GgufWriter& w) { w.set_u32("llama.attention.head_count_kv", 2); });
  expect_load_error(p, {"blk.0.attn_k.weight", "shape"});
}

TEST(ModelErrors, UnsupportedArchitectureIsNamed) {
  SLUICE_REQUIRE_SHARED();
  auto p = rewrite_stories("arch", [](GgufWriter& w) { w.set_string("general.architecture", "rwkv6"); });
  expect_load_error(p, {"rwkv6", "not supported"});
}

}  // namespace
}  // namespace sluice::test_model_errors
