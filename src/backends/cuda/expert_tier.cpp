// backends/cuda/expert_tier: the VRAM expert cache (see expert_tier.h): ExpertCache's policy
// over cudaMalloc'd slots, copies on a dedicated stream, readiness by events.
#include "backends/cuda/expert_tier.h"

#include "core/error.h"

namespace sluice {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("cuda expert tier: ", what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

class CudaSlotAllocator final : public ExpertSlotAllocator {
 public:
  static constexpr size_t kGrain = size_t{64} << 10;
  size_t slot_bytes(size_t bytes) const override { return (bytes + kGrain - 1) / kGrain * kGrain; }
  uint8_t* allocate(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc of an expert slot");
    return static_cast<uint8_t*>(p);
  }
  void release(uint8_t* p, size_t) override { cudaFree(p); }
  bool host_visible() const override { return false; }
};

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

std::unique_ptr<ExpertSlotAllocator> make_cuda_slot_allocator() { return std::make_unique<CudaSlotAllocator>(); }

CudaExpertTier::CudaExpertTier(size_t budget_bytes) : cache_(budget_bytes, make_cuda_slot_allocator()) {
  check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
}

CudaExpertTier::~CudaExpertTier() {
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  for (auto& [e, ev] : loading_) cudaEventDestroy(ev);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
}

void CudaExpertTier::slot_layout(const ExpertHostBytes& src, size_t offset[3], size_t* total) {
  size_t off = 0;
  for (int i = 0; i < 3; ++i) {
    offset[i] = off;
    off += align256(src.bytes[i]);
  }
  *total = off;
}

void CudaExpertTier::poll() {
  for (auto it = loading_.begin(); it != loading_.end();) {
    const cudaError_t q = cudaEventQuery(it->second);
    if (q == cudaErrorNotReady) {
      ++it;
      continue;
    }
    check(q, "copy of an expert");
    it->first->state = ExpertCache::State::ready;
    cudaEventDestroy(it->second);
    it = loading_.erase(it);
  }
}

ExpertCache::Entry* CudaExpertTier::request(int32_t layer, int32_t expert, const ExpertHostBytes& src, bool prefetch) {
  poll();
  ++stats_.requests;
  if (ExpertCache::Entry* e = cache_.find(layer, expert)) {
    ++stats_.hits;
    return e;
  }
  size_t off[3], total = 0;
  slot_layout(src, off, &total);
  ExpertCache::Entry* e = cache_.insert(layer, expert, total, /*probationary_only=*/prefetch);
  if (!e) {
    ++stats_.refused;
    return nullptr;
  }
  e->prefetched = prefetch;
  // From pageable memory the copy is staged by the driver and returns late; from pinned
  // memory (the streaming tier's buffers can be registered with cudaHostRegister) it is a
  // true asynchronous DMA overlapped with compute.
  for (int i = 0; i < 3; ++i)
    if (src.bytes[i])
      check(cudaMemcpyAsync(e->buf + off[i], src.host[i], src.bytes[i], cudaMemcpyHostToDevice, copy_stream_),
            "cudaMemcpyAsync of an expert");
  cudaEvent_t ev;
  check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventRecord(ev, copy_stream_), "cudaEventRecord");
  loading_[e] = ev;
  ++stats_.copies;
  stats_.bytes_copied += src.bytes[0] + src.bytes[1] + src.bytes[2];
  return e;
}

void CudaExpertTier::acquire(ExpertCache::Entry* e, cudaStream_t compute) {
  if (auto it = loading_.find(e); it != loading_.end())
    check(cudaStreamWaitEvent(compute, it->second, 0), "cudaStreamWaitEvent");
  e->prefetched = false;
  ++e->holds;
  cache_.mark_used(e);
}

}  // namespace sluice
