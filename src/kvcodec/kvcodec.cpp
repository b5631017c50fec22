// kvcodec/kvcodec: the KV type table, the Lloyd-Max Gaussian codebooks, the Walsh-Hadamard
// transform, and the reference rotated-codebook encoder/decoder.
#include "kvcodec/kvcodec.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numbers>
#include <string>

#include "core/error.h"
#include "quant/quant.h"

namespace sluice {
namespace {

struct KvTypeEntry {
  DType type;
  std::string_view name;
  int precision_bits;
  int tq_bits;         // 0: not a rotated-codebook type
  int64_t tq_group;    // rotated coordinates per scale (0: one norm per head)
  int tq_bits_lo = 0;  // a split head's second half (tq3s); 0: not split
};

// The one list of KV types. Order = the order of kv_type_names().
constexpr std::array<KvTypeEntry, 13> kKvTypes = {{
    {DType::F32, "f32", 32, 0, 0},
    {DType::F16, "f16", 16, 0, 0},
    {DType::BF16, "bf16", 16, 0, 0},
    {DType::Q8_0, "q8_0", 8, 0, 0},
    {DType::Q4_0, "q4_0", 4, 0, 0},
    {kKvTq2, "tq2", 2, 2, 0},
    {kKvTq3, "tq3", 3, 3, 0},
    {kKvTq4, "tq4", 4, 4, 0},
    {kKvTq8, "tq8", 8, 8, 0},
    {kKvTq2g, "tq2g", 2, 2, kTqGroup},
    {kKvTq3g, "tq3g", 3, 3, kTqGroup},
    {kKvTq4g, "tq4g", 4, 4, kTqGroup},
    {kKvTq3s, "tq3s", 3, 4, kTqGroup, 2},
}};

// The positive half of each tqNg codebook (bits 2, 3, 4), ascending; the other half is its
// negation. scripts/kv_codebook_fit.py: Lloyd iterations on 20000 heads of 64 N(0,1)
// values, each group of 32 coded with its searched scale (kvcodec.h), the cells' means
// weighted by s², symmetrized, divided by the largest (8 rounds; 4 digits kept).
constexpr float kGroupHalf2[] = {0.2904f, 1.0f};
constexpr float kGroupHalf3[] = {0.1067f, 0.3328f, 0.6024f, 1.0f};
constexpr float kGroupHalf4[] = {0.0473f, 0.1432f, 0.2428f, 0.3491f, 0.4667f, 0.6028f, 0.7707f, 1.0f};
// The encoder's scale candidates: kScaleSteps values lo..hi times the group's largest |y|.
constexpr int kScaleSteps = 33;
constexpr double kScaleLo = 0.6, kScaleHi = 1.2;
// The one-norm encoder's divisor candidates: kNormSteps values lo..hi times |x| (measured on
// SmolLM2's KV, issue 18: q8_0/tq3 KLD 0.0160 -> 0.0143, tq3/q8_0 0.0935 -> 0.0826 against the
// divisor |x| alone; 25 steps, wider ranges, or moving single indices afterwards to raise the
// cosine did no better beyond the run-to-run spread of ~0.001, and 13 cost 1.6x the plain
// encode where 25 cost 2.3x).
constexpr int kNormSteps = 13;
constexpr double kNormLo = 0.8, kNormHi = 1.2;

const KvTypeEntry* find_entry(DType t) {
  for (const auto& e : kKvTypes)
    if (e.type == t) return &e;
  return nullptr;
}

double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi); }
double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }

