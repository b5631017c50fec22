// backends/cpu: op implementations over the per-ISA kernel table (kernels.h) and the thread
// pool. Legend: T = tokens, H = query heads, Hkv = KV heads, Dk/Dv = head dims, N = cached
// positions, in = weight row length, out = weight rows.
//
// Threading: ops parallelize over independent outputs (weight-row blocks, (token, head)
// pairs, rows); each output is computed start to finish by one thread with a code path that
// does not depend on how the range was split. Small ops stay on the calling thread, because
// waking the pool costs more than they do.
#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/attention.h"
#include "backends/cpu/attn_kernels.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/linear_attn.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kvcodec/kvcodec.h"
#include "quant/mlx_affine.h"
#include "quant/quant.h"
#include "quant/rows16.h"

namespace sluice {
namespace {

// Below this many multiply-adds an op runs on the calling thread.
constexpr int64_t kMinParallelWork = 1 << 15;
// Weight rows decoded at once for a batched matmul: sized so the float block (≤ 256 KiB)
// stays in L2 while every token tile is multiplied against it.
constexpr int64_t kDecodedBlockBytes = 256 << 10;

// Rows per work unit of the int8 path, and activation rows per tile (a tile of Q8_K rows,
// ≤ 64 × 1.1 KiB per 1024 inputs, stays in L2 while a unit's weight rows sit in L1).
constexpr int64_t kQ8RowsDecode = 16, kQ8RowsBatch = 32, kQ8TokTile = 64;
// MLX affine weights take the block tiles (matmul_affine_tiles) from this many tokens: each
// 16-row unit is repacked on every call first (mlx_affine_repack_row, ~3 us per 2048-input row
// against ~25 ns per row and token that the tiles save over the affine row kernel). 12-layer
// qwen3-30b-a3b MLX 4-bit, pp512, Zen 4, 2 threads: the tiles from 9 tokens (every expert with
// its ~32 tokens repacking) 106.6 tok/s, from 128 (the attention projections; the experts in
// moe_affine with the row kernel) 128.4-128.9, without tiles 97.2.
constexpr int64_t kAffineTileMinTokens = 128;
// Most output rows per unit of moe_ffn_token's down phase (see there).
constexpr int64_t kMoeDownRows = 128;

// Whether expert e has g0/u0/d0's types and the shapes of an FFN of E inputs and F hidden units:
// what every fused MoE pass needs of all the experts it takes (FfnExpert or FfnExpertRows).
template <class Expert>
bool same_expert_shape(const Expert& e, const TensorView& g0, const TensorView& u0, const TensorView& d0, int64_t E,
                       int64_t F) {
  return e.gate->type == g0.type && e.up->type == u0.type && e.down->type == d0.type && e.gate->ne[0] == E &&
         e.gate->ne[1] == F && e.up->ne[0] == E && e.up->ne[1] == F && e.down->ne[0] == F && e.down->ne[1] == E;
}
// Row i of expert j is row first[j] + i of a batch pass's per-row buffers; returns the most rows of one expert.
int64_t expert_row_offsets(std::span<const FfnExpertRows> ex, std::vector<int64_t>& first) {
  first.assign(ex.size() + 1, 0);
  int64_t most = 0;
  for (size_t j = 0; j < ex.size(); ++j) {
    first[j + 1] = first[j] + ex[j].n;
    most = std::max(most, ex[j].n);
  }
  return most;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(int n_threads, CpuIsa isa, const CpuBackendOptions& opt)
      : pool_(n_threads),
        k_(cpu::kernels_for(isa)),
        q8_(opt.q8_activations ? q8_table(isa, opt.q8_amx) : nullptr),
        q8_tiles_(opt.q8_tiles),
        q8_tile_min_tokens_(opt.q8_tile_min_tokens),
        q8_legacy_(opt.q8_legacy_types) {
    if (!cpu_isa_available(isa)) fail("cpu backend: ISA level ", cpu_isa_name(isa), " is not available on this CPU");
    scratch_.resize(static_cast<size_t>(pool_.size()));
  }

  int64_t tile_min_tokens(const cpu::Q8Ops& op) const {
    return q8_tile_min_tokens_ > 0 ? q8_tile_min_tokens_ : op.tile.min_tokens;
  }

  static const cpu::Q8Kernels* q8_table(CpuIsa isa, bool amx) {
    if (amx && isa == CpuIsa::avx512)
      if (const cpu::Q8Kernels* k = cpu::q8_kernels_amx()) return k;
    return &cpu::q8_kernels_for(isa);
  }

  std::string_view name() const override { return "cpu"; }
  CpuIsa isa() const { return k_.isa; }
  const char* q8_level() const { return q8_ ? q8_->name : nullptr; }
  bool reads_rows16(DType t) const {
    const cpu::Q8Ops* op = q8_op(t);
    return op && op->rows16;
  }
  int n_threads() const override { return pool_.size(); }

  void matmul_weights(const TensorView& w, const float* x, float* y, int64_t n_tok) override {
    const int64_t n_in = w.ne[0], n_out = w.n_rows();
    if (n_tok <= 0 || n_out <= 0) return;
    if (q8_) {
      if (const cpu::Q8Ops* op = q8_op(w)) {
        matmul_q8(*op, w, x, y, n_tok);
        return;
      }
      if (affine_int8(w)) {
        matmul_affine(w, x, y, n_tok);
        return;
      }
    }
    const bool direct = w.type == DType::F32 || w.type == DType::F16 || w.type == DType::BF16;
    if (!direct && !weight_decodable(w.type))
      fail("cpu backend: matmul on unsupported weight type ", dtype_name(w.type));

    // Rows per work unit. Direct types read the weights in place, and so does the fused
    // one-token path of quantized types with a fast decoder; otherwise rows are decoded once
    // per call into a per-thread float block and multiplied with every token from there.
    const cpu::QuantOps* qops = direct ? nullptr : k_.quant(w.type);
    const bool fused = qops && n_tok == 1;
    int64_t block = 16;
    if (!direct && !fused) block = std::clamp<int64_t>(kDecodedBlockBytes / (n_in * 4) / 4 * 4, 4, 64);
    const int64_t n_units = (n_out + block - 1) / block;

    auto body = [&](int64_t u0, int64_t u1, int thread) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t r0 = u * block;
        float_rows(w, qops, r0, std::min(block, n_out - r0), x, n_tok, y + r0, static_cast<size_t>(n_out), thread);
      }
    };
    run(n_units, n_out * n_in * n_tok, body);
  }

