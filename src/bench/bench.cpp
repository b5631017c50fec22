// bench/bench: memory bandwidth kernel, synthetic KV fill, and the byte-counting,
// stage-timing backend decorator.
#include "bench/bench.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "memory/io_engine.h"
#include "models/model.h"
#include "runtime/session.h"

namespace sluice {
namespace {

// Sum of 64-bit words with 4 independent accumulators (the loads, not the adds, are the
// bottleneck: the compiler vectorizes this to 16- or 32-byte loads).
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a + b + c + d;
}

#if defined(__x86_64__)
// The same with 32-byte AVX2 loads, 8 streams in flight (chosen by CPUID at run time).
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* p, size_t n) {
  __attribute__((vector_size(32))) uint64_t acc[8] = {};
  using V = __attribute__((vector_size(32), aligned(8))) uint64_t;
  for (size_t i = 0; i + 32 <= n; i += 32)
    for (int k = 0; k < 8; ++k) acc[k] += *reinterpret_cast<const V*>(p + i + 4 * k);
  uint64_t s = 0;
  for (int k = 0; k < 8; ++k)
    for (int l = 0; l < 4; ++l) s += acc[k][l];
  return s;
}

// 64-byte AVX-512 loads, 8 streams in flight: what the decode kernels issue.
__attribute__((target("avx512f"))) uint64_t sum_words_avx512(const uint64_t* p, size_t n) {
  __attribute__((vector_size(64))) uint64_t acc[8] = {};
  using V = __attribute__((vector_size(64), aligned(8))) uint64_t;
  for (size_t i = 0; i + 64 <= n; i += 64)
    for (int k = 0; k < 8; ++k) acc[k] += *reinterpret_cast<const V*>(p + i + 8 * k);
  uint64_t s = 0;
  for (int k = 0; k < 8; ++k)
    for (int l = 0; l < 8; ++l) s += acc[k][l];
  return s;
}
#endif

// The measured buffer is an anonymous mapping with transparent huge pages requested: model
// weights are read from the page cache, which on current kernels holds large folios mapped
// with 2 MiB entries, and a 4 KiB-page buffer would understate what the bus gives them
// (measured here: 31 GB/s with 4 KiB pages while the LM head streamed at 44 GB/s).
struct HugeBuffer {
  void* p = MAP_FAILED;
  size_t n = 0;
  explicit HugeBuffer(size_t bytes) : n(bytes) {
    p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("bench: cannot map ", n, " bytes for the bandwidth buffer");
    ::madvise(p, n, MADV_HUGEPAGE);  // a hint: without THP the buffer keeps 4 KiB pages
  }
  ~HugeBuffer() { ::munmap(p, n); }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  uint64_t* words() const { return static_cast<uint64_t*>(p); }
};

}  // namespace

double membw_read(int n_threads, size_t bytes, int reps) {
  n_threads = std::max(1, n_threads);
  const size_t words = bytes / 8 / (64 * static_cast<size_t>(n_threads)) * 64 * static_cast<size_t>(n_threads);
  HugeBuffer hb(words * 8);
  uint64_t* buf = hb.words();
  for (size_t i = 0; i < words; ++i) buf[i] = i;
  const size_t per = words / static_cast<size_t>(n_threads);
  const bool avx2 = cpu_features().avx2, avx512 = cpu_isa_available(CpuIsa::avx512);
  double best = 0;
  std::atomic<uint64_t> sink{0};
  for (int r = 0; r < std::max(1, reps); ++r) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> th;
    for (int t = 0; t < n_threads; ++t)
      th.emplace_back([&, t] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) {
        }
        const uint64_t* p = buf + per * static_cast<size_t>(t);
#if defined(__x86_64__)
        sink.fetch_add(avx512 ? sum_words_avx512(p, per) : avx2 ? sum_words_avx2(p, per) : sum_words(p, per));
#else
        sink.fetch_add(sum_words(p, per));
#endif
      });
    while (ready.load() < n_threads) std::this_thread::yield();
    const auto t0 = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    for (auto& t : th) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(words * 8) / s);
  }
  if (sink.load() == 1) std::fprintf(stderr, " ");  // keeps the sums alive
  return best;
}