// Φ^-1(p) by bisection: only used to start the Lloyd iterations.
double normal_quantile(double p) {
  double lo = -40.0, hi = 40.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (normal_cdf(mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

std::vector<double> compute_lloyd_max(int bits) {
  const int L = 1 << bits;
  std::vector<double> c(L), b(L + 1);
  for (int k = 0; k < L; ++k) c[k] = normal_quantile((k + 0.5) / L);
  b[0] = -INFINITY;
  b[L] = INFINITY;
  // Lloyd: thresholds at midpoints, centroids at the Gaussian mean of each cell. Each
  // iteration does not increase the MSE; the Gaussian has a unique fixed point (log-concave
  // density, Fleischer 1964), reached here to ~1e-12 in a few hundred iterations at 8 bits.
  for (int it = 0; it < 100000; ++it) {
    for (int k = 1; k < L; ++k) b[k] = 0.5 * (c[k - 1] + c[k]);
    double change = 0.0;
    for (int k = 0; k < L; ++k) {
      const double mass = normal_cdf(b[k + 1]) - normal_cdf(b[k]);
      const double pa = std::isinf(b[k]) ? 0.0 : normal_pdf(b[k]);
      const double pb = std::isinf(b[k + 1]) ? 0.0 : normal_pdf(b[k + 1]);
      const double nc = mass > 0 ? (pa - pb) / mass : c[k];
      change = std::max(change, std::fabs(nc - c[k]));
      c[k] = nc;
    }
    if (change < 1e-12) break;
  }
  return c;
}

// splitmix64: the sign vector's generator (stable across platforms, unlike std:: engines'
// distributions).
uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class T>
void fwht_impl(T* x, int64_t n) {
  for (int64_t len = 1; len < n; len *= 2)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; ++j) {
        const T a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
}

bool is_pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

bool kv_type_is_tq(DType t) { return kv_type_tq_bits(t) != 0; }
int kv_type_tq_bits(DType t) {
  const auto* e = find_entry(t);
  return e ? e->tq_bits : 0;
}
int kv_type_tq_bits_lo(DType t) {
  const auto* e = find_entry(t);
  return e ? e->tq_bits_lo : 0;
}
bool kv_type_k_only(DType t) { return kv_type_tq_bits_lo(t) != 0; }
int64_t kv_type_tq_group(DType t) {
  const auto* e = find_entry(t);
  return e ? e->tq_group : 0;
}
bool kv_type_supported(DType t) { return find_entry(t) != nullptr; }
std::string_view kv_type_name(DType t) {
  const auto* e = find_entry(t);
  return e ? e->name : "?";
}
std::optional<DType> kv_type_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& e : kKvTypes)
    if (e.name == lower) return e.type;
  return std::nullopt;
}
std::string_view kv_type_names() {
  return "f32 | f16 | bf16 | q8_0 | q4_0 | tq2 | tq3 | tq4 | tq8 | tq2g | tq3g | tq4g | tq3s (K only)";
}
int kv_type_precision_bits(DType t) {
  const auto* e = find_entry(t);
  return e ? e->precision_bits : 0;
}
int64_t kv_type_block_size(DType t) { return kv_type_is_tq(t) ? 1 : dtype_traits(t).block_size; }

size_t kv_type_row_bytes(DType t, int64_t n_head, int64_t head_dim) {
  if (!kv_type_supported(t)) fail("kv cache: type id ", static_cast<uint32_t>(t), " is not a KV cache type");
  if (const int bits = kv_type_tq_bits(t)) {
    if (const int lo = kv_type_tq_bits_lo(t)) {  // halves of head_dim/2 at bits and lo
      const int64_t g = kv_type_tq_group(t), per_half = head_dim / 2 / g;
      return static_cast<size_t>(n_head * per_half) * (4 + static_cast<size_t>(g * (bits + lo) / 8));
    }
    if (const int64_t g = kv_type_tq_group(t))
      return static_cast<size_t>(n_head * (head_dim / g)) * (2 + static_cast<size_t>(g * bits / 8));
    return static_cast<size_t>(n_head) * (2 + static_cast<size_t>(head_dim * bits + 7) / 8);
  }
  return dtype_row_bytes(t, n_head * head_dim);
}

const std::vector<double>& lloyd_max_gaussian(int bits) {
  if (bits < 1 || bits > 8) fail("lloyd_max_gaussian: bits must be 1..8, got ", bits);
  static std::array<std::vector<double>, 9> books;
  static std::array<std::once_flag, 9> once;
  std::call_once(once[bits], [bits] { books[bits] = compute_lloyd_max(bits); });
  return books[bits];
}

const std::vector<float>& tq_group_codebook(int bits) {
  static const std::array<std::vector<float>, 3> books = [] {
    std::array<std::vector<float>, 3> b;
    auto make = [](const float* half, size_t n) {
      std::vector<float> c(2 * n);
      for (size_t i = 0; i < n; ++i) {
        c[n - 1 - i] = -half[i];
        c[n + i] = half[i];
      }
      return c;
    };
    b[0] = make(kGroupHalf2, std::size(kGroupHalf2));
    b[1] = make(kGroupHalf3, std::size(kGroupHalf3));
    b[2] = make(kGroupHalf4, std::size(kGroupHalf4));
    return b;
  }();
  if (bits < 2 || bits > 4) fail("tq group codebook: bits must be 2, 3 or 4, got ", bits);
  return books[bits - 2];
}

void fwht(float* x, int64_t n) { fwht_impl(x, n); }
void fwht(double* x, int64_t n) { fwht_impl(x, n); }

KvRotation kv_rotation_make(int64_t block, uint64_t seed) {
  if (!is_pow2(block) || block < 2) fail("kv rotation: block must be a power of two >= 2, got ", block);
  KvRotation r;
  r.block = block;
  if (seed != 0) {
    uint64_t s = seed;
    r.signs.resize(static_cast<size_t>(block));
    for (auto& v : r.signs) v = (splitmix64(s) >> 63) ? -1.0f : 1.0f;
  }
  return r;
}

void kv_rotate_ref(const KvRotation& r, float* x, int64_t n, bool inverse) {
  if (!r.on()) return;
  const int64_t B = r.block;
  if (n % B != 0) fail("kv rotation: ", n, " elements are not whole blocks of ", B);
  const bool has_signs = !r.signs.empty();
  const double k = 1.0 / std::sqrt(static_cast<double>(B));
  std::vector<double> y(static_cast<size_t>(B));
  for (int64_t b = 0; b < n; b += B) {
    float* xb = x + b;
    // R = H·diag(s)/sqrt(B): signs first; R^T = diag(s)·H/sqrt(B): signs last.
    for (int64_t i = 0; i < B; ++i) y[i] = static_cast<double>(xb[i]) * (has_signs && !inverse ? r.signs[i] : 1.0f);
    fwht(y.data(), B);
    for (int64_t i = 0; i < B; ++i) xb[i] = static_cast<float>(y[i] * k * (has_signs && inverse ? r.signs[i] : 1.0f));
  }
}

TqCodec::TqCodec(int bits, int64_t n_head, int64_t head_dim, uint64_t seed, int64_t group, int bits_lo)
    : bits_(bits), bits_lo_(bits_lo), n_head_(n_head), head_dim_(head_dim), group_(group), seed_(seed) {
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8) fail("tq codec: bits must be 2, 3, 4 or 8, got ", bits);
  if (!is_pow2(head_dim) || head_dim < 8) fail("tq codec: head dim must be a power of two >= 8, got ", head_dim);
  if (n_head <= 0) fail("tq codec: n_head must be positive, got ", n_head);
  if (group != 0 && group != kTqGroup) fail("tq codec: group must be 0 or ", kTqGroup, ", got ", group);
  if (group && (bits > 4 || head_dim < group))
    fail("tq codec: groups of ", group, " need bits 2..4 and a head dim >= ", group, " (got ", bits, " bits, ",
         head_dim, ")");
  if (bits_lo != 0 && (!group || bits_lo < 2 || bits_lo > 4 || head_dim < 2 * group))
    fail("tq codec: split heads need groups, second-half bits 2..4 and a head dim >= ", 2 * kTqGroup, " (got group ",
         group, ", ", bits_lo, " bits, head dim ", head_dim, ")");
  uint64_t s = seed;
  signs_.resize(head_dim);
  for (auto& v : signs_) v = (splitmix64(s) >> 63) ? -1.0f : 1.0f;
  if (group) {
    codebook_ = tq_group_codebook(bits);
    if (bits_lo) codebook_lo_ = tq_group_codebook(bits_lo);
  } else {
    const auto& book = lloyd_max_gaussian(bits);
    codebook_.assign(book.begin(), book.end());
  }
  bounds_.resize(codebook_.size() - 1);
  for (size_t k = 0; k + 1 < codebook_.size(); ++k)
    bounds_[k] = 0.5 * (static_cast<double>(codebook_[k]) + codebook_[k + 1]);
  for (size_t k = 0; k + 1 < codebook_lo_.size(); ++k)
    bounds_lo_.push_back(0.5 * (static_cast<double>(codebook_lo_[k]) + codebook_lo_[k + 1]));
  bounds_f_.assign(bounds_.begin(), bounds_.end());
  for (size_t k = 0; k + 1 < codebook_.size(); ++k) steps_f_.push_back(codebook_[k + 1] - codebook_[k]);
  bounds_lo_f_.assign(bounds_lo_.begin(), bounds_lo_.end());
  for (size_t k = 0; k + 1 < codebook_lo_.size(); ++k) steps_lo_f_.push_back(codebook_lo_[k + 1] - codebook_lo_[k]);
}

