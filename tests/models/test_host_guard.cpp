// tests/models/test_host_guard: every architecture's forward keeps its activations to the
// backend (backends/backend.h ActBuf): run on HostGuardBackend, whose buffers fault on any
// host access outside an op or Backend::host_view, a prompt (past the batched MoE path's
// threshold) and decode steps give logits bitwise equal to the same backend unguarded — with
// hooks reading every intermediate, compressed KV sides whose codecs do host math (q8_0
// rotated, tq4 with the K mean and sinks), two sequences sharing a batch, and the expert
// predictor's guess. Negative controls: a host write to a guarded buffer, and a host read of
// one, each die with SIGSEGV. The same runs on a fake device (backends/staging.h over memory the host cannot touch, one
// op as a "kernel" on device pointers, the rest staged through a cpu twin) equal cpu bitwise.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <ostream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/staging.h"
#include "bench/bench.h"
#include "host_guard_backend.h"
#include "kvcodec/kvcodec.h"
#include "memory/batch.h"
#include "memory/memory.h"
#include "models/model.h"
#include "models/predictor.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_host_guard {
namespace {

struct Case {
  std::string model;    // a path under ../shared/golden (or the repo's tests/data/golden)
  std::string backend;  // ref, cpu
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " on " << c.backend; }

std::string model_path(const std::string& name) {
  const std::string repo = std::string(SLUICE_SOURCE_DIR) + "/tests/data/golden/" + name + "/model.gguf";
  if (std::filesystem::exists(repo)) return repo;
  if (name == "stories260K") return test::shared_dir() + "/models/stories260K.gguf";
  return test::shared_dir() + "/golden/" + name + "/model.gguf";
}

struct Run {
  std::vector<std::vector<float>> logits;  // after the prompt, then after each decoded token
  std::vector<double> hook_sums;           // every hooked intermediate's sum, in call order
};

// 12 prompt tokens, then 3 greedy tokens one step at a time.
Run run(const Model& m, Backend& be, const KvCacheOptions& kv, bool hook) {
  Run r;
  TensorHook h = [&](std::string_view, int, const float* d, int64_t rows, int64_t cols) {
    double s = 0;
    for (int64_t i = 0; i < rows * cols; ++i) s += d[i];
    r.hook_sums.push_back(s);
  };
  Session s(m, be, kv);
  if (hook) s.set_hook(h);
  const int64_t V = m.hparams().n_vocab;
  std::vector<int32_t> prompt{1};
  for (int i = 1; i < 12; ++i) prompt.push_back(static_cast<int32_t>(3 + (i * 37) % (V - 3)));
  auto l = s.eval(prompt);
  for (int step = 0; step < 4; ++step) {
    r.logits.emplace_back(l.begin(), l.end());
    if (step == 3) break;
    int32_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (l[i] > l[best]) best = static_cast<int32_t>(i);
    l = s.eval(std::span(&best, 1));
  }
  return r;
}

void expect_same(const Run& a, const Run& b) {
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i) {
    ASSERT_EQ(a.logits[i].size(), b.logits[i].size());
    EXPECT_EQ(std::memcmp(a.logits[i].data(), b.logits[i].data(), a.logits[i].size() * sizeof(float)), 0)
        << "step " << i;
  }
  EXPECT_EQ(a.hook_sums, b.hook_sums);
}

// The case's model, loaded (the test skipped where ../shared or the file is missing).
class ModelCase : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_SHARED();
    const std::string path = model_path(GetParam().model);
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
    m = Model::load(path);
  }
  std::unique_ptr<Model> m;
};

class HostGuard : public ModelCase {};

TEST_P(HostGuard, ForwardTouchesActivationsOnlyThroughOps) {
  auto be = make_backend(GetParam().backend, 2);
  test::HostGuardBackend guard(*be);
  const KvCacheOptions plain{.n_ctx = 64};
  expect_same(run(*m, *be, plain, false), run(*m, guard, plain, false));
  EXPECT_GT(guard.ops(), 0);

  // Every intermediate read by a hook (the parity tool's way): through host_view.
  const int64_t reads = guard.host_reads();
  expect_same(run(*m, *be, plain, true), run(*m, guard, plain, true));
  EXPECT_GT(guard.host_reads(), reads);

  // Codecs with host math on the K/V rows and the queries (attention layers only).
  KvCacheOptions q8{.n_ctx = 64, .type_k = DType::Q8_0, .type_v = DType::Q8_0};
  expect_same(run(*m, *be, q8, false), run(*m, guard, q8, false));
  if (m->hparams().head_dim_k % 32 == 0 && m->hparams().head_dim_v % 32 == 0) {
    KvCacheOptions tq{.n_ctx = 64, .type_k = kKvTq4, .type_v = kKvTq4};
    tq.n_sink_k = tq.n_sink_v = 2;
    expect_same(run(*m, *be, tq, false), run(*m, guard, tq, false));
  }
}

