// backends/cuda/cuda_backend: the host side of the CUDA backend — device selection, the VRAM
// weight cache, the KV-cache mirrors, pinned staging of activations, and one launcher call
// per op (kernels.h). Plain C++ against the CUDA runtime API; the kernels live in the .cu files.
//
// Every op: copy inputs host -> pinned -> device, launch, copy outputs back, synchronise. That
// round trip per op is the price of the host-pointer Backend interface (see cuda_backend.h);
// the weights, which dominate the bytes, are uploaded once. moe_ffn_token does one round trip
// for all of a token's experts (plan in moe_plan.h); with an expert budget its routed experts
// live in the VRAM expert tier, keyed by (layer, expert), and never enter the weight cache.
//
// Holds: everything a queued kernel points to must outlive the call. A call's weight-cache
// entries are marked held (evict_lru skips them) and its tier slots acquired, both until its
// result is downloaded; before that, no eviction can free them.
//
// Weight cache invariants:
//  * an entry is keyed by (host address, byte size) and remembers the type, a fingerprint of
//    up to 192 bytes of the host data (start, middle, end) and the host buffer's refill
//    generation (core/expert_cache.h). A lookup whose fingerprint or generation differs
//    re-uploads: a streamed expert buffer refilled with another expert (generation), or a
//    model mapping unmapped and another mapped at the same address (fingerprint) never
//    serves stale weights.
//  * bytes() <= weight_cache_bytes when a budget is set; otherwise cudaMalloc failures evict
//    least recently used weights until the allocation succeeds.
//
// KV mirror invariants: per host cache pointer, rows [0, rows) of the device copy equal the
// host rows as of the last call. A call with (pos0, n_kv) re-uploads rows [min(rows, pos0),
// n_kv): rows below pos0 are the past, which a session never rewrites without rewinding pos0.
// Row 0 and the last mirrored row are fingerprinted, so a different cache reusing the address
// is detected and uploaded whole.
#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <unordered_map>
#include <vector>

#include "backends/cuda/expert_tier.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/moe_plan.h"
#include "core/error.h"
#include "core/expert_cache.h"
#include "core/hash.h"
#include "kvcodec/kvcodec.h"
#include "quant/quant.h"

namespace sluice {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("cuda backend: ", what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}
#define SLUICE_CU(call) check((call), #call)

// A device allocation that grows (contents are not kept on growth).
struct DevBuf {
  void* p = nullptr;
  size_t cap = 0;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), cap(o.cap) { o.p = nullptr, o.cap = 0; }
  DevBuf& operator=(DevBuf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(cap, o.cap);
    return *this;
  }
  ~DevBuf() { reset(); }
  void reset() {
    if (p) cudaFree(p);
    p = nullptr;
    cap = 0;
  }
  void* reserve(size_t n) {
    if (n > cap) {
      const size_t want = std::max(n, cap * 2);
      reset();
      SLUICE_CU(cudaMalloc(&p, want));
      cap = want;
    }
    return p;
  }
};

// A pinned host allocation that grows.
struct PinBuf {
  void* p = nullptr;
  size_t cap = 0;
  PinBuf() = default;
  PinBuf(const PinBuf&) = delete;
  PinBuf& operator=(const PinBuf&) = delete;
  ~PinBuf() {
    if (p) cudaFreeHost(p);
  }
  void* reserve(size_t n) {
    if (n > cap) {
      if (p) cudaFreeHost(p);
      p = nullptr;
      const size_t want = std::max({n, cap * 2, size_t{1} << 16});
      SLUICE_CU(cudaMallocHost(&p, want));
      cap = want;
    }
    return p;
  }
};

// FNV-1a over [p, p+n), or over three 64-byte windows (start, middle, end) when n > 192.
uint64_t fingerprint(const void* data, size_t n) {
  const auto* b = static_cast<const uint8_t*>(data);
  const uint64_t h = kFnv1aOffset ^ n;
  if (n <= 192) return fnv1a64(b, n, h);
  return fnv1a64(b + n - 64, 64, fnv1a64(b + n / 2 - 32, 64, fnv1a64(b, 64, h)));
}

constexpr int kSlots = 6;  // staging slots: the most buffers one op moves


}  // namespace

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = str_cat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (n == 0 && why) *why = "the driver reports 0 devices";
  return n;
}

struct CudaBackend::Impl {
  CudaBackendOptions opt;
  cudaStream_t stream = nullptr;
  cudaDeviceProp prop{};
  DevBuf dev[kSlots];
  PinBuf pin[kSlots];

  struct Key {
    const void* p;
    size_t n;
    bool operator==(const Key& o) const { return p == o.p && n == o.n; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<const void*>()(k.p) ^ (k.n * 0x9e3779b97f4a7c15ull); }
  };
  struct Weight {
    DevBuf buf;
    size_t bytes = 0;         // device bytes
    DType type = DType::F32;  // as stored on the device (F32 for a host-decoded fallback)
    DType host_type = DType::F32;
    uint64_t fp = 0, gen = 0;
    bool held = false;  // in use by the moe_ffn_token call in progress: not evictable
    std::list<Key>::iterator lru;
  };
  std::unordered_map<Key, Weight, KeyHash> weights;
  std::list<Key> lru;  // front = least recently used
  CudaWeightCacheStats stats;

  struct Mirror {
    DevBuf buf;
    size_t row_bytes = 0;
    int64_t rows = 0;
    uint64_t fp_first = 0, fp_last = 0;
  };
  std::unordered_map<const void*, Mirror> mirrors;
  DevBuf kv_plain[2];  // kv_mirror = false: the visible rows, uploaded every call