  // Rows [r0, r0 + nr) of w times n_tok float tokens, y[t*ldy + r - r0]: direct types read in
  // place; quantized ones through the fused one-token decoder (qops->gemv) when there is one
  // token, else decoded once into the thread's float block. Every output is one dot whose
  // value depends only on its operands (kernels.h), whatever rows run alongside.
  void float_rows(const TensorView& w, const cpu::QuantOps* qops, int64_t r0, int64_t nr, const float* x, int64_t n_tok,
                  float* y, size_t ldy, int thread) {
    const int64_t n_in = w.ne[0];
    const size_t ldw_bytes = w.row_bytes();
    const uint8_t* wr = w.row(r0);
    switch (w.type) {
      case DType::F32:
        k_.gemm_f32(reinterpret_cast<const float*>(wr), ldw_bytes / 4, nr, x, n_in, n_tok, n_in, y, ldy);
        return;
      case DType::F16:
        k_.gemm_f16(reinterpret_cast<const uint16_t*>(wr), ldw_bytes / 2, nr, x, n_in, n_tok, n_in, y, ldy);
        return;
      case DType::BF16:
        k_.gemm_bf16(reinterpret_cast<const uint16_t*>(wr), ldw_bytes / 2, nr, x, n_in, n_tok, n_in, y, ldy);
        return;
      default: break;
    }
    if (qops && n_tok == 1) {
      qops->gemv(wr, ldw_bytes, nr, x, n_in, y);
      return;
    }
    float* buf = scratch(thread, static_cast<size_t>(nr * n_in));
    for (int64_t r = 0; r < nr; ++r) {
      if (qops)
        qops->decode(wr + r * ldw_bytes, buf + r * n_in, n_in);
      else
        dequantize_weight_row(w, r0 + r, buf + r * n_in);
    }
    k_.gemm_f32(buf, n_in, nr, x, n_in, n_tok, n_in, y, ldy);
  }

  // x quantized to an int8 activation type: quantize_row, or the level's vector Q8_K quantizer
  // (the same bytes).
  void quantize_act(DType act, const float* x, uint8_t* y, int64_t n) const {
    if (act == DType::Q8_K && q8_ && q8_->quantize_q8_K)
      q8_->quantize_q8_K(x, y, n);
    else if (act == DType::Q8_0 && q8_ && q8_->quantize_q8_0)
      q8_->quantize_q8_0(x, y, n);
    else
      quantize_row(act, x, y, n);
  }

  // The int8 op for weights w, or null (exact backend, a type without an int8 path, or a
  // legacy 32-block type kept in float: q8_legacy_types off).
  const cpu::Q8Ops* q8_op(const TensorView& w) const { return q8_op(w.type); }
  const cpu::Q8Ops* q8_op(DType t) const {
    if (!q8_) return nullptr;
    if ((t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q8_A) && !q8_legacy_) return nullptr;
    return q8_->get(t);
  }

  // w's interleaved rows (TensorView::rows16) where op reads them and rows [r0, r0 + nr) are
  // whole 16-row groups; else null (the row and tile paths read w.data).
  static const uint8_t* rows16(const TensorView& w, const cpu::Q8Ops& op, int64_t r0, int64_t nr) {
    return w.rows16 && op.rows16 && r0 % 16 == 0 && nr % 16 == 0 ? static_cast<const uint8_t*>(w.rows16) : nullptr;
  }

  // n_tok rows of x (n inputs each) quantized to act into dst (rows dtype_row_bytes(act, n) apart),
  // in parallel; with sums, each row's 32-block sums too (n / 32 a row; act Q8_0).
  void quantize_tokens(DType act, const float* x, int64_t n, int64_t n_tok, uint8_t* dst, int32_t* sums) {
    const size_t a_bytes = dtype_row_bytes(act, n);
    run(n_tok, n_tok * n * 4, [&](int64_t t0, int64_t t1, int) {
      for (int64_t t = t0; t < t1; ++t) {
        uint8_t* at = dst + static_cast<size_t>(t) * a_bytes;
        quantize_act(act, x + t * n, at, n);
        if (sums) act_block_sums(at, n / 32, sums + t * (n / 32));
      }
    });
  }

  // Each 32-block of the quantized activation q (nb blocks of op.act Q8_0) summed, for the
  // kernels that read them (Q8TileOps::act_sums): once per activation, not per call of 16 rows.
  static void act_block_sums(const uint8_t* q, int64_t nb, int32_t* dst) {
    for (int64_t i = 0; i < nb; ++i) dst[i] = cpu::q8_0_quant_sum(reinterpret_cast<const block_q8_0*>(q)[i]);
  }

  // Rows [r0, r0 + nr) of w times one token: through op when given (xq = the token quantized
  // to op->act, sums its act_block_sums where op->tile.act_sums, else null), else the float path
  // on x. Exactly what matmul computes for these rows.
  void rows_one_token(const TensorView& w, const cpu::Q8Ops* op, int64_t r0, int64_t nr, const float* x,
                      const uint8_t* xq, const int32_t* sums, float* y, int thread) {
    if (op) {
      const size_t ldw_bytes = w.row_bytes();
      if (const uint8_t* w16 = rows16(w, *op, r0, nr))
        return op->rows16(w16 + static_cast<size_t>(r0) * ldw_bytes, nr, w.ne[0], xq, 0, sums, 1, y, 1);
      op->gemm(w.row(r0), ldw_bytes, nr, xq, 0, 1, w.ne[0], y, 1);
      return;
    }
    float_rows(w, k_.quant(w.type), r0, nr, x, 1, y, 1, thread);
  }