// Two sequences in one batch (a prompt each, then a decode step of both): several runs per
// layer through attention, the recurrent state and the MoE batch path.
std::vector<float> two_sequences(const Model& m, Backend& be) {
  MemoryOptions mo;
  mo.kv.n_ctx = 64;
  Memory mem(m.memory_layout(), mo);
  const int32_t a = mem.seq_new(), b = mem.seq_new();
  const int64_t V = m.hparams().n_vocab;
  std::vector<float> out, logits;
  Batch first;
  for (int t = 0; t < 5; ++t) first.add(static_cast<int32_t>(3 + (t * 37) % (V - 3)), a, t, t == 4);
  for (int t = 0; t < 9; ++t) first.add(static_cast<int32_t>(3 + (t * 53 + 11) % (V - 3)), b, t, t == 8);
  logits.assign(static_cast<size_t>(first.n_outputs() * V), 0.0f);
  m.forward(be, mem, first, logits.data(), nullptr);
  out.insert(out.end(), logits.begin(), logits.end());
  Batch next;
  next.add(7, a, 5, true);
  next.add(9, b, 9, true);
  m.forward(be, mem, next, logits.data(), nullptr);
  out.insert(out.end(), logits.begin(), logits.end());
  return out;
}

TEST_P(HostGuard, SequencesSharingABatch) {
  auto be = make_backend(GetParam().backend, 2);
  test::HostGuardBackend guard(*be);
  const std::vector<float> want = two_sequences(*m, *be), got = two_sequences(*m, guard);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
}

TEST_P(HostGuard, PredictorGuessReadsThroughHostView) {
  if (m->hparams().moe.n_expert == 0) GTEST_SKIP() << GetParam().model << " has no experts";
  m->set_predictor(std::make_unique<RouterLookahead>(*m, 2));
  auto be = make_backend(GetParam().backend, 2);
  test::HostGuardBackend guard(*be);
  const KvCacheOptions plain{.n_ctx = 64};
  expect_same(run(*m, *be, plain, false), run(*m, guard, plain, false));
}

// A device whose memory faults on host access (PROT_NONE pages, opened only to copy), with
// matmul_weights as its one "kernel": the cpu twin run on the device pointers themselves.
class FakeDevice final : public StagingBackend {
 public:
  FakeDevice() : StagingBackend(make_backend("cpu", 2)) {}
  std::string_view name() const override { return "fake-device"; }
  int64_t kernel_calls = 0;

  void matmul_weights(const TensorView& w, const float* x, float* y, int64_t n_tok) override {
    // Host operands (logits, the per-thread FFN scratch, the predictor's rows) take the staged
    // path, as a real device's kernel would stage them.
    if (!on_device(x) || !on_device(y)) return StagingBackend::matmul_weights(w, x, y, n_tok);
    ++kernel_calls;
    for (auto& [p, len] : allocs_) protect(p, len, PROT_READ | PROT_WRITE);
    host_twin().matmul_weights(w, x, y, n_tok);
    for (auto& [p, len] : allocs_) protect(p, len, PROT_NONE);
  }