TqCodec TqCodec::for_type(DType t, int64_t n_head, int64_t head_dim, uint64_t seed) {
  if (!kv_type_is_tq(t)) fail("tq codec: ", kv_type_name(t), " is not a tq type");
  return TqCodec(kv_type_tq_bits(t), n_head, head_dim, seed, kv_type_tq_group(t), kv_type_tq_bits_lo(t));
}

size_t TqCodec::group_offset(int64_t i) const {
  const int64_t G = group_, half = head_dim_ / 2;
  if (!bits_lo_ || i <= half) return static_cast<size_t>(i / G) * (2 + static_cast<size_t>(G * bits_ / 8));
  return group_offset(half) + static_cast<size_t>((i - half) / G) * (2 + static_cast<size_t>(G * bits_lo_ / 8));
}

DType TqCodec::type() const {
  if (bits_lo_) return kKvTq3s;
  switch (bits_) {
    case 2: return group_ ? kKvTq2g : kKvTq2;
    case 3: return group_ ? kKvTq3g : kKvTq3;
    case 4: return group_ ? kKvTq4g : kKvTq4;
    default: return kKvTq8;
  }
}

namespace {

// n indices of `bits` bits -> LSB-first into dst (zeroed here; n·bits a multiple of 8).
void pack_indices(const uint32_t* idx, int64_t n, int bits, uint8_t* dst) {
  std::memset(dst, 0, static_cast<size_t>(n * bits + 7) / 8);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    const uint32_t v = idx[i] << (bit & 7);
    dst[bit >> 3] |= static_cast<uint8_t>(v);
    if ((bit & 7) + bits > 8) dst[(bit >> 3) + 1] |= static_cast<uint8_t>(v >> 8);
  }
}

