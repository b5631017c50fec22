// backends/staging: ops staged through a host twin for a device backend (see the header).
#include "backends/staging.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace sluice {

StagingBackend::StagingBackend(std::unique_ptr<Backend> host_twin) : host_(std::move(host_twin)) {
  if (!host_) fail("staging backend: no host twin");
}

// Buffers still alive here were handed out by alloc_bytes and outlive the backend: their
// deleters must not run after it (the same rule as any backend's resources).
StagingBackend::~StagingBackend() = default;

std::shared_ptr<void> StagingBackend::alloc_bytes(size_t n_bytes) {
  if (n_bytes == 0) return {};
  auto* p = static_cast<uint8_t*>(dev_alloc(n_bytes));
  (*bufs_)[p].len = n_bytes;
  return {p, [this, bufs = bufs_, n_bytes](void* q) {
            bufs->erase(static_cast<uint8_t*>(q));
            dev_free(q, n_bytes);
          }};
}

std::pair<uint8_t* const, StagingBackend::Buffer>* StagingBackend::find(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  auto it = bufs_->upper_bound(const_cast<uint8_t*>(b));
  if (it == bufs_->begin()) return nullptr;
  --it;
  return b < it->first + it->second.len ? &*it : nullptr;
}

bool StagingBackend::on_device(const void* p) const { return const_cast<StagingBackend*>(this)->find(p) != nullptr; }

const void* StagingBackend::host_read(const void* p, size_t n_bytes) {
  auto* e = find(p);
  if (!e) return p;
  const size_t off = static_cast<size_t>(static_cast<const uint8_t*>(p) - e->first);
  if (off + n_bytes > e->second.len) fail("staging backend: host_read of ", n_bytes, " bytes past its buffer's end");
  e->second.mirror.resize(e->second.len);
  dev_to_host(e->second.mirror.data() + off, p, n_bytes);
  return e->second.mirror.data() + off;
}

void StagingBackend::copy_out(void* host_dst, const void* src, size_t n_bytes) {
  if (find(src))
    dev_to_host(host_dst, src, n_bytes);
  else
    std::memcpy(host_dst, src, n_bytes);
}

void StagingBackend::copy_in(void* dst, const void* host_src, size_t n_bytes) {
  if (find(dst))
    host_to_dev(dst, host_src, n_bytes);
  else
    std::memcpy(dst, host_src, n_bytes);
}

const void* StagingBackend::Mirror::map(const void* p, bool write) {
  if (!p) return p;
  auto* e = b_.find(p);
  if (!e) return p;
  auto it = std::find_if(used_.begin(), used_.end(), [&](const auto& u) { return u.first == e->first; });
  if (it == used_.end()) {
    e->second.mirror.resize(e->second.len);
    b_.dev_to_host(e->second.mirror.data(), e->first, e->second.len);
    used_.emplace_back(e->first, write);
  } else {
    it->second = it->second || write;
  }
  return e->second.mirror.data() + (static_cast<const uint8_t*>(p) - e->first);
}

void StagingBackend::Mirror::done() {
  for (const auto& [p, written] : used_)
    if (written) {
      auto* e = b_.find(p);
      b_.host_to_dev(p, e->second.mirror.data(), e->second.len);
    }
  used_.clear();
}

// ---- the ops: arguments mapped, the twin run on the mirrors, written buffers copied back ----

void StagingBackend::matmul_weights(const TensorView& w, const float* x, float* y, int64_t n_tok) {
  Mirror m(*this);
  host_->matmul_weights(w, m.in(x), m.out(y), n_tok);
  m.done();
}

void StagingBackend::get_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out) {
  Mirror m(*this);
  host_->get_rows(table, m.in(ids), n, m.out(out));
  m.done();
}

void StagingBackend::rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) {
  Mirror m(*this);
  host_->rms_norm(m.in(x), m.in(w), m.out(y), n_rows, n, eps);
  m.done();
}

void StagingBackend::rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim,
                          const Rope& r) {
  Mirror m(*this);
  host_->rope(m.out(x), m.in(pos), n_tok, n_head, head_dim, r);
  m.done();
}

void StagingBackend::softmax(float* x, int64_t n_rows, int64_t n) {
  Mirror m(*this);
  host_->softmax(m.out(x), n_rows, n);
  m.done();
}

void StagingBackend::swiglu(const float* gate, const float* up, float* out, int64_t n, float limit) {
  Mirror m(*this);
  host_->swiglu(m.in(gate), m.in(up), m.out(out), n, limit);
  m.done();
}

void StagingBackend::gelu(const float* x, float* out, int64_t n) {
  Mirror m(*this);
  host_->gelu(m.in(x), m.out(out), n);
  m.done();
}

void StagingBackend::add(const float* a, const float* b, float* out, int64_t n) {
  Mirror m(*this);
  host_->add(m.in(a), m.in(b), m.out(out), n);
  m.done();
}

