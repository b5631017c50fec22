// kvcodec/kvcodec: the element codecs a KV cache can hold, defined in one place — their ids,
// names and sizes — and the rotated-codebook codec ("tq", after TurboQuant, arXiv:2504.19874).
//
// KV types are DType values. The plain and block types are ggml's own ids (f32, f16, bf16,
// q8_0, q4_0; quant/ encodes them). The rotated-codebook types take Sluice-only ids from
// 0x1000 up, far outside ggml's range, so a GGUF type field can never name one; core/dtype's
// traits table does not know them, so code that may see a KV type uses the kv_type_*
// functions below instead of dtype_traits().
//
// tqN, per head of D elements (D a power of two, >= 8), for bits N in {2, 3, 4, 8}:
//   1. rotate: y = R·x with R = H_D·diag(s)/sqrt(D), H_D the Sylvester Walsh-Hadamard matrix
//      and s a fixed random ±1 vector (seeded; the same for every head, position and layer of
//      one cache). R is orthonormal, so q·k = (Rq)·(Rk): attention rotates the query once.
//   2. quantize: after the rotation each coordinate of x/|x|·sqrt(D) is close to N(0,1) for
//      any x (the rotation spreads outliers over all coordinates), so every coordinate is
//      coded by the nearest centroid of the 2^N-level Lloyd-Max quantizer of N(0,1).
//   3. matched norm: the head stores γ = |x| / |c| (fp16), c the vector of chosen centroids,
//      so the decoded vector γ·R^T·c has exactly the original L2 norm (up to fp16 rounding).
//   Storage per head: γ (fp16, 2 bytes) then D·N bits of indices, packed LSB-first (index i
//   in bits [i·N, i·N+N) of the little-endian stream): 4.125 bits/element at D = 128 for tq4.
//
// tqNg (N in {2, 3, 4}; D a power of two >= 32): the same rotation, then one scale per group
// of 32 rotated coordinates instead of one norm per head. Why: a group's scale follows its
// own range (the largest of 32 near-Gaussian values is known, not guessed from the norm):
// 4-bit relative squared error on Gaussian heads 0.0054 against tq4's 0.0086, and SmolLM2-135M
// tq4g/tq4g mean KLD 0.0257 against tq4/tq4's 0.0384 (both without the K mean of
// memory/kv_cache.h) at 0.25 bits more. Per group: s (fp16), then 32·N bits of indices packed
// as tqN's; the coordinate is s·c[idx], c the symmetric codebook of tq_group_codebook (largest
// centroid 1), fitted by Lloyd iterations to N(0,1) groups of 32 coded with the scale the
// encoder searches for (the fp16 s of 33 candidates 0.6..1.2 × the group's largest |y| that
// gives the least squared error; scripts/kv_codebook_fit.py). 2.5 / 3.5 / 4.5 bits per
// element (tq4g: q4_0's size).
//
// tq3s (a K type; D a power of two >= 64): the head split in two halves, each rotated on its
// own (R = H_(D/2)·diag(s_half)/sqrt(D/2)) and coded as tqNg groups: the first half at 4 bits,
// the second at 2 (3.5 bits per element, tq3g's size). Useful only with the channel order and
// scales memory/kv_cache.h fits to the first queries and keys (the K fit): it puts the
// channels whose errors move the scores most into the first half. Why: a head's channels are
// far from equal in what their errors cost (post-RoPE keys and queries both concentrate in a
// few slowly rotating pairs), and a rotation over the whole head spreads every channel's
// error evenly; bits spent where the cost is gain more than the rotation's averaging.
//
// KvRotation: the Hadamard rotation of the block-quantized sides (q8_0, q4_0), as llama.cpp
// applies it since ggml-org/llama.cpp#21038 (Q, K and V rotated by a 64-point normalized
// Hadamard matrix when the head dim is a multiple of 64, the attention output rotated back).
// A head's blocks of n elements (n a power of two) become R·x, R = H_n·diag(s)/sqrt(n), with
// s = 1 (the plain, symmetric Hadamard: R = R^T = R^-1) or a fixed random ±1 vector. R is
// orthonormal, so q·k = (Rq)·(Rk) and Σ_p w_p·v_p = R^T·Σ_p w_p·(R·v_p): attention runs over
// the rotated cache unchanged once the query is rotated and the output rotated back. Why: a
// q4_0/q8_0 block's scale is set by its largest element, so one outlier channel costs its
// whole block precision; the rotation spreads that channel's energy over n coordinates.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace sluice {