namespace {
#if defined(__x86_64__)
// kChains independent accumulators hide the instruction latency; the asm keeps the compiler
// from folding the loop (the operands never change).
constexpr int kChains = 24;
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double int8_macs_vnni(int64_t iters) {
  __m512i acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_epi32(k);
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+v"(a), "+v"(b));
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
  }
  // Stored and summed by hand: GCC 12's _mm512_reduce_add_epi32 trips -Wuninitialized. The
  // lanes have wrapped around many times: summed as unsigned (wrapping is defined there).
  uint32_t s = 0;
  alignas(64) uint32_t lanes[16];
  for (int k = 0; k < kChains; ++k) {
    _mm512_store_si512(lanes, acc[k]);
    s += lanes[0];
  }
  if (s == 1) std::fprintf(stderr, " ");
  return static_cast<double>(iters) * kChains * 64;
}
// The AVX2 kernels' inner loop: vpmaddubsw into 16-bit sums (a vpmaddwd closes a run of them,
// rarely enough not to count). Each chain multiplies its own pair of operands: with one pair for
// all of them the compiler computes the product once per iteration (it did, and the "peak" read
// 2.4x what vpmaddubsw + vpmaddwd reach on Zen 1).
__attribute__((target("avx2"))) double int8_macs_avx2(int64_t iters) {
  constexpr int kA = 4, kB = 2;  // kA·kB chains, operand pairs (a[k % kA], b[k / kA])
  __m256i acc[kA * kB], a[kA], b[kB];
  for (int k = 0; k < kA * kB; ++k) acc[k] = _mm256_set1_epi16(static_cast<int16_t>(k));
  for (int k = 0; k < kA; ++k) a[k] = _mm256_set1_epi8(static_cast<char>(3 + k));
  for (int k = 0; k < kB; ++k) b[k] = _mm256_set1_epi8(static_cast<char>(5 + k));
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(b[0]), "+v"(b[1]));
#pragma GCC unroll 8
    for (int k = 0; k < kA * kB; ++k) acc[k] = _mm256_add_epi16(acc[k], _mm256_maddubs_epi16(a[k % kA], b[k / kA]));
  }
  uint32_t s = 0;
  for (int k = 0; k < kA * kB; ++k) s += static_cast<uint32_t>(_mm256_extract_epi32(acc[k], 0));
  if (s == 1) std::fprintf(stderr, " ");
  return static_cast<double>(iters) * kA * kB * 32;
}
#endif
}  // namespace

namespace {
// Best of 3 of n_threads threads running macs(iters) at once: total MACs per second.
double peak_of_threads(int n_threads, int64_t iters, double (*macs_fn)(int64_t)) {
  n_threads = std::max(1, n_threads);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::atomic<bool> go{false};
    std::vector<std::thread> th;
    std::vector<double> macs(static_cast<size_t>(n_threads));
    for (int t = 0; t < n_threads; ++t)
      th.emplace_back([&, t] {
        while (!go.load(std::memory_order_acquire)) {
        }
        macs[static_cast<size_t>(t)] = macs_fn(iters);
      });
    const auto t0 = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    for (auto& t : th) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double total = 0;
    for (double m : macs) total += m;
    best = std::max(best, total / s);
  }
  return best;
}
}  // namespace

double int8_peak(int n_threads) {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  const bool vnni = cpu_isa_available(CpuIsa::avx512) && f.avx512vnni;
  if (!vnni && !f.avx2) return 0;
  return peak_of_threads(n_threads, 2'000'000, vnni ? int8_macs_vnni : int8_macs_avx2);
#else
  (void)n_threads;
  return 0;
#endif
}

