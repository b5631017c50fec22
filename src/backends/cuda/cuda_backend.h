// backends/cuda: the CUDA backend — every op of backends/backend.h on an NVIDIA GPU, checked
// against `ref` by tests/kernels/test_cuda_parity.cpp. Built when CMake finds nvcc
// (SLUICE_HAVE_CUDA); this header needs no CUDA headers.
//
// Cost model, said plainly: the Backend interface passes activations as HOST float pointers,
// so every op copies its inputs to the device and its outputs back (pinned staging, one
// stream, one synchronisation per op). Weights are uploaded once, on first use, and stay in
// VRAM (keyed by host address + size + a content fingerprint, and by the refill generation of
// core/expert_cache.h for streamed expert buffers). The KV cache is mirrored in VRAM and
// appended incrementally. MoE decode is the exception to one sync per op: moe_ffn_token runs
// all of a token's experts with one upload, ~4 launches and one download (kernels.h:
// matvec_batch, moe_down), and with an expert budget takes routed experts from the VRAM
// expert tier (expert_tier.h) instead of the weight cache. This op-level path is correct and
// good for parity; it is not the fast path: a device-resident decode step (activations never leave the GPU, the whole step
// captured as a CUDA graph, greedy argmax on the device) is what reaches the HBM speed of
// light, and needs a model-level entry point the interface does not have yet.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/backend.h"

namespace sluice {

// Number of usable CUDA devices; 0 when there is none, with the reason in *why (no driver,
// no device, ...). Never throws. Do not call at static-initialisation time.
int cuda_device_count(std::string* why = nullptr);

struct CudaBackendOptions {
  int device = 0;
  // VRAM for cached weights; 0 = as much as the device gives (least recently used weights
  // are evicted when an allocation fails).
  size_t weight_cache_bytes = 0;
  // Keep a device mirror of each KV cache, appended per call (false: upload every visible row
  // on every call; slower, for debugging the mirror).
  bool kv_mirror = true;
  // VRAM for routed experts (the expert tier of expert_tier.h), 0 = none. With a budget,
  // moe_ffn_token takes each routed expert (FfnExpert::layer/expert >= 0) from the tier, keyed
  // by (layer, expert) and evicted by its SLRU policy, and never puts it in the weight cache;
  // without one, experts are cached like any other weight. make_backend("cuda") takes it from
  // BackendOptions::gpu_expert_cache (the CLI's --gpu-expert-cache).
  size_t expert_cache_bytes = 0;
};

// The expert tier's figures (all 0 without a budget).
struct CudaExpertStats {
  size_t budget = 0, used = 0, peak = 0, resident = 0;  // bytes, bytes, bytes, experts
  uint64_t requests = 0, hits = 0, copies = 0, bytes_copied = 0, evictions = 0;
  uint64_t overflow = 0;  // experts the tier had no room for (all held): copied to scratch
  // matmuls of routed-expert weights (prefill's per-expert path, which has no (layer, expert)
  // ids): uploaded to scratch per call instead of entering the weight cache.
  uint64_t transient_uploads = 0, transient_bytes = 0;
};

struct CudaWeightCacheStats {
  size_t bytes = 0;  // VRAM held by cached weights
  size_t entries = 0;
  uint64_t uploads = 0;  // weights copied host -> device (first uses and refills)
  uint64_t hits = 0;
  uint64_t evictions = 0;
  uint64_t bytes_uploaded = 0;
};

class CudaBackend final : public Backend {
 public:
  // Throws Error "cuda backend: no CUDA device found (...)" when there is none.
  explicit CudaBackend(const CudaBackendOptions& opt = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  void matmul_weights(const TensorView& w, const float* x, float* y, int64_t n_tok) override;
  void get_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out) override;
  void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) override;
  void rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, const Rope& r) override;
  void softmax(float* x, int64_t n_rows, int64_t n) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n, float limit) override;
  void gelu(const float* x, float* out, int64_t n) override;
  void add(const float* a, const float* b, float* out, int64_t n) override;
  void store_row(const float* src, DType t, void* dst, int64_t n) override;
  void attention(const AttentionArgs& a) override;
  // Decode MoE in one round trip: x up, every expert's gate/up (one launch per weight type),
  // swiglu, the downs with the weighted sum fused, out down. Same semantics as the default.
  void moe_ffn_token(std::span<const FfnExpert> experts, const float* x, float* out, int64_t n_embd) override;

  // Greedy sampling on the device: index of the largest of n logits, ties to the lowest.
  int32_t argmax(const float* logits, int64_t n);
  // Device memory bandwidth in bytes/s measured by a copy kernel over `bytes` (read + write
  // counted), best of `reps`: the speed of light decode is compared with.
  double copy_bandwidth(size_t bytes, int reps);
  std::string device_name() const;
  size_t device_memory_bytes() const;
  CudaWeightCacheStats weight_stats() const;
  CudaExpertStats expert_stats() const;
  // One line for the end of a run ("gpu expert cache: ..."); empty without an expert budget.
  std::string expert_stats_line() const;
  // The expert tier's line, and with SLUICE_CUDA_PROFILE=1 one of each op's calls and wall time.
  std::string stats_line() const override;
  // Drops every cached weight, KV mirror and tier expert (e.g. before loading another model).
  void forget_cached();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& opt = {});

}  // namespace sluice