inline constexpr DType kKvTq2 = static_cast<DType>(0x1002);
inline constexpr DType kKvTq3 = static_cast<DType>(0x1003);
inline constexpr DType kKvTq4 = static_cast<DType>(0x1004);
inline constexpr DType kKvTq8 = static_cast<DType>(0x1008);
inline constexpr DType kKvTq2g = static_cast<DType>(0x1102);
inline constexpr DType kKvTq3g = static_cast<DType>(0x1103);
inline constexpr DType kKvTq4g = static_cast<DType>(0x1104);
inline constexpr DType kKvTq3s = static_cast<DType>(0x1203);

// True for the rotated-codebook ids above.
bool kv_type_is_tq(DType t);
// Index bits of a tq type (2, 3, 4, 8; tq3s: its first half's 4); 0 for any other type.
int kv_type_tq_bits(DType t);
// Index bits of a split tq type's second half (tq3s: 2); 0 for any other type.
int kv_type_tq_bits_lo(DType t);
// True for a type that only a K side may hold (tq3s: it needs the K fit).
bool kv_type_k_only(DType t);
// Rotated coordinates per scale of a tq type: kTqGroup for tq2g/tq3g/tq4g, 0 (one norm per
// head) for tq2..tq8 and any other type.
inline constexpr int64_t kTqGroup = 32;
int64_t kv_type_tq_group(DType t);
// True for every type a KV cache accepts: f32, f16, bf16, q8_0, q4_0, tq2, tq3, tq4, tq8,
// tq2g, tq3g, tq4g, tq3s.
bool kv_type_supported(DType t);
// "f16", "q8_0", "tq4", ...; "?" for a type that is not a KV type.
std::string_view kv_type_name(DType t);
// Parses a KV type name (case-insensitive); nullopt if it is not one of the supported types.
std::optional<DType> kv_type_from_name(std::string_view name);
// "f32 | f16 | bf16 | q8_0 | q4_0 | tq2 | ... | tq4g", for help texts and errors.
std::string_view kv_type_names();
// Nominal precision in bits per element (f32 32, f16/bf16 16, q8_0 8, q4_0 4, tqN N): what the
// auto-asymmetric policy compares against 8.
int kv_type_precision_bits(DType t);
// Bytes of one cache row of n_head heads of head_dim elements (the row must be valid for t:
// block types need n_head·head_dim to be a multiple of 32; tq needs head_dim a power of two,
// >= 32 for the grouped tqNg, >= 64 for tq3s).
size_t kv_type_row_bytes(DType t, int64_t n_head, int64_t head_dim);
// Elements per block of a non-tq type (1 for f32/f16/bf16, 32 for q8_0/q4_0).
int64_t kv_type_block_size(DType t);

// The Lloyd-Max quantizer of N(0,1) with 2^bits levels (bits 1..8), centroids ascending.
// Computed once per bit width at first use by Lloyd iterations on the exact Gaussian
// density (closed-form cell means (φ(a)-φ(b))/(Φ(b)-Φ(a))), started from the Gaussian
// quantiles and run to a fixed point (change < 1e-12); e.g. 2 levels ±0.7979 = ±sqrt(2/π),
// 4 levels ±0.4528, ±1.5104 (Max 1960, Table I).
const std::vector<double>& lloyd_max_gaussian(int bits);
// The codebook of tqNg (bits 2, 3, 4): 2^bits centroids ascending, symmetric, largest 1.
const std::vector<float>& tq_group_codebook(int bits);

// In-place unnormalized fast Walsh-Hadamard transform (n a power of two): x = H_n·x.
void fwht(float* x, int64_t n);
void fwht(double* x, int64_t n);

// The rotation of one cache side (K or V); block 0 = none.
struct KvRotation {
  int64_t block = 0;         // elements per Hadamard block, a power of two (0: no rotation)
  std::vector<float> signs;  // s: `block` values ±1; empty for the plain Hadamard (s = 1)
  bool on() const { return block > 0; }
  bool operator==(const KvRotation&) const = default;
};
// A rotation of `block` elements (a power of two >= 2); seed 0 gives the plain Hadamard,
// any other seed a fixed random sign vector from it (splitmix64, as TqCodec's).
KvRotation kv_rotation_make(int64_t block, uint64_t seed);
// Reference rotation, the oracle of Backend::kv_rotate: x [n] in place (n a multiple of
// r.block), every block -> R·x, or R^T·x when inverse; the transform runs in double.
void kv_rotate_ref(const KvRotation& r, float* x, int64_t n, bool inverse);