// n indices of `bits` bits (2, 3, 4, 8) at p -> cb[idx]·scale into y (n a multiple of 8).
void unpack_centroids(const uint8_t* p, int64_t n, int bits, const float* cb, float scale, bool scaled, float* y) {
  auto put = [&](int64_t i, uint32_t k) { y[i] = scaled ? scale * cb[k] : cb[k]; };
  switch (bits) {
    case 8:
      for (int64_t i = 0; i < n; ++i) put(i, p[i]);
      break;
    case 4:
      for (int64_t i = 0; i < n; i += 2) {
        put(i, p[i / 2] & 15);
        put(i + 1, p[i / 2] >> 4);
      }
      break;
    case 2:
      for (int64_t i = 0; i < n; i += 4) {
        const uint8_t b = p[i / 4];
        for (int j = 0; j < 4; ++j) put(i + j, (b >> (2 * j)) & 3);
      }
      break;
    default:  // 3 bits: 8 indices in every 3 bytes
      for (int64_t i = 0; i < n; i += 8) {
        const uint8_t* q = p + i / 8 * 3;
        const uint32_t w = q[0] | (uint32_t{q[1]} << 8) | (uint32_t{q[2]} << 16);
        for (int j = 0; j < 8; ++j) put(i + j, (w >> (3 * j)) & 7);
      }
  }
}

}  // namespace