double amx_int8_peak(int n_threads) {
  if (!cpu::q8_kernels_amx()) return 0;
  return peak_of_threads(n_threads, 200'000, cpu::amx_int8_macs);
}

void kv_fill_synthetic(KvCache& kv, Backend& be, int64_t n_layer, int64_t n_pos, uint64_t seed) {
  if (n_pos > kv.n_ctx()) fail("bench: depth ", n_pos, " does not fit the cache of ", kv.n_ctx(), " positions");
  const AttentionArgs g = kv.attention_args(0);
  const int64_t wk = g.n_head_kv * g.head_dim_k, wv = g.n_head_kv * g.head_dim_v;
  constexpr int64_t kPool = 1024;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nk(0.0f, 1.0f), nv(0.0f, 0.5f);
  std::vector<float> kp(static_cast<size_t>(kPool * wk)), vp(static_cast<size_t>(kPool * wv));
  for (auto& x : kp) x = nk(rng);
  for (auto& x : vp) x = nv(rng);
  for (int64_t l = 0; l < n_layer; ++l)
    for (int64_t p = 0; p < n_pos; ++p) {
      uint64_t h = (static_cast<uint64_t>(l) << 32 | static_cast<uint64_t>(p)) * 0x9e3779b97f4a7c15ull;
      h ^= h >> 29;
      const int64_t rk = static_cast<int64_t>(h % kPool), rv = static_cast<int64_t>((h >> 20) % kPool);
      kv.store(be, l, p, kp.data() + rk * wk, vp.data() + rv * wv);
    }
}

double decode_together(const Model& m, Backend& be, Memory& mem, const std::vector<int32_t>& seqs,
                       std::vector<int32_t> next, int n_steps) {
  const int64_t V = m.hparams().n_vocab, n = static_cast<int64_t>(seqs.size());
  if (static_cast<int64_t>(next.size()) != n) fail("bench: ", n, " sequences but ", next.size(), " first tokens");
  std::vector<float> logits(static_cast<size_t>(n * V));
  Batch b;
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < n_steps; ++step) {
    b.clear();
    for (int64_t i = 0; i < n; ++i) b.add(next[i], seqs[i], static_cast<int32_t>(mem.seq_len(seqs[i])), true);
    m.forward(be, mem, b, logits.data(), nullptr);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = logits.data() + i * V;
      next[i] = argmax(std::span<const float>(row, static_cast<size_t>(V)));
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string_view bench_stage_name(BenchStage s) {
  switch (s) {
    case BenchStage::embed: return "embed";
    case BenchStage::attention: return "attention";
    case BenchStage::attend: return "attend";
    case BenchStage::linear_attn: return "linear_attn";
    case BenchStage::router: return "router";
    case BenchStage::experts: return "experts";
    case BenchStage::dense_ffn: return "dense_ffn";
    case BenchStage::output: return "output";
    case BenchStage::other: return "other";
    case BenchStage::count: break;
  }
  return "?";
}

BenchStage bench_stage_of(std::string_view n) {
  auto has = [&](std::string_view s) { return n.find(s) != std::string_view::npos; };
  if (has("token_embd")) return BenchStage::embed;
  // Gated DeltaNet layers: their input projections (attn_qkv, attn_gate) and ssm_* weights.
  if (has("ssm_") || has("attn_qkv") || has("attn_gate")) return BenchStage::linear_attn;
  if (has("attn_")) return BenchStage::attention;
  if (has("ffn_gate_inp")) return BenchStage::router;
  if (has("_exps") || has("_shexp")) return has("_exps") ? BenchStage::experts : BenchStage::dense_ffn;
  // Packed experts are blk.N.ffn_gate.E.weight: a digit right after "ffn_<kind>.".
  for (std::string_view k : {"ffn_gate.", "ffn_up.", "ffn_down."}) {
    const size_t p = n.find(k);
    if (p != std::string_view::npos) {
      const size_t q = p + k.size();
      return q < n.size() && n[q] >= '0' && n[q] <= '9' ? BenchStage::experts : BenchStage::dense_ffn;
    }
  }
  if (has("ffn_")) return BenchStage::dense_ffn;
  if (n.rfind("output", 0) == 0) return BenchStage::output;
  return BenchStage::other;
}

template <class F>
void CountingBackend::timed(BenchStage s, uint64_t bytes, F&& f) {
  const size_t i = static_cast<size_t>(s);
  c_.bytes[i] += bytes;
  if (!profile_) {
    f();
    return;
  }
  const auto t0 = Clock::now();
  f();
  c_.seconds[i] += std::chrono::duration<double>(Clock::now() - t0).count();
}

void CountingBackend::matmul_weights(const TensorView& w, const float* x, float* y, int64_t n_tok) {
  last_ = bench_stage_of(w.name);
  const uint64_t macs = static_cast<uint64_t>(w.ne[0]) * static_cast<uint64_t>(w.n_rows()) *
                        static_cast<uint64_t>(n_tok);
  c_.macs += macs;
  c_.stage_macs[static_cast<size_t>(last_)] += macs;
  timed(last_, static_cast<uint64_t>(w.n_rows()) * w.read_bytes_per_row(), [&] { in_.matmul_weights(w, x, y, n_tok); });
}
void CountingBackend::get_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out) {
  timed(bench_stage_of(table.name), static_cast<uint64_t>(n) * table.read_bytes_per_row(),
        [&] { in_.get_rows(table, ids, n, out); });
}
void CountingBackend::rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) {
  timed(BenchStage::other, 0, [&] { in_.rms_norm(x, w, y, n_rows, n, eps); });
}
void CountingBackend::rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim,
                           const Rope& r) {
  timed(BenchStage::attend, 0, [&] { in_.rope(x, pos, n_tok, n_head, head_dim, r); });
}
void CountingBackend::softmax(float* x, int64_t n_rows, int64_t n) {
  timed(last_ == BenchStage::router ? BenchStage::router : BenchStage::other, 0, [&] { in_.softmax(x, n_rows, n); });
}
void CountingBackend::swiglu(const float* gate, const float* up, float* out, int64_t n, float limit) {
  timed(last_, 0, [&] { in_.swiglu(gate, up, out, n, limit); });
}
void CountingBackend::gelu(const float* x, float* out, int64_t n) {
  timed(last_, 0, [&] { in_.gelu(x, out, n); });
}
void CountingBackend::add(const float* a, const float* b, float* out, int64_t n) {
  timed(BenchStage::other, 0, [&] { in_.add(a, b, out, n); });
}
void CountingBackend::store_row(const float* src, DType t, void* dst, int64_t n) {
  timed(BenchStage::attend, 0, [&] { in_.store_row(src, t, dst, n); });
}
void CountingBackend::attention(const AttentionArgs& a) {
  const int64_t n_vis = std::min(a.n_kv, a.pos0 + a.n_tok);
  const uint64_t bytes = static_cast<uint64_t>(std::max<int64_t>(0, n_vis)) * (a.k_row_bytes + a.v_row_bytes);
  timed(BenchStage::attend, bytes, [&] { in_.attention(a); });
}
void CountingBackend::moe_ffn_token(std::span<const FfnExpert> experts, const float* x, float* out, int64_t n_embd) {
  uint64_t bytes = 0;
  for (const FfnExpert& e : experts)
    for (const TensorView* w : {e.gate, e.up, e.down}) {
      bytes += static_cast<uint64_t>(w->n_rows()) * w->read_bytes_per_row();
      const uint64_t macs = static_cast<uint64_t>(w->ne[0]) * static_cast<uint64_t>(w->n_rows());
      c_.macs += macs;
      c_.stage_macs[static_cast<size_t>(BenchStage::experts)] += macs;
    }
  last_ = BenchStage::experts;
  timed(BenchStage::experts, bytes, [&] { in_.moe_ffn_token(experts, x, out, n_embd); });
}

