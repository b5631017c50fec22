// bench/bench: what `sluice bench` measures with, kept out of the model and backend code:
// a multi-threaded memory read-bandwidth kernel (the speed of light for decode), a
// synthetic KV-cache filler (decode at depth without a long prefill), and a Backend decorator that counts the bytes every op reads from weights and the KV cache and,
// when profiling, times each op by stage (attention, router, experts, dense FFN, output).
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "memory/kv_cache.h"
#include "memory/memory.h"

namespace sluice {

class Model;

// Best-of-`reps` read bandwidth in bytes/s: n_threads threads each sum their slice of a
// `bytes` buffer (page-faulted in and written once beforehand), started together.
double membw_read(int n_threads, size_t bytes, int reps);

// The disk's read speed of light for expert streaming, in bytes/s: `bytes` of `path` in
// `block`-byte O_DIRECT reads at random block-aligned offsets over the whole file (expert misses
// land all over it; on the VMs here random 1 MiB reads with 32 in flight ran at 1.5x a sequential
// read), `depth` in flight, through the io engine the stream policy uses (io_uring, else pread
// threads). Best of `reps`, each at fresh offsets. Throws Error when the file cannot be opened
// for O_DIRECT reads or is shorter than one block.
double disk_read_bandwidth(const std::string& path, size_t bytes, size_t block, unsigned depth, int reps);

// The int8 multiply-accumulate peak in MAC/s of n_threads threads: independent chains of
// vpdpbusd (AVX-512 VNNI, 64 MACs per instruction), or of vpmaddubsw into 16-bit sums (AVX2, 32
// MACs per instruction, as the AVX2 kernels' inner loops run) where VNNI is missing; 0 without
// AVX2. What a prefill's matmul MACs are compared against.
double int8_peak(int n_threads);
// The AMX-INT8 peak of n_threads threads (tdpbssd, 16384 MACs each), where the cpu backend has
// AMX tiles (cpu::q8_kernels_amx()); else 0.
double amx_int8_peak(int n_threads);

// Writes positions [0, n_pos) of layers [0, n_layer) of kv with synthetic K/V rows through
// KvCache::store (each codec's own encoder, as a prefill would store them): Gaussian
// elements, K with RMS 1 (qwen3-style k_norm output) and V with RMS 0.5, rows drawn from a
// pool of 1024 distinct K and V rows (seeded) by a hash of (layer, position). What decode
// at depth reads and how fast does not depend on the values beyond their scale, and a real
// prefill of 16K tokens takes many minutes on a few cores.
void kv_fill_synthetic(KvCache& kv, Backend& be, int64_t n_layer, int64_t n_pos, uint64_t seed);

// Decode of several sequences together (bench --sequences): n_steps forward steps, each one
// batch of one token per sequence in `seqs` (which must exist in mem), every token the argmax
// of its sequence's previous logits, starting from next[i]. Returns the seconds the steps took.
double decode_together(const Model& m, Backend& be, Memory& mem, const std::vector<int32_t>& seqs,
                       std::vector<int32_t> next, int n_steps);

// attention: its weights (q/k/v/o projections); attend: the rest of it (RoPE, the KV store, the
// scores and their sum over V), so a profile tells the projections' rate from the cache's.
enum class BenchStage { embed, attention, attend, linear_attn, router, experts, dense_ffn, output, other, count };
std::string_view bench_stage_name(BenchStage s);
// The stage a weight belongs to, from its GGUF name (blk.N.attn_q.weight, ..._exps, ...).
BenchStage bench_stage_of(std::string_view tensor_name);

struct BenchCounters {
  std::array<double, static_cast<size_t>(BenchStage::count)> seconds{};
  std::array<uint64_t, static_cast<size_t>(BenchStage::count)> bytes{};
  uint64_t macs = 0;  // multiply-accumulates of matmul and moe_ffn_token (weights × activations)
  std::array<uint64_t, static_cast<size_t>(BenchStage::count)> stage_macs{};  // the same, by stage
  uint64_t total_bytes() const {
    uint64_t s = 0;
    for (uint64_t b : bytes) s += b;
    return s;
  }
};

// Forwards every op to `inner`, adding to counters() the bytes the op reads from weights
// (whole matrices for matmul, the rows for get_rows) and from the KV cache (every visible
// position's K and V row for attention). Activations are not counted: they stay in cache.
// With profile on, each op is also timed and its time added to its stage; elementwise ops
// go to the stage of the matmul before them (swiglu belongs to the FFN that produced it).
class CountingBackend final : public Backend {
 public:
  CountingBackend(Backend& inner, bool profile) : in_(inner), profile_(profile) {}
  const BenchCounters& counters() const { return c_; }
  void reset() { c_ = {}; }
  void restore(const BenchCounters& c) { c_ = c; }  // resume one test's counts between interleaved runs

  std::string_view name() const override { return in_.name(); }
  int n_threads() const override { return in_.n_threads(); }
  // The wrapped backend's activation memory (a device's, where it has its own).
  std::shared_ptr<void> alloc_bytes(size_t n_bytes) override { return in_.alloc_bytes(n_bytes); }
  const void* host_read(const void* p, size_t n_bytes) override { return in_.host_read(p, n_bytes); }
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
  void moe_ffn_token(std::span<const FfnExpert> experts, const float* x, float* out, int64_t n_embd) override;
  void moe_ffn_batch(std::span<const FfnExpertRows> experts, const float* x, float* out, int64_t n_tok,
                     int64_t n_embd) override;
  // Data movement and routing: forwarded, neither counted nor timed (the "outside ops" row).
  void copy_2d(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t cols) override {
    in_.copy_2d(src, ss, dst, ds, rows, cols);
  }
  void gather_rows(const float* src, int64_t width, const int64_t* idx, int64_t n, float* dst) override {
    in_.gather_rows(src, width, idx, n, dst);
  }
  void add_rows_weighted(const float* y, int64_t width, const int64_t* idx, const float* w, int64_t n,
                         float* out) override {
    in_.add_rows_weighted(y, width, idx, w, n, out);
  }
  void fill(float* x, int64_t n, float v) override { in_.fill(x, n, v); }
  // Linear attention (the linear_attn stage): the delta rule counts its state, read and
  // written once per call (a chunked backend may read it more, from cache).
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
  void kv_rotate(const KvRotation& r, float* x, int64_t n, bool inverse) override { in_.kv_rotate(r, x, n, inverse); }
  void moe_route(const MoeOptions& opt, const float* logits, float* probs, int64_t n_tok, const float* bias,
                 int32_t* experts, float* weights) override {
    in_.moe_route(opt, logits, probs, n_tok, bias, experts, weights);
  }

 private:
  using Clock = std::chrono::steady_clock;
  template <class F>
  void timed(BenchStage s, uint64_t bytes, F&& f);

  Backend& in_;
  bool profile_;
  BenchStage last_ = BenchStage::other;
  BenchCounters c_;
};

}  // namespace sluice
