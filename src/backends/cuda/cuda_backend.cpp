// backends/cuda/cuda_backend: the host side of the CUDA backend — device selection, the VRAM
// weight cache, the KV-cache mirrors, pinned staging of activations, and one launcher call
// per op (kernels.h). Plain C++ against the CUDA runtime API; the kernels live in the .cu files.
//
// Every op: copy inputs host -> pinned -> device, launch, copy outputs back, synchronise. That
// round trip per op is the price of the host-pointer Backend interface (see cuda_backend.h);
// the weights, which dominate the bytes, are uploaded once.
//
// Weight cache invariants:
//  * an entry is keyed by (host address, byte size) and remembers the type, a fingerprint of
//    up to 192 bytes of the host data (start, middle, end) and the host buffer's refill
//    generation (runtime/expert_cache.h). A lookup whose fingerprint or generation differs
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
#include <cstring>
#include <list>
#include <unordered_map>
#include <vector>

#include "backends/cuda/kernels.h"
#include "core/error.h"
#include "kvcodec/kvcodec.h"
#include "quant/quant.h"
#include "runtime/expert_cache.h"

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
  uint64_t h = 1469598103934665603ull ^ n;
  auto mix = [&](size_t off, size_t len) {
    for (size_t i = 0; i < len; ++i) h = (h ^ b[off + i]) * 1099511628211ull;
  };
  if (n <= 192) {
    mix(0, n);
  } else {
    mix(0, 64);
    mix(n / 2 - 32, 64);
    mix(n - 64, 64);
  }
  return h;
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
    size_t bytes = 0;        // device bytes
    DType type = DType::F32;  // as stored on the device (F32 for a host-decoded fallback)
    DType host_type = DType::F32;
    uint64_t fp = 0, gen = 0;
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

  ~Impl() {
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

  void evict_lru() {
    const Key k = lru.front();
    lru.pop_front();
    auto it = weights.find(k);
    stats.bytes -= it->second.bytes;
    weights.erase(it);
    ++stats.evictions;
    stats.entries = weights.size();
  }

  // cudaMalloc for a weight, evicting least recently used weights while the budget or the
  // device says no.
  void alloc_weight(DevBuf& b, size_t bytes) {
    if (opt.weight_cache_bytes && bytes > opt.weight_cache_bytes)
      fail("cuda backend: a ", bytes, "-byte weight does not fit the ", opt.weight_cache_bytes, "-byte weight cache");
    while (opt.weight_cache_bytes && stats.bytes + bytes > opt.weight_cache_bytes && !lru.empty()) evict_lru();
    for (;;) {
      void* p = nullptr;
      const cudaError_t e = cudaMalloc(&p, bytes);
      if (e == cudaSuccess) {
        b.p = p;
        b.cap = bytes;
        return;
      }
      cudaGetLastError();
      if (e != cudaErrorMemoryAllocation || lru.empty())
        fail("cuda backend: cannot allocate ", bytes, " bytes of VRAM for a weight: ", cudaGetErrorString(e));
      evict_lru();
    }
  }

  // The device copy of w (uploaded on first use or when the host bytes changed).
  const Weight& weight(const TensorView& w) {
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
      if (!quant_supported(w.type)) fail("cuda backend: no decoder for weight type ", dtype_name(w.type));
      std::vector<float> f(static_cast<size_t>(w.ne[0] * w.n_rows()));
      for (int64_t r = 0; r < w.n_rows(); ++r) dequantize_row(w.type, w.row(r), f.data() + r * w.ne[0], w.ne[0]);
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

CudaBackend::CudaBackend(const CudaBackendOptions& opt) : impl_(std::make_unique<Impl>()) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0) fail("cuda backend: no CUDA device found (", why, ")");
  if (opt.device < 0 || opt.device >= n) fail("cuda backend: device ", opt.device, " does not exist (", n, " found)");
  impl_->opt = opt;
  SLUICE_CU(cudaSetDevice(opt.device));
  SLUICE_CU(cudaGetDeviceProperties(&impl_->prop, opt.device));
  SLUICE_CU(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
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
}

void CudaBackend::matmul(const TensorView& w, const float* x, float* y, int64_t n_tok) {
  Impl& m = *impl_;
  const int64_t n_in = w.ne[0], n_out = w.n_rows();
  if (n_tok <= 0 || n_out <= 0) return;
  const Impl::Weight& dw = m.weight(w);
  const size_t row_bytes = dw.type == w.type ? w.row_bytes() : static_cast<size_t>(n_in) * sizeof(float);
  const float* dx = m.upload(0, x, static_cast<size_t>(n_tok * n_in) * sizeof(float));
  float* dy = m.scratch(1, static_cast<size_t>(n_tok * n_out) * sizeof(float));
  cuda::matmul(dw.type, dw.buf.p, row_bytes, n_in, n_out, dx, dy, n_tok, m.stream);
  m.download(1, dy, y, static_cast<size_t>(n_tok * n_out) * sizeof(float), "matmul");
}

void CudaBackend::get_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out) {
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

void CudaBackend::rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
                       float base, RopeMode mode) {
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(n_tok * n_head * head_dim) * sizeof(float);
  if (!bytes) return;
  float* dx = m.upload(0, x, bytes);
  const int32_t* dp = m.upload<int32_t>(2, pos, static_cast<size_t>(n_tok) * sizeof(int32_t));
  cuda::rope(dx, dp, n_tok, n_head, head_dim, n_rot, base, mode, m.stream);
  m.download(1, dx, x, bytes, "rope");
}

