// backends/staging: the base of a backend whose activation buffers live in memory the host
// cannot address (a GPU's): Backend::alloc hands out that memory, and every op the device has
// no kernel for runs on a host twin backend (cpu) over host mirrors of the buffers it touches.
// Each device buffer an argument points into is copied whole into its host mirror (so pointers
// into the middle of a buffer, aliased inputs and outputs, and partial writes all stay right),
// the twin runs on the mirrors, and the buffers it wrote are copied back. Host memory passes as
// it is: weights, positions and token ids, the KV cache and recurrent state (Memory), routing
// results, logits. A device overrides the ops it has kernels for, taking device pointers
// where on_device() says so; tests/models/test_host_guard.cpp (DeviceStaging) runs every
// architecture on a fake device whose memory faults on any host access, bitwise equal to the
// twin alone.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backends/backend.h"

namespace sluice {

class StagingBackend : public Backend {
 public:
  explicit StagingBackend(std::unique_ptr<Backend> host_twin);
  ~StagingBackend() override;

  int n_threads() const override { return host_->n_threads(); }
  // Device memory from dev_alloc, zeroed, registered for on_device() until freed.
  std::shared_ptr<void> alloc_bytes(size_t n_bytes) override;
  // Device bytes copied into their buffer's host mirror; the mirror's address.
  const void* host_read(const void* p, size_t n_bytes) override;
  // Whether p points into a live buffer of alloc_bytes.
  bool on_device(const void* p) const;
  // Copies between host memory and device buffers or host memory (either side), n_bytes.
  void copy_out(void* host_dst, const void* src, size_t n_bytes);
  void copy_in(void* dst, const void* host_src, size_t n_bytes);
  uint64_t staged_ops() const { return staged_ops_; }  // ops run by the host twin

  // Every op, staged through the host twin; a device overrides those it has kernels for.
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
  void kv_rotate(const KvRotation& r, float* x, int64_t n, bool inverse) override;
  void moe_ffn_token(std::span<const FfnExpert> experts, const float* x, float* out, int64_t n_embd) override;
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

 protected:
  // The device's memory: n_bytes (> 0) zeroed, freed with the same size; copies between it and
  // host memory, complete when they return.
  virtual void* dev_alloc(size_t n_bytes) = 0;
  virtual void dev_free(void* p, size_t n_bytes) = 0;
  virtual void dev_to_host(void* host_dst, const void* dev_src, size_t n_bytes) = 0;
  virtual void host_to_dev(void* dev_dst, const void* host_src, size_t n_bytes) = 0;
  Backend& host_twin() { return *host_; }

  // The host side of one staged op: in(p) / out(p) give the host address for an argument
  // (its buffer mirrored on first use; out also marks it to copy back), done() copies the
  // written buffers back. An op that throws copies nothing back.
  class Mirror {
   public:
    explicit Mirror(StagingBackend& b) : b_(b) { ++b.staged_ops_; }
    template <class T>
    const T* in(const T* p) {
      return static_cast<const T*>(map(p, false));
    }
    template <class T>
    T* out(T* p) {
      return static_cast<T*>(const_cast<void*>(map(p, true)));
    }
    void done();

   private:
    const void* map(const void* p, bool write);
    StagingBackend& b_;
    std::vector<std::pair<uint8_t*, bool>> used_;  // buffers mirrored, whether written
  };

 private:
  struct Buffer {
    size_t len = 0;
    std::vector<uint8_t> mirror;  // grown on first staging, kept for the buffer's life
  };
  // The live buffer holding p, or null.
  std::pair<uint8_t* const, Buffer>* find(const void* p);

  std::unique_ptr<Backend> host_;
  // Shared with the buffers' deleters, which may outlive a call but not this backend.
  std::shared_ptr<std::map<uint8_t*, Buffer>> bufs_ = std::make_shared<std::map<uint8_t*, Buffer>>();
  uint64_t staged_ops_ = 0;
};

}  // namespace sluice
