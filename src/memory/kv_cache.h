// memory/kv_cache: per-layer K and V storage, one row per position, each side in its own
// codec (kvcodec/kvcodec.h: f16 by default as llama.cpp, f32 for exactness checks, bf16, the
// ggml block types q8_0/q4_0, and the rotated-codebook tq2/tq3/tq4/tq8), and the policy that
// picks the codecs a model's geometry can really use.
//
// Row layout: position p of layer l holds [Hkv][D] elements. Block types (q8_0, q4_0: 32
// elements per block) form their blocks over that whole row, so a head of D = 128 is 4 whole
// blocks, and with D < 32 (stories260K: D = 8, Hkv = 4) one block spans several heads; the
// row must then be a multiple of 32 elements, else the policy falls back to f16. tq codes
// every head on its own (rotation, codebook, norm per head), so it needs D a power of two
// (>= 8), else the policy falls back to q8_0.
//
// Rotation (kvcodec.h KvRotation, on by default for q8_0 and q4_0 as in llama.cpp): a side
// stores R·k / R·v, each head's blocks of 64 elements rotated by the normalized Hadamard
// matrix before encoding, when its head dim is a multiple of 64 (llama.cpp's condition);
// other head dims take the largest power-of-two block that divides them, down to 16 (D = 96:
// 32; D = 80: 16; D = 72: none). SmolLM2-135M q4_0/q4_0 (D = 64), mean KLD vs f16 over 765
// tokens: unrotated 0.108, blocks of 16 0.043, of 32 0.041, of 64 0.034. Attention over it
// needs the queries rotated (query_for_cache) when K is rotated and the output rotated back
// (output_from_cache) when V is; models/blocks' attend_batch does both, so every caller of
// store() must attend through it (or do the same). tq sides are never rotated this way (tq
// rotates inside its codec).
//
// K mean removal (on by default for tq K sides): a tq K side stores k - μ, μ one fixed vector
// per (layer, KV head). Exact: every score of a query moves by the same q·μ, which softmax
// ignores, so attention needs no change. Why: post-RoPE keys carry large per-channel offsets
// (the slowly rotating channels), which the rotation spreads over every coordinate and the
// codec then spends its range on; SmolLM2-135M mean KLD vs f16, tq4g/tq4g: 0.0257 without,
// 0.0185 with; tq4/tq4: 0.0384 -> 0.0316. μ is the mean of the first rows a sequence writes (its first run: the prompt,
// positions 1..255, leaving out BOS, often an attention sink with an unusual key) and then
// frozen: it is kept through rewinds and copied by forks (rows already stored were encoded
// against it), and set again only by a run at position 0, which no earlier row outlives
// (positions continue without a gap). V is not treated so: Σ w·(v - μ) + μ is exact too,
// but the sink row, with a near-zero value and most of the weight, then carries |μ| of
// quantization error (measured: tq4/tq4 0.0367 -> 0.0373, q4_0/q4_0 0.0300 -> 0.0333).
//
// Attention sinks (KvCacheOptions::n_sink_k / n_sink_v, --kv-sinks-k/-v; off by default):
// positions 0..n-1 of a quantized side are also kept as f16 rows in the side's storage space
// (K minus its mean, rotated by the tq codec or the Hadamard rotation, exactly what the coded
// row approximates), and attention reads those rows instead (AttentionArgs::k_sink). Why: BOS
// takes most of many heads' attention, and with the K mean removed its key k0 - μ is far
// from the others (BOS is left out of μ), so a tq code's error on it moves every score's
// share. SmolLM2-135M, mean KLD vs f16 over 765 tokens, K sink of one row: tq4/q8_0 0.0289 ->
// 0.0151, tq3g/tq3g 0.0824 -> 0.0573, tq4g/tq4g 0.0185 -> 0.0132; without a K mean it does
// not help (tq4/q8_0 --no-kv-mean 0.0320 -> 0.0353, rotated q4_0/q4_0 0.0340 -> 0.0345), and
// 4 rows of K and V do no better than 1 of each (tq3g/tq3g 0.0585, 0.0554). Cost: n·16 bits
// per element of a side over the context (0.031 bits at 512 for one row); the coded rows of
// those positions are still written and counted.
// K fit (K types that need it: tq3s, kvcodec.h): with the mean, the first run also fixes,
// per (layer, KV head), an order of the head's channels and a scale per channel, from the
// variances of its keys (minus μ) and of its query heads' queries over the same positions.
// The cost of channel i's key error in the scores is w_i = E[q_i²]·Var(k_i); the order puts
// the D/2 channels of largest w_i first (tq3s codes that half at 4 bits, the rest at 2), and
// the key is stored divided by s_i = (Var(k_i)/E[q_i²])^(1/4), the query multiplied by it
// (q·k unchanged), which makes every channel's key variance and query weight equal within a
// half, the best a rotation that spreads error evenly can get (Cauchy-Schwarz). SmolLM2-135M
// (measurements in the README's KV table): tq3s/tq3 against tq3g/tq3 at the same bits.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/anon_map.h"
#include "core/dtype.h"
#include "kvcodec/kvcodec.h"

