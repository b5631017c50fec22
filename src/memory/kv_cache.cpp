// memory/kv_cache: the codec policy, allocation of the per-layer K/V buffers, and the store
// path (block and plain types through the backend's store_row, tq through its codec).
#include "memory/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/fp16.h"

namespace sluice {
namespace {

bool is_pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

std::string str(DType t) { return std::string(kv_type_name(t)); }

// The type one side (K or V) can use for heads of D elements, n_head_kv per row.
DType fit_type(DType t, const char* side, int64_t n_head_kv, int64_t D, std::vector<std::string>* notes) {
  if (kv_type_k_only(t) && side[0] == 'V') {
    notes->push_back(str_cat("kv cache: ", str(t), " is a K type (its channel order is fitted to the queries); V uses ",
                             str(kKvTq3g), " (the same bits)"));
    t = kKvTq3g;
  }
  const int64_t min_d = std::max<int64_t>(8, kv_type_tq_group(t) * (kv_type_k_only(t) ? 2 : 1));
  if (kv_type_is_tq(t) && (!is_pow2(D) || D < min_d)) {
    notes->push_back(str_cat("kv cache: ", side, " ", str(t), " needs a head dim that is a power of two >= ", min_d,
                             " (got ", D, "); using q8_0"));
    t = DType::Q8_0;
  }
  if (!kv_type_is_tq(t) && (n_head_kv * D) % kv_type_block_size(t) != 0) {
    notes->push_back(str_cat("kv cache: ", side, " ", str(t), " needs a row of a multiple of ", kv_type_block_size(t),
                             " elements (got ", n_head_kv * D, "); using f16"));
    t = DType::F16;
  }
  return t;
}

// The rotation of one side of type t with heads of D elements (the header's policy).
KvRotation rotation_for(const KvCacheOptions& opt, DType t, int64_t D, uint64_t seed) {
  using R = KvCacheOptions::Rotation;
  const bool wanted = opt.rotation == R::all         ? !kv_type_is_tq(t)
                      : opt.rotation == R::quantized ? (t == DType::Q8_0 || t == DType::Q4_0)
                                                     : false;
  if (!wanted || opt.rotation_block <= 0 || D <= 0) return {};
  int64_t b = opt.rotation_block;  // the largest power of two <= rotation_block dividing D
  while (b > 1 && D % b != 0) b /= 2;
  if (D % b != 0 || b < std::min<int64_t>(16, opt.rotation_block)) return {};
  return kv_rotation_make(b, opt.rotation_signs ? seed : 0);
}

}  // namespace

KvCacheOptions kv_cache_resolve(const KvCacheOptions& opt, const KvGeometry& g, std::vector<std::string>* notes) {
  for (DType t : {opt.type_k, opt.type_v})
    if (!kv_type_supported(t))
      fail("kv cache: type id ", static_cast<uint32_t>(t), " is not a KV cache type (", kv_type_names(), ")");
  KvCacheOptions o = opt;
  const int64_t gqa = g.n_head_kv > 0 ? g.n_head / g.n_head_kv : 1;
  if (o.auto_asymmetric && gqa >= 6 && kv_type_precision_bits(o.type_k) < 8) {
    notes->push_back(str_cat("kv cache: GQA ratio ", gqa, " >= 6: K raised from ", str(o.type_k),
                             " to q8_0 (softmax amplifies K errors; --no-auto-asymmetric keeps it)"));
    o.type_k = DType::Q8_0;
  }
  o.type_k = fit_type(o.type_k, "K", g.n_head_kv, g.head_dim_k, notes);
  o.type_v = fit_type(o.type_v, "V", g.n_head_kv, g.head_dim_v, notes);
  return o;
}

KvCache::KvCache(const KvGeometry& g, const KvCacheOptions& opt) {
  std::vector<std::string> notes;
  const KvCacheOptions o = kv_cache_resolve(opt, g, &notes);
  for (const auto& n : notes) std::fprintf(stderr, "%s\n", n.c_str());
  init(g, o);
}

KvCache::KvCache(int64_t n_layer, int64_t k_width, int64_t v_width, const KvCacheOptions& opt) {
  const KvGeometry g{n_layer, 1, 1, k_width, v_width};
  for (DType t : {opt.type_k, opt.type_v})
    if (!kv_type_supported(t))
      fail("kv cache: type id ", static_cast<uint32_t>(t), " is not a KV cache type (", kv_type_names(), ")");
  for (auto [t, w] : {std::pair{opt.type_k, k_width}, std::pair{opt.type_v, v_width}})
    if (!kv_type_is_tq(t) && w % kv_type_block_size(t) != 0)
      fail("kv cache: type ", kv_type_name(t), " needs a row width that is a multiple of ", kv_type_block_size(t),
           ", got ", w);
  init(g, opt);
}

void KvCache::init(const KvGeometry& g, const KvCacheOptions& opt) {
  if (opt.n_ctx <= 0) fail("kv cache: context size must be positive, got ", opt.n_ctx);
  n_ctx_ = opt.n_ctx;
  geo_ = g;
  type_k_ = opt.type_k;
  type_v_ = opt.type_v;
  if (kv_type_is_tq(type_k_))
    k_tq_ = std::make_unique<TqCodec>(TqCodec::for_type(type_k_, g.n_head_kv, g.head_dim_k, opt.seed));
  if (kv_type_is_tq(type_v_))
    v_tq_ = std::make_unique<TqCodec>(TqCodec::for_type(type_v_, g.n_head_kv, g.head_dim_v, opt.seed + 1));
  k_rot_ = rotation_for(opt, type_k_, g.head_dim_k, opt.seed + 2);
  v_rot_ = rotation_for(opt, type_v_, g.head_dim_v, opt.seed + 3);
  using M = KvCacheOptions::KMean;
  k_order_on_ = kv_type_k_only(type_k_);  // the split types code nothing well without it
  k_mean_on_ = k_order_on_ || opt.k_mean == M::all || (opt.k_mean == M::tq && kv_type_is_tq(type_k_));
  mean_window_ = std::max<int64_t>(2, opt.mean_window);
  k_fit_.assign(static_cast<size_t>(g.n_layer), {});
  auto sinks = [&](DType t, int64_t n) {
    const bool plain = t == DType::F32 || t == DType::F16 || t == DType::BF16;
    return plain ? int64_t{0} : std::clamp<int64_t>(n, 0, n_ctx_);
  };
  n_sink_k_ = sinks(type_k_, opt.n_sink_k);
  n_sink_v_ = sinks(type_v_, opt.n_sink_v);
  k_sink_.assign(static_cast<size_t>(g.n_layer), std::vector<uint16_t>(n_sink_k_ * g.n_head_kv * g.head_dim_k));
  v_sink_.assign(static_cast<size_t>(g.n_layer), std::vector<uint16_t>(n_sink_v_ * g.n_head_kv * g.head_dim_v));
  k_row_bytes_ = kv_type_row_bytes(type_k_, g.n_head_kv, g.head_dim_k);
  v_row_bytes_ = kv_type_row_bytes(type_v_, g.n_head_kv, g.head_dim_v);
  for (int64_t l = 0; l < g.n_layer; ++l) {
    k_.emplace_back(k_row_bytes_ * static_cast<size_t>(n_ctx_));
    v_.emplace_back(v_row_bytes_ * static_cast<size_t>(n_ctx_));
  }
}

int64_t KvCache::rows_for(int64_t n_pos) const {
  if (n_pos <= capacity_) return capacity_;
  return std::min(n_ctx_, (n_pos + kRowStep - 1) / kRowStep * kRowStep);
}

size_t KvCache::bytes_for(int64_t n_pos) const {
  return (k_row_bytes_ + v_row_bytes_) * static_cast<size_t>(rows_for(n_pos)) * k_.size() + sink_bytes();
}

size_t KvCache::sink_bytes() const {
  const int64_t h = n_sink_k_ * geo_.n_head_kv * geo_.head_dim_k + n_sink_v_ * geo_.n_head_kv * geo_.head_dim_v;
  return static_cast<size_t>(h) * sizeof(uint16_t) * k_.size();
}

void KvCache::reserve(int64_t n_pos) {
  if (n_pos > n_ctx_) fail("kv cache: ", n_pos, " positions do not fit in a context of ", n_ctx_, " (use --ctx)");
  capacity_ = rows_for(n_pos);
}

void KvCache::copy_prefix(const KvCache& src, int64_t n_pos) {
  if (src.k_.size() != k_.size() || src.k_row_bytes_ != k_row_bytes_ || src.v_row_bytes_ != v_row_bytes_ ||
      src.type_k_ != type_k_ || src.type_v_ != type_v_ || !(src.k_rot_ == k_rot_) || !(src.v_rot_ == v_rot_))
    fail("kv cache: copy between caches of different geometry or types");
  if (n_pos > src.capacity_) fail("kv cache: copy of ", n_pos, " rows from a cache holding ", src.capacity_);
  reserve(n_pos);
  k_fit_ = src.k_fit_;    // the prefix's rows were encoded against it
  k_sink_ = src.k_sink_;  // rows past n_pos are written again before attention sees them
  v_sink_ = src.v_sink_;
  for (size_t l = 0; l < k_.size(); ++l) {
    std::copy_n(src.k_[l].data(), k_row_bytes_ * static_cast<size_t>(n_pos), k_[l].data());
    std::copy_n(src.v_[l].data(), v_row_bytes_ * static_cast<size_t>(n_pos), v_[l].data());
  }
}

void KvCache::copy_out(int64_t n_pos, std::vector<uint8_t>& out, std::vector<KvKFit>& k_fit) const {
  if (n_pos < 0 || n_pos > capacity_) fail("kv cache: copy out of ", n_pos, " rows from a cache holding ", capacity_);
  const size_t kb = k_row_bytes_ * static_cast<size_t>(n_pos), vb = v_row_bytes_ * static_cast<size_t>(n_pos);
  out.reserve(out.size() + (kb + vb) * k_.size());
  for (size_t l = 0; l < k_.size(); ++l) {
    out.insert(out.end(), k_[l].data(), k_[l].data() + kb);
    out.insert(out.end(), v_[l].data(), v_[l].data() + vb);
    for (const auto* sk : {&k_sink_[l], &v_sink_[l]}) {
      const auto* b = reinterpret_cast<const uint8_t*>(sk->data());
      out.insert(out.end(), b, b + sk->size() * sizeof(uint16_t));
    }
  }
  k_fit = k_fit_;
}

void KvCache::copy_in(const uint8_t* data, int64_t n_stored, int64_t n_pos, const std::vector<KvKFit>& k_fit) {
  if (n_pos < 0 || n_pos > n_stored || n_pos > n_ctx_)
    fail("kv cache: copy in of ", n_pos, " of ", n_stored, " rows into a context of ", n_ctx_);
  if (k_fit.size() != k_fit_.size())
    fail("kv cache: copy in of K fits for ", k_fit.size(), " layers, not ", k_fit_.size());
  reserve(n_pos);
  k_fit_ = k_fit;
  const auto stored = static_cast<size_t>(n_stored), n = static_cast<size_t>(n_pos);
  for (size_t l = 0; l < k_.size(); ++l) {
    std::copy_n(data, k_row_bytes_ * n, k_[l].data());
    data += k_row_bytes_ * stored;
    std::copy_n(data, v_row_bytes_ * n, v_[l].data());
    data += v_row_bytes_ * stored;
    for (auto* sk : {&k_sink_[l], &v_sink_[l]}) {  // empty (data() may be null) without sinks
      std::copy_n(data, sk->size() * sizeof(uint16_t), reinterpret_cast<uint8_t*>(sk->data()));
      data += sk->size() * sizeof(uint16_t);
    }
  }
}

size_t KvCache::bytes() const {
  return (k_row_bytes_ + v_row_bytes_) * static_cast<size_t>(capacity_) * k_.size() + sink_bytes();
}

namespace {

// The mean of rows first..first+n-1 of x ([rows][w]).
std::vector<float> row_mean(const float* x, int64_t w, int64_t first, int64_t n) {
  std::vector<double> acc(static_cast<size_t>(w), 0.0);
  for (int64_t t = first; t < first + n; ++t)
    for (int64_t i = 0; i < w; ++i) acc[i] += x[t * w + i];
  std::vector<float> m(static_cast<size_t>(w));
  for (int64_t i = 0; i < w; ++i) m[i] = static_cast<float>(acc[i] / static_cast<double>(n));
  return m;
}

}  // namespace

void KvCache::fit_k(int64_t layer, int64_t pos0, int64_t n, const float* k, const float* q) {
  const int64_t Hkv = geo_.n_head_kv, D = geo_.head_dim_k, wk = Hkv * D;
  const int64_t first = pos0 == 0 && n > 1 ? 1 : 0, m = std::min(mean_window_, n) - first;
  KvKFit f;
  f.mean = row_mean(k, wk, first, m);
  if (k_order_on_) {
    const int64_t H = geo_.n_head, G = std::max<int64_t>(1, H / Hkv);
    f.order.resize(static_cast<size_t>(wk));
    f.scale.resize(static_cast<size_t>(wk));
    std::vector<double> vk(D), vq(D), s(D);
    std::vector<int32_t> order(D);
    for (int64_t h = 0; h < Hkv; ++h) {
      std::fill(vk.begin(), vk.end(), 0.0);
      std::fill(vq.begin(), vq.end(), q ? 0.0 : 1.0);
      for (int64_t t = first; t < first + m; ++t)
        for (int64_t i = 0; i < D; ++i) {
          const double d = k[t * wk + h * D + i] - f.mean[h * D + i];
          vk[i] += d * d;
          for (int64_t g = 0; q && g < G; ++g) {
            const double qi = q[(t * H + h * G + g) * D + i];
            vq[i] += qi * qi;
          }
        }
      // Floors: a channel without spread must not get a zero or infinite scale.
      const double mk = std::accumulate(vk.begin(), vk.end(), 0.0) / D;
      const double mq = std::accumulate(vq.begin(), vq.end(), 0.0) / D;
      double log_sum = 0.0;
      for (int64_t i = 0; i < D; ++i) {
        vk[i] = std::max(vk[i], 1e-6 * mk);
        vq[i] = std::max(vq[i], 1e-6 * mq);
        s[i] = mk > 0 && mq > 0 ? std::pow(vk[i] / vq[i], 0.25) : 1.0;
        log_sum += std::log(s[i]);
      }
      const double norm = std::exp(log_sum / D);  // scales of geometric mean 1
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return vk[a] * vq[a] > vk[b] * vq[b]; });
      for (int64_t j = 0; j < D; ++j) {
        f.order[h * D + j] = order[j];
        f.scale[h * D + j] = static_cast<float>(s[order[j]] / norm);
      }
    }
  }
  k_fit_[layer] = std::move(f);
}