  std::unique_ptr<CudaExpertTier> tier;  // routed experts, when opt.expert_cache_bytes > 0
  DevBuf overflow;                       // experts the tier had no room for, this call only
  uint64_t overflow_experts = 0;
  DevBuf transient;  // matmul of a routed expert with a budget: not cached
  uint64_t transient_uploads = 0, transient_bytes = 0;

  // SLUICE_CUDA_PROFILE=1: each op's wall time (its uploads, kernels, download and sync), in
  // stats_line(): where a step's time goes on this op-by-op path.
  struct OpStat {
    const char* name;
    uint64_t calls = 0;
    double seconds = 0;
  };
  bool profile = false;
  std::vector<OpStat> op_stats;
  struct OpTimer {
    Impl* m;
    const char* name;
    std::chrono::steady_clock::time_point t0;
    ~OpTimer() {
      if (!m) return;
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      auto it = std::find_if(m->op_stats.begin(), m->op_stats.end(), [&](const OpStat& o) { return o.name == name; });
      if (it == m->op_stats.end()) it = m->op_stats.insert(m->op_stats.end(), OpStat{name});
      ++it->calls;
      it->seconds += dt;
    }
  };
  OpTimer timed(const char* name) {
    return profile ? OpTimer{this, name, std::chrono::steady_clock::now()} : OpTimer{nullptr, name, {}};
  }

  ~Impl() {
    tier.reset();
    weights.clear();
    mirrors.clear();
    for (auto& d : dev) d.reset();
    for (auto& d : kv_plain) d.reset();
    if (stream) cudaStreamDestroy(stream);
  }

  void sync(const char* op) {
    check(cudaGetLastError(), op);
    check(cudaStreamSynchronize(stream), op);
  }

  // Host -> pinned slot -> device slot. Returns the device copy.
  template <class T = float>
  T* upload(int slot, const void* host, size_t bytes) {
    void* d = dev[slot].reserve(std::max<size_t>(bytes, 16));
    if (bytes) {
      void* h = pin[slot].reserve(bytes);
      std::memcpy(h, host, bytes);
      SLUICE_CU(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream));
    }
    return static_cast<T*>(d);
  }
  template <class T = float>
  T* scratch(int slot, size_t bytes) {
    return static_cast<T*>(dev[slot].reserve(std::max<size_t>(bytes, 16)));
  }
  // Device slot -> pinned -> host, after the stream has run everything before it.
  void download(int slot, const void* d, void* host, size_t bytes, const char* op) {
    if (!bytes) {
      sync(op);
      return;
    }
    void* h = pin[slot].reserve(bytes);
    check(cudaGetLastError(), op);
    SLUICE_CU(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, stream));
    sync(op);
    std::memcpy(host, h, bytes);
  }

  // Evicts the least recently used weight not held by the call in progress; false if none.
  bool evict_lru() {
    for (auto l = lru.begin(); l != lru.end(); ++l) {
      auto it = weights.find(*l);
      if (it->second.held) continue;
      stats.bytes -= it->second.bytes;
      lru.erase(l);
      weights.erase(it);
      ++stats.evictions;
      stats.entries = weights.size();
      return true;
    }
    return false;
  }

  // cudaMalloc for a weight, evicting least recently used weights while the budget or the
  // device says no.
  void alloc_weight(DevBuf& b, size_t bytes) {
    if (opt.weight_cache_bytes && bytes > opt.weight_cache_bytes)
      fail("cuda backend: a ", bytes, "-byte weight does not fit the ", opt.weight_cache_bytes, "-byte weight cache");
    while (opt.weight_cache_bytes && stats.bytes + bytes > opt.weight_cache_bytes)
      if (!evict_lru())
        fail("cuda backend: the ", opt.weight_cache_bytes, "-byte weight cache cannot hold one call's weights (",
             stats.bytes + bytes, " bytes)");
    for (;;) {
      void* p = nullptr;
      const cudaError_t e = cudaMalloc(&p, bytes);
      if (e == cudaSuccess) {
        b.p = p;
        b.cap = bytes;
        return;
      }
      cudaGetLastError();
      if (e != cudaErrorMemoryAllocation || !evict_lru())
        fail("cuda backend: cannot allocate ", bytes, " bytes of VRAM for a weight: ", cudaGetErrorString(e));
    }
  }

  // The device copy of w (uploaded on first use or when the host bytes changed).
  Weight& weight(const TensorView& w) {
    (void)w.row(0);  // refuses, by name, rows interleaved in place (TensorView::rows_interleaved)
    const size_t bytes = w.row_bytes() * static_cast<size_t>(w.n_rows());
    const Key key{w.data, bytes};
    const uint64_t gen = host_buffer_generation(w.data);
    const uint64_t fp = fingerprint(w.data, bytes);
    auto it = weights.find(key);
    if (it != weights.end()) {
      Weight& e = it->second;
      lru.splice(lru.end(), lru, e.lru);
      if (e.gen == gen && e.fp == fp && e.host_type == w.type) {
        ++stats.hits;
        return e;
      }
      stats.bytes -= e.bytes;
      lru.erase(e.lru);
      weights.erase(it);
    }
    Weight e;
    e.host_type = w.type;
    e.gen = gen;
    e.fp = fp;
    if (cuda::weight_type_supported(w.type)) {
      e.type = w.type;
      e.bytes = bytes;
      alloc_weight(e.buf, bytes);
      SLUICE_CU(cudaMemcpyAsync(e.buf.p, w.data, bytes, cudaMemcpyHostToDevice, stream));
    } else {
      // No device decoder for this type (none of quant/'s types today; kept so a new type
      // works before its kernel exists): decode on the host once, keep float32 in VRAM.
      // MLX affine codes (their scales and biases in planes of their own) come here too.
      if (!weight_decodable(w.type)) fail("cuda backend: no decoder for weight type ", dtype_name(w.type));
      std::vector<float> f(static_cast<size_t>(w.ne[0] * w.n_rows()));
      for (int64_t r = 0; r < w.n_rows(); ++r) dequantize_weight_row(w, r, f.data() + r * w.ne[0]);
      e.type = DType::F32;
      e.bytes = f.size() * sizeof(float);
      alloc_weight(e.buf, e.bytes);
      SLUICE_CU(cudaMemcpyAsync(e.buf.p, f.data(), e.bytes, cudaMemcpyHostToDevice, stream));
      SLUICE_CU(cudaStreamSynchronize(stream));  // f dies here
    }
    ++stats.uploads;
    stats.bytes_uploaded += bytes;
    stats.bytes += e.bytes;
    e.lru = lru.insert(lru.end(), key);
    auto [pos, ok] = weights.emplace(key, std::move(e));
    stats.entries = weights.size();
    return pos->second;
  }

  // The device rows [0, n_rows) of a KV cache at `host` (row_bytes apart).
  const uint8_t* kv_rows(int which, const void* host, size_t row_bytes, int64_t n_rows, int64_t pos0) {
    const auto* hb = static_cast<const uint8_t*>(host);
    const size_t need = row_bytes * static_cast<size_t>(n_rows);
    if (!opt.kv_mirror) {
      void* d = kv_plain[which].reserve(std::max<size_t>(need, 16));
      if (need) SLUICE_CU(cudaMemcpyAsync(d, host, need, cudaMemcpyHostToDevice, stream));
      return static_cast<const uint8_t*>(d);
    }
    Mirror& m = mirrors[host];
    const size_t fp_len = std::min<size_t>(row_bytes, 64);
    int64_t start = std::max<int64_t>(0, std::min(m.rows, pos0));
    if (m.row_bytes != row_bytes || (m.rows > 0 && fingerprint(hb, fp_len) != m.fp_first) ||
        (start > 0 && m.rows <= pos0 && fingerprint(hb + (m.rows - 1) * row_bytes, fp_len) != m.fp_last))
      start = 0;
    if (need > m.buf.cap) {
      DevBuf grown;
      grown.reserve(std::max(need, 2 * m.buf.cap));
      if (start > 0)
        SLUICE_CU(cudaMemcpyAsync(grown.p, m.buf.p, row_bytes * static_cast<size_t>(start), cudaMemcpyDeviceToDevice,
                                  stream));
      SLUICE_CU(cudaStreamSynchronize(stream));  // the old buffer is freed below
      m.buf = std::move(grown);
    }
    if (n_rows > start)
      SLUICE_CU(cudaMemcpyAsync(static_cast<uint8_t*>(m.buf.p) + row_bytes * static_cast<size_t>(start),
                                hb + row_bytes * static_cast<size_t>(start),
                                row_bytes * static_cast<size_t>(n_rows - start), cudaMemcpyHostToDevice, stream));
    m.row_bytes = row_bytes;
    m.rows = n_rows;
    if (n_rows > 0) {
      m.fp_first = fingerprint(hb, fp_len);
      m.fp_last = fingerprint(hb + (n_rows - 1) * row_bytes, fp_len);
    }
    return static_cast<const uint8_t*>(m.buf.p);
  }
};