void CountingBackend::moe_ffn_batch(std::span<const FfnExpertRows> experts, const float* x, float* out, int64_t n_tok,
                                    int64_t n_embd) {
  uint64_t bytes = 0;
  for (const FfnExpertRows& e : experts)
    for (const TensorView* w : {e.gate, e.up, e.down}) {
      bytes += static_cast<uint64_t>(w->n_rows()) * w->read_bytes_per_row();  // read once for all its tokens
      const uint64_t macs = static_cast<uint64_t>(w->ne[0]) * static_cast<uint64_t>(w->n_rows()) *
                            static_cast<uint64_t>(e.n);
      c_.macs += macs;
      c_.stage_macs[static_cast<size_t>(BenchStage::experts)] += macs;
    }
  last_ = BenchStage::experts;
  timed(BenchStage::experts, bytes, [&] { in_.moe_ffn_batch(experts, x, out, n_tok, n_embd); });
}

void CountingBackend::conv1d_causal(const float* x, const float* w, float* state, float* out, int64_t n_tok,
                                    int64_t n_ch, int64_t kernel, bool silu) {
  timed(BenchStage::linear_attn, 0, [&] { in_.conv1d_causal(x, w, state, out, n_tok, n_ch, kernel, silu); });
}
void CountingBackend::l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps) {
  timed(BenchStage::linear_attn, 0, [&] { in_.l2_norm(x, y, n_rows, n, eps); });
}
void CountingBackend::delta_rule(const DeltaRuleArgs& a) {
  const uint64_t state = static_cast<uint64_t>(a.n_head_v * a.dim_v * a.dim_k) * sizeof(float);
  timed(BenchStage::linear_attn, 2 * state, [&] { in_.delta_rule(a); });
}
void CountingBackend::delta_gates(const float* alpha, const float* beta_logit, const float* bias, const float* a,
                                  float* g, float* beta, int64_t n_tok, int64_t n) {
  timed(BenchStage::linear_attn, 0, [&] { in_.delta_gates(alpha, beta_logit, bias, a, g, beta, n_tok, n); });
}
void CountingBackend::kda_safe_gate(const float* x, const float* bias, const float* a, float lower_bound, float* g,
                                    int64_t n_tok, int64_t n) {
  timed(BenchStage::linear_attn, 0, [&] { in_.kda_safe_gate(x, bias, a, lower_bound, g, n_tok, n); });
}
void CountingBackend::sigmoid_mul(const float* x, const float* gate, float* out, int64_t n) {
  timed(last_, 0, [&] { in_.sigmoid_mul(x, gate, out, n); });
}
void CountingBackend::sigmoid(const float* x, float* out, int64_t n) {
  timed(last_, 0, [&] { in_.sigmoid(x, out, n); });
}