void KvCache::encode_side(Backend& be, const float* x, int64_t w, const KvKFit& fit, const KvRotation& rot,
                          const TqCodec* tq, DType t, uint8_t* dst, uint16_t* sink) {
  const std::vector<float>& mean = fit.mean;  // a fit with an order always has its mean
  if (!mean.empty() || rot.on()) {
    if (!fit.order.empty()) {  // heads of Dk into the fit's order, minus the mean, divided by the scales
      rot_buf_.resize(static_cast<size_t>(w));
      const int64_t D = geo_.head_dim_k;
      for (int64_t i = 0; i < w; ++i) {
        const int64_t c = i - i % D + fit.order[i];
        rot_buf_[i] = (x[c] - mean[c]) / fit.scale[i];
      }
    } else {
      rot_buf_.assign(x, x + w);
      for (size_t i = 0; i < mean.size(); ++i) rot_buf_[i] -= mean[i];
    }
    if (rot.on()) be.kv_rotate(rot, rot_buf_.data(), w, /*inverse=*/false);
    x = rot_buf_.data();
  }
  if (sink) {  // the storage space: a tq side's heads rotated by its codec
    std::vector<float> y(x, x + w);
    if (tq)
      for (int64_t h = 0; h < tq->n_head(); ++h) tq->rotate(x + h * tq->head_dim(), y.data() + h * tq->head_dim());
    for (int64_t i = 0; i < w; ++i) sink[i] = fp32_to_fp16(y[i]);
  }
  if (tq)
    tq->encode_row(x, dst);
  else
    be.store_row(x, t, dst, w);
}

