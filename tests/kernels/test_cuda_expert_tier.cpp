// tests/kernels/test_cuda_expert_tier: the VRAM expert tier on a device — a requested expert's
// three matrices arrive in its slot byte for byte (checked after waiting on the device), hits
// do not copy again, the budget holds under churn, and pinned experts stay. Without a device:
// "skipped: no device". The policy itself is tested without a GPU in tests/unit/test_expert_cache.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda_test_util.h"

#ifdef SLUICE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backends/cuda/expert_tier.h"
#endif

namespace sluice::test_cuda_expert_tier {
namespace {

TEST(CudaExpertTier, CopiesHitsBudgetAndPins) {
  SLUICE_REQUIRE_CUDA();
#ifdef SLUICE_HAVE_CUDA
  std::mt19937 rng(1);
  const size_t sizes[3] = {300000, 300000, 310000};  // ~gate/up/down of a small expert
  auto make = [&](int e) {
    std::vector<std::vector<uint8_t>> m(3);
    for (int i = 0; i < 3; ++i) {
      m[i].resize(sizes[i]);
      for (auto& b : m[i]) b = static_cast<uint8_t>(rng() + e);
    }
    return m;
  };
  std::vector<std::vector<std::vector<uint8_t>>> host;
  for (int e = 0; e < 12; ++e) host.push_back(make(e));
  auto src = [&](int e) {
    ExpertHostBytes s;
    for (int i = 0; i < 3; ++i) s.host[i] = host[e][i].data(), s.bytes[i] = sizes[i];
    return s;
  };
  size_t off[3], total = 0;
  CudaExpertTier::slot_layout(src(0), off, &total);
  CudaExpertTier tier(4 * ((total + (64 << 10) - 1) / (64 << 10) * (64 << 10)));  // room for 4 experts
  cudaStream_t compute;
  ASSERT_EQ(cudaStreamCreate(&compute), cudaSuccess);
  for (int round = 0; round < 3; ++round) {
    for (int e = 0; e < 12; ++e) {
      ExpertCache::Entry* en = tier.request(0, e, src(e), false);
      ASSERT_NE(en, nullptr);
      tier.acquire(en, compute);
      if (round == 0 && e == 0) tier.pin(en);
      std::vector<uint8_t> back(sizes[2]);
      ASSERT_EQ(cudaMemcpyAsync(back.data(), en->buf + off[2], sizes[2], cudaMemcpyDeviceToHost, compute), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
      EXPECT_EQ(back, host[e][2]) << "expert " << e;
      tier.release(en);
      ASSERT_LE(tier.cache().used(), tier.cache().budget());
    }
  }
  EXPECT_NE(const_cast<ExpertCache&>(tier.cache()).find(0, 0), nullptr) << "pinned expert evicted";
  EXPECT_GT(tier.stats().hits, 0u);  // the pinned one, at least
  cudaStreamDestroy(compute);
#endif
}

}  // namespace
}  // namespace sluice::test_cuda_expert_tier