void CudaBackend::softmax(float* x, int64_t n_rows, int64_t n) {
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(n_rows * n) * sizeof(float);
  if (!bytes) return;
  float* dx = m.upload(0, x, bytes);
  cuda::softmax(dx, n_rows, n, m.stream);
  m.download(1, dx, x, bytes, "softmax");
}

void CudaBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (!bytes) return;
  float* dg = m.upload(0, gate, bytes);
  const float* du = m.upload(2, up, bytes);
  cuda::swiglu(dg, du, dg, n, m.stream);
  m.download(1, dg, out, bytes, "swiglu");
}

void CudaBackend::gelu(const float* x, float* out, int64_t n) {
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (!bytes) return;
  float* dx = m.upload(0, x, bytes);
  cuda::gelu(dx, dx, n, m.stream);
  m.download(1, dx, out, bytes, "gelu");
}

void CudaBackend::add(const float* a, const float* b, float* out, int64_t n) {
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (!bytes) return;
  float* da = m.upload(0, a, bytes);
  const float* db = m.upload(2, b, bytes);
  cuda::add(da, db, da, n, m.stream);
  m.download(1, da, out, bytes, "add");
}

void CudaBackend::store_row(const float* src, DType t, void* dst, int64_t n) {
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
  Impl& m = *impl_;
  const int64_t T = a.n_tok, H = a.n_head, Hkv = a.n_head_kv, Dk = a.head_dim_k, Dv = a.head_dim_v;
  if (Hkv <= 0 || H % Hkv != 0) fail("attention: n_head ", H, " is not a multiple of n_head_kv ", Hkv);
  for (DType t : {a.k_type, a.v_type}) {
    if (kv_type_is_tq(t) || a.k_tq || a.v_tq)
      fail("cuda backend: attention over ", kv_type_name(t),
           " caches (rotated codebook) is not supported on cuda; use --cache-type f16, bf16, q8_0 or q4_0");
    if (!cuda::kv_type_supported(t)) fail("cuda backend: attention over ", kv_type_name(t), " caches is not supported");
  }
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

int32_t CudaBackend::argmax(const float* logits, int64_t n) {
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

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& opt) { return std::make_unique<CudaBackend>(opt); }

}  // namespace sluice
