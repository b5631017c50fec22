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
// light, and needs a model-level entry point the interface does not have yet. The way there
// (docs/ARCHITECTURE.md, "Backend-resident tensors"): with resident_activations the forwards'
// buffers are device memory (backends/staging.h); an op given device operands runs staged on
// a host twin until its kernel takes them as they are, one op at a time, each checked by
// scripts/gpu-check's resident goldens.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/staging.h"

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
  // Activation buffers (Backend::alloc) in device memory, the StagingBackend way: an op given
  // device operands runs on the host twin over staged copies until its kernel takes them as
  // they are (docs/ARCHITECTURE.md, "Backend-resident tensors", step 3). Off by default until
  // scripts/gpu-check has run the goldens with it on a GPU; SLUICE_CUDA_RESIDENT=1 turns it on.
  bool resident_activations = false;
  int host_threads = 0;  // the host twin's (a cpu backend's) threads; <= 0: the core count
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

class CudaBackend final : public StagingBackend {
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
  // Host memory unless resident_activations (then device memory, see StagingBackend).
  std::shared_ptr<void> alloc_bytes(size_t n_bytes) override;
  // The ops without a kernel: Backend's host defaults on host operands (on this backend, so a
  // composite default such as moe_ffn_batch runs its matmuls here), staged with device ones.
  void kv_rotate(const KvRotation& r, float* x, int64_t n, bool inverse) override;
  void moe_ffn_batch(std::span<const FfnExpertRows> experts, const float* x, float* out, int64_t n_tok,
                     int64_t n_embd) override;
  void copy_2d(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t cols) override;
  void gather_rows(const float* src, int64_t width, const int64_t* idx, int64_t n, float* dst) override;
  void add_rows_weighted(const float* y, int64_t width, const int64_t* idx, const float* w, int64_t n,
                         float* out) override;
  void fill(float* x, int64_t n, float v) override;
  void moe_route(const MoeOptions& opt, const float* logits, float* probs, int64_t n_tok, const float* bias,
                 int32_t* experts, float* weights) override;
  void conv1d_causal(const float* x, const float* w, float* state, float* out, int64_t n_tok, int64_t n_ch,
                     int64_t kernel, bool silu) override;
  void l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps) override;
  void delta_rule(const DeltaRuleArgs& a) override;
  void delta_gates(const float* alpha, const float* beta_logit, const float* bias, const float* a, float* g,
                   float* beta, int64_t n_tok, int64_t n) override;
  void kda_safe_gate(const float* x, const float* bias, const float* a, float lower_bound, float* g, int64_t n_tok,
                     int64_t n) override;
  void sigmoid_mul(const float* x, const float* gate, float* out, int64_t n) override;
  void sigmoid(const float* x, float* out, int64_t n) override;

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

 protected:
  void* dev_alloc(size_t n_bytes) override;
  void dev_free(void* p, size_t n_bytes) override;
  void dev_to_host(void* host_dst, const void* dev_src, size_t n_bytes) override;
  void host_to_dev(void* dev_dst, const void* host_src, size_t n_bytes) override;

 private:
  // Whether an op with these pointer operands goes to the staged host twin: some are device
  // memory (only with resident_activations).
  bool staged(std::initializer_list<const void*> operands) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& opt = {});

}  // namespace sluice