// The same comparisons as code_cosine's, thresholds outside so that the coordinates vectorize
// (a binary search per coordinate was half of a 3-bit head's encode).
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void TqCodec::threshold_counts(const float* u, int64_t n, const float* b, size_t nb, float f, uint32_t* idx) {
  for (int64_t i = 0; i < n; ++i) idx[i] = 0;
  for (size_t j = 0; j < nb; ++j) {
    const float t = b[j] * f;
    for (int64_t i = 0; i < n; ++i) idx[i] += u[i] >= t ? 1u : 0u;
  }
}

// Cloned per ISA (x86): the encoder runs once per cache row and head, on the calling thread.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
float TqCodec::code_cosine(const float* u, int64_t n, float f, float* c) const {
  for (int64_t i = 0; i < n; ++i) c[i] = codebook_[0];
  // Thresholds outside, coordinates inside: the inner loop vectorizes.
  for (size_t j = 0; j < bounds_f_.size(); ++j) {
    const float b = bounds_f_[j] * f, d = steps_f_[j];
    for (int64_t i = 0; i < n; ++i) c[i] += u[i] >= b ? d : 0.0f;
  }
  float cc[8] = {}, uc[8] = {};  // partial sums, so the loop vectorizes (n is a multiple of 8)
  for (int64_t i = 0; i < n; i += 8)
    for (int l = 0; l < 8; ++l) cc[l] += c[i + l] * c[i + l], uc[l] += u[i + l] * c[i + l];
  float sc = 0.0f, su = 0.0f;
  for (int l = 0; l < 8; ++l) sc += cc[l], su += uc[l];
  return sc > 0 ? su / std::sqrt(sc) : 0.0f;
}

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
float TqCodec::group_candidate(const float* y, float sc, const float* b, const float* d, int nb, float c0,
                               uint32_t* n) {
  float c[kTqGroup];
  for (int64_t i = 0; i < kTqGroup; ++i) c[i] = c0, n[i] = 0;
  // Thresholds outside, coordinates inside (as code_cosine): y >= b·sc counts the thresholds
  // y/sc reaches, and the steps between their centroids add up to the decoded centroid.
  for (int j = 0; j < nb; ++j) {
    const float t = b[j] * sc, s = d[j];
    for (int64_t i = 0; i < kTqGroup; ++i) {
      const bool ge = y[i] >= t;
      c[i] += ge ? s : 0.0f;
      n[i] += ge;
    }
  }
  float e8[8] = {};
  for (int64_t i = 0; i < kTqGroup; i += 8)
    for (int l = 0; l < 8; ++l) {
      const float e = y[i + l] - sc * c[i + l];
      e8[l] += e * e;
    }
  float err = 0.0f;
  for (float e : e8) err += e;
  return err;
}

