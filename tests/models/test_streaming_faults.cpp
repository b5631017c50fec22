// tests/models/test_streaming_faults: every way an expert read can go wrong — EIO, a short
// read, a file truncated after it was opened (injected, and for real) — ends in a sluice::Error
// that names the file, the layer, the expert and the file offset. No crash, no logits from a
// half-filled buffer, and the model works again once the fault is gone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <filesystem>

#include "backends/backend.h"
#include "core/error.h"
#include "format/gguf.h"
#include "memory/io_fault.h"
#include "memory/pack.h"
#include "models/model.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_streaming_faults {
namespace {

namespace fs = std::filesystem;

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};

ExpertStoreOptions faulty(IoFaultPlan plan, bool prefetch = false) {
  ExpertStoreOptions o;
  o.policy = ExpertPolicy::stream;
  o.cache_bytes = 400 << 10;  // ~3 of the qwen3moe golden's experts
  o.prefetch = prefetch;      // off: every read is a demand read, so the n-th read is predictable
  o.io_factory = [plan] { return make_io_fault(make_io_uring(), plan); };
  return o;
}

std::unique_ptr<Model> load(const std::string& path, const ExpertStoreOptions& eo) {
  ModelOptions mo;
  mo.experts = eo;
  return Model::load(path, mo);
}

// Evaluates the prompt; returns the Error's message ("" if none was thrown).
std::string eval_error(Model& m, std::vector<float>* logits = nullptr) {
  auto be = make_backend("cpu", 2);
  Session s(m, *be, KvCacheOptions{});
  try {
    auto l = s.eval(kPrompt, true);
    if (logits) logits->assign(l.begin(), l.end());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// True when `msg` holds `word` followed by a number (std::regex is avoided: GCC 12 reports
// false -Wmaybe-uninitialized inside <regex> under -fsanitize at -O1).
bool has_number_after(const std::string& msg, const std::string& word) {
  for (size_t p = msg.find(word); p != std::string::npos; p = msg.find(word, p + 1))
    if (p + word.size() < msg.size() && std::isdigit(static_cast<unsigned char>(msg[p + word.size()]))) return true;
  return false;
}

void expect_names_layer_expert_offset(const std::string& msg, const std::string& path) {
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_TRUE(has_number_after(msg, ": layer ")) << msg;
  EXPECT_TRUE(has_number_after(msg, " expert ")) << msg;
  EXPECT_TRUE(has_number_after(msg, "file offset ")) << msg;
}

std::vector<float> resident_logits(const std::string& path) {
  auto m = load(path, ExpertStoreOptions{});
  std::vector<float> l;
  EXPECT_EQ(eval_error(*m, &l), "");
  return l;
}

TEST(StreamingFaults, EioNamesLayerExpertAndOffset) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/golden/qwen3moe/model.gguf";
  IoFaultPlan p;
  p.kind = IoFaultKind::eio;
  auto m = load(path, faulty(p));
  const std::string msg = eval_error(*m);
  expect_names_layer_expert_offset(msg, path);
  EXPECT_NE(msg.find("Input/output error"), std::string::npos) << msg;
  // The same with prefetch on: a failed prefetch is dropped, the demand read then fails too.
  auto m2 = load(path, faulty(p, /*prefetch=*/true));
  EXPECT_NE(eval_error(*m2), "");
}

TEST(StreamingFaults, OneFailedReadThenTheModelWorksAgain) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/golden/qwen3moe/model.gguf";
  const std::vector<float> want = resident_logits(path);
  IoFaultPlan p;
  p.kind = IoFaultKind::eio;
  p.skip = 7;  // a read in the middle of the prompt's first layers
  p.count = 1;
  auto m = load(path, faulty(p));
  const std::string msg = eval_error(*m);
  expect_names_layer_expert_offset(msg, path);
  // The failed expert left nothing behind: the next evaluation reads it again and is exact.
  std::vector<float> got;
  EXPECT_EQ(eval_error(*m, &got), "");
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

TEST(StreamingFaults, ShortReadIsAnError) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/golden/qwen3moe-Q4_K_M/model.gguf";
  IoFaultPlan p;
  p.kind = IoFaultKind::short_read;
  p.skip = 2;
  auto m = load(path, faulty(p));
  const std::string msg = eval_error(*m);
  expect_names_layer_expert_offset(msg, path);
  EXPECT_NE(msg.find("short read"), std::string::npos) << msg;
}

TEST(StreamingFaults, InjectedTruncationIsAnError) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/golden/deepseek2/model.gguf";
  GgufFile f(path);
  const TensorView* t = f.find_tensor("blk.2.ffn_up_exps.weight");
  ASSERT_NE(t, nullptr);
  IoFaultPlan p;
  p.kind = IoFaultKind::truncated;
  p.truncate_at = static_cast<uint64_t>(static_cast<const uint8_t*>(t->data) - f.base()) + t->nbytes / 2;
  auto m = load(path, faulty(p));
  const std::string msg = eval_error(*m);
  expect_names_layer_expert_offset(msg, path);
  EXPECT_NE(msg.find("short read"), std::string::npos) << msg;
}

TEST(StreamingFaults, FileTruncatedAfterOpenIsAnError) {
  SLUICE_REQUIRE_SHARED();
  // A packed copy keeps the dense weights in front and the expert bundles at the end, so the
  // truncation below removes only expert bytes: the mapping of the dense weights stays valid
  // (the stream policy never touches the expert part of the mapping, which is now past EOF).
  const std::string dir = fs::temp_directory_path() / ("sluice_trunc_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = dir + "/m.gguf";
  pack_experts(test::shared_dir() + "/golden/qwen3moe/model.gguf", path);
  uint64_t cut = 0;
  {
    GgufFile f(path);
    const TensorView* t = f.find_tensor("blk.1.ffn_gate.0.weight");
    ASSERT_NE(t, nullptr);
    cut = static_cast<uint64_t>(static_cast<const uint8_t*>(t->data) - f.base());
  }
  ExpertStoreOptions o;
  o.policy = ExpertPolicy::stream;
  o.cache_bytes = 400 << 10;
  auto m = load(path, o);
  fs::resize_file(path, cut);  // every expert of layer 1 is gone
  const std::string msg = eval_error(*m);
  expect_names_layer_expert_offset(msg, path);
  EXPECT_NE(msg.find("layer 1 "), std::string::npos) << msg;
  EXPECT_NE(msg.find("short read"), std::string::npos) << msg;
  m.reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice::test_streaming_faults