namespace sluice {

struct KvCacheOptions {
  int64_t n_ctx = 2048;       // positions the cache holds
  DType type_k = DType::F16;  // any KV type of kvcodec/kvcodec.h
  DType type_v = DType::F16;
  // K errors are amplified by the softmax, and the more query heads share one KV head the
  // more scores each K error moves; with GQA >= 6 and K below 8 bits, K is raised to q8_0
  // (TurboQuant+ forks' observation). false keeps the requested K type.
  bool auto_asymmetric = true;
  uint64_t seed = 0x5eed5eedull;  // rotation sign seed of the tq codecs (K uses seed, V seed + 1)
  // Which sides get the Hadamard rotation (see the header comment).
  enum class Rotation {
    off,        // none (--no-kv-rotation)
    quantized,  // the q8_0 and q4_0 sides (default)
    all,        // every side but tq, f16/f32/bf16 too (exactness tests: results equal unrotated)
  };
  Rotation rotation = Rotation::quantized;
  // The largest Hadamard block (a power of two); smaller ones down to min(16, this) when the
  // head dim is not a multiple of it.
  int64_t rotation_block = 64;
  // false: the plain Hadamard, as llama.cpp; true: with a fixed random ±1 diagonal (K seed + 2,
  // V seed + 3).
  bool rotation_signs = false;
  // Which K sides store k - μ (see the header comment).
  enum class KMean {
    off,  // none (--no-kv-mean)
    tq,   // the tq sides (default)
    all,  // any type, f16/f32/bf16 too (exactness tests: results equal to no mean)
  };
  KMean k_mean = KMean::tq;
  // μ is the mean of the first run's rows at positions 1..mean_window-1 (position 0 only when
  // the run is that one row).
  int64_t mean_window = 256;
  // Attention sinks: positions 0..n_sink-1 of each quantized side (q8_0, q4_0, tq*) are also
  // kept as f16 rows in the side's storage space (minus the K mean, rotated as the codec
  // rotates), and attention reads those instead of the coded rows (see the header comment).
  int64_t n_sink_k = 0, n_sink_v = 0;
};

// What a K side's rows were encoded against, one layer (see the header's K mean and K fit).
struct KvKFit {
  std::vector<float> mean;     // [Hkv][Dk] μ; empty: none (yet), or off
  std::vector<int32_t> order;  // [Hkv][Dk]: stored coordinate j of head h is channel order[h·Dk + j]; empty: none
  std::vector<float> scale;    // [Hkv][Dk] in stored order: the key divided by it, the query multiplied
  size_t bytes() const { return (mean.size() + scale.size()) * sizeof(float) + order.size() * sizeof(int32_t); }
  bool operator==(const KvKFit&) const = default;
};

// What the cache is shaped after: the model's attention geometry.
struct KvGeometry {
  int64_t n_layer = 0;
  int64_t n_head = 0;      // query heads (for the GQA ratio)
  int64_t n_head_kv = 0;   // KV heads per row
  int64_t head_dim_k = 0;  // elements per K head
  int64_t head_dim_v = 0;  // elements per V head
};

// The options with the types the geometry allows, after the policy: auto-asymmetric K, tq
// on a head dim that is not a power of two >= 8 -> q8_0, a block type on a row that is not a
// multiple of 32 -> f16. One human-readable line per change is appended to *notes.
KvCacheOptions kv_cache_resolve(const KvCacheOptions& opt, const KvGeometry& g, std::vector<std::string>* notes);

class KvCache {
 public:
  // Applies kv_cache_resolve and prints its notes to stderr.
  KvCache(const KvGeometry& g, const KvCacheOptions& opt);
  // One head per row (k_width / v_width elements per position per layer): for callers
  // without a head structure.
  KvCache(int64_t n_layer, int64_t k_width, int64_t v_width, const KvCacheOptions& opt);