 protected:
  void* dev_alloc(size_t n) override {
    void* p = mmap(nullptr, pages(n), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    allocs_[static_cast<uint8_t*>(p)] = pages(n);
    return p;
  }
  void dev_free(void* p, size_t n) override {
    allocs_.erase(static_cast<uint8_t*>(p));
    munmap(p, pages(n));
  }
  void dev_to_host(void* dst, const void* src, size_t n) override {
    with_open(src, n, PROT_READ, [&] { std::memcpy(dst, src, n); });
  }
  void host_to_dev(void* dst, const void* src, size_t n) override {
    with_open(dst, n, PROT_READ | PROT_WRITE, [&] { std::memcpy(dst, src, n); });
  }

 private:
  static size_t pages(size_t n) {
    const size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return (n + pg - 1) / pg * pg;
  }
  static void protect(void* p, size_t len, int prot) { ASSERT_EQ(mprotect(p, len, prot), 0); }
  template <class F>
  void with_open(const void* p, size_t n, int prot, F&& f) {
    const auto pg = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t lo = reinterpret_cast<uintptr_t>(p) / pg * pg;
    const size_t len = pages(reinterpret_cast<uintptr_t>(p) + n - lo);
    protect(reinterpret_cast<void*>(lo), len, prot);
    f();
    protect(reinterpret_cast<void*>(lo), len, PROT_NONE);
  }
  std::map<uint8_t*, size_t> allocs_;
};

class DeviceStaging : public ModelCase {};

TEST_P(DeviceStaging, FakeDeviceEqualsItsHostTwin) {
  if (m->hparams().moe.n_expert > 0) m->set_predictor(std::make_unique<RouterLookahead>(*m, 2));
  auto cpu = make_backend("cpu", 2);
  FakeDevice dev;
  const KvCacheOptions plain{.n_ctx = 64};
  expect_same(run(*m, *cpu, plain, true), run(*m, dev, plain, true));
  EXPECT_GT(dev.kernel_calls, 0);
  EXPECT_GT(dev.staged_ops(), 0u);
  KvCacheOptions q8{.n_ctx = 64, .type_k = DType::Q8_0, .type_v = DType::Q8_0};
  expect_same(run(*m, *cpu, q8, false), run(*m, dev, q8, false));
}

std::vector<Case> cases(bool cpu_only = false) {
  std::vector<Case> out;
  for (const char* model :
       {"stories260K", "llama_dense", "llama_dense-Q4_K_M", "qwen3_dense", "qwen3moe", "qwen3moe-Q4_K_M", "mixtral",
        "olmoe", "deepseek2", "qwen35moe", "qwen35", "qwen3next", "kimi-linear", "bailingmoe3", "bailingmoe3-clamp"})
    for (const char* backend : {"cpu", "ref"})
      if (!cpu_only || std::string(backend) == "cpu") out.push_back({model, backend});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, HostGuard, ::testing::ValuesIn(cases()), [](const ::testing::TestParamInfo<Case>& i) {
  return test::test_name_part(i.param.model + "_" + i.param.backend);
});

INSTANTIATE_TEST_SUITE_P(Models, DeviceStaging, ::testing::ValuesIn(cases(/*cpu_only=*/true)),
                         [](const ::testing::TestParamInfo<Case>& i) { return test::test_name_part(i.param.model); });

// bench's CountingBackend (the profile) hands the forward its inner backend's buffers and
// views: a device keeps its activations when measured.
TEST(HostGuardCounting, CountingBackendForwardsBuffersAndViews) {
  SLUICE_REQUIRE_SHARED();
  for (const char* name : {"qwen3moe", "qwen35moe"}) {
    auto m = Model::load(model_path(name));
    auto be = make_backend("cpu", 2);
    test::HostGuardBackend guard(*be);
    CountingBackend counting(guard, /*profile=*/true);
    const KvCacheOptions plain{.n_ctx = 64};
    expect_same(run(*m, *be, plain, true), run(*m, counting, plain, true));
    EXPECT_GT(guard.allocs(), 0) << name;
    EXPECT_GT(guard.host_reads(), 0) << name;
    EXPECT_GT(counting.counters().total_bytes(), 0u) << name;
  }
}

// The guard can fail: a host write to, or read of, an activation outside an op faults.
TEST(HostGuardNegative, HostTouchOutsideAnOpDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto be = make_backend("ref");
  test::HostGuardBackend guard(*be);
  ActBuf<float> x = guard.alloc<float>(16);
  guard.fill(x.data(), 16, 2.0f);  // inside an op: fine
  EXPECT_EQ(guard.host_view(x.data(), 16)[3], 2.0f);
  EXPECT_DEATH(x.data()[0] = 1.0f, "");
  guard.fill(x.data(), 16, 3.0f);  // the view ended with this op
  EXPECT_DEATH(
      {
        volatile float v = x.data()[1];
        (void)v;
      },
      "");
}

}  // namespace
}  // namespace sluice::test_host_guard