// The host twin runs only the staged ops of resident_activations: one thread without it.
CudaBackend::CudaBackend(const CudaBackendOptions& opt)
    : StagingBackend(make_backend("cpu", opt.resident_activations ? opt.host_threads : 1)),
      impl_(std::make_unique<Impl>()) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0) fail("cuda backend: no CUDA device found (", why, ")");
  if (opt.device < 0 || opt.device >= n) fail("cuda backend: device ", opt.device, " does not exist (", n, " found)");
  impl_->opt = opt;
  SLUICE_CU(cudaSetDevice(opt.device));
  SLUICE_CU(cudaGetDeviceProperties(&impl_->prop, opt.device));
  SLUICE_CU(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  if (opt.expert_cache_bytes) impl_->tier = std::make_unique<CudaExpertTier>(opt.expert_cache_bytes);
  const char* prof = std::getenv("SLUICE_CUDA_PROFILE");
  impl_->profile = prof && *prof && std::string_view(prof) != "0";
}

CudaBackend::~CudaBackend() = default;

std::string CudaBackend::device_name() const { return impl_->prop.name; }
size_t CudaBackend::device_memory_bytes() const { return impl_->prop.totalGlobalMem; }
CudaWeightCacheStats CudaBackend::weight_stats() const { return impl_->stats; }

void CudaBackend::forget_cached() {
  SLUICE_CU(cudaStreamSynchronize(impl_->stream));
  impl_->weights.clear();
  impl_->lru.clear();
  impl_->mirrors.clear();
  impl_->stats.bytes = 0;
  impl_->stats.entries = 0;
  impl_->tier.reset();
  if (impl_->opt.expert_cache_bytes) impl_->tier = std::make_unique<CudaExpertTier>(impl_->opt.expert_cache_bytes);
}

CudaExpertStats CudaBackend::expert_stats() const {
  CudaExpertStats r;
  const Impl& m = *impl_;
  r.overflow = m.overflow_experts;
  r.transient_uploads = m.transient_uploads;
  r.transient_bytes = m.transient_bytes;
  if (!m.tier) return r;
  const ExpertCache& c = m.tier->cache();
  const CudaExpertTierStats t = m.tier->stats();
  r.budget = c.budget();
  r.used = c.used();
  r.peak = c.peak();
  r.resident = c.size();
  r.requests = t.requests;
  r.hits = t.hits;
  r.copies = t.copies;
  r.bytes_copied = t.bytes_copied;
  r.evictions = c.evictions();
  return r;
}