// The rotated-codebook codec of one cache (K or V): row geometry, rotation, codebook.
class TqCodec {
 public:
  // bits: 2, 3, 4 or 8; a row holds n_head heads of head_dim elements (a power of two >= 8);
  // seed picks the sign vector s. group: 0 (one norm per head, tqN) or kTqGroup (tqNg: bits
  // 2, 3 or 4, head_dim >= kTqGroup). bits_lo > 0 (grouped only, head_dim >= 2·kTqGroup):
  // split heads (tq3s), the first half at `bits`, the second at bits_lo, each half rotated
  // on its own.
  TqCodec(int bits, int64_t n_head, int64_t head_dim, uint64_t seed, int64_t group = 0, int bits_lo = 0);
  // The codec of a tq type (kv_type_is_tq(t)).
  static TqCodec for_type(DType t, int64_t n_head, int64_t head_dim, uint64_t seed);

  int bits() const { return bits_; }
  int64_t n_head() const { return n_head_; }
  int64_t head_dim() const { return head_dim_; }
  uint64_t seed() const { return seed_; }
  int64_t group() const { return group_; }
  int bits_lo() const { return bits_lo_; }
  // Elements per rotation block: the head, or half of it when split.
  int64_t rotation_block() const { return bits_lo_ ? head_dim_ / 2 : head_dim_; }
  DType type() const;
  // tqN: γ then the indices; tqNg: per group of kTqGroup, its scale then its indices (tq3s:
  // the first half's groups, then the second half's).
  size_t head_bytes() const {
    if (!group_) return 2 + static_cast<size_t>(head_dim_ * bits_ + 7) / 8;
    return group_offset(head_dim_);
  }
  size_t row_bytes() const { return static_cast<size_t>(n_head_) * head_bytes(); }
  const std::vector<float>& signs() const { return signs_; }        // s: head_dim values ±1
  const std::vector<float>& codebook() const { return codebook_; }  // 2^bits centroids, ascending

  // Reference encode / decode of one row ([n_head][head_dim] floats <-> row_bytes() bytes).
  // Both do the rotation in double; decode returns the vector in the original space.
  void encode_row(const float* x, uint8_t* dst) const;
  void decode_row(const uint8_t* src, float* x) const;

  // For attention in the rotated space (float32): y = R·x and x = R^T·y, one head each.
  void rotate(const float* x, float* y) const;
  void unrotate(const float* y, float* x) const;
  // One stored head (head_bytes() at src): writes its centroids c[i] (rotated space, before
  // scaling) to y and returns γ, so the head's rotated vector is γ·y. tqNg: y[i] = s·c[idx_i]
  // with its group's scale s (one float product), and γ = 1.
  float decode_head_rotated(const uint8_t* src, float* y) const;

 private:
  // Grouped: the bits of the group holding coordinate i, and the byte offset of that group.
  int group_bits(int64_t i) const { return bits_lo_ && i >= head_dim_ / 2 ? bits_lo_ : bits_; }
  size_t group_offset(int64_t i) const;
  // tqNg: one group's coordinates y [kTqGroup] -> its bytes at dst (scale, indices), coded
  // with `bits` (bits_ or bits_lo_) and that width's codebook.
  void encode_group(const double* y, int bits, uint8_t* dst) const;
  // tqN: codes u/f by the nearest centroids (u against the thresholds times f; as values,
  // codebook_[0] + the steps of the thresholds each reaches, into c [n]; n a multiple of 8)
  // and returns the cosine of u and that code times |u|.
  float code_cosine(const float* u, int64_t n, float f, float* c) const;
  // tqN: the indices of that code: idx[i] = how many thresholds b[j]·f (j < nb) u[i] reaches.
  static void threshold_counts(const float* u, int64_t n, const float* b, size_t nb, float f, uint32_t* idx);
  // tqNg: codes the group y [kTqGroup] with scale sc by the nearest centroids of the codebook
  // whose thresholds and steps are b, d [nb] (first centroid c0): the indices into n, and the
  // squared error of the decoded group as the return value.
  static float group_candidate(const float* y, float sc, const float* b, const float* d, int nb, float c0, uint32_t* n);

  int bits_, bits_lo_;
  int64_t n_head_, head_dim_, group_;
  uint64_t seed_;
  std::vector<float> signs_, codebook_, codebook_lo_;  // codebook_lo_: a split head's second half
  std::vector<double> bounds_, bounds_lo_;             // 2^bits - 1 decision thresholds (midpoints of centroids)
  std::vector<float> bounds_f_, steps_f_;              // bounds_ in float; codebook_[k+1] - codebook_[k]
  std::vector<float> bounds_lo_f_, steps_lo_f_;        // the same of codebook_lo_
};

}  // namespace sluice