void TqCodec::encode_group(const double* y, int bits, uint8_t* dst) const {
  const bool lo = bits != bits_;
  const std::vector<float>& codebook = lo ? codebook_lo_ : codebook_;
  const std::vector<float>& b = lo ? bounds_lo_f_ : bounds_f_;
  const std::vector<float>& d = lo ? steps_lo_f_ : steps_f_;
  double amax = 0.0;
  float yf[kTqGroup];
  for (int64_t i = 0; i < kTqGroup; ++i) {
    amax = std::max(amax, std::fabs(y[i]));
    yf[i] = static_cast<float>(y[i]);
  }
  uint32_t idx[kTqGroup], best_idx[kTqGroup] = {};
  uint16_t best_s = 0;
  float best_err = INFINITY;
  // The scale is searched among fp16 values (what decode multiplies by), each candidate
  // coding every coordinate by its nearest centroid; the least squared error wins (the first
  // on ties). amax = 0 leaves s = 0: every coordinate decodes to 0. In float, vectorized:
  // the search in double with a binary search per coordinate cost 20 us per 64-dim tq4g head
  // and 14 per tq3s head (Zen 4), ~1.2 ms of SmolLM2's ~7 ms decode step with a tq3s K cache.
  for (int k = 0; amax > 0 && k < kScaleSteps; ++k) {
    const double f = kScaleLo + (kScaleHi - kScaleLo) * k / (kScaleSteps - 1);
    const uint16_t h = fp32_to_fp16(static_cast<float>(amax * f));
    const float sc = fp16_to_fp32(h);
    if (!(sc > 0) || std::isinf(sc)) continue;
    const float err = group_candidate(yf, sc, b.data(), d.data(), static_cast<int>(b.size()), codebook[0], idx);
    if (err < best_err) {
      best_err = err;
      best_s = h;
      std::copy(idx, idx + kTqGroup, best_idx);
    }
  }
  if (best_err == INFINITY)  // amax 0 (or no finite fp16 scale): index of the smallest |c|
    std::fill(best_idx, best_idx + kTqGroup, static_cast<uint32_t>(codebook.size() / 2));
  std::memcpy(dst, &best_s, 2);
  pack_indices(best_idx, kTqGroup, bits, dst + 2);
}

void TqCodec::encode_row(const float* x, uint8_t* dst) const {
  const int64_t D = head_dim_;
  std::vector<double> y(D);
  std::vector<uint32_t> idx(D);
  std::vector<float> scratch(2 * static_cast<size_t>(D));  // u, then code_cosine's codes
  float* const u = scratch.data();
  float* const c = u + D;
  for (int64_t h = 0; h < n_head_; ++h) {
    const float* xh = x + h * D;
    uint8_t* out = dst + h * head_bytes();
    double norm2 = 0.0;
    for (int64_t i = 0; i < D; ++i) {
      y[i] = static_cast<double>(xh[i]) * signs_[i];
      norm2 += static_cast<double>(xh[i]) * xh[i];
    }
    const int64_t RB = rotation_block();
    for (int64_t b = 0; b < D; b += RB) fwht(y.data() + b, RB);
    if (group_) {  // orthonormal coordinates y/sqrt(RB), one scale per group
      const double k = 1.0 / std::sqrt(static_cast<double>(RB));
      for (int64_t i = 0; i < D; ++i) y[i] *= k;
      for (int64_t g = 0; g < D; g += group_) encode_group(y.data() + g, group_bits(g), out + group_offset(g));
      continue;
    }
    const double norm = std::sqrt(norm2);
    // Coordinates on the N(0,1) scale: u_i = y_i·sqrt(D)/|x| (y already carries the factor
    // sqrt(D) of the unnormalized transform, so y_i/|x| is that).
    for (int64_t i = 0; i < D; ++i) u[i] = norm > 0 ? static_cast<float>(y[i] / norm) : 0.0f;
    // The code's direction is what the norm-preserving decode can't mend, so u is divided by
    // kNormSteps candidates f around 1 and the code with the largest cosine to u wins (the
    // first on ties); decode still scales it to |x|. 8-bit codes keep f = 1 (their angle error
    // is already ~1e-5, and 255 thresholds per candidate would cost 25x the encode).
    const int steps = bits_ <= 4 ? kNormSteps : 1;
    float best_cos = -INFINITY, best_f = 1.0f;
    for (int k = 0; steps > 1 && k < steps; ++k) {
      const float f = static_cast<float>(kNormLo + (kNormHi - kNormLo) * k / (steps - 1));
      const float cos = code_cosine(u, D, f, c);
      if (cos > best_cos) best_cos = cos, best_f = f;
    }
    double c2 = 0.0;
    // The thresholds code_cosine compared with (u >= b·f), so the code is the one it scored;
    // 8-bit codes (255 thresholds) search them instead.
    if (steps > 1) {
      threshold_counts(u, D, bounds_f_.data(), bounds_f_.size(), best_f, idx.data());
    } else {
      const auto below = [best_f](float v, float b) { return v < b * best_f; };
      for (int64_t i = 0; i < D; ++i)
        idx[i] = static_cast<uint32_t>(std::upper_bound(bounds_f_.begin(), bounds_f_.end(), u[i], below) -
                                       bounds_f_.begin());
    }
    for (int64_t i = 0; i < D; ++i) c2 += static_cast<double>(codebook_[idx[i]]) * codebook_[idx[i]];
    const double gamma = c2 > 0 ? norm / std::sqrt(c2) : 0.0;
    const uint16_t g = fp32_to_fp16(static_cast<float>(gamma));
    std::memcpy(out, &g, 2);
    pack_indices(idx.data(), D, bits_, out + 2);
  }
}

