// backends/cuda/expert_tier: the VRAM expert cache — a byte budget of device memory in front of
// the host tier (RAM, or the disk streaming of memory/expert_stream), with the same SLRU
// policy, pinned hot set and (layer, expert) keys as the host cache (core/expert_cache.h
// over a device slot allocator). Copies run on their own stream from (ideally pinned) host
// memory and signal an event; compute waits on that event on the device, so copies of the
// next layer's predicted experts overlap with the current layer's compute.
//
// Use: CudaBackend::moe_ffn_token requests each routed expert of a token, acquires them all
// for the call on its compute stream and releases them when the call's result is back
// (CudaBackendOptions::expert_cache_bytes, the CLI's --gpu-expert-cache). Policy tests run on
// the CPU (tests/unit/test_expert_cache.cpp, tests/kernels/test_cuda_moe.cpp, fake device
// allocators); the device path is tested by tests/kernels/test_cuda_expert_tier.cpp and
// test_cuda_moe.cpp on a GPU. Not done yet: prefetching the next layer's predicted experts
// (request(..., prefetch = true) exists for it) and pinning a hot set from routing counts.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "core/expert_cache.h"

namespace sluice {

// One expert's three matrices on the host (gate, up, down), copied into one device slot back
// to back, each at a 256-byte aligned offset.
struct ExpertHostBytes {
  const void* host[3] = {};
  size_t bytes[3] = {};
};

struct CudaExpertTierStats {
  uint64_t requests = 0, hits = 0, copies = 0, bytes_copied = 0, refused = 0;
};

class CudaExpertTier {
 public:
  // budget_bytes of VRAM on the current device.
  explicit CudaExpertTier(size_t budget_bytes);
  ~CudaExpertTier();  // waits for copies in flight, frees every slot
  CudaExpertTier(const CudaExpertTier&) = delete;
  CudaExpertTier& operator=(const CudaExpertTier&) = delete;

  // Offsets of gate, up and down inside a slot (256-byte aligned).
  static void slot_layout(const ExpertHostBytes& src, size_t offset[3], size_t* total);

  // The slot of (layer, expert): a hit returns it at once; a miss starts its copy (state
  // loading until the copy's event fires) and returns it. nullptr when no room can be made
  // now (everything held, loading or pinned) — the caller computes from the host tier. A
  // prefetch (`prefetch`) may only evict probationary entries.
  ExpertCache::Entry* request(int32_t layer, int32_t expert, const ExpertHostBytes& src, bool prefetch);
  // Makes `compute` wait on the device for e's copy, counts a use, and holds e until release().
  void acquire(ExpertCache::Entry* e, cudaStream_t compute);
  void release(ExpertCache::Entry* e) { --e->holds; }
  // The hot set: e is never evicted.
  void pin(ExpertCache::Entry* e) { e->pinned = true; }

  const ExpertCache& cache() const { return cache_; }
  CudaExpertTierStats stats() const { return stats_; }

 private:
  void poll();  // loading entries whose copy finished become ready (evictable)

  ExpertCache cache_;
  cudaStream_t copy_stream_ = nullptr;
  std::unordered_map<ExpertCache::Entry*, cudaEvent_t> loading_;
  CudaExpertTierStats stats_;
};

// The device allocator behind the tier (cudaMalloc per slot, 64 KiB rounding).
std::unique_ptr<ExpertSlotAllocator> make_cuda_slot_allocator();

}  // namespace sluice
