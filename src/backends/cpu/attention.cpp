// backends/cpu/attention: one-pass online-softmax attention (flash-attention style) over the
// cache as stored — f16 halves, q8_0/q4_0 blocks and tq codebook indices read in place by the
// fused kernels of attn_kernels.h (tq in the rotated space; q8_0 K scored on int8 against the
// query's Q8_0 quantization, as llama.cpp does), f32 rows by Kernels' gemm_f32 /
// axpy_rows_f32, bf16 (and heads that are not whole 32-element blocks) decoded one head at a
// time — with split-KV for decode.
// Legend: T = tokens, H = query heads, Hkv = KV heads, Dk/Dv = head dims, N = cached
// positions, S = positions per split.
//
// Rotated-codebook (tq) caches: R is orthonormal, so q·k = (Rq)·(Rk); the query is rotated
// once per (token, head, split) and each score is γ·Σ_i c[idx_i]·(Rq)_i from the codebook.
// The V sum accumulates in the rotated space (Σ_p w_p·γ_p·c_p) and is rotated back once per
// (token, head) at the end. No dequantized copy of the cache is made.
//
// GQA: a work unit is one KV head with its group of H/Hkv query heads, so each K and V row
// is read (or decoded) once per group rather than once per query head.
//
// Splits: each row's visible positions are cut into splits of S positions (S from the model's
// shapes: never from the batch or the thread count). Each split runs the one-pass kernel from
// a fresh state, leaving (max m, sum l, unnormalized acc), and the splits are folded into the
// row's result in split order (merge_split). When a batch has few (token, head) rows (decode)
// the splits run in parallel and a second pass folds them; otherwise units of 4 tokens
// (attend_tile) fold each row's splits as they go. Same operations either way, so a row's result is bitwise the same whatever batch it
// came in (a prompt-cache hit that evaluates 17 tokens answers as the whole prompt evaluated
// at once) and for any number of threads. With a single split the arithmetic is exactly the
// one-pass kernel.
#include "backends/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "backends/cpu/attn_kernels.h"
#include "backends/cpu/kernels.h"
#include "core/error.h"
#include "kvcodec/kvcodec.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace sluice::cpu {
namespace {

// Positions per online-softmax block.
constexpr int64_t kAttnBlock = 64;
// Positions per split (a multiple of kAttnBlock), and the row count under which a batch runs
// its splits in parallel: decode has T·H = H rows, fewer than the threads of a big machine can
// take. Splits are kSplitPerHead·Hkv positions, at most kSplit, so every 1024 positions give
// a decode at least 8 units (Hkv·1024/S) whatever the KV heads (MLA's single latent head:
// splits of 128). Each unit costs a fixed part (the query quantized or rotated, the partial
// written and folded), so no shorter than that: with splits of 128 at 4 KV heads (32K
// positions, q8_0 K / q4_0 V, 1 thread, AMD EPYC Zen 4) attention took 7.1-7.2 ms per layer
// against 6.3-6.4 at 512 (f16 12.1-12.3 vs 11.7-11.9).
constexpr int64_t kSplit = 512, kSplitPerHead = 128;
constexpr int64_t kSplitMaxRows = 256;

struct Side {
  DType type;
  const uint8_t* base;
  size_t row_bytes;
  const TqCodec* tq;
  int64_t D;
  // The fused kernels for this side (null: f32 in place, or the decode path), the bytes of
  // one KV head within a row (0 if a head is not whole blocks), and the tq codebook.
  const AttnKvOps* ops = nullptr;
  size_t head_bytes = 0;
  const float* cb = nullptr;
  // q8_0 K: scores on int8, as llama.cpp scores a q8_0 K — the query rows quantized to Q8_0
  // (quantize_q8, or quant/'s quantize_row where null), then kernels.h's Q8Ops gemm with the
  // K heads as weight rows (q8), or AttnKernels::q8_0_scores (q8_scores: the same bits); null
  // otherwise.
  const Q8Ops* q8 = nullptr;
  void (*quantize_q8)(const float* x, void* y, int64_t n) = nullptr;
  decltype(AttnKernels::q8_0_scores) q8_scores = nullptr;
  // q8_0 / q4_0 V: its sums on integers (attn_kernels.h's axpy_i16), where the level has them.
  AttnAxpyI16 axpy_i16 = nullptr;
};

struct Ctx {
  const Kernels& k;
  const AttentionArgs& a;
  Side ks, vs;
};

// Where positions are read from: the f16 sink rows (AttentionArgs::k_sink / v_sink) below
// n_sink_k / n_sink_v, the cache above. A split is attended in pieces cut at the two counts,
// each with the Ctx whose sides hold its positions, in position order.
struct Pieces {
  const Ctx *cache, *sink_kv, *sink_k, *sink_v;
  int64_t n_sink_k, n_sink_v;
  int64_t cut[2];  // the two counts, smaller first
  const Ctx& at(int64_t p) const {
    return p < n_sink_k ? (p < n_sink_v ? *sink_kv : *sink_k) : (p < n_sink_v ? *sink_v : *cache);
  }
};

// Sets the fused-kernel fields of s when its type has them and D is whole 32-element blocks
// (so a q8_0/q4_0 head is whole blocks; every tq head dim >= 32 is a power of two).
// SLUICE_CPU_ATTN_FUSED=0 turns the fused kernels off (the per-head decode path and
// Kernels' gemm_f16/axpy_rows_f16 run instead): an A/B switch for benchmarks, read once.
// An A/B switch: false when the environment sets `name` to 0.
bool env_switch_on(const char* name) {
  const char* e = std::getenv(name);
  return !(e && std::string_view(e) == "0");
}
bool fused_enabled() {
  static const bool on = env_switch_on("SLUICE_CPU_ATTN_FUSED");
  return on;
}

// SLUICE_CPU_ATTN_V_I16=0 keeps a q8_0 / q4_0 V's sums in float (the fused axpy): an A/B
// switch for benchmarks and KLD runs, read once.
bool v_i16_enabled() {
  static const bool on = env_switch_on("SLUICE_CPU_ATTN_V_I16");
  return on;
}

// head_bytes is also what the block prefetch fetches (0 = nothing: a head that is not whole
// blocks). is_v: the V side, which may take the integer sums.
void bind_fused(Side& s, const AttnKernels& ak, const Q8Kernels& q8k, bool is_v) {
  if (s.tq) {
    s.head_bytes = s.tq->head_bytes();
    s.cb = s.tq->bits_lo() ? tq_split_codebook() : s.tq->codebook().data();
  } else if (s.type == DType::F32 || s.type == DType::F16 || s.type == DType::BF16) {
    s.head_bytes = static_cast<size_t>(s.D) * (s.type == DType::F32 ? 4 : 2);
  } else if (const auto& tr = dtype_traits(s.type); s.D % tr.block_size == 0) {
    s.head_bytes = static_cast<size_t>(s.D / tr.block_size) * tr.block_bytes;
  }
  s.ops = s.D % 32 == 0 && fused_enabled() ? ak.get(s.type) : nullptr;
  // q8_0 K is scored on int8 with or without the fused kernels (what is scored must not depend
  // on an A/B switch; the ref backend scores the same quantized query).
  if (s.type == DType::Q8_0 && s.D % 32 == 0) {
    s.q8 = q8k.get(DType::Q8_0);
    s.quantize_q8 = q8k.quantize_q8_0;
    if (s.ops && s.D <= 32 * kQ8ScoresMaxBlocks) s.q8_scores = ak.q8_0_scores;
  }
  if (is_v && s.ops && s.D <= 32 * kQ8ScoresMaxBlocks && v_i16_enabled()) s.axpy_i16 = ak.axpy_i16(s.type);
}

// Head hk of a block-quantized (or bf16) cache row of Hkv·D elements, decoded to float.
// Decodes just the head when D is a whole number of blocks, else the whole row (into buf,
// Hkv·D floats) and points at the head.
const float* decode_head(const Kernels& k, DType t, const uint8_t* row, int64_t hk, int64_t D, int64_t Hkv,
                         float* buf) {
  const auto& tr = dtype_traits(t);
  const QuantOps* q = k.quant(t);
  if (D % tr.block_size == 0) {
    const uint8_t* src = row + static_cast<size_t>(hk * D / tr.block_size) * tr.block_bytes;
    q ? q->decode(src, buf, D) : dequantize_row(t, src, buf, D);
    return buf;
  }
  q ? q->decode(row, buf, Hkv * D) : dequantize_row(t, row, buf, Hkv * D);
  return buf + hk * D;
}

// Cache rows are [Hkv][D], so one KV head's positions are row_bytes apart, a stride the
// hardware prefetchers follow poorly (attn_kernels_impl.h: the fused kernels prefetch a few
// positions ahead themselves). The V kernel's first pass reads every γ (tq) of the block at
// once, so each block also asks for its V heads (every cache line, into L2) before computing
// its scores: at 16K positions, q8_0 K + tq4 V, 1 thread, this took the layer from 7.0 to
// 5.8 ms; asking for the next block's K heads the same way instead made it slower (10.6 ms).
// Prefetches never fault, so addresses past the cache's end are harmless.
void prefetch_heads(const uint8_t* h, size_t stride, int64_t n, size_t bytes) {
  if (bytes == 0) return;
  for (int64_t j = 0; j < n; ++j, h += stride) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(h + o, 0, 2);
    __builtin_prefetch(h + bytes - 1, 0, 2);  // the line a straddling head ends in
  }
}