std::string CudaBackend::expert_stats_line() const {
  if (!impl_->tier) return {};
  const CudaExpertStats s = expert_stats();
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "gpu expert cache: %llu requests, %.1f%% hits, %llu copies (%.1f MB), %llu evictions, %llu overflow; "
                "%zu experts, %.1f of %.1f MB (peak %.1f MB); %llu uncached expert matmuls (%.1f MB)",
                static_cast<unsigned long long>(s.requests), s.requests ? 100.0 * s.hits / s.requests : 0.0,
                static_cast<unsigned long long>(s.copies), s.bytes_copied / 1e6,
                static_cast<unsigned long long>(s.evictions), static_cast<unsigned long long>(s.overflow), s.resident,
                s.used / 1e6, s.budget / 1e6, s.peak / 1e6, static_cast<unsigned long long>(s.transient_uploads),
                s.transient_bytes / 1e6);
  return buf;
}

std::string CudaBackend::stats_line() const {
  std::string line = expert_stats_line();
  const Impl& m = *impl_;
  if (!m.profile || m.op_stats.empty()) return line;
  std::vector<Impl::OpStat> ops = m.op_stats;
  std::sort(ops.begin(), ops.end(), [](const Impl::OpStat& a, const Impl::OpStat& b) { return a.seconds > b.seconds; });
  double total = 0;
  for (const auto& o : ops) total += o.seconds;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%scuda ops: %.3f s in all", line.empty() ? "" : "\n", total);
  line += buf;
  for (const auto& o : ops) {
    std::snprintf(buf, sizeof buf, "; %s %llu x %.1f us (%.1f%%)", o.name, static_cast<unsigned long long>(o.calls),
                  1e6 * o.seconds / static_cast<double>(o.calls), total > 0 ? 100 * o.seconds / total : 0.0);
    line += buf;
  }
  return line;
}

void CudaBackend::matmul_weights(const TensorView& w, const float* x, float* y, int64_t n_tok) {
  if (staged({x, y})) return StagingBackend::matmul_weights(w, x, y, n_tok);

  const auto op_timer = impl_->timed("matmul_weights");
  Impl& m = *impl_;
  const int64_t n_in = w.ne[0], n_out = w.n_rows();
  if (n_tok <= 0 || n_out <= 0) return;
  const float* dx = m.upload(0, x, static_cast<size_t>(n_tok * n_in) * sizeof(float));
  float* dy = m.scratch(1, static_cast<size_t>(n_tok * n_out) * sizeof(float));
  if (m.tier && cuda::weight_type_supported(w.type) && cuda::routed_expert_name(w.name)) {
    const size_t bytes = w.row_bytes() * static_cast<size_t>(n_out);
    void* dw = m.transient.reserve(bytes);  // the previous op has synchronised: free to reuse
    SLUICE_CU(cudaMemcpyAsync(dw, w.row(0), bytes, cudaMemcpyHostToDevice, m.stream));
    ++m.transient_uploads;
    m.transient_bytes += bytes;
    cuda::matmul(w.type, dw, w.row_bytes(), n_in, n_out, dx, dy, n_tok, m.stream);
  } else {
    const Impl::Weight& dw = m.weight(w);
    const size_t row_bytes = dw.type == w.type ? w.row_bytes() : static_cast<size_t>(n_in) * sizeof(float);
    cuda::matmul(dw.type, dw.buf.p, row_bytes, n_in, n_out, dx, dy, n_tok, m.stream);
  }
  m.download(1, dy, y, static_cast<size_t>(n_tok * n_out) * sizeof(float), "matmul");
}

void CudaBackend::get_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out) {
  if (staged({ids, out})) return StagingBackend::get_rows(table, ids, n, out);

  const auto op_timer = impl_->timed("get_rows");
  Impl& m = *impl_;
  const int64_t n_embd = table.ne[0], n_rows = table.n_rows();
  for (int64_t r = 0; r < n; ++r)
    if (ids[r] < 0 || ids[r] >= n_rows) fail("get_rows: id ", ids[r], " outside ", table.name, " (", n_rows, " rows)");
  if (n <= 0) return;
  const Impl::Weight& dw = m.weight(table);
  const size_t row_bytes = dw.type == table.type ? table.row_bytes() : static_cast<size_t>(n_embd) * sizeof(float);
  const int32_t* did = m.upload<int32_t>(0, ids, static_cast<size_t>(n) * sizeof(int32_t));
  float* dout = m.scratch(1, static_cast<size_t>(n * n_embd) * sizeof(float));
  cuda::get_rows(dw.type, dw.buf.p, row_bytes, n_embd, did, n, dout, m.stream);
  m.download(1, dout, out, static_cast<size_t>(n * n_embd) * sizeof(float), "get_rows");
}

void CudaBackend::rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) {
  if (staged({x, w, y})) return StagingBackend::rms_norm(x, w, y, n_rows, n, eps);

  const auto op_timer = impl_->timed("rms_norm");
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(n_rows * n) * sizeof(float);
  if (!bytes) return;
  float* dx = m.upload(0, x, bytes);
  // Norm weights are n floats: uploaded with the activations rather than cached (cheaper than
  // being wrong about a host vector that was reused).
  const float* dw = w ? m.upload(2, w, static_cast<size_t>(n) * sizeof(float)) : nullptr;
  cuda::rms_norm(dx, dw, dx, n_rows, n, eps, m.stream);
  m.download(1, dx, y, bytes, "rms_norm");
}