  // The most positions the cache may hold. Each layer's rows are one mapping of n_ctx rows
  // whose pages the kernel provides when written (core/anon_map.h), so nothing is copied as
  // a sequence grows; capacity() counts the rows in use for budgets, in steps of kRowStep.
  int64_t n_ctx() const { return n_ctx_; }
  static constexpr int64_t kRowStep = 256;
  int64_t capacity() const { return capacity_; }
  // Counts rows for positions 0..n_pos-1 as in use (rounded up to kRowStep, at most n_ctx).
  void reserve(int64_t n_pos);
  // Bytes the cache counts once reserve(n_pos) ran (for budgets checked before growing).
  size_t bytes_for(int64_t n_pos) const;
  // Copies rows 0..n_pos-1 of every layer from `src`, which must have this cache's geometry
  // and types (Memory::seq_fork).
  void copy_prefix(const KvCache& src, int64_t n_pos);
  // Rows 0..n_pos-1 of every layer (per layer its K rows, then its V rows) appended to `out`,
  // and the K fits they were encoded against (Memory::seq_save: the host-RAM prompt cache).
  void copy_out(int64_t n_pos, std::vector<uint8_t>& out, std::vector<KvKFit>& k_fit) const;
  // The inverse into this cache (same geometry and types): `data` holds what copy_out wrote
  // for n_stored rows, of which the first n_pos come in.
  void copy_in(const uint8_t* data, int64_t n_stored, int64_t n_pos, const std::vector<KvKFit>& k_fit);
  DType type_k() const { return type_k_; }
  DType type_v() const { return type_v_; }
  size_t k_row_bytes() const { return k_row_bytes_; }
  size_t v_row_bytes() const { return v_row_bytes_; }
  uint8_t* k_row(int64_t layer, int64_t pos) { return k_[layer].data() + pos * k_row_bytes_; }
  uint8_t* v_row(int64_t layer, int64_t pos) { return v_[layer].data() + pos * v_row_bytes_; }
  const uint8_t* k_data(int64_t layer) const { return k_[layer].data(); }
  const uint8_t* v_data(int64_t layer) const { return v_[layer].data(); }
  // Sink positions of each side (KvCacheOptions::n_sink_k/v; 0 on f32/f16/bf16 sides).
  int64_t n_sink_k() const { return n_sink_k_; }
  int64_t n_sink_v() const { return n_sink_v_; }
  // The bytes the sink rows take, every layer, K and V (counted by bytes() and bytes_for()).
  size_t sink_bytes() const;
  // The tq codecs (null for the other types).
  const TqCodec* k_codec() const { return k_tq_.get(); }
  const TqCodec* v_codec() const { return v_tq_.get(); }
  // The Hadamard rotation of each side (on() false: stored as given).
  const KvRotation& k_rotation() const { return k_rot_; }
  const KvRotation& v_rotation() const { return v_rot_; }
  size_t bytes() const;  // the rows in use (capacity()), K and V, every layer
  // Bytes per position over all layers (K + V): the number to compare codecs by.
  size_t bytes_per_token() const { return (k_row_bytes_ + v_row_bytes_) * k_.size(); }