template <class T>
struct Scratch {
  std::vector<T> v;
  T* get(size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};
thread_local Scratch<float> tl_scratch;
thread_local Scratch<uint8_t> tl_q8;  // the query rows quantized for a q8_0 K (quantize_query)

// Bytes of one query row quantized to Q8_0 for a q8_0 K of head dim Dk.
size_t q8_row_bytes(int64_t Dk) { return static_cast<size_t>(Dk / QK8_0) * sizeof(block_q8_0); }

// The n query rows q (Dk each) quantized to Q8_0 when the cache's K is scored on int8
// (Side::q8), in tl_q8; else null. Once per work unit, not per block: every block of the
// unit scores the same rows (per block it was ~7% of a 32K-position decode's attention).
const uint8_t* quantize_query(const Side& ks, const float* q, int64_t n) {
  if (!ks.q8) return nullptr;
  const size_t qb = q8_row_bytes(ks.D);
  uint8_t* qq = tl_q8.get(static_cast<size_t>(n) * qb);
  for (int64_t r = 0; r < n; ++r) {
    if (ks.quantize_q8)
      ks.quantize_q8(q + r * ks.D, qq + r * qb, ks.D);
    else
      quantize_row(DType::Q8_0, q + r * ks.D, qq + r * qb, ks.D);
  }
  return qq;
}

// One block [p0, p0 + nb) of KV head hk's positions against G query rows (q: G rows of Dk,
// already rotated when K is tq): score[g·B + j] = q_g · k_(p0+j) (q8_0 K: q_g as its Q8_0
// quantization qq, quantize_query's, on int8 — Side::q8). Each score is the same dot
// product whatever G, nb or the other rows (attn_kernels.h's contract; Kernels' gemm_f32 /
// dot_f32 likewise), so rows may share a call.
void block_scores(const Ctx& c, const float* q, const uint8_t* qq, int64_t G, int64_t hk, int64_t p0, int64_t nb,
                  float* score, float* kbuf) {
  const Kernels& k = c.k;
  const int64_t Dk = c.ks.D, Hkv = c.a.n_head_kv, B = kAttnBlock;
  const uint8_t* k0 = c.ks.base + p0 * c.ks.row_bytes;
  prefetch_heads(c.vs.base + p0 * c.vs.row_bytes + hk * c.vs.head_bytes, c.vs.row_bytes, nb, c.vs.head_bytes);
  if (c.ks.q8) {
    if (c.ks.q8_scores)
      c.ks.q8_scores(k0 + hk * c.ks.head_bytes, c.ks.row_bytes, nb, reinterpret_cast<const block_q8_0*>(qq), G, Dk,
                     score, B);
    else
      c.ks.q8->gemm(k0 + hk * c.ks.head_bytes, c.ks.row_bytes, nb, qq, q8_row_bytes(Dk), G, Dk, score, B);
  } else if (c.ks.ops && c.ks.ops->scores) {
    c.ks.ops->scores(k0 + hk * c.ks.head_bytes, c.ks.row_bytes, nb, q, G, Dk, c.ks.cb, score, B);
  } else if (c.ks.tq) {
    const size_t hb = c.ks.tq->head_bytes();
    for (int64_t j = 0; j < nb; ++j) {
      const float gm = c.ks.tq->decode_head_rotated(k0 + j * c.ks.row_bytes + hk * hb, kbuf);
      for (int64_t g = 0; g < G; ++g) score[g * B + j] = gm * k.dot_f32(kbuf, q + g * Dk, Dk);
    }
  } else if (c.ks.type == DType::F32) {
    k.gemm_f32(reinterpret_cast<const float*>(k0) + hk * Dk, c.ks.row_bytes / 4, nb, q, Dk, G, Dk, score, B);
  } else if (c.ks.type == DType::F16) {
    k.gemm_f16(reinterpret_cast<const uint16_t*>(k0) + hk * Dk, c.ks.row_bytes / 2, nb, q, Dk, G, Dk, score, B);
  } else {
    for (int64_t j = 0; j < nb; ++j) {
      const float* kr = decode_head(k, c.ks.type, k0 + j * c.ks.row_bytes, hk, Dk, Hkv, kbuf);
      for (int64_t g = 0; g < G; ++g) score[g * B + j] = k.dot_f32(kr, q + g * Dk, Dk);
    }
  }
}

// The online-softmax step of one row over its first nb block scores sg: scaled, the running
// max m and sum l updated (acc rescaled when the max grows), sg replaced by the weights.
void block_softmax(const Kernels& k, float scale, float* sg, int64_t nb, float* ag, int64_t Dv, float& m, float& l) {
  for (int64_t j = 0; j < nb; ++j) sg[j] *= scale;
  const float m_new = std::max(m, k.max(sg, nb));
  if (m_new > m && l > 0.0f) {
    const float cf = std::exp(m - m_new);
    k.scale_mul(ag, cf, nullptr, ag, Dv);
    l *= cf;
  }
  m = m_new;
  l += k.exp_sub_sum(sg, m_new, nb);
}

// acc[g·Dv + i] += Σ_j score[g·B + j]·V_(p0+j)[i] over j < nb in order, for G rows.
void block_axpy(const Ctx& c, const float* score, int64_t G, int64_t hk, int64_t p0, int64_t nb, float* acc,
                float* vbuf) {
  const Kernels& k = c.k;
  const int64_t Dv = c.vs.D, Hkv = c.a.n_head_kv, B = kAttnBlock;
  const uint8_t* v0 = c.vs.base + p0 * c.vs.row_bytes;
  if (c.vs.axpy_i16) {
    c.vs.axpy_i16(score, B, v0 + hk * c.vs.head_bytes, c.vs.row_bytes, nb, G, Dv, acc);
  } else if (c.vs.ops) {
    c.vs.ops->axpy(score, B, v0 + hk * c.vs.head_bytes, c.vs.row_bytes, nb, G, Dv, c.vs.cb, acc);
  } else if (c.vs.tq) {
    const size_t hb = c.vs.tq->head_bytes();
    for (int64_t j = 0; j < nb; ++j) {
      const float gm = c.vs.tq->decode_head_rotated(v0 + j * c.vs.row_bytes + hk * hb, vbuf);
      for (int64_t g = 0; g < G; ++g) k.axpy_f32(score[g * B + j] * gm, vbuf, acc + g * Dv, Dv);
    }
  } else if (c.vs.type == DType::F32) {
    for (int64_t g = 0; g < G; ++g)
      k.axpy_rows_f32(score + g * B, reinterpret_cast<const float*>(v0) + hk * Dv, c.vs.row_bytes / 4, nb, acc + g * Dv,
                      Dv);
  } else if (c.vs.type == DType::F16) {
    for (int64_t g = 0; g < G; ++g)
      k.axpy_rows_f16(score + g * B, reinterpret_cast<const uint16_t*>(v0) + hk * Dv, c.vs.row_bytes / 2, nb,
                      acc + g * Dv, Dv);
  } else {
    for (int64_t j = 0; j < nb; ++j) {
      const float* vr = decode_head(k, c.vs.type, v0 + j * c.vs.row_bytes, hk, Dv, Hkv, vbuf);
      for (int64_t g = 0; g < G; ++g) k.axpy_f32(score[g * B + j], vr, acc + g * Dv, Dv);
    }
  }
}

// The G query heads of one KV head against positions [p_begin, p_end) of KV head hk, in
// blocks of kAttnBlock from p_begin, continuing the online softmax in (acc, m, l).
void attend_group(const Ctx& c, const float* q, const uint8_t* qq, int64_t G, int64_t hk, int64_t p_begin,
                  int64_t p_end, float* score, float* acc, float* kbuf, float* vbuf, float* m, float* l) {
  const int64_t Dv = c.vs.D, B = kAttnBlock;
  for (int64_t p0 = p_begin; p0 < p_end; p0 += B) {
    const int64_t nb = std::min(B, p_end - p0);
    block_scores(c, q, qq, G, hk, p0, nb, score, kbuf);
    for (int64_t g = 0; g < G; ++g) block_softmax(c.k, c.a.scale, score + g * B, nb, acc + g * Dv, Dv, m[g], l[g]);
    block_axpy(c, score, G, hk, p0, nb, acc, vbuf);
  }
}

// Folds one split's (ms, ls, as) into a row's running (m, l, acc): the online softmax's
// rescale, once per split. The first split into the empty state (m = -inf, l = 0, acc = 0) is
// exact: weights 0 and 1.
void merge_split(const Kernels& k, float ms, float ls, const float* as, float& m, float& l, float* acc, int64_t Dv) {
  const float mn = std::max(m, ms);
  const float wa = std::exp(m - mn), ws = std::exp(ms - mn);
  m = mn;
  l = l * wa + ls * ws;
  k.scale_mul(acc, wa, nullptr, acc, Dv);
  k.axpy_f32(ws, as, acc, Dv);
}

// acc (V storage space, already normalized) -> out (original space).
void finish(const Ctx& c, const float* acc, float* out) {
  if (c.vs.tq)
    c.vs.tq->unrotate(acc, out);
  else
    std::memcpy(out, acc, static_cast<size_t>(c.vs.D) * sizeof(float));
}

// Tokens per unit of a batch whose rows fold their own splits (attend_tile): their kTileTokens·G
// query rows share each block's K and V reads and the kernels' widest register tiles (G alone
// is often 2 or 3, which takes their narrow, per-dot-reduced tiles).
constexpr int64_t kTileTokens = 4;

// attend_tile's buffers, for R = kTileTokens·G rows: score [R][kAttnBlock], acc, row_acc
// [R][Dv], m, l, row_m, row_l [R], and the decode buffers kbuf, vbuf.
struct TileScratch {
  float *score, *acc, *m, *l, *row_acc, *row_m, *row_l, *kbuf, *vbuf;
};

// Tokens t0 .. t0 + nt of the batch (nv[i] visible positions each, nondecreasing in i) against
// KV head hk: every row runs exactly its own unit's operations (splits of S from position 0,
// blocks of kAttnBlock from each split's start, the same scores, softmax steps, V sums and
// folds in the same order), while the rows of the tokens still inside a block share its calls:
// scores for the longest of them (a score does not depend on the others), the V sum for those
// that take the whole block together and one call per token that ends inside it. q: the nt·G
// query rows (rotated when K is tq), token-major.
void attend_tile(const Pieces& pc, const float* q, int64_t t0, int64_t nt, const int64_t* nv, int64_t G, int64_t hk,
                 int64_t S, const TileScratch& w) {
  const Ctx& c = *pc.cache;
  const Kernels& k = c.k;
  const int64_t Dk = c.ks.D, Dv = c.vs.D, B = kAttnBlock, H = c.a.n_head, h0 = hk * G;
  auto out_row = [&](int64_t i, int64_t g) { return c.a.out + ((t0 + i) * H + h0 + g) * Dv; };
  auto n_split = [&](int64_t i) { return std::max<int64_t>(1, (nv[i] + S - 1) / S); };
  int64_t i0 = 0;  // tokens that see no position
  for (; i0 < nt && nv[i0] == 0; ++i0)
    for (int64_t g = 0; g < G; ++g) std::fill(out_row(i0, g), out_row(i0, g) + Dv, 0.0f);
  if (i0 == nt) return;
  const uint8_t* qq = quantize_query(c.ks, q, nt * G);
  std::fill(w.row_acc + i0 * G * Dv, w.row_acc + nt * G * Dv, 0.0f);
  std::fill(w.row_m + i0 * G, w.row_m + nt * G, -std::numeric_limits<float>::infinity());
  std::fill(w.row_l + i0 * G, w.row_l + nt * G, 0.0f);
  for (int64_t s = 0, ns_max = n_split(nt - 1); s < ns_max; ++s) {
    auto split_end = [&](int64_t i) { return std::min(nv[i], (s + 1) * S); };
    int64_t ia = i0;  // the first token with positions in split s
    while (nv[ia] <= s * S) ++ia;
    std::fill(w.acc + ia * G * Dv, w.acc + nt * G * Dv, 0.0f);
    std::fill(w.m + ia * G, w.m + nt * G, -std::numeric_limits<float>::infinity());
    std::fill(w.l + ia * G, w.l + nt * G, 0.0f);
    const int64_t end_max = split_end(nt - 1);
    int64_t p = s * S;
    for (const int64_t cut : {pc.cut[0], pc.cut[1], end_max}) {
      const int64_t e = std::min(cut, end_max);
      if (e <= p) continue;
      const Ctx& cc = pc.at(p);
      auto row_end = [&](int64_t i) { return std::min(e, split_end(i)); };
      for (int64_t p0 = p; p0 < e; p0 += B) {
        int64_t ib = ia;  // the first token still inside this block
        while (row_end(ib) <= p0) ++ib;
        const int64_t nb_max = std::min(B, e - p0);
        block_scores(cc, q + ib * G * Dk, qq ? qq + ib * G * q8_row_bytes(Dk) : nullptr, (nt - ib) * G, hk, p0, nb_max,
                     w.score, w.kbuf);
        int64_t full = nt;  // the first token that takes the whole block (all after it do)
        for (int64_t i = ib; i < nt; ++i) {
          const int64_t nb = std::min(B, row_end(i) - p0);
          if (nb == nb_max && full == nt) full = i;
          for (int64_t g = 0; g < G; ++g) {
            const int64_t r = i * G + g;
            block_softmax(k, c.a.scale, w.score + ((i - ib) * G + g) * B, nb, w.acc + r * Dv, Dv, w.m[r], w.l[r]);
          }
        }
        for (int64_t i = ib; i < full; ++i)
          block_axpy(cc, w.score + (i - ib) * G * B, G, hk, p0, std::min(B, row_end(i) - p0), w.acc + i * G * Dv,
                     w.vbuf);
        block_axpy(cc, w.score + (full - ib) * G * B, (nt - full) * G, hk, p0, nb_max, w.acc + full * G * Dv, w.vbuf);
      }
      p = e;
    }
    for (int64_t i = ia; i < nt; ++i) {
      const int64_t ns = n_split(i);
      for (int64_t g = 0; g < G; ++g) {
        const int64_t r = i * G + g;
        float* ag = w.acc + r * Dv;
        if (ns == 1) {
          k.scale_mul(ag, 1.0f / w.l[r], nullptr, ag, Dv);
          finish(c, ag, out_row(i, g));
          continue;
        }
        float* ra = w.row_acc + r * Dv;
        merge_split(k, w.m[r], w.l[r], ag, w.row_m[r], w.row_l[r], ra, Dv);
        if (s == ns - 1) {
          k.scale_mul(ra, 1.0f / w.row_l[r], nullptr, ra, Dv);
          finish(c, ra, out_row(i, g));
        }
      }
    }
  }
}

void check_side(DType t, const TqCodec* tq, size_t row_bytes, int64_t Hkv, int64_t D, const char* side) {
  if (kv_type_is_tq(t)) {
    if (!tq || tq->type() != t) fail("attention: ", side, " cache type ", kv_type_name(t), " comes without its codec");
    if (tq->n_head() != Hkv || tq->head_dim() != D)
      fail("attention: ", side, " tq codec is for ", tq->n_head(), " heads of ", tq->head_dim(), ", attention has ",
           Hkv, " of ", D);
    if (row_bytes < tq->row_bytes())
      fail("attention: ", side, " cache row stride ", row_bytes, " < tq row ", tq->row_bytes());
    return;
  }
  if (tq) fail("attention: ", side, " cache type ", kv_type_name(t), " given a tq codec");
  if (t != DType::F32 && t != DType::F16 && !quant_supported(t))
    fail("cpu backend: attention on unsupported cache type ", kv_type_name(t));
  // F32/F16 rows are read as float/half arrays in place: the stride must keep them aligned.
  if ((t == DType::F32 && row_bytes % 4) || (t == DType::F16 && row_bytes % 2))
    fail("attention: ", side, " cache row stride ", row_bytes, " bytes is not a whole number of elements");
}

template <class F>
void run(ThreadPool& pool, int64_t min_work, int64_t n, int64_t work, F&& body) {
  if (n <= 0) return;
  if (work < min_work || pool.size() == 1) {
    body(int64_t{0}, n, 0);
    return;
  }
  pool.parallel_for(n, body);
}

}  // namespace