void CudaBackend::rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, const Rope& r) {
  if (staged({x, pos})) return StagingBackend::rope(x, pos, n_tok, n_head, head_dim, r);

  const auto op_timer = impl_->timed("rope");
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(n_tok * n_head * head_dim) * sizeof(float);
  if (!bytes) return;
  float* dx = m.upload(0, x, bytes);
  const int32_t* dp = m.upload<int32_t>(2, pos, static_cast<size_t>(n_tok) * sizeof(int32_t));
  cuda::rope(dx, dp, n_tok, n_head, head_dim, r, m.stream);
  m.download(1, dx, x, bytes, "rope");
}

void CudaBackend::softmax(float* x, int64_t n_rows, int64_t n) {
  if (staged({x})) return StagingBackend::softmax(x, n_rows, n);

  const auto op_timer = impl_->timed("softmax");
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(n_rows * n) * sizeof(float);
  if (!bytes) return;
  float* dx = m.upload(0, x, bytes);
  cuda::softmax(dx, n_rows, n, m.stream);
  m.download(1, dx, x, bytes, "softmax");
}

void CudaBackend::swiglu(const float* gate, const float* up, float* out, int64_t n, float limit) {
  if (staged({gate, up, out})) return StagingBackend::swiglu(gate, up, out, n, limit);

  const auto op_timer = impl_->timed("swiglu");
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (!bytes) return;
  float* dg = m.upload(0, gate, bytes);
  const float* du = m.upload(2, up, bytes);
  cuda::swiglu(dg, du, dg, n, limit, m.stream);
  m.download(1, dg, out, bytes, "swiglu");
}

void CudaBackend::gelu(const float* x, float* out, int64_t n) {
  if (staged({x, out})) return StagingBackend::gelu(x, out, n);

  const auto op_timer = impl_->timed("gelu");
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (!bytes) return;
  float* dx = m.upload(0, x, bytes);
  cuda::gelu(dx, dx, n, m.stream);
  m.download(1, dx, out, bytes, "gelu");
}

void CudaBackend::add(const float* a, const float* b, float* out, int64_t n) {
  if (staged({a, b, out})) return StagingBackend::add(a, b, out, n);

  const auto op_timer = impl_->timed("add");
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (!bytes) return;
  float* da = m.upload(0, a, bytes);
  const float* db = m.upload(2, b, bytes);
  cuda::add(da, db, da, n, m.stream);
  m.download(1, da, out, bytes, "add");
}