float TqCodec::decode_head_rotated(const uint8_t* src, float* y) const {
  uint16_t g;
  if (group_) {
    for (int64_t i = 0; i < head_dim_; i += group_) {
      const uint8_t* p = src + group_offset(i);
      const int bits = group_bits(i);
      std::memcpy(&g, p, 2);
      unpack_centroids(p + 2, group_, bits, (bits == bits_ ? codebook_ : codebook_lo_).data(), fp16_to_fp32(g),
                       /*scaled=*/true, y + i);
    }
    return 1.0f;
  }
  std::memcpy(&g, src, 2);
  unpack_centroids(src + 2, head_dim_, bits_, codebook_.data(), 1.0f, /*scaled=*/false, y);
  return fp16_to_fp32(g);
}

void TqCodec::decode_row(const uint8_t* src, float* x) const {
  const int64_t D = head_dim_, RB = rotation_block();
  std::vector<float> c(D);
  std::vector<double> y(D);
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(RB));
  for (int64_t h = 0; h < n_head_; ++h) {
    const double gamma = decode_head_rotated(src + h * head_bytes(), c.data());
    // Stored coordinates are on the N(0,1) scale of y·sqrt(D)/|x| with γ = |x|/|c|; the
    // orthonormal rotated vector is γ·c, and x = R^T(γ·c) = diag(s)·H·(γ·c)/sqrt(D) (per
    // rotation block RB when split).
    for (int64_t i = 0; i < D; ++i) y[i] = gamma * c[i];
    for (int64_t b = 0; b < D; b += RB) fwht(y.data() + b, RB);
    for (int64_t i = 0; i < D; ++i) x[h * D + i] = static_cast<float>(y[i] * inv_sqrt_d * signs_[i]);
  }
}

void TqCodec::rotate(const float* x, float* y) const {
  const int64_t RB = rotation_block();
  const float k = 1.0f / std::sqrt(static_cast<float>(RB));
  for (int64_t i = 0; i < head_dim_; ++i) y[i] = x[i] * signs_[i];
  for (int64_t b = 0; b < head_dim_; b += RB) fwht(y + b, RB);
  for (int64_t i = 0; i < head_dim_; ++i) y[i] *= k;
}

void TqCodec::unrotate(const float* y, float* x) const {
  const int64_t RB = rotation_block();
  const float k = 1.0f / std::sqrt(static_cast<float>(RB));
  if (x != y) std::copy(y, y + head_dim_, x);
  for (int64_t b = 0; b < head_dim_; b += RB) fwht(x + b, RB);
  for (int64_t i = 0; i < head_dim_; ++i) x[i] *= k * signs_[i];
}

}  // namespace sluice