double disk_read_bandwidth(const std::string& path, size_t bytes, size_t block, unsigned depth, int reps) {
  constexpr uint64_t kAlign = 4096;
  block = std::max<size_t>(kAlign, block / kAlign * kAlign);
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open for O_DIRECT reads: ", std::strerror(errno));
  const off_t size = ::lseek(fd, 0, SEEK_END);
  const uint64_t n_blocks = size > 0 ? static_cast<uint64_t>(size) / block : 0;
  if (n_blocks == 0) {
    ::close(fd);
    fail(path, ": shorter than one ", block, "-byte read");
  }
  void* mem = ::mmap(nullptr, block * depth, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    ::close(fd);
    fail("disk read test: cannot map ", block * depth, " bytes");
  }
  auto* buf = static_cast<uint8_t*>(mem);
  double best = 0;
  try {
    auto io = make_io_engine("auto");
    depth = std::min<unsigned>(depth, static_cast<unsigned>(io->max_in_flight()));
    std::vector<IoCompletion> done(depth);
    std::mt19937_64 rng(12345);
    for (int r = 0; r < reps; ++r) {
      const size_t n = std::max<size_t>(1, bytes / block);
      size_t issued = 0, completed = 0;
      const auto t0 = std::chrono::steady_clock::now();
      while (completed < n) {
        while (issued < n && io->in_flight() < depth) {
          const IoRead rd{fd, rng() % n_blocks * block, block, buf + (issued % depth) * block, issued};
          io->submit(std::span<const IoRead>(&rd, 1));
          ++issued;
        }
        const size_t k = io->reap(done, 1);
        for (size_t i = 0; i < k; ++i)
          if (done[i].result < static_cast<int64_t>(block))
            fail(path, ": disk read test: a ", block, "-byte read returned ", done[i].result);
        completed += k;
      }
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, double(n * block) / std::max(sec, 1e-9));
    }
  } catch (...) {
    ::munmap(mem, block * depth);
    ::close(fd);
    throw;
  }
  ::munmap(mem, block * depth);
  ::close(fd);
  return best;
}

}  // namespace sluice
