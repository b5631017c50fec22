// tests/models/host_guard_backend: a Backend decorator whose activation buffers (Backend::alloc)
// the host cannot touch except inside one of its ops or through host_view: they are mapped
// PROT_NONE, opened read-write for the length of each op it forwards to the wrapped backend,
// and read-only by host_read until the next op. A forward step that reads or writes an
// activation on the host anywhere else dies with SIGSEGV: the rule a device backend's resident
// buffers need (backend.h ActBuf), checked on any machine.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backends/backend.h"
#include "core/error.h"

namespace sluice::test {

class HostGuardBackend final : public Backend {
 public:
  explicit HostGuardBackend(Backend& inner) : in_(inner) {}

  std::string_view name() const override { return in_.name(); }
  int n_threads() const override { return in_.n_threads(); }
  int64_t ops() const { return ops_; }           // ops forwarded
  int64_t host_reads() const { return reads_; }  // host_read calls on a guarded buffer
  int64_t allocs() const { return allocs_; }     // buffers handed out

  std::shared_ptr<void> alloc_bytes(size_t n_bytes) override {
    if (n_bytes == 0) return {};
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), len = (n_bytes + page - 1) / page * page;
    void* p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // zeroed
    if (p == MAP_FAILED) fail("host guard: mmap of ", len, " bytes failed");
    auto bufs = bufs_;
    (*bufs)[static_cast<uint8_t*>(p)] = len;
    ++allocs_;
    return {p, [bufs, len](void* q) {
              bufs->erase(static_cast<uint8_t*>(q));
              munmap(q, len);
            }};
  }

  const void* host_read(const void* p, size_t n_bytes) override {
    const auto* b = static_cast<const uint8_t*>(p);
    auto it = bufs_->upper_bound(const_cast<uint8_t*>(b));
    if (it == bufs_->begin()) return p;  // host memory
    --it;
    if (b >= it->first + it->second) return p;
    if (b + n_bytes > it->first + it->second) fail("host guard: host_read past the end of a buffer");
    protect(it->first, it->second, PROT_READ);
    ++reads_;
    return p;
  }

  void matmul_weights(const TensorView& w, const float* x, float* y, int64_t n_tok) override {
    Open o(*this);
    in_.matmul_weights(w, x, y, n_tok);
  }
  void get_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out) override {
    Open o(*this);
    in_.get_rows(table, ids, n, out);
  }
  void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) override {
    Open o(*this);
    in_.rms_norm(x, w, y, n_rows, n, eps);
  }
  void rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, const Rope& r) override {
    Open o(*this);
    in_.rope(x, pos, n_tok, n_head, head_dim, r);
  }
  void softmax(float* x, int64_t n_rows, int64_t n) override {
    Open o(*this);
    in_.softmax(x, n_rows, n);
  }
  void swiglu(const float* gate, const float* up, float* out, int64_t n, float limit) override {
    Open o(*this);
    in_.swiglu(gate, up, out, n, limit);
  }
  void gelu(const float* x, float* out, int64_t n) override {
    Open o(*this);
    in_.gelu(x, out, n);
  }
  void add(const float* a, const float* b, float* out, int64_t n) override {
    Open o(*this);
    in_.add(a, b, out, n);
  }
  void store_row(const float* src, DType t, void* dst, int64_t n) override {
    Open o(*this);
    in_.store_row(src, t, dst, n);
  }
  void attention(const AttentionArgs& a) override {
    Open o(*this);
    in_.attention(a);
  }
  void kv_rotate(const KvRotation& r, float* x, int64_t n, bool inverse) override {
    Open o(*this);
    in_.kv_rotate(r, x, n, inverse);
  }
  void moe_ffn_token(std::span<const FfnExpert> experts, const float* x, float* out, int64_t n_embd) override {
    Open o(*this);
    in_.moe_ffn_token(experts, x, out, n_embd);
  }
  void moe_ffn_batch(std::span<const FfnExpertRows> experts, const float* x, float* out, int64_t n_tok,
                     int64_t n_embd) override {
    Open o(*this);
    in_.moe_ffn_batch(experts, x, out, n_tok, n_embd);
  }
  void copy_2d(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t cols) override {
    Open o(*this);
    in_.copy_2d(src, ss, dst, ds, rows, cols);
  }
  void gather_rows(const float* src, int64_t width, const int64_t* idx, int64_t n, float* dst) override {
    Open o(*this);
    in_.gather_rows(src, width, idx, n, dst);
  }
  void add_rows_weighted(const float* y, int64_t width, const int64_t* idx, const float* w, int64_t n,
                         float* out) override {
    Open o(*this);
    in_.add_rows_weighted(y, width, idx, w, n, out);
  }
  void fill(float* x, int64_t n, float v) override {
    Open o(*this);
    in_.fill(x, n, v);
  }
  void moe_route(const MoeOptions& opt, const float* logits, float* probs, int64_t n_tok, const float* bias,
                 int32_t* experts, float* weights) override {
    Open o(*this);
    in_.moe_route(opt, logits, probs, n_tok, bias, experts, weights);
  }
  void conv1d_causal(const float* x, const float* w, float* state, float* out, int64_t n_tok, int64_t n_ch,
                     int64_t kernel, bool silu) override {
    Open o(*this);
    in_.conv1d_causal(x, w, state, out, n_tok, n_ch, kernel, silu);
  }
  void l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps) override {
    Open o(*this);
    in_.l2_norm(x, y, n_rows, n, eps);
  }
  void delta_rule(const DeltaRuleArgs& a) override {
    Open o(*this);
    in_.delta_rule(a);
  }
  void delta_gates(const float* alpha, const float* beta_logit, const float* bias, const float* a, float* g,
                   float* beta, int64_t n_tok, int64_t n) override {
    Open o(*this);
    in_.delta_gates(alpha, beta_logit, bias, a, g, beta, n_tok, n);
  }
  void kda_safe_gate(const float* x, const float* bias, const float* a, float lower_bound, float* g, int64_t n_tok,
                     int64_t n) override {
    Open o(*this);
    in_.kda_safe_gate(x, bias, a, lower_bound, g, n_tok, n);
  }
  void sigmoid_mul(const float* x, const float* gate, float* out, int64_t n) override {
    Open o(*this);
    in_.sigmoid_mul(x, gate, out, n);
  }
  void sigmoid(const float* x, float* out, int64_t n) override {
    Open o(*this);
    in_.sigmoid(x, out, n);
  }

 private:
  // Every buffer read-write for the op's length (nested ops, from the wrapped backend's own
  // defaults, never come back here), then none.
  struct Open {
    explicit Open(HostGuardBackend& g) : g(g) {
      ++g.ops_;
      g.protect_all(PROT_READ | PROT_WRITE);
    }
    ~Open() { g.protect_all(PROT_NONE); }
    HostGuardBackend& g;
  };
  static void protect(uint8_t* p, size_t len, int prot) {
    if (mprotect(p, len, prot) != 0) fail("host guard: mprotect failed");
  }
  void protect_all(int prot) {
    for (auto& [p, len] : *bufs_) protect(p, len, prot);
  }

  Backend& in_;
  // Shared with the buffers' deleters, which may run after this backend is gone.
  std::shared_ptr<std::map<uint8_t*, size_t>> bufs_ = std::make_shared<std::map<uint8_t*, size_t>>();
  int64_t ops_ = 0, reads_ = 0, allocs_ = 0;
};

}  // namespace sluice::test