  // Decode MoE FFN in three phases instead of three matmuls + a swiglu per expert:
  //   1. the gate and up rows of all experts, as one parallel job (x quantized once);
  //   2. h_j = silu(g_j) ⊙ u_j and its quantization for the down matrices (small: k·F);
  //   3. the output rows, each summing the experts' down rows in the given order, so the
  //      weighted sum is fused and no per-expert output is stored.
  // Each value is computed by the same kernels on the same operands as the default
  // Backend::moe_ffn_token (matmul per expert), and summed in the same order: bitwise equal.
  void moe_ffn_token(std::span<const FfnExpert> ex, const float* x, float* out, int64_t E) override {
    if (ex.empty()) {
      std::fill(out, out + E, 0.0f);
      return;
    }
    if (affine_int8(*ex[0].gate)) {
      moe_rows_.resize(ex.size());
      static constexpr int64_t kToken0 = 0;
      for (size_t j = 0; j < ex.size(); ++j)
        moe_rows_[j] = {ex[j].gate, ex[j].up,    ex[j].down,   &kToken0,   &ex[j].weight,
                        1,          ex[j].layer, ex[j].expert, ex[j].limit};
      if (moe_affine(moe_rows_, x, out, 1, E)) return;
      return Backend::moe_ffn_token(ex, x, out, E);
    }
    const TensorView &g0 = *ex[0].gate, &u0 = *ex[0].up, &d0 = *ex[0].down;
    const int64_t F = g0.ne[1], n = static_cast<int64_t>(ex.size());
    for (const FfnExpert& e : ex)
      if (!same_expert_shape(e, g0, u0, d0, E, F)) return Backend::moe_ffn_token(ex, x, out, E);  // mixed experts
    const cpu::Q8Ops *qg = q8_op(g0), *qu = q8_op(u0), *qd = q8_op(d0);
    const size_t gb = qg ? dtype_row_bytes(qg->act, E) : 0, ub = qu ? dtype_row_bytes(qu->act, E) : 0;
    const size_t hb = qd ? dtype_row_bytes(qd->act, F) : 0;
    moe_act_.resize(gb + ub + hb * static_cast<size_t>(n));
    uint8_t *xg = moe_act_.data(), *xu = xg + gb, *hq = xu + ub;
    if (qg) quantize_act(qg->act, x, xg, E);
    if (qu) {
      if (qg && qg->act == qu->act)
        xu = xg;
      else
        quantize_act(qu->act, x, xu, E);
    }
    // The 32-block types' activation sums: x's for gate and up, each expert's h for down.
    const bool sg = qg && qg->tile.act_sums, su = qu && qu->tile.act_sums, sd = qd && qd->tile.act_sums;
    moe_sums_.resize(static_cast<size_t>(2 * (E / 32) + n * (F / 32)));
    int32_t *xgs = moe_sums_.data(), *xus = xgs + E / 32, *hs = xus + E / 32;
    if (sg) act_block_sums(xg, E / 32, xgs);
    if (su) act_block_sums(xu, E / 32, xus);
    moe_gu_.resize(static_cast<size_t>(2 * n * F));
    float *g = moe_gu_.data(), *u = g + n * F;

    const int64_t B = kQ8RowsDecode, nbF = (F + B - 1) / B;
    run(2 * n * nbF, 2 * n * F * E, [&](int64_t i0, int64_t i1, int th) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t j = i / (2 * nbF), rem = i % (2 * nbF), r0 = (rem % nbF) * B, nr = std::min(B, F - r0);
        if (rem >= nbF)
          rows_one_token(*ex[j].up, qu, r0, nr, x, xu, su ? xus : nullptr, u + j * F + r0, th);
        else
          rows_one_token(*ex[j].gate, qg, r0, nr, x, xg, sg ? xgs : nullptr, g + j * F + r0, th);
      }
    });
    for (int64_t j = 0; j < n; ++j) {
      swiglu(g + j * F, u + j * F, g + j * F, F, ex[static_cast<size_t>(j)].limit);
      if (qd) quantize_act(qd->act, g + j * F, hq + static_cast<size_t>(j) * hb, F);
      if (sd) act_block_sums(hq + static_cast<size_t>(j) * hb, F / 32, hs + j * (F / 32));
    }
    // Phase 3 units are long row ranges (up to kMoeDownRows, at least 4 units per thread): each
    // expert's down rows of a unit are one contiguous stream (128 rows of Q6_K at F = 768 is
    // 80 KB), where 16-row units made 8 short interleaved streams that the hardware
    // prefetcher kept losing (the fused op was then slower than a matmul per expert).
    int64_t B3 = B;
    while (B3 < kMoeDownRows && E / (2 * B3) >= 4 * pool_.size()) B3 *= 2;
    const int64_t nbE = (E + B3 - 1) / B3;
    run(nbE, n * E * F, [&](int64_t i0, int64_t i1, int th) {
      float y[kMoeDownRows];
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t r0 = i * B3, nr = std::min(B3, E - r0);
        std::fill(out + r0, out + r0 + nr, 0.0f);
        for (int64_t j = 0; j < n; ++j) {
          rows_one_token(*ex[j].down, qd, r0, nr, g + j * F, hq + static_cast<size_t>(j) * hb,
                         sd ? hs + j * (F / 32) : nullptr, y, th);
          for (int64_t c = 0; c < nr; ++c) out[r0 + c] += ex[j].weight * y[c];
        }
      }
    });
  }

  // moe_ffn_token's three phases for a batch: every token row quantized once; the gate and up
  // rows of all experts for their tokens as one parallel job; h = silu(g) ⊙ u and its
  // quantization, in parallel; then the output rows, each unit running every expert's down rows
  // for that expert's tokens and adding them to out expert by expert in the order given. An
  // expert's rows take the prefill tiles (packed 16 rows at a time, from row multiples of 16)
  // when matmul would, i.e. from q8_tile_min_tokens_ tokens, else the int8 row kernel, which
  // computes each (row, token) product as matmul's row path does: so this is bitwise
  // Backend::moe_ffn_batch (a matmul per expert), gathering quantized rows (a quarter of its
  // float gathers, still on the calling thread) instead of quantizing each expert's rows twice,
  // and without its six parallel jobs per expert (the pool's
  // wake-ups cost more than the work at 16 tokens per expert: Qwen3.5-MoE's 256 experts, pp512).
  void moe_ffn_batch(std::span<const FfnExpertRows> ex, const float* x, float* out, int64_t n_tok, int64_t E) override {
    if (ex.empty()) return Backend::moe_ffn_batch(ex, x, out, n_tok, E);
    if (affine_int8(*ex[0].gate)) {
      if (!moe_affine(ex, x, out, n_tok, E)) Backend::moe_ffn_batch(ex, x, out, n_tok, E);
      return;
    }
    const TensorView &g0 = *ex[0].gate, &u0 = *ex[0].up, &d0 = *ex[0].down;
    const int64_t F = g0.ne[1], n = static_cast<int64_t>(ex.size());
    const cpu::Q8Ops *qg = q8_op(g0), *qu = q8_op(u0), *qd = q8_op(d0);
    bool fusable = qg && qu && qd && qg->act == qu->act;
    for (const FfnExpertRows& e : ex) fusable = fusable && e.n >= 1 && same_expert_shape(e, g0, u0, d0, E, F);
    if (!fusable) return Backend::moe_ffn_batch(ex, x, out, n_tok, E);
    // Whether expert j's rows of op take matmul's tiles; the AMX tiles (gemm_rows, activations
    // repacked per matmul) stay with the default.
    auto tiled = [&](const cpu::Q8Ops* op, int64_t m) {
      return q8_tiles_ && op->tile.any() && m >= tile_min_tokens(*op);
    };
    for (const FfnExpertRows& e : ex)
      for (const cpu::Q8Ops* op : {qg, qu, qd})
        if (tiled(op, e.n) && !op->tile.gemm) return Backend::moe_ffn_batch(ex, x, out, n_tok, E);
    std::vector<int64_t> first;  // row i of expert j is row first[j] + i of every per-row buffer below
    const int64_t most = expert_row_offsets(ex, first), rows = first[n];
    const size_t xb = dtype_row_bytes(qg->act, E), hb = dtype_row_bytes(qd->act, F);
    moe_act_.resize(xb * static_cast<size_t>(n_tok + rows) + hb * static_cast<size_t>(rows));
    uint8_t *xq = moe_act_.data(), *xr = xq + xb * static_cast<size_t>(n_tok),
            *hq = xr + xb * static_cast<size_t>(rows);
    // The 32-block tiles' activation sums (Q8TileOps::act_sums), per row: E/32 of x, F/32 of h.
    const bool xsums = qg->tile.act_sums || qu->tile.act_sums, hsums = qd->tile.act_sums;
    moe_sums_.resize(static_cast<size_t>(rows * ((xsums ? E / 32 : 0) + (hsums ? F / 32 : 0))));
    int32_t* xs = moe_sums_.data();
    int32_t* hs = xsums ? xs + rows * (E / 32) : xs;
    run(n_tok, n_tok * E * 4, [&](int64_t t0, int64_t t1, int) {
      for (int64_t t = t0; t < t1; ++t) quantize_act(qg->act, x + t * E, xq + static_cast<size_t>(t) * xb, E);
    });
    for (int64_t j = 0; j < n; ++j)  // each expert's token rows side by side, as the kernels read them
      for (int64_t i = 0; i < ex[j].n; ++i) {
        const int64_t r = first[j] + i;
        std::copy_n(xq + static_cast<size_t>(ex[j].tokens[i]) * xb, xb, xr + static_cast<size_t>(r) * xb);
        if (xsums) act_block_sums(xr + static_cast<size_t>(r) * xb, E / 32, xs + r * (E / 32));
      }
    moe_gu_.resize(static_cast<size_t>(2 * rows * F));
    float *g = moe_gu_.data(), *u = g + rows * F;
    // Rows [r0, r0 + nr) of w times expert j's m activation rows a (sums: their block sums), into
    // y[t·ldy + r], by the tiles (16 rows per pack into `tile`, the thread's) or the row kernel.
    auto tile_bytes = [](const cpu::Q8Ops* op, int64_t n_in) {
      return op->tile.bytes ? (op->tile.bytes(n_in) + 63) / 64 * 64 : size_t{0};
    };
    auto rows_of = [&](const cpu::Q8Ops& op, const TensorView& w, int64_t r0, int64_t nr, const uint8_t* a, size_t ab,
                       const int32_t* sums, int64_t m, int64_t n_in, float* y, size_t ldy, uint8_t* tile) {
      if (const uint8_t* w16 = rows16(w, op, r0, nr))
        return op.rows16(w16 + static_cast<size_t>(r0) * w.row_bytes(), nr, n_in, a, ab,
                         op.tile.act_sums ? sums : nullptr, m, y, ldy);
      const auto* wr = w.row(r0);
      if (!tiled(&op, m)) return op.gemm(wr, w.row_bytes(), nr, a, ab, m, n_in, y, ldy);
      for (int64_t s = 0; s < nr; s += cpu::kQ8TileRows) {
        const int64_t ns = std::min(cpu::kQ8TileRows, nr - s);
        op.tile.pack(wr + static_cast<size_t>(s) * w.row_bytes(), w.row_bytes(), ns, n_in, tile);
        op.tile.gemm(tile, n_in, a, ab, op.tile.act_sums ? sums : nullptr, m, y + s, ldy, ns);
      }
    };

    const int64_t B = kQ8RowsDecode, nbF = (F + B - 1) / B;
    run(2 * n * nbF, 2 * rows * F * E, [&](int64_t i0, int64_t i1, int th) {
      uint8_t* tile = scratch_aligned(th, std::max(tile_bytes(qg, E), tile_bytes(qu, E)));
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t j = i / (2 * nbF), rem = i % (2 * nbF), r0 = (rem % nbF) * B, nr = std::min(B, F - r0);
        const bool is_up = rem >= nbF;
        rows_of(is_up ? *qu : *qg, is_up ? *ex[j].up : *ex[j].gate, r0, nr, xr + static_cast<size_t>(first[j]) * xb, xb,
                xsums ? xs + first[j] * (E / 32) : nullptr, ex[j].n, E, (is_up ? u : g) + first[j] * F + r0,
                static_cast<size_t>(F), tile);
      }
    });
    run(rows, rows * F * 8, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t j = std::upper_bound(first.begin(), first.end(), r) - first.begin() - 1;
        swiglu(g + r * F, u + r * F, g + r * F, F, ex[static_cast<size_t>(j)].limit);
        quantize_act(qd->act, g + r * F, hq + static_cast<size_t>(r) * hb, F);
        if (hsums) act_block_sums(hq + static_cast<size_t>(r) * hb, F / 32, hs + r * (F / 32));
      }
    });
    int64_t B3 = B;
    while (B3 < kMoeDownRows && E / (2 * B3) >= 4 * pool_.size()) B3 *= 2;
    const int64_t nbE = (E + B3 - 1) / B3;
    std::fill(out, out + n_tok * E, 0.0f);
    run(nbE, rows * E * F, [&](int64_t i0, int64_t i1, int th) {
      // The thread's scratch: the pack tile, then y.
      const size_t tb = tile_bytes(qd, F);
      uint8_t* tile = scratch_aligned(th, tb + static_cast<size_t>(most * kMoeDownRows) * sizeof(float));
      float* y = reinterpret_cast<float*>(tile + tb);
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t r0 = i * B3, nr = std::min(B3, E - r0);
        for (int64_t j = 0; j < n; ++j) {
          rows_of(*qd, *ex[j].down, r0, nr, hq + static_cast<size_t>(first[j]) * hb, hb,
                  hsums ? hs + first[j] * (F / 32) : nullptr, ex[j].n, F, y, static_cast<size_t>(nr), tile);
          for (int64_t t = 0; t < ex[j].n; ++t) {
            float* o = out + ex[j].tokens[t] * E + r0;
            const float wt = ex[j].weights[t];
            for (int64_t c = 0; c < nr; ++c) o[c] += wt * y[t * nr + c];
          }
        }
      }
    });
  }

  // Whether w is an MLX affine matrix that the int8 kernels read in place (AffineOps): rows a
  // whole number of 64-input chunks. Otherwise (and on the exact backend) it is decoded to float.
  bool affine_int8(const TensorView& w) const { return q8_ && dtype_is_affine(w.type) && w.ne[0] % 64 == 0; }
  static cpu::AffineRows affine_rows(const TensorView& w, int64_t r0) {
    cpu::AffineRows a;
    a.code_row_bytes = w.row_bytes();
    a.codes = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r0) * a.code_row_bytes;
    a.group_row_bytes = w.affine.group_row_bytes;
    a.scales = w.affine.scales + static_cast<size_t>(r0) * a.group_row_bytes;
    a.biases = w.affine.biases + static_cast<size_t>(r0) * a.group_row_bytes;
    a.bits = dtype_affine_bits(w.type);
    a.group_size = w.affine.group_size;
    a.scale_type = w.affine.scale_type;
    return a;
  }
  // n_tok rows of x (n inputs each) prepared for `bits`-bit codes into dst, in parallel.
  void affine_prepare_rows(const float* x, int64_t n, int64_t n_tok, int bits, uint8_t* dst) {
    const size_t ab = cpu::affine_act_bytes(n);
    run(n_tok, n_tok * n * 4, [&](int64_t t0, int64_t t1, int) {
      for (int64_t t = t0; t < t1; ++t) q8_->affine.act_prepare(x + t * n, n, bits, dst + static_cast<size_t>(t) * ab);
    });
  }

  // MLX affine weights by the int8 kernels, read where the file keeps them: every token prepared
  // once, then units of rows (16 for one token, 32 for more) against all tokens.
  void matmul_affine(const TensorView& w, const float* x, float* y, int64_t n_tok) {
    const int64_t n_in = w.ne[0], n_out = w.n_rows();
    MlxAffineFormat f;
    if (const cpu::Q8Ops* op = affine_tile_op(w, n_tok, &f)) return matmul_affine_tiles(*op, f, w, x, y, n_tok);
    const size_t ab = cpu::affine_act_bytes(n_in);
    if (act_.size() < ab * static_cast<size_t>(n_tok)) act_.resize(ab * static_cast<size_t>(n_tok));
    affine_prepare_rows(x, n_in, n_tok, dtype_affine_bits(w.type), act_.data());
    const int64_t block = n_tok == 1 ? kQ8RowsDecode : kQ8RowsBatch;
    run((n_out + block - 1) / block, n_out * n_in * n_tok, [&](int64_t u0, int64_t u1, int) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t r0 = u * block, nr = std::min(block, n_out - r0);
        for (int64_t t0 = 0; t0 < n_tok; t0 += kQ8TokTile)
          q8_->affine.gemm(affine_rows(w, r0), nr, act_.data() + static_cast<size_t>(t0) * ab, ab,
                           std::min(kQ8TokTile, n_tok - t0), n_in, y + t0 * n_out + r0, static_cast<size_t>(n_out));
      }
    });
  }

  // Prefill of MLX affine weights: the block type's tiles (Q4_1 for 2-4 bits, Q5_1, Q8_A), each
  // 16-row unit repacked exactly into the thread's scratch first (mlx_affine_repack_row: the
  // codes, scale and bias as the block's, every scale and bias an fp16 value) and then packed and
  // multiplied as a GGUF's rows are; what the tiles cost to pack is paid per unit, as theirs. A
  // unit whose scales or biases are not all fp16 values (the repack says so, row by row) is
  // computed in float instead (float_rows), so no pass over the whole tensor's groups first. The
  // op, with w's format in *f, or null (a few tokens, no tiles for the type: the affine row kernel).
  const cpu::Q8Ops* affine_tile_op(const TensorView& w, int64_t n_tok, MlxAffineFormat* f) const {
    if (!q8_tiles_) return nullptr;
    *f = {dtype_affine_bits(w.type), w.affine.group_size, w.affine.scale_type};
    const std::optional<DType> bt = mlx_affine_repack_type(*f);
    const cpu::Q8Ops* op = bt ? q8_op(*bt) : nullptr;
    return op && op->tile.gemm && n_tok >= std::max(tile_min_tokens(*op), kAffineTileMinTokens) ? op : nullptr;
  }
  void matmul_affine_tiles(const cpu::Q8Ops& op, const MlxAffineFormat& f, const TensorView& w, const float* x,
                           float* y, int64_t n_tok) {
    const int64_t n_in = w.ne[0], n_out = w.n_rows(), nb = n_in / 32;
    const DType bt = *mlx_affine_repack_type(f);
    const size_t a_bytes = dtype_row_bytes(op.act, n_in), rb = dtype_row_bytes(bt, n_in);
    if (act_.size() < a_bytes * static_cast<size_t>(n_tok)) act_.resize(a_bytes * static_cast<size_t>(n_tok));
    if (op.tile.act_sums && act_sums_.size() < static_cast<size_t>(n_tok * nb))
      act_sums_.resize(static_cast<size_t>(n_tok * nb));
    quantize_tokens(op.act, x, n_in, n_tok, act_.data(), op.tile.act_sums ? act_sums_.data() : nullptr);
    const size_t tile_bytes = (op.tile.bytes(n_in) + 63) / 64 * 64;
    run((n_out + cpu::kQ8TileRows - 1) / cpu::kQ8TileRows, n_out * n_in * n_tok, [&](int64_t u0, int64_t u1, int th) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t r0 = u * cpu::kQ8TileRows, nr = std::min(cpu::kQ8TileRows, n_out - r0);
        // Per unit: a float_rows unit before may have grown (moved) the thread's scratch.
        uint8_t* tile = scratch_aligned(th, tile_bytes + static_cast<size_t>(cpu::kQ8TileRows) * rb);
        uint8_t* rows = tile + tile_bytes;
        bool exact = true;
        for (int64_t i = 0; i < nr && exact; ++i) {
          const size_t g = static_cast<size_t>(r0 + i) * w.affine.group_row_bytes;
          exact = mlx_affine_repack_row(f, bt, reinterpret_cast<const uint32_t*>(w.row(r0 + i)), w.affine.scales + g,
                                        w.affine.biases + g, n_in, rows + static_cast<size_t>(i) * rb);
        }
        if (!exact) {
          float_rows(w, nullptr, r0, nr, x, n_tok, y + r0, static_cast<size_t>(n_out), th);
          continue;
        }
        op.tile.pack(rows, rb, nr, n_in, tile);
        op.tile.gemm(tile, n_in, act_.data(), a_bytes, op.tile.act_sums ? act_sums_.data() : nullptr, n_tok, y + r0,
                     static_cast<size_t>(n_out), nr);
      }
    });
  }

  // moe_ffn_batch's three phases for MLX affine experts (moe_ffn_token calls it with one token):
  // the gate and up rows of all experts as one parallel job, h = silu(g) ⊙ u prepared per row,
  // then the output rows, each unit adding every expert's down rows to out in the order given:
  // the same kernels and order as a matmul per expert (Backend::moe_ffn_batch), bitwise.
  // False (nothing done) for experts of mixed types or shapes.
  bool moe_affine(std::span<const FfnExpertRows> ex, const float* x, float* out, int64_t n_tok, int64_t E) {
    const TensorView &g0 = *ex[0].gate, &u0 = *ex[0].up, &d0 = *ex[0].down;
    const int64_t F = g0.ne[1], n = static_cast<int64_t>(ex.size());
    if (!affine_int8(u0) || !affine_int8(d0) || g0.type != u0.type) return false;
    // An expert with enough tokens for the block tiles (matmul_affine_tiles): the default's
    // matmul per expert gives them to it.
    for (const FfnExpertRows& e : ex)
      if (e.n >= kAffineTileMinTokens) return false;
    for (const FfnExpertRows& e : ex)
      if (e.n < 1 || !same_expert_shape(e, g0, u0, d0, E, F)) return false;
    std::vector<int64_t> first;
    const int64_t most = expert_row_offsets(ex, first), rows = first[n];
    const size_t xb = cpu::affine_act_bytes(E), hb = cpu::affine_act_bytes(F);
    moe_act_.resize(xb * static_cast<size_t>(n_tok + rows) + hb * static_cast<size_t>(rows));
    uint8_t *xq = moe_act_.data(), *xr = xq + xb * static_cast<size_t>(n_tok),
            *hq = xr + xb * static_cast<size_t>(rows);
    affine_prepare_rows(x, E, n_tok, dtype_affine_bits(g0.type), xq);
    for (int64_t j = 0; j < n; ++j)  // each expert's token rows side by side
      for (int64_t i = 0; i < ex[j].n; ++i)
        std::copy_n(xq + static_cast<size_t>(ex[j].tokens[i]) * xb, xb, xr + static_cast<size_t>(first[j] + i) * xb);
    moe_gu_.resize(static_cast<size_t>(2 * rows * F));
    float *g = moe_gu_.data(), *u = g + rows * F;
    const int64_t B = kQ8RowsDecode, nbF = (F + B - 1) / B;
    run(2 * n * nbF, 2 * rows * F * E, [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t j = i / (2 * nbF), rem = i % (2 * nbF), r0 = (rem % nbF) * B, nr = std::min(B, F - r0);
        const bool is_up = rem >= nbF;
        q8_->affine.gemm(affine_rows(is_up ? *ex[j].up : *ex[j].gate, r0), nr, xr + static_cast<size_t>(first[j]) * xb,
                         xb, ex[j].n, E, (is_up ? u : g) + first[j] * F + r0, static_cast<size_t>(F));
      }
    });
    const int bits_d = dtype_affine_bits(d0.type);
    run(rows, rows * F * 8, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t j = std::upper_bound(first.begin(), first.end(), r) - first.begin() - 1;
        swiglu(g + r * F, u + r * F, g + r * F, F, ex[static_cast<size_t>(j)].limit);
        q8_->affine.act_prepare(g + r * F, F, bits_d, hq + static_cast<size_t>(r) * hb);
      }
    });
    int64_t B3 = B;
    while (B3 < kMoeDownRows && E / (2 * B3) >= 4 * pool_.size()) B3 *= 2;
    std::fill(out, out + n_tok * E, 0.0f);
    run((E + B3 - 1) / B3, rows * E * F, [&](int64_t i0, int64_t i1, int th) {
      float* y = reinterpret_cast<float*>(
          scratch_aligned(th, static_cast<size_t>(most * kMoeDownRows) * sizeof(float)));
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t r0 = i * B3, nr = std::min(B3, E - r0);
        for (int64_t j = 0; j < n; ++j) {
          q8_->affine.gemm(affine_rows(*ex[j].down, r0), nr, hq + static_cast<size_t>(first[j]) * hb, hb, ex[j].n, F, y,
                           static_cast<size_t>(nr));
          for (int64_t t = 0; t < ex[j].n; ++t) {
            float* o = out + ex[j].tokens[t] * E + r0;
            const float wt = ex[j].weights[t];
            for (int64_t c = 0; c < nr; ++c) o[c] += wt * y[t * nr + c];
          }
        }
      }
    });
    return true;
  }

  // The int8 path: x quantized once per call (per token) to op.act, then each output is one
  // int8 dot product of a weight row with a quantized activation row.
  void matmul_q8(const cpu::Q8Ops& op, const TensorView& w, const float* x, float* y, int64_t n_tok) {
    const int64_t n_in = w.ne[0], n_out = w.n_rows();
    const size_t ldw_bytes = w.row_bytes(), a_bytes = dtype_row_bytes(op.act, n_in);
    if (act_.size() < a_bytes * static_cast<size_t>(n_tok)) act_.resize(a_bytes * static_cast<size_t>(n_tok));
    uint8_t* act = act_.data();
    const bool tiled = q8_tiles_ && op.tile.any() && n_tok >= tile_min_tokens(op);
    // The interleaved groups at every batch size (from cpu::kRows16TileTokens on the kernel
    // makes each group's tile, so the rows are never read), except where the AMX tiles
    // (gemm_rows) outrun it at prefill where the rows are still there; the same bits.
    const bool interleaved = rows16(w, op, 0, n_out) && !(tiled && op.tile.gemm_rows && !w.rows_interleaved);
    const bool tiles = tiled && !interleaved;
    // The 32-block tiles' activation sums (Q8TileOps::act_sums): nb per token.
    const bool sums = (tiles || interleaved) && op.tile.act_sums;
    const int64_t nb = n_in / 32;
    if (sums && act_sums_.size() < static_cast<size_t>(n_tok * nb)) act_sums_.resize(static_cast<size_t>(n_tok * nb));
    quantize_tokens(op.act, x, n_in, n_tok, act, sums ? act_sums_.data() : nullptr);
    if (interleaved) {
      // The 16-row groups as they are: no pack, and the tiles' float order at every batch size.
      const int64_t n_units = n_out / 16;
      run(n_units, n_out * n_in * n_tok, [&](int64_t u0, int64_t u1, int) {
        op.rows16(static_cast<const uint8_t*>(w.rows16) + static_cast<size_t>(16 * u0) * ldw_bytes, 16 * (u1 - u0),
                  n_in, act, a_bytes, sums ? act_sums_.data() : nullptr, n_tok, y + 16 * u0,
                  static_cast<size_t>(n_out));
      });
      return;
    }
    if (tiles) {
      // Prefill: each unit packs 16 rows into the thread's tile buffer once, then runs every
      // token against it (AMX: gemm_rows, one super-block at a time, on the activations
      // repacked once for all units). Units start at multiples of 16 rows whatever the thread count.
      const int64_t n_units = (n_out + cpu::kQ8TileRows - 1) / cpu::kQ8TileRows;
      if (op.tile.gemm_rows) {
        const size_t bytes = op.tile.act_bytes(n_in, n_tok);
        if (act_tiles_.size() < bytes + 64) act_tiles_.resize(bytes + 64);
        uint8_t* a = act_tiles_.data() + (64 - reinterpret_cast<uintptr_t>(act_tiles_.data()) % 64) % 64;
        // In 16-token groups across the pool: group g starts at act_bytes(n_in, 16g).
        run((n_tok + 15) / 16, n_tok * n_in, [&](int64_t g0, int64_t g1, int) {
          for (int64_t g = g0; g < g1; ++g)
            op.tile.act_pack(act + static_cast<size_t>(16 * g) * a_bytes, a_bytes, n_in,
                             std::min<int64_t>(16, n_tok - 16 * g), a + op.tile.act_bytes(n_in, 16 * g));
        });
        run(n_units, n_out * n_in * n_tok, [&](int64_t u0, int64_t u1, int) {
          for (int64_t u = u0; u < u1; ++u) {
            const int64_t r0 = u * cpu::kQ8TileRows, nr = std::min(cpu::kQ8TileRows, n_out - r0);
            op.tile.gemm_rows(w.row(r0), ldw_bytes, nr, n_in, a, n_tok, y + r0, static_cast<size_t>(n_out));
          }
        });
        return;
      }
      const size_t tile_bytes = op.tile.bytes(n_in);
      run(n_units, n_out * n_in * n_tok, [&](int64_t u0, int64_t u1, int thread) {
        uint8_t* tile = scratch_aligned(thread, tile_bytes);
        for (int64_t u = u0; u < u1; ++u) {
          const int64_t r0 = u * cpu::kQ8TileRows, nr = std::min(cpu::kQ8TileRows, n_out - r0);
          op.tile.pack(w.row(r0), ldw_bytes, nr, n_in, tile);
          op.tile.gemm(tile, n_in, act, a_bytes, sums ? act_sums_.data() : nullptr, n_tok, y + r0,
                       static_cast<size_t>(n_out), nr);
        }
      });
      return;
    }
    const int64_t block = n_tok == 1 ? kQ8RowsDecode : kQ8RowsBatch;
    const int64_t n_units = (n_out + block - 1) / block;
    run(n_units, n_out * n_in * n_tok, [&](int64_t u0, int64_t u1, int) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t r0 = u * block, nr = std::min(block, n_out - r0);
        const uint8_t* wr = w.row(r0);
        for (int64_t t0 = 0; t0 < n_tok; t0 += kQ8TokTile)
          op.gemm(wr, ldw_bytes, nr, act + static_cast<size_t>(t0) * a_bytes, a_bytes, std::min(kQ8TokTile, n_tok - t0),
                  n_in, y + t0 * n_out + r0, static_cast<size_t>(n_out));
      }
    });
  }

  void get_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out) override {
    const int64_t n_embd = table.ne[0], n_rows = table.n_rows();
    for (int64_t r = 0; r < n; ++r)
      if (ids[r] < 0 || ids[r] >= n_rows)
        fail("get_rows: id ", ids[r], " outside ", table.name, " (", n_rows, " rows)");
    if (table.rows_interleaved) {
      // A table interleaved in place (a tied embedding that is also the output head): each row
      // from its 16-row group, unpacked into the thread's scratch.
      const size_t rb = table.row_bytes();
      run(n, n * n_embd, [&](int64_t r0, int64_t r1, int thread) {
        uint8_t* rows = scratch_aligned(thread, 16 * rb);
        for (int64_t r = r0; r < r1; ++r) {
          const auto* group = static_cast<const uint8_t*>(table.rows16) + static_cast<size_t>(ids[r] / 16 * 16) * rb;
          rows16_unpack(table.type, group, rb, 16, n_embd, rows);
          decode(table.type, rows + static_cast<size_t>(ids[r] % 16) * rb, out + r * n_embd, n_embd);
        }
      });
      return;
    }
    run(n, n * n_embd, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        if (dtype_is_affine(table.type))
          dequantize_weight_row(table, ids[r], out + r * n_embd);
        else
          decode(table.type, table.row(ids[r]), out + r * n_embd, n_embd);
      }
    });
  }

  void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) override {
    run(n_rows, n_rows * n, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        const float ss = k_.sum_sq(x + r * n, n);
        const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
        k_.scale_mul(x + r * n, scale, w, y + r * n, n);
      }
    });
  }

  void rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, const Rope& r) override {
    const int64_t n_rot = r.n_rot, half = n_rot / 2;
    const RopeMode mode = r.mode;
    run(n_tok, n_tok * n_head * n_rot, [&](int64_t t0, int64_t t1, int thread) {
      float* cs = scratch(thread, static_cast<size_t>(2 * half));
      float* sn = cs + half;
      for (int64_t t = t0; t < t1; ++t) {
        // Angles in double, as the reference.
        for (int64_t i = 0; i < half; ++i) {
          const double theta = r.angle(pos[t], i);
          cs[i] = static_cast<float>(std::cos(theta) * r.mscale);
          sn[i] = static_cast<float>(std::sin(theta) * r.mscale);
        }
        for (int64_t h = 0; h < n_head; ++h) {
          float* v = x + (t * n_head + h) * head_dim;
          if (mode == RopeMode::neox) {
            for (int64_t i = 0; i < half; ++i) {
              const float a = v[i], b = v[i + half];
              v[i] = a * cs[i] - b * sn[i];
              v[i + half] = a * sn[i] + b * cs[i];
            }
          } else {
            for (int64_t i = 0; i < half; ++i) {
              const float a = v[2 * i], b = v[2 * i + 1];
              v[2 * i] = a * cs[i] - b * sn[i];
              v[2 * i + 1] = a * sn[i] + b * cs[i];
            }
          }
        }
      }
    });
  }

  void softmax(float* x, int64_t n_rows, int64_t n) override {
    run(n_rows, n_rows * n * 8, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        float* xr = x + r * n;
        const float sum = k_.exp_sub_sum(xr, k_.max(xr, n), n);
        k_.scale_mul(xr, 1.0f / sum, nullptr, xr, n);
      }
    });
  }

  void swiglu(const float* gate, const float* up, float* out, int64_t n, float limit) override {
    if (limit > 0)
      elementwise(n, [&](int64_t i, int64_t m) { k_.swiglu_limit(gate + i, up + i, out + i, m, limit); });
    else
      elementwise(n, [&](int64_t i, int64_t m) { k_.swiglu(gate + i, up + i, out + i, m); });
  }
  void gelu(const float* x, float* out, int64_t n) override {
    elementwise(n, [&](int64_t i, int64_t m) { k_.gelu(x + i, out + i, m); });
  }
  void add(const float* a, const float* b, float* out, int64_t n) override {
    elementwise(n, [&](int64_t i, int64_t m) { k_.add(a + i, b + i, out + i, m); });
  }

  void store_row(const float* src, DType t, void* dst, int64_t n) override {
    switch (t) {
      case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
      case DType::F16: k_.f32_to_f16(src, static_cast<uint16_t*>(dst), n); return;
      default:
        if (!quant_supported(t)) fail("cpu backend: no encoder for dtype ", dtype_name(t));
        quantize_row(t, src, dst, n);
    }
  }

  // Lives in backends/cpu/attention.cpp (KV codecs, split-KV).
  void attention(const AttentionArgs& a) override { cpu::attention(k_, pool_, kMinParallelWork, a); }
  // A few heads per token (K, V, the queries, the output): one thread, no pool wake.
  void kv_rotate(const KvRotation& r, float* x, int64_t n, bool inverse) override {
    if (!r.on()) return;
    if (n % r.block != 0) fail("kv rotation: ", n, " elements are not whole blocks of ", r.block);
    const float scale = 1.0f / std::sqrt(static_cast<float>(r.block));
    cpu::attn_kernels_for(k_.isa).rotate(x, n, r.block, r.signs.empty() ? nullptr : r.signs.data(), inverse, scale);
  }

  void delta_rule(const DeltaRuleArgs& a) override { cpu::delta_rule(k_, pool_, kMinParallelWork, a); }
  void conv1d_causal(const float* x, const float* w, float* state, float* out, int64_t n_tok, int64_t n_ch,
                     int64_t kernel, bool silu) override {
    cpu::conv1d_causal(k_, x, w, state, out, n_tok, n_ch, kernel, silu);
  }
  void l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps) override {
    run(n_rows, n_rows * n, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        const float scale = 1.0f / std::max(std::sqrt(k_.sum_sq(x + r * n, n)), eps);
        k_.scale_mul(x + r * n, scale, nullptr, y + r * n, n);
      }
    });
  }
  void delta_gates(const float* alpha, const float* beta_logit, const float* bias, const float* a, float* g,
                   float* beta, int64_t n_tok, int64_t n) override {
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t c = 0; c < n; ++c) {
        const int64_t i = t * n + c;
        const float z = alpha[i] + bias[c];
        g[i] = a[c] * (z > 20.0f ? z : std::log1p(std::exp(z)));
        beta[i] = 1.0f / (1.0f + std::exp(-beta_logit[i]));
      }
  }
  void kda_safe_gate(const float* x, const float* bias, const float* a, float lower_bound, float* g, int64_t n_tok,
                     int64_t n) override {
    run(n_tok, n_tok * n, [&](int64_t t0, int64_t t1, int) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t c = 0; c < n; ++c) {
          const int64_t i = t * n + c;
          g[i] = lower_bound / (1.0f + std::exp(-a[c] * (x[i] + bias[c])));
        }
    });
  }
  void sigmoid_mul(const float* x, const float* gate, float* out, int64_t n) override {
    elementwise(n, [&](int64_t i0, int64_t m) {
      for (int64_t i = i0; i < i0 + m; ++i) out[i] = x[i] / (1.0f + std::exp(-gate[i]));
    });
  }
  void sigmoid(const float* x, float* out, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
  }

 private:
  void decode(DType t, const void* src, float* dst, int64_t n) const {
    switch (t) {
      case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
      case DType::F16: k_.f16_to_f32(static_cast<const uint16_t*>(src), dst, n); return;
      case DType::BF16: k_.bf16_to_f32(static_cast<const uint16_t*>(src), dst, n); return;
      default:
        if (!quant_supported(t)) fail("cpu backend: no decoder for dtype ", dtype_name(t));
        dequantize_row(t, src, dst, n);
    }
  }

  // Runs body over [0, n) on the pool, or inline when the op is too small to pay for it.
  template <class F>
  void run(int64_t n, int64_t work, F&& body) {
    if (n <= 0) return;
    if (work < kMinParallelWork || pool_.size() == 1) {
      body(int64_t{0}, n, 0);
      return;
    }
    pool_.parallel_for(n, body);
  }

  // Elementwise ops: chunks of a fixed size (a multiple of every vector width), so the
  // split never changes which lanes are processed together.
  template <class F>
  void elementwise(int64_t n, F&& f) {
    constexpr int64_t kChunk = 4096;
    run((n + kChunk - 1) / kChunk, n * 4, [&](int64_t c0, int64_t c1, int) {
      for (int64_t c = c0; c < c1; ++c) f(c * kChunk, std::min(kChunk, n - c * kChunk));
    });
  }

  float* scratch(int thread, size_t n) {
    auto& s = scratch_[static_cast<size_t>(thread)];
    if (s.size() < n) s.resize(n);
    return s.data();
  }

  // n bytes of the thread's scratch, 64-byte aligned (tiles are read as 64-byte vectors).
  uint8_t* scratch_aligned(int thread, size_t n) {
    auto* p = reinterpret_cast<uint8_t*>(scratch(thread, (n + 64) / sizeof(float) + 1));
    return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
  }

  ThreadPool pool_;
  const cpu::Kernels& k_;
  const cpu::Q8Kernels* q8_;                 // null: quantized weights are decoded to float (the exact path)
  bool q8_tiles_;                            // CpuBackendOptions::q8_tiles
  int64_t q8_tile_min_tokens_;               // CpuBackendOptions::q8_tile_min_tokens (0: per type)
  bool q8_legacy_;                           // CpuBackendOptions::q8_legacy_types
  std::vector<uint8_t> act_;                 // quantized activations of the current int8 matmul
  std::vector<int32_t> moe_sums_;            // the moe paths' activation block sums
  std::vector<uint8_t> act_tiles_;           // the same, repacked by Q8TileOps::act_pack (AMX)
  std::vector<int32_t> act_sums_;            // their block sums, for Q8TileOps::act_sums
  std::vector<uint8_t> moe_act_;             // moe_ffn_token: x and the k hidden rows, quantized
  std::vector<float> moe_gu_;                // moe_ffn_token: gate then up outputs, [2][k][F]
  std::vector<FfnExpertRows> moe_rows_;      // moe_ffn_token of affine experts: one row each
  std::vector<std::vector<float>> scratch_;  // per pool thread; a backend runs one op at a time
};

}  // namespace