void attention(const Kernels& k, ThreadPool& pool, int64_t min_parallel_work, const AttentionArgs& a) {
  const int64_t T = a.n_tok, H = a.n_head, Hkv = a.n_head_kv, Dk = a.head_dim_k, Dv = a.head_dim_v, N = a.n_kv;
  if (Hkv <= 0 || H % Hkv != 0) fail("attention: n_head ", H, " is not a multiple of n_head_kv ", Hkv);
  check_side(a.k_type, a.k_tq, a.k_row_bytes, Hkv, Dk, "K");
  check_side(a.v_type, a.v_tq, a.v_row_bytes, Hkv, Dv, "V");
  Ctx c{k,
        a,
        {a.k_type, static_cast<const uint8_t*>(a.k), a.k_row_bytes, a.k_tq, Dk},
        {a.v_type, static_cast<const uint8_t*>(a.v), a.v_row_bytes, a.v_tq, Dv}};
  const AttnKernels& ak = attn_kernels_for(k.isa);
  const Q8Kernels& q8k = q8_kernels_for(k.isa);
  bind_fused(c.ks, ak, q8k, false);
  bind_fused(c.vs, ak, q8k, true);
  // The sink rows as f16 sides (AttentionArgs::k_sink): Ctxs for positions below n_sink_k
  // and/or n_sink_v; attend_group's choices of kernel look only at the Side.
  auto sink_side = [&](const uint16_t* rows, int64_t D) {
    Side sd{DType::F16, reinterpret_cast<const uint8_t*>(rows), static_cast<size_t>(Hkv * D) * 2, nullptr, D};
    bind_fused(sd, ak, q8k, false);  // f16: no integer sums
    return sd;
  };
  if ((a.n_sink_k > 0 && !a.k_sink) || (a.n_sink_v > 0 && !a.v_sink)) fail("attention: sink positions without rows");
  const Side ks_sink = a.n_sink_k > 0 ? sink_side(a.k_sink, Dk) : c.ks;
  const Side vs_sink = a.n_sink_v > 0 ? sink_side(a.v_sink, Dv) : c.vs;
  const Ctx c_sink_kv{k, a, ks_sink, vs_sink}, c_sink_k{k, a, ks_sink, c.vs}, c_sink_v{k, a, c.ks, vs_sink};
  const Pieces pc{&c,
                  &c_sink_kv,
                  &c_sink_k,
                  &c_sink_v,
                  a.n_sink_k,
                  a.n_sink_v,
                  {std::min(a.n_sink_k, a.n_sink_v), std::max(a.n_sink_k, a.n_sink_v)}};
  const int64_t group = H / Hkv;
  auto n_vis = [&](int64_t t) { return std::max<int64_t>(0, std::min(N, a.pos0 + t + 1)); };
  // Splits per row (see the header comment); `parallel`: they are units of their own.
  const bool parallel = T * H < kSplitMaxRows;
  const int64_t S = std::min(kSplit, kSplitPerHead * Hkv);  // shapes only, never the batch or threads
  auto n_split = [&](int64_t t) { return std::max<int64_t>(1, (n_vis(t) + S - 1) / S); };
  const int64_t work = T * H * std::max<int64_t>(1, std::min(N, a.pos0 + T)) * (Dk + Dv);

  // A batch whose rows fold their own splits: units of kTileTokens tokens and one KV head
  // (attend_tile).
  if (!parallel) {
    const int64_t G = group, R = kTileTokens * G, n_tiles = (T + kTileTokens - 1) / kTileTokens;
    run(pool, min_parallel_work, n_tiles * Hkv, work, [&](int64_t u0, int64_t u1, int) {
      TileScratch w;
      w.score = tl_scratch.get(static_cast<size_t>(R * (kAttnBlock + 2 * Dv + Dk + 4) + Hkv * (Dk + Dv)));
      w.acc = w.score + R * kAttnBlock;
      float* qr = w.acc + R * Dv;
      w.m = qr + R * Dk;
      w.l = w.m + R;
      w.row_acc = w.l + R;
      w.row_m = w.row_acc + R * Dv;
      w.row_l = w.row_m + R;
      w.kbuf = w.row_l + R;
      w.vbuf = w.kbuf + Hkv * Dk;
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t t0 = (u / Hkv) * kTileTokens, hk = u % Hkv, nt = std::min(kTileTokens, T - t0);
        int64_t nv[kTileTokens];
        for (int64_t i = 0; i < nt; ++i) {
          nv[i] = n_vis(t0 + i);
          for (int64_t g = 0; g < G; ++g) {
            const float* src = a.q + ((t0 + i) * H + hk * G + g) * Dk;
            float* dst = qr + (i * G + g) * Dk;
            if (c.ks.tq)
              c.ks.tq->rotate(src, dst);
            else
              std::memcpy(dst, src, static_cast<size_t>(Dk) * sizeof(float));
          }
        }
        attend_tile(pc, qr, t0, nt, nv, G, hk, S, w);
      }
    });
    return;
  }

  // A batch of few rows (decode): units (t, s, hk) in that order — one KV head's group of
  // query heads, one split; unit_begin[t] = first unit of token t. Split-major: a thread's
  // consecutive units read the same S cache rows, one KV head each, so the lines two heads
  // share and the rows' pages are still cached when the next head comes (32K positions,
  // Hkv 4, D 128, 2 threads, AMD EPYC: 9.5-9.9 -> 8.0 ms per layer for f16, 7.9-8.9 -> 6.6-7.0
  // for q8_0/q4_0 against head-major units). Partials of the rows of
  // several splits, per (t, h, s): [m, l, acc[Dv]] at part_begin[t] + h·ns + s, folded after.
  std::vector<int64_t> unit_begin(static_cast<size_t>(T + 1), 0), part_begin(static_cast<size_t>(T + 1), 0);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t ns = n_split(t);
    unit_begin[t + 1] = unit_begin[t] + Hkv * ns;
    part_begin[t + 1] = part_begin[t] + (ns > 1 ? H * ns : 0);
  }
  const int64_t n_units = unit_begin[T];
  const bool any_partial = part_begin[T] > 0;
  thread_local std::vector<float> partial;
  if (any_partial) partial.resize(static_cast<size_t>(part_begin[T] * (Dv + 2)));
  float* part = partial.data();

  run(pool, min_parallel_work, n_units, work, [&](int64_t u0, int64_t u1, int) {
    // Scratch: scores [G][kAttnBlock], acc [G][Dv], rotated q [G][Dk], m [G], l [G], decode
    // buffers [Hkv·(Dk+Dv)].
    const int64_t G = group;
    float* score = tl_scratch.get(static_cast<size_t>(G * (kAttnBlock + Dv + Dk + 2) + Hkv * (Dk + Dv)));
    float* acc = score + G * kAttnBlock;
    float* qr = acc + G * Dv;
    float* m = qr + G * Dk;
    float* l = m + G;
    float* kbuf = l + G;
    float* vbuf = kbuf + Hkv * Dk;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t t = std::upper_bound(unit_begin.begin(), unit_begin.end(), u) - unit_begin.begin() - 1;
      const int64_t ns = n_split(t), r = u - unit_begin[t], hk = r % Hkv, s = r / Hkv, h0 = hk * G;
      const int64_t nv = n_vis(t);
      if (nv == 0) {
        std::fill(a.out + (t * H + h0) * Dv, a.out + (t * H + h0 + G) * Dv, 0.0f);
        continue;
      }
      const float* q = a.q + (t * H + h0) * Dk;  // the group's G query rows are contiguous
      if (c.ks.tq) {
        for (int64_t g = 0; g < G; ++g) c.ks.tq->rotate(q + g * Dk, qr + g * Dk);
        q = qr;
      }
      const int64_t p_end = std::min(nv, (s + 1) * S);
      std::fill(acc, acc + G * Dv, 0.0f);
      std::fill(m, m + G, -std::numeric_limits<float>::infinity());
      std::fill(l, l + G, 0.0f);
      const uint8_t* qq = quantize_query(c.ks, q, G);
      int64_t p = s * S;
      for (const int64_t cut : {pc.cut[0], pc.cut[1], p_end}) {
        const int64_t e = std::min(cut, p_end);
        if (e <= p) continue;
        attend_group(pc.at(p), q, qq, G, hk, p, e, score, acc, kbuf, vbuf, m, l);
        p = e;
      }
      for (int64_t g = 0; g < G; ++g) {
        float* ag = acc + g * Dv;
        if (ns == 1) {
          k.scale_mul(ag, 1.0f / l[g], nullptr, ag, Dv);
          finish(c, ag, a.out + (t * H + h0 + g) * Dv);
        } else {
          float* pp = part + (part_begin[t] + (h0 + g) * ns + s) * (Dv + 2);
          pp[0] = m[g];
          pp[1] = l[g];
          std::memcpy(pp + 2, ag, static_cast<size_t>(Dv) * sizeof(float));
        }
      }
    }
  });
  if (!any_partial) return;

  // Fold the splits of each row, in split order (as attend_tile does as it goes).
  run(pool, min_parallel_work, T * H, T * H * Dv * 4, [&](int64_t r0, int64_t r1, int) {
    float* acc = tl_scratch.get(static_cast<size_t>(Dv));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r / H, h = r % H, ns = n_split(t);
      if (ns == 1) continue;
      const float* p0 = part + (part_begin[t] + h * ns) * (Dv + 2);
      float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
      std::fill(acc, acc + Dv, 0.0f);
      for (int64_t s = 0; s < ns; ++s) {
        const float* p = p0 + s * (Dv + 2);
        merge_split(k, p[0], p[1], p + 2, m, l, acc, Dv);
      }
      k.scale_mul(acc, 1.0f / l, nullptr, acc, Dv);
      finish(c, acc, a.out + (t * H + h) * Dv);
    }
  });
}

}  // namespace sluice::cpu