  // Encodes one position's K row ([Hkv][Dk] floats) and V row into the cache (K's mean
  // removed and rotated first where the side has those): store_run with n = 1.
  void store(Backend& be, int64_t layer, int64_t pos, const float* k, const float* v);
  // Encodes the rows of positions pos0..pos0+n-1 (k: [n][Hkv][Dk], v: [n][Hkv][Dv]). A run
  // at position 0 (or the first run of a layer) first sets that layer's K mean (and K fit)
  // from its rows; q, the run's queries [n][H][Dk] (H the geometry's n_head), weighs the K
  // fit's channels (nullptr: every channel weighs the same).
  void store_run(Backend& be, int64_t layer, int64_t pos0, int64_t n, const float* k, const float* v,
                 const float* q = nullptr);
  // Queries q [n] (whole heads of Dk) as attention over layer's cache takes them: q itself,
  // or written to *buf in the K fit's order and scales and/or as R·q when K is rotated.
  const float* query_for_cache(Backend& be, int64_t layer, const float* q, int64_t n, std::vector<float>* buf) const;
  // Attention output [n] (whole heads of Dv) in place: back from V's rotated space (R^T·o)
  // when V is rotated.
  void output_from_cache(Backend& be, float* out, int64_t n) const;
  // The mean subtracted from layer's K rows ([Hkv][Dk]); empty when K keeps its rows as
  // given (or nothing was stored yet).
  const std::vector<float>& k_mean(int64_t layer) const { return k_fit_[layer].mean; }
  const KvKFit& k_fit(int64_t layer) const { return k_fit_[layer]; }
  // AttentionArgs with the cache fields (k, v, types, strides, codecs, n_head_kv, head
  // dims) of `layer` filled in; the caller sets q, out, token counts and scale.
  AttentionArgs attention_args(int64_t layer) const;

 private:
  void init(const KvGeometry& g, const KvCacheOptions& opt);
  // One side's row (width w) into dst: minus the mean and in the fit's order and scales (if
  // any), rotated, encoded. sink: the f16 sink row to write too (nullptr: not a sink).
  void encode_side(Backend& be, const float* x, int64_t w, const KvKFit& fit, const KvRotation& rot, const TqCodec* tq,
                   DType t, uint8_t* dst, uint16_t* sink);
  // Sets layer's K fit from a run's rows k [n][Hkv][Dk] (and queries q [n][H][Dk] or null).
  void fit_k(int64_t layer, int64_t pos0, int64_t n, const float* k, const float* q);

  int64_t rows_for(int64_t n_pos) const;

  int64_t n_ctx_ = 0;
  int64_t capacity_ = 0;  // rows allocated per layer
  KvGeometry geo_;
  DType type_k_ = DType::F16, type_v_ = DType::F16;
  size_t k_row_bytes_ = 0, v_row_bytes_ = 0;
  std::unique_ptr<TqCodec> k_tq_, v_tq_;
  KvRotation k_rot_, v_rot_;
  std::vector<float> rot_buf_;  // store(): one rotated row
  std::vector<AnonMap> k_, v_;  // per layer, n_ctx rows each
  bool k_mean_on_ = false, k_order_on_ = false;
  int64_t mean_window_ = 256;
  std::vector<KvKFit> k_fit_;                           // per layer (empty mean: none yet, or off)
  int64_t n_sink_k_ = 0, n_sink_v_ = 0;                 // sink positions per side (0: none)
  std::vector<std::vector<uint16_t>> k_sink_, v_sink_;  // per layer [n_sink][Hkv][D] f16
};

}  // namespace sluice