void StagingBackend::store_row(const float* src, DType t, void* dst, int64_t n) {
  Mirror m(*this);
  host_->store_row(m.in(src), t, m.out(dst), n);
  m.done();
}

void StagingBackend::attention(const AttentionArgs& a) {
  Mirror m(*this);
  AttentionArgs h = a;
  h.q = m.in(a.q);
  h.k = m.in(a.k);
  h.v = m.in(a.v);
  h.k_sink = m.in(a.k_sink);
  h.v_sink = m.in(a.v_sink);
  h.out = m.out(a.out);
  host_->attention(h);
  m.done();
}

void StagingBackend::kv_rotate(const KvRotation& r, float* x, int64_t n, bool inverse) {
  Mirror m(*this);
  host_->kv_rotate(r, m.out(x), n, inverse);
  m.done();
}

void StagingBackend::moe_ffn_token(std::span<const FfnExpert> experts, const float* x, float* out, int64_t n_embd) {
  Mirror m(*this);
  host_->moe_ffn_token(experts, m.in(x), m.out(out), n_embd);
  m.done();
}

void StagingBackend::moe_ffn_batch(std::span<const FfnExpertRows> experts, const float* x, float* out, int64_t n_tok,
                                   int64_t n_embd) {
  Mirror m(*this);
  std::vector<FfnExpertRows> h(experts.begin(), experts.end());
  for (FfnExpertRows& e : h) e.tokens = m.in(e.tokens), e.weights = m.in(e.weights);
  host_->moe_ffn_batch(h, m.in(x), m.out(out), n_tok, n_embd);
  m.done();
}

void StagingBackend::copy_2d(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t cols) {
  Mirror m(*this);
  host_->copy_2d(m.in(src), ss, m.out(dst), ds, rows, cols);
  m.done();
}

void StagingBackend::gather_rows(const float* src, int64_t width, const int64_t* idx, int64_t n, float* dst) {
  Mirror m(*this);
  host_->gather_rows(m.in(src), width, m.in(idx), n, m.out(dst));
  m.done();
}

void StagingBackend::add_rows_weighted(const float* y, int64_t width, const int64_t* idx, const float* w, int64_t n,
                                       float* out) {
  Mirror m(*this);
  host_->add_rows_weighted(m.in(y), width, m.in(idx), m.in(w), n, m.out(out));
  m.done();
}

void StagingBackend::fill(float* x, int64_t n, float v) {
  Mirror m(*this);
  host_->fill(m.out(x), n, v);
  m.done();
}

void StagingBackend::moe_route(const MoeOptions& opt, const float* logits, float* probs, int64_t n_tok,
                               const float* bias, int32_t* experts, float* weights) {
  Mirror m(*this);
  host_->moe_route(opt, m.in(logits), m.out(probs), n_tok, m.in(bias), m.out(experts), m.out(weights));
  m.done();
}

void StagingBackend::conv1d_causal(const float* x, const float* w, float* state, float* out, int64_t n_tok,
                                   int64_t n_ch, int64_t kernel, bool silu) {
  Mirror m(*this);
  host_->conv1d_causal(m.in(x), m.in(w), m.out(state), m.out(out), n_tok, n_ch, kernel, silu);
  m.done();
}

void StagingBackend::l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps) {
  Mirror m(*this);
  host_->l2_norm(m.in(x), m.out(y), n_rows, n, eps);
  m.done();
}

void StagingBackend::delta_rule(const DeltaRuleArgs& a) {
  Mirror m(*this);
  DeltaRuleArgs h = a;
  h.q = m.in(a.q);
  h.k = m.in(a.k);
  h.v = m.in(a.v);
  h.g = m.in(a.g);
  h.beta = m.in(a.beta);
  h.state = m.out(a.state);
  h.out = m.out(a.out);
  host_->delta_rule(h);
  m.done();
}

void StagingBackend::delta_gates(const float* alpha, const float* beta_logit, const float* bias, const float* a,
                                 float* g, float* beta, int64_t n_tok, int64_t n) {
  Mirror m(*this);
  host_->delta_gates(m.in(alpha), m.in(beta_logit), m.in(bias), m.in(a), m.out(g), m.out(beta), n_tok, n);
  m.done();
}

void StagingBackend::kda_safe_gate(const float* x, const float* bias, const float* a, float lower_bound, float* g,
                                   int64_t n_tok, int64_t n) {
  Mirror m(*this);
  host_->kda_safe_gate(m.in(x), m.in(bias), m.in(a), lower_bound, m.out(g), n_tok, n);
  m.done();
}

void StagingBackend::sigmoid_mul(const float* x, const float* gate, float* out, int64_t n) {
  Mirror m(*this);
  host_->sigmoid_mul(m.in(x), m.in(gate), m.out(out), n);
  m.done();
}

void StagingBackend::sigmoid(const float* x, float* out, int64_t n) {
  Mirror m(*this);
  host_->sigmoid(m.in(x), m.out(out), n);
  m.done();
}

}  // namespace sluice