CpuBackendOptions cpu_backend_default_options() {
  CpuBackendOptions o;
  if (const char* e = std::getenv("SLUICE_CPU_Q8")) o.q8_activations = std::string_view(e) == "1";
  if (const char* e = std::getenv("SLUICE_CPU_Q8_TILES")) o.q8_tiles = std::string_view(e) == "1";
  if (const char* e = std::getenv("SLUICE_CPU_Q8_LEGACY")) o.q8_legacy_types = std::string_view(e) == "1";
  if (const char* e = std::getenv("SLUICE_CPU_AMX")) o.q8_amx = std::string_view(e) == "1";
  if (const char* e = std::getenv("SLUICE_CPU_Q8_TILE_MIN")) {
    const int v = std::atoi(e);
    if (v < 1) fail("SLUICE_CPU_Q8_TILE_MIN='", e, "' must be a token count >= 1");
    o.q8_tile_min_tokens = v;
  }
  return o;
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads, CpuIsa isa, const CpuBackendOptions& opt) {
  if (!cpu_isa_available(isa)) fail("cpu backend: ISA level ", cpu_isa_name(isa), " is not available on this CPU");
  return std::make_unique<CpuBackend>(n_threads, isa, opt);
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads, CpuIsa isa) {
  return make_cpu_backend(n_threads, isa, cpu_backend_default_options());
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return make_cpu_backend(n_threads, cpu_isa_select()); }

const char* cpu_backend_q8_level(const Backend& b) {
  if (const auto* c = dynamic_cast<const CpuBackend*>(&b)) return c->q8_level();
  return nullptr;
}

bool cpu_backend_reads_rows16(const Backend& b, DType t) {
  const auto* c = dynamic_cast<const CpuBackend*>(&b);
  return c && c->reads_rows16(t);
}

bool cpu_backend_reads_every_rows16(const Backend& b) {
  for (uint32_t id = 0; id < kFirstSluiceDType; ++id)  // ggml's ids: every type with the layout is one
    if (rows16_supported(static_cast<DType>(id)) && !cpu_backend_reads_rows16(b, static_cast<DType>(id))) return false;
  return true;
}

bool repack_by_default(const Backend& b) { return cpu_backend_reads_rows16(b, DType::Q4_K); }

std::optional<CpuIsa> cpu_backend_isa(const Backend& b) {
  if (const auto* c = dynamic_cast<const CpuBackend*>(&b)) return c->isa();
  return std::nullopt;
}

}  // namespace sluice