void KvCache::store_run(Backend& be, int64_t layer, int64_t pos0, int64_t n, const float* k, const float* v,
                        const float* q) {
  if (n <= 0) return;
  if (pos0 < 0 || pos0 + n > n_ctx_)
    fail("kv cache: positions ", pos0, "..", pos0 + n - 1, " outside the context of ", n_ctx_);
  if (pos0 + n > capacity_) reserve(pos0 + n);
  const int64_t wk = geo_.n_head_kv * geo_.head_dim_k, wv = geo_.n_head_kv * geo_.head_dim_v;
  // The codecs' host math (the K mean and channel order, rotations, tq, the fp16 sinks) reads
  // the rows on the host: copied out once through Backend::host_view (the ops between would
  // end a view); a plain side goes to store_row as it is.
  std::vector<float> k_host, v_host, q_host;
  auto to_host = [&](const float*& x, int64_t count, std::vector<float>& buf) {
    const float* h = be.host_view(x, count);
    buf.assign(h, h + count);
    x = buf.data();
  };
  if (k_mean_on_ || k_rot_.on() || k_tq_ || pos0 < n_sink_k_) to_host(k, n * wk, k_host);
  if (v_rot_.on() || v_tq_ || pos0 < n_sink_v_) to_host(v, n * wv, v_host);
  // A run at position 0 starts the sequence's rows afresh (positions continue without a gap,
  // so no row written against an earlier mean stays visible): the mean is set again from it,
  // from its positions 1..mean_window-1 (the header says why BOS is left out).
  if (k_mean_on_ && (pos0 == 0 || k_fit_[layer].mean.empty())) {
    if (q) to_host(q, n * geo_.n_head * geo_.head_dim_k, q_host);
    fit_k(layer, pos0, n, k, q);
  }
  static const KvKFit kNone;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t p = pos0 + t;
    uint16_t* ks = p < n_sink_k_ ? k_sink_[layer].data() + p * wk : nullptr;
    uint16_t* vs = p < n_sink_v_ ? v_sink_[layer].data() + p * wv : nullptr;
    encode_side(be, k + t * wk, wk, k_fit_[layer], k_rot_, k_tq_.get(), type_k_, k_row(layer, p), ks);
    encode_side(be, v + t * wv, wv, kNone, v_rot_, v_tq_.get(), type_v_, v_row(layer, p), vs);
  }
}