void CudaBackend::store_row(const float* src, DType t, void* dst, int64_t n) {
  if (staged({src, dst})) return StagingBackend::store_row(src, t, dst, n);

  const auto op_timer = impl_->timed("store_row");
  if (t == DType::F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (!cuda::store_type_supported(t)) {
    // The K-quants and the other legacy blocks are weight formats, not KV-cache formats:
    // quant/'s encoder on the host is the reference itself.
    if (!quant_supported(t)) fail("cuda backend: no encoder for dtype ", dtype_name(t));
    quantize_row(t, src, dst, n);
    return;
  }
  const int64_t bs = dtype_traits(t).block_size;
  if (n < 0 || n % bs != 0) fail("store_row: type ", dtype_name(t), ": n = ", n, " is not a multiple of ", bs);
  Impl& m = *impl_;
  const size_t out_bytes = dtype_row_bytes(t, n);
  if (!out_bytes) return;
  const float* ds = m.upload(0, src, static_cast<size_t>(n) * sizeof(float));
  void* dd = m.scratch<void>(1, out_bytes);
  cuda::store_row(ds, t, dd, n, m.stream);
  m.download(1, dd, dst, out_bytes, "store_row");
}

void CudaBackend::attention(const AttentionArgs& a) {
  if (staged({a.q, a.k, a.v, a.out})) return StagingBackend::attention(a);

  const auto op_timer = impl_->timed("attention");
  Impl& m = *impl_;
  const int64_t T = a.n_tok, H = a.n_head, Hkv = a.n_head_kv, Dk = a.head_dim_k, Dv = a.head_dim_v;
  if (Hkv <= 0 || H % Hkv != 0) fail("attention: n_head ", H, " is not a multiple of n_head_kv ", Hkv);
  for (DType t : {a.k_type, a.v_type}) {
    if (kv_type_is_tq(t) || a.k_tq || a.v_tq)
      fail("cuda backend: attention over ", kv_type_name(t),
           " caches (rotated codebook) is not supported on cuda; use --cache-type f16, bf16, q8_0 or q4_0");
    if (!cuda::kv_type_supported(t)) fail("cuda backend: attention over ", kv_type_name(t), " caches is not supported");
  }
  if (a.n_sink_k > 0 || a.n_sink_v > 0)
    fail("cuda backend: attention over f16 sink rows (--kv-sinks-k/-v) is not supported on cuda");
  if (Dv > cuda::kAttnMaxDv) fail("cuda backend: attention head_dim_v ", Dv, " exceeds ", cuda::kAttnMaxDv);
  if (Dk + 8 + 4 * Dv > 12 * 1024) fail("cuda backend: attention head_dim_k ", Dk, " is too large");
  const size_t out_bytes = static_cast<size_t>(T * H * Dv) * sizeof(float);
  if (!out_bytes) return;
  AttentionArgs d = a;
  d.q = m.upload(0, a.q, static_cast<size_t>(T * H * Dk) * sizeof(float));
  d.k = m.kv_rows(0, a.k, a.k_row_bytes, a.n_kv, a.pos0);
  d.v = m.kv_rows(1, a.v, a.v_row_bytes, a.n_kv, a.pos0);
  d.out = m.scratch(1, out_bytes);
  float* scratch = m.scratch(2, cuda::attention_scratch_floats(a) * sizeof(float));
  cuda::attention(d, scratch, m.stream);
  m.download(1, d.out, a.out, out_bytes, "attention");
}

void CudaBackend::moe_ffn_token(std::span<const FfnExpert> ex, const float* x, float* out, int64_t E) {
  if (staged({x, out})) return StagingBackend::moe_ffn_token(ex, x, out, E);

  const auto op_timer = impl_->timed("moe_ffn_token");
  Impl& m = *impl_;
  if (E <= 0) return;
  const int k = static_cast<int>(ex.size());
  if (k == 0) {
    std::fill(out, out + E, 0.0f);
    return;
  }
  // The fused plan runs one unclamped swiglu over every expert's hidden rows; clamped experts
  // (Ling 3's swiglu_clamp_exp) take the default path, whose swiglu op carries the limit.
  for (const FfnExpert& e : ex)
    if (e.limit > 0.0f) return Backend::moe_ffn_token(ex, x, out, E);
  // Shapes and launches first: nothing is uploaded for a call that is going to fail.
  std::vector<cuda::MoeMatrix> mats(static_cast<size_t>(3 * k));
  for (int j = 0; j < k; ++j) {
    const TensorView* v[3] = {ex[j].gate, ex[j].up, ex[j].down};
    for (int i = 0; i < 3; ++i) {
      if (!v[i]) fail("moe_ffn_token: expert ", j, " lacks a matrix");
      const DType t = cuda::weight_type_supported(v[i]->type) ? v[i]->type : DType::F32;
      mats[static_cast<size_t>(3 * j + i)] = {t, v[i]->ne[0], v[i]->n_rows()};
    }
  }
  const cuda::MoePlan plan = cuda::moe_plan(mats, E);

  // Device copies of every matrix: routed experts from the tier when there is one (copies on
  // its stream, which m.stream waits for), everything else from the weight cache.
  std::vector<const void*> dptr(mats.size());
  std::vector<size_t> drow(mats.size());
  // Holds on what the jobs point to (weight-cache entries, tier slots), given back when the
  // call ends, normally or by an exception: nothing this call uses is evicted under it.
  struct Holds {
    Impl& m;
    std::vector<Impl::Weight*> weights;
    std::vector<ExpertCache::Entry*> entries;
    ~Holds() {
      for (auto* w : weights) w->held = false;
      for (auto* e : entries) m.tier->release(e);
    }
  } holds{m, {}, {}};
  struct Overflow {
    int j;
    ExpertHostBytes src;
  };
  std::vector<Overflow> overflow;
  for (int j = 0; j < k; ++j) {
    const FfnExpert& e = ex[j];
    const TensorView* v[3] = {e.gate, e.up, e.down};
    const bool tiered = m.tier && e.layer >= 0 && e.expert >= 0 && cuda::weight_type_supported(e.gate->type) &&
                        cuda::weight_type_supported(e.up->type) && cuda::weight_type_supported(e.down->type);
    if (tiered) {
      ExpertHostBytes src;
      for (int i = 0; i < 3; ++i) {
        src.host[i] = v[i]->data;
        src.bytes[i] = v[i]->row_bytes() * static_cast<size_t>(v[i]->n_rows());
      }
      size_t off[3], total = 0;
      CudaExpertTier::slot_layout(src, off, &total);
      ExpertCache::Entry* en = m.tier->request(e.layer, e.expert, src, /*prefetch=*/false);
      if (!en) {
        overflow.push_back({j, src});
        continue;
      }
      if (en->bytes != m.tier->cache().slot_size(total))
        fail("cuda backend: expert ", e.expert, " of layer ", e.layer, " changed size (", total,
             " bytes now); call forget_cached() before switching models");
      m.tier->acquire(en, m.stream);
      holds.entries.push_back(en);
      for (int i = 0; i < 3; ++i) {
        dptr[3 * j + i] = en->buf + off[i];
        drow[3 * j + i] = v[i]->row_bytes();
      }
    } else {
      for (int i = 0; i < 3; ++i) {
        Impl::Weight& w = m.weight(*v[i]);
        w.held = true;
        holds.weights.push_back(&w);
        dptr[3 * j + i] = w.buf.p;
        drow[3 * j + i] = w.type == v[i]->type ? v[i]->row_bytes() : static_cast<size_t>(v[i]->ne[0]) * sizeof(float);
      }
    }
  }
  if (!overflow.empty()) {
    // Every slot the tier could give is held by this call (the budget is below k experts):
    // these experts are copied to per-call scratch on the compute stream, counted, not cached.
    size_t total = 0;
    std::vector<size_t> base;
    for (const Overflow& o : overflow) {
      size_t off[3], t = 0;
      CudaExpertTier::slot_layout(o.src, off, &t);
      base.push_back(total);
      total += t;
    }
    auto* buf = static_cast<uint8_t*>(m.overflow.reserve(total));
    for (size_t q = 0; q < overflow.size(); ++q) {
      const Overflow& o = overflow[q];
      size_t off[3], t = 0;
      CudaExpertTier::slot_layout(o.src, off, &t);
      const TensorView* v[3] = {ex[o.j].gate, ex[o.j].up, ex[o.j].down};
      for (int i = 0; i < 3; ++i) {
        uint8_t* d = buf + base[q] + off[i];
        SLUICE_CU(cudaMemcpyAsync(d, o.src.host[i], o.src.bytes[i], cudaMemcpyHostToDevice, m.stream));
        dptr[3 * o.j + i] = d;
        drow[3 * o.j + i] = v[i]->row_bytes();
      }
    }
    m.overflow_experts += overflow.size();
  }

  // Scratch: slot 0 = [x | job array] (one upload), 1 = out, 2 = gate then hidden, 3 = up,
  // 4 = per-expert down outputs (mixed down types only). Reserved before any pointer is taken.
  const size_t x_bytes = static_cast<size_t>(cuda::moe_round64(E)) * sizeof(float);
  const size_t job_bytes = plan.job_matrix.size() * sizeof(cuda::MatvecJob);
  auto* d0 = m.scratch<uint8_t>(0, x_bytes + job_bytes);
  float* dout = m.scratch(1, static_cast<size_t>(E) * sizeof(float));
  float* dg = m.scratch(2, static_cast<size_t>(plan.h_floats) * sizeof(float));
  float* du = m.scratch(3, static_cast<size_t>(plan.h_floats) * sizeof(float));
  float* dy = plan.y_floats ? m.scratch(4, static_cast<size_t>(plan.y_floats) * sizeof(float)) : nullptr;
  const float* dx = reinterpret_cast<const float*>(d0);
  auto* djobs = reinterpret_cast<const cuda::MatvecJob*>(d0 + x_bytes);

  auto* h0 = static_cast<uint8_t*>(m.pin[0].reserve(x_bytes + job_bytes));
  std::memcpy(h0, x, static_cast<size_t>(E) * sizeof(float));
  auto* hjobs = reinterpret_cast<cuda::MatvecJob*>(h0 + x_bytes);
  for (size_t i = 0; i < plan.job_matrix.size(); ++i) {
    const int mi = plan.job_matrix[i], j = mi / 3, which = mi % 3;
    const cuda::MoeMatrix& mm = mats[static_cast<size_t>(mi)];
    const int64_t h = plan.h_off[static_cast<size_t>(j)];
    cuda::MatvecJob jb;
    jb.w = dptr[static_cast<size_t>(mi)];
    jb.row_bytes = drow[static_cast<size_t>(mi)];
    jb.n_in = mm.n_in;
    jb.n_out = mm.n_out;
    jb.x = which == 2 ? dg + h : dx;
    jb.y = which == 0 ? dg + h : which == 1 ? du + h : dy ? dy + j * plan.y_stride : nullptr;
    jb.weight = ex[j].weight;
    hjobs[i] = jb;
  }
  SLUICE_CU(cudaMemcpyAsync(d0, h0, x_bytes + job_bytes, cudaMemcpyHostToDevice, m.stream));

  bool hidden_ready = false;
  for (const cuda::MoeLaunch& l : plan.launches) {
    if (l.kind != cuda::MoeLaunchKind::gate_up && !hidden_ready) {
      // silu(gate) ⊙ up for every expert at once (padding between experts is computed too
      // and never read).
      cuda::swiglu(dg, du, dg, plan.h_floats, 0.0f, m.stream);
      hidden_ready = true;
    }
    switch (l.kind) {
      case cuda::MoeLaunchKind::gate_up:
      case cuda::MoeLaunchKind::down_part:
        cuda::matvec_batch(l.type, djobs + l.first, l.count, l.max_out, m.stream);
        break;
      case cuda::MoeLaunchKind::down_fused: cuda::moe_down(l.type, djobs + l.first, l.count, E, dout, m.stream); break;
      case cuda::MoeLaunchKind::combine: cuda::moe_combine(djobs + l.first, l.count, E, dout, m.stream); break;
    }
  }
  m.download(1, dout, out, static_cast<size_t>(E) * sizeof(float), "moe_ffn_token");
}

int32_t CudaBackend::argmax(const float* logits, int64_t n) {
  const auto op_timer = impl_->timed("argmax");
  Impl& m = *impl_;
  if (n <= 0) return 0;
  const float* dx = m.upload(0, logits, static_cast<size_t>(n) * sizeof(float));
  int32_t* di = m.scratch<int32_t>(1, sizeof(int32_t));
  cuda::argmax(dx, n, di, m.stream);
  int32_t r = 0;
  m.download(1, di, &r, sizeof r, "argmax");
  return r;
}

double CudaBackend::copy_bandwidth(size_t bytes, int reps) {
  Impl& m = *impl_;
  bytes = std::max<size_t>(bytes / 16 * 16, 16);
  DevBuf src, dst;
  src.reserve(bytes);
  dst.reserve(bytes);
  SLUICE_CU(cudaMemsetAsync(src.p, 0, bytes, m.stream));
  cudaEvent_t t0, t1;
  SLUICE_CU(cudaEventCreate(&t0));
  SLUICE_CU(cudaEventCreate(&t1));
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  cuda::copy_f32(static_cast<float*>(src.p), static_cast<float*>(dst.p), n, m.stream);  // warm-up
  double best = 0;
  for (int r = 0; r < std::max(reps, 1); ++r) {
    SLUICE_CU(cudaEventRecord(t0, m.stream));
    cuda::copy_f32(static_cast<float*>(src.p), static_cast<float*>(dst.p), n, m.stream);
    SLUICE_CU(cudaEventRecord(t1, m.stream));
    m.sync("copy_bandwidth");
    float ms = 0;
    SLUICE_CU(cudaEventElapsedTime(&ms, t0, t1));
    if (ms > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / (ms * 1e-3));
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  return best;
}

// ---- resident activations (backends/staging.h) ----

std::shared_ptr<void> CudaBackend::alloc_bytes(size_t n_bytes) {
  return impl_->opt.resident_activations ? StagingBackend::alloc_bytes(n_bytes) : Backend::alloc_bytes(n_bytes);
}

bool CudaBackend::staged(std::initializer_list<const void*> operands) const {
  if (!impl_->opt.resident_activations) return false;
  for (const void* p : operands)
    if (p && on_device(p)) return true;
  return false;
}

void* CudaBackend::dev_alloc(size_t n_bytes) {
  void* p = nullptr;
  SLUICE_CU(cudaMalloc(&p, n_bytes));
  SLUICE_CU(cudaMemsetAsync(p, 0, n_bytes, impl_->stream));
  SLUICE_CU(cudaStreamSynchronize(impl_->stream));
  return p;
}

void CudaBackend::dev_free(void* p, size_t) {
  // From a buffer's deleter: no throwing; the stream may still read it.
  cudaStreamSynchronize(impl_->stream);
  cudaFree(p);
}

void CudaBackend::dev_to_host(void* host_dst, const void* dev_src, size_t n_bytes) {
  SLUICE_CU(cudaStreamSynchronize(impl_->stream));
  SLUICE_CU(cudaMemcpy(host_dst, dev_src, n_bytes, cudaMemcpyDeviceToHost));
}

void CudaBackend::host_to_dev(void* dev_dst, const void* host_src, size_t n_bytes) {
  SLUICE_CU(cudaStreamSynchronize(impl_->stream));
  SLUICE_CU(cudaMemcpy(dev_dst, host_src, n_bytes, cudaMemcpyHostToDevice));
}

// The ops without a kernel: Backend's defaults on host operands, exactly as before resident
// activations existed; the staged twin with device ones.
void CudaBackend::kv_rotate(const KvRotation& r, float* x, int64_t n, bool inverse) {
  if (staged({x})) return StagingBackend::kv_rotate(r, x, n, inverse);
  Backend::kv_rotate(r, x, n, inverse);
}
void CudaBackend::moe_ffn_batch(std::span<const FfnExpertRows> experts, const float* x, float* out, int64_t n_tok,
                                int64_t n_embd) {
  if (staged({x, out})) return StagingBackend::moe_ffn_batch(experts, x, out, n_tok, n_embd);
  Backend::moe_ffn_batch(experts, x, out, n_tok, n_embd);
}
void CudaBackend::copy_2d(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t cols) {
  if (staged({src, dst})) return StagingBackend::copy_2d(src, ss, dst, ds, rows, cols);
  Backend::copy_2d(src, ss, dst, ds, rows, cols);
}
void CudaBackend::gather_rows(const float* src, int64_t width, const int64_t* idx, int64_t n, float* dst) {
  if (staged({src, idx, dst})) return StagingBackend::gather_rows(src, width, idx, n, dst);
  Backend::gather_rows(src, width, idx, n, dst);
}
void CudaBackend::add_rows_weighted(const float* y, int64_t width, const int64_t* idx, const float* w, int64_t n,
                                    float* out) {
  if (staged({y, idx, w, out})) return StagingBackend::add_rows_weighted(y, width, idx, w, n, out);
  Backend::add_rows_weighted(y, width, idx, w, n, out);
}
void CudaBackend::fill(float* x, int64_t n, float v) {
  if (staged({x})) return StagingBackend::fill(x, n, v);
  Backend::fill(x, n, v);
}
void CudaBackend::moe_route(const MoeOptions& opt, const float* logits, float* probs, int64_t n_tok, const float* bias,
                            int32_t* experts, float* weights) {
  if (staged({logits, probs, bias, experts, weights}))
    return StagingBackend::moe_route(opt, logits, probs, n_tok, bias, experts, weights);
  Backend::moe_route(opt, logits, probs, n_tok, bias, experts, weights);
}
void CudaBackend::conv1d_causal(const float* x, const float* w, float* state, float* out, int64_t n_tok, int64_t n_ch,
                                int64_t kernel, bool silu) {
  if (staged({x, w, state, out})) return StagingBackend::conv1d_causal(x, w, state, out, n_tok, n_ch, kernel, silu);
  Backend::conv1d_causal(x, w, state, out, n_tok, n_ch, kernel, silu);
}
void CudaBackend::l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps) {
  if (staged({x, y})) return StagingBackend::l2_norm(x, y, n_rows, n, eps);
  Backend::l2_norm(x, y, n_rows, n, eps);
}
void CudaBackend::delta_rule(const DeltaRuleArgs& a) {
  if (staged({a.q, a.k, a.v, a.g, a.beta, a.state, a.out})) return StagingBackend::delta_rule(a);
  Backend::delta_rule(a);
}
void CudaBackend::delta_gates(const float* alpha, const float* beta_logit, const float* bias, const float* a, float* g,
                              float* beta, int64_t n_tok, int64_t n) {
  if (staged({alpha, beta_logit, bias, a, g, beta}))
    return StagingBackend::delta_gates(alpha, beta_logit, bias, a, g, beta, n_tok, n);
  Backend::delta_gates(alpha, beta_logit, bias, a, g, beta, n_tok, n);
}
void CudaBackend::kda_safe_gate(const float* x, const float* bias, const float* a, float lower_bound, float* g,
                                int64_t n_tok, int64_t n) {
  if (staged({x, bias, a, g})) return StagingBackend::kda_safe_gate(x, bias, a, lower_bound, g, n_tok, n);
  Backend::kda_safe_gate(x, bias, a, lower_bound, g, n_tok, n);
}
void CudaBackend::sigmoid_mul(const float* x, const float* gate, float* out, int64_t n) {
  if (staged({x, gate, out})) return StagingBackend::sigmoid_mul(x, gate, out, n);
  Backend::sigmoid_mul(x, gate, out, n);
}
void CudaBackend::sigmoid(const float* x, float* out, int64_t n) {
  if (staged({x, out})) return StagingBackend::sigmoid(x, out, n);
  Backend::sigmoid(x, out, n);
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& opt) { return std::make_unique<CudaBackend>(opt); }

}  // namespace sluice