void KvCache::store(Backend& be, int64_t layer, int64_t pos, const float* k, const float* v) {
  if (pos < 0 || pos >= n_ctx_) fail("kv cache: position ", pos, " outside the context of ", n_ctx_);
  store_run(be, layer, pos, 1, k, v);
}

const float* KvCache::query_for_cache(Backend& be, int64_t layer, const float* q, int64_t n,
                                      std::vector<float>* buf) const {
  const KvKFit& fit = k_fit_[layer];
  if (!k_rot_.on() && fit.order.empty()) return q;
  q = be.host_view(q, n);  // read on the host into buf, which the rotation then turns in place
  if (fit.order.empty()) {
    buf->assign(q, q + n);
  } else {  // each query head as its KV head's keys are stored
    buf->resize(static_cast<size_t>(n));
    const int64_t D = geo_.head_dim_k, H = geo_.n_head, G = std::max<int64_t>(1, H / geo_.n_head_kv);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t head = i / D, hk = (head % H) / G, j = hk * D + i % D;
      (*buf)[i] = q[i - i % D + fit.order[j]] * fit.scale[j];
    }
  }
  if (!k_rot_.on()) return buf->data();
  be.kv_rotate(k_rot_, buf->data(), n, /*inverse=*/false);
  return buf->data();
}

void KvCache::output_from_cache(Backend& be, float* out, int64_t n) const {
  if (v_rot_.on()) be.kv_rotate(v_rot_, out, n, /*inverse=*/true);
}

AttentionArgs KvCache::attention_args(int64_t layer) const {
  AttentionArgs a;
  a.k = k_data(layer);
  a.k_type = type_k_;
  a.k_row_bytes = k_row_bytes_;
  a.k_tq = k_tq_.get();
  a.v = v_data(layer);
  a.v_type = type_v_;
  a.v_row_bytes = v_row_bytes_;
  a.v_tq = v_tq_.get();
  a.n_head_kv = geo_.n_head_kv;
  a.head_dim_k = geo_.head_dim_k;
  a.head_dim_v = geo_.head_dim_v;
  a.k_sink = n_sink_k_ ? k_sink_[layer].data() : nullptr;
  a.v_sink = n_sink_v_ ? v_sink_[layer].data() : nullptr;
  a.n_sink_k = n_sink_k_;
  a.n_sink_v = n_sink_v_;
  return a;
}

}  // namespace sluice
