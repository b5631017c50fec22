// backends/cpu/kernels_amx: the AVX-512 VNNI int8 table with AMX-INT8 prefill tiles for the
// K-quants (built with the AVX-512 and AMX flags; chosen only where the CPU has AMX-INT8 and the
// kernel grants the tile state, cpu_request_amx()).
//
// A tdpbssd multiplies a 16×64 int8 tile of activations (16 tokens' Q8_K qs, read in place)
// by a 64×16 int8 tile of weights into 16×16 exact int32 sums (16384 multiply-adds). The
// K-quants' per-sub-block scales change every 16 or 32 inputs, inside one tdp's 64, so the pack
// folds them into the weights: w = sc·q (Q6_K: sc·(q − 32)), a 13-bit integer, split as
// 64·hi + lo with lo in [0, 64) and hi in [-64, 64], two int8 planes. One super-block's
// sumi = 64·(A·HI) + A·LO is then exact, Q4_K/Q5_K's mins Σ_j m_j·bsum_j come from vpdpwssd as
// in the VNNI tiles, and the two fused multiply-adds per super-block are the scalar twin's:
// the AMX tiles are bitwise the twin (tests/kernels/test_q8_matmul.cpp).
// The planes are packed a super-block at a time into L1 and used there at once (gemm_rows),
// the activations repacked once per matmul into contiguous 16-token tiles (act_pack).
// Measured (Intel Xeon, AMX, 1 thread, 768×2048, pack included): Q4_K 32 tokens 248-256
// GMAC/s (VNNI tiles 130), 512 tokens 360-395 (146); Q6_K 208-228 (118) and 418-455 (124). That
// is ~10% of the tdp peak: the pack (~6 cycles per 64 weight bytes: the 16-row transpose, two
// vpmaddubsw and three vpermt2b), the float pass per super-block and the tile loads bound it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/cpu_features.h"
#include "quant/blocks.h"

namespace sluice::cpu {
namespace amx_q8 {
inline float q8_half(uint16_t h) { return _cvtsh_ss(h); }
#define SLUICE_Q8_SIMD 1
#define SLUICE_Q8_VNNI 1
#define SLUICE_Q8_AVX512 1
#include "backends/cpu/kernels_q8_impl.h"
#undef SLUICE_Q8_SIMD
#undef SLUICE_Q8_VNNI
#undef SLUICE_Q8_AVX512

// One super-block (256 inputs) of 16 rows as AMX B operands: plane[c] is the 64×16 tile of
// inputs 64c..64c+63, its row k holding inputs 64c + 4k..+3 of each of the 16 rows (VNNI
// order: 4 bytes per row). Q4_K/Q5_K's 6-bit mins as int16 pairs (m_2k, m_2k+1) per row, for a
// vpdpwssd with the activations' sub-block sums (AmxAct::bsum32).
struct alignas(64) AmxKTile {
  int8_t lo[4][16][64];
  int8_t hi[4][16][64];
  uint32_t mp[4][kQ8TileRows];
  float d[kQ8TileRows], dmin[kQ8TileRows];
};
static_assert(sizeof(AmxKTile) % 64 == 0, "tiles are read as 64-byte rows");

// The scale of each of the 16 rows (int8) as vpmaddubsw operands: se holds it in the even bytes
// of the row's 32-bit lane, so in the odd ones; offs = 32·sc as int16 (Q6_K's −32 offset).
struct RowScale {
  __m512i se, so, offs;
};
template <bool kOffs>
inline RowScale row_scale(const void* sc) {
  const __m512i idx = _mm512_set_epi32(0x0F0F0F0F, 0x0E0E0E0E, 0x0D0D0D0D, 0x0C0C0C0C, 0x0B0B0B0B, 0x0A0A0A0A,
                                       0x09090909, 0x08080808, 0x07070707, 0x06060606, 0x05050505, 0x04040404,
                                       0x03030303, 0x02020202, 0x01010101, 0x00000000);
  const __m512i v = _mm512_zextsi128_si512(_mm_loadu_si128(static_cast<const __m128i*>(sc)));
  RowScale r;
  r.se = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, idx, v);
  r.so = _mm512_maskz_permutexvar_epi8(0xAAAAAAAAAAAAAAAAull, idx, v);
  r.offs = kOffs ? _mm512_slli_epi16(_mm512_srai_epi16(_mm512_slli_epi16(r.se, 8), 8), 5) : _mm512_setzero_si512();
  return r;
}

// sc·q − offs per byte, for q (unsigned, < 64) in the 4 bytes of each row's 32-bit lane, split
// into lo (bits 0..5) and hi (the rest, arithmetic): two vpmaddubsw give the even and odd
// bytes' products as int16, a vpermt2b gathers their low bytes back into byte order.
template <bool kOffs>
inline void scale_split(__m512i q, const RowScale& rs, int8_t* lo, int8_t* hi) {
  // byte 2p <- byte 2p of e (lane p's low byte), byte 2p+1 <- byte 2p of o
  const __m512i even_idx = _mm512_set_epi8(126, 62, 124, 60, 122, 58, 120, 56, 118, 54, 116, 52, 114, 50, 112, 48, 110,
                                           46, 108, 44, 106, 42, 104, 40, 102, 38, 100, 36, 98, 34, 96, 32, 94, 30, 92,
                                           28, 90, 26, 88, 24, 86, 22, 84, 20, 82, 18, 80, 16, 78, 14, 76, 12, 74, 10,
                                           72, 8, 70, 6, 68, 4, 66, 2, 64, 0);
  __m512i e = _mm512_maddubs_epi16(q, rs.se), o = _mm512_maddubs_epi16(q, rs.so);
  if constexpr (kOffs) {
    e = _mm512_sub_epi16(e, rs.offs);
    o = _mm512_sub_epi16(o, rs.offs);
  }
  _mm512_store_si512(lo, _mm512_and_si512(_mm512_permutex2var_epi8(e, even_idx, o), _mm512_set1_epi8(0x3F)));
  _mm512_store_si512(hi, _mm512_permutex2var_epi8(_mm512_srai_epi16(e, 6), even_idx, _mm512_srai_epi16(o, 6)));
}

// Prefetch super-block i of the tile's 16 rows (i ≥ nb: super-block i − nb of the next 16 rows,
// which the next pack of this thread most likely reads). The pack reads 16 row streams a
// block at a time: the Xeon's hardware prefetchers lose them (as the decode rows, kernels.h),
// and without this the pack waited on DRAM for most of its time in a 512-token MoE prefill.
inline void prefetch_super_block(const void* w, size_t row_bytes, int64_t i, int64_t nb, size_t block) {
  const auto* base = static_cast<const uint8_t*>(w) +
                     (i < nb ? static_cast<size_t>(i) * block : 16 * row_bytes + static_cast<size_t>(i - nb) * block);
  // As asm: GCC 12 at -O2 drops __builtin_prefetch/_mm_prefetch here (they were absent from
  // the object code).
  for (int r = 0; r < 16; ++r)
    for (size_t o = 0; o < block + 63; o += 64)
      __asm__ volatile("prefetcht0 %0" : : "m"(*(base + r * row_bytes + std::min(o, block - 1))));
}

// Q4_K and Q5_K: super-block i of 16 rows as its VNNI tile (q8_*_tile_pack_512), then planes.
template <class VTile, class Block, void (*VPack)(const void*, size_t, int64_t, int64_t, uint8_t*)>
struct K4Pack {
  static constexpr size_t kBlock = sizeof(Block);
  static constexpr bool kMins = true;
  static void run(const void* w, size_t row_bytes, int64_t nr, int64_t i, AmxKTile& a) {
    constexpr bool kHighBit = requires(const VTile& t) { t.qh; };
    const __m512i m4 = _mm512_set1_epi8(0xF), m10 = _mm512_set1_epi8(0x10);
    alignas(64) VTile b;
    VPack(static_cast<const uint8_t*>(w) + static_cast<size_t>(i) * sizeof(Block), row_bytes, nr, QK_K,
          reinterpret_cast<uint8_t*>(&b));
    for (int j = 0; j < 8; ++j) {  // sub-block j: inputs 32j.., plane j/2, rows 8(j%2)..+7
      const int c = j / 2, hi = j % 2;
      const RowScale sc = row_scale<false>(b.sc[j]);
      for (int g = 0; g < 8; ++g) {
        const __m512i raw = _mm512_loadu_si512(b.qs[8 * c + g]);
        __m512i q = _mm512_and_si512(hi ? _mm512_srli_epi16(raw, 4) : raw, m4);
        if constexpr (kHighBit) {
          const __m512i h = _mm512_loadu_si512(b.qh[g]);
          const __m512i hb = j < 4 ? _mm512_slli_epi16(h, 4 - j) : j == 4 ? h : _mm512_srli_epi16(h, j - 4);
          q = _mm512_or_si512(q, _mm512_and_si512(hb, m10));
        }
        scale_split<false>(q, sc, a.lo[c][8 * hi + g], a.hi[c][8 * hi + g]);
      }
    }
    for (int k = 0; k < 4; ++k)
      for (int r = 0; r < kQ8TileRows; ++r) a.mp[k][r] = (b.m2[2 * k][r] & 0xFFFF) | (b.m2[2 * k + 1][r] << 16);
    std::memcpy(a.d, b.d, sizeof a.d);
    std::memcpy(a.dmin, b.dmin, sizeof a.dmin);
  }
};

struct Q6Pack {
  static constexpr size_t kBlock = sizeof(block_q6_K);
  static constexpr bool kMins = false;
  static void run(const void* w, size_t row_bytes, int64_t nr, int64_t i, AmxKTile& a) {
    alignas(64) Q6KTile b;
    q6_K_tile_pack_512(static_cast<const uint8_t*>(w) + static_cast<size_t>(i) * sizeof(block_q6_K), row_bytes, nr,
                       QK_K, reinterpret_cast<uint8_t*>(&b));
    // Sub-block s (inputs 16s..16s+15) is rows 4(s%4)..+3 of plane s/4; plane c, row k holds
    // inputs 64c + 4k = 128h + 32p + 4g (h = c/2, p = 2(c%2) + k/8, g = k%8), as Q6KTokens.
    for (int sb = 0; sb < 16; ++sb) {
      const RowScale sc = row_scale<true>(b.sc[sb]);
      const int c = sb / 4;
      for (int k = 4 * (sb % 4); k < 4 * (sb % 4) + 4; ++k)
        scale_split<true>(q6_K_tile_q(b, c / 2, 2 * (c % 2) + k / 8, k % 8), sc, a.lo[c][k], a.hi[c][k]);
    }
    std::memcpy(a.d, b.d, sizeof a.d);
  }
};

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Activations as AMX A operands: per group of 16 tokens (the last one zero-padded) and
// super-block, qs[c] is the 16×64 tile of inputs 64c.. of the 16 tokens, with their d and the
// sums of their eight 32-input sub-blocks beside it (bsums[2j] + bsums[2j+1], exact in int16).
// One contiguous 1 KiB tile loads ~1.6x faster than 16 Q8_K rows 2.3 KB apart.
struct alignas(64) AmxAct {
  int8_t qs[4][16][64];
  float d[16];
  int16_t bsum32[16][8];
};
static_assert(sizeof(AmxAct) % 64 == 0, "tiles are read as 64-byte rows");

size_t amx_act_bytes(int64_t n, int64_t n_tok) {
  return static_cast<size_t>((n_tok + 15) / 16 * (n / QK_K)) * sizeof(AmxAct);
}

void amx_act_pack(const void* a, size_t astride, int64_t n, int64_t n_tok, uint8_t* out) {
  const int64_t nb = n / QK_K, n_groups = (n_tok + 15) / 16;
  auto* A = reinterpret_cast<AmxAct*>(out);
  for (int64_t g = 0; g < n_groups; ++g)
    for (int64_t i = 0; i < nb; ++i) {
      AmxAct& b = A[g * nb + i];
      for (int t = 0; t < 16; ++t) {
        const int64_t tok = 16 * g + t;
        if (tok >= n_tok) {
          for (int c = 0; c < 4; ++c) std::memset(b.qs[c][t], 0, 64);
          b.d[t] = 0;
          std::memset(b.bsum32[t], 0, sizeof b.bsum32[t]);
          continue;
        }
        const auto& x = reinterpret_cast<const block_q8_K*>(static_cast<const uint8_t*>(a) + tok * astride)[i];
        for (int c = 0; c < 4; ++c) std::memcpy(b.qs[c][t], x.qs + 64 * c, 64);
        b.d[t] = x.d;
        for (int j = 0; j < 8; ++j) b.bsum32[t][j] = static_cast<int16_t>(x.bsums[2 * j] + x.bsums[2 * j + 1]);
      }
    }
}

// Two groups of 16 tokens against one 16-row tile: tiles 0-1 hold the first group's lo and hi
// sums (16 tokens × 16 rows of int32), 2-3 the second's, 4-5 their activations, 6-7 the weight
// planes. A 2×2 block: each weight plane loaded serves both groups.
inline void load_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // Not _tile_loadconfig: GCC 12 declares its operand as the first 8 bytes only, so the stores
  // to colsb and rows above are dead to it and were dropped (every tile then faults).
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

// The float terms of super-block i for m tokens (sums c_lo, c_hi as stored by the tiles), as
// the scalar twin: acc = fma(sumi, d·d_t, acc), then Q4_K/Q5_K acc = fma(-mins, dmin·d_t, acc),
// acc being token t's 16 outputs in y (0 before the first super-block).
template <bool kMins>
inline void amx_k_terms(const AmxKTile& b, const AmxAct& a, int m, const int32_t (*c_lo)[16], const int32_t (*c_hi)[16],
                        bool first, float* y, size_t ldy, __mmask16 rows) {
  const __m512 dv = _mm512_loadu_ps(b.d), dmv = _mm512_loadu_ps(b.dmin);
  for (int t = 0; t < m; ++t) {
    float* yt = y + t * ldy;
    __m512 acc = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(rows, yt);
    const __m512i sumi = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c_hi[t]), 6), _mm512_load_si512(c_lo[t]));
    const __m512 ad = _mm512_set1_ps(a.d[t]);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dv, ad), acc);
    if constexpr (kMins) {
      __m512i mins = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k)
        mins = _mm512_dpwssd_epi32(mins, _mm512_loadu_si512(b.mp[k]), q8_bcst32(a.bsum32[t] + 2 * k));
      acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dmv, ad), acc);
    }
    _mm512_mask_storeu_ps(yt, rows, acc);
  }
}

// The 2×2 block of one super-block (load_config): the lo and hi sums of 16 tokens a0 (and of
// 16 more, a1, when non-null) against the planes b, left in tiles 0-1 (2-3); then stored to c.
inline void amx_block_tdp(const AmxKTile& b, const AmxAct& a0, const AmxAct* a1) {
  _tile_zero(0);
  _tile_zero(1);
  if (a1) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int k = 0; k < 4; ++k) {
    _tile_loadd(4, a0.qs[k], 64);
    _tile_loadd(6, b.lo[k], 64);
    _tile_loadd(7, b.hi[k], 64);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    if (a1) {
      _tile_loadd(5, a1->qs[k], 64);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    }
  }
}
inline void amx_block_store(int32_t (*c)[16][16], bool two) {
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  if (two) {
    _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64);
  }
}

// amx_k_terms with token t's accumulator in acc[t] (a register) instead of y.
template <bool kMins>
inline void amx_k_terms_acc(const AmxKTile& b, const AmxAct& a, int m, const int32_t (*c_lo)[16],
                            const int32_t (*c_hi)[16], __m512* acc) {
  const __m512 dv = _mm512_loadu_ps(b.d), dmv = _mm512_loadu_ps(b.dmin);
  for (int t = 0; t < m; ++t) {
    const __m512i sumi = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c_hi[t]), 6), _mm512_load_si512(c_lo[t]));
    const __m512 ad = _mm512_set1_ps(a.d[t]);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dv, ad), acc[t]);
    if constexpr (kMins) {
      __m512i mins = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k)
        mins = _mm512_dpwssd_epi32(mins, _mm512_loadu_si512(b.mp[k]), q8_bcst32(a.bsum32[t] + 2 * k));
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dmv, ad), acc[t]);
    }
  }
}

// Batches of more than kFusedMaxTokens tokens: all super-blocks of the 16 rows are packed first
// (into this thread's buffer, nb·8.6 KB, in L2), then each pair of token groups runs through
// them with its 32 accumulators in registers: the activations stream once, the planes from L2.
// Fewer tokens: one super-block at a time (below). 768×2048, 1 thread, Intel Xeon: 32 tokens
// Q4_K 256 GMAC/s fused vs 218 packed first, Q6_K 228 vs 204; 512 tokens Q4_K 367 vs 395,
// Q6_K 344 vs 418.
constexpr int64_t kFusedMaxTokens = 64;

template <bool kMins>
void amx_gemm_packed(const AmxKTile* T, int64_t nb, const AmxAct* A, int64_t n_tok, float* y, size_t ldy,
                     __mmask16 rows) {
  alignas(64) int32_t cs[2][4][16][16];
  for (int64_t t0 = 0; t0 < n_tok; t0 += 32) {
    const int m0 = static_cast<int>(std::min<int64_t>(16, n_tok - t0));
    const int m1 = static_cast<int>(std::clamp<int64_t>(n_tok - t0 - 16, 0, 16));
    const AmxAct* a0 = A + t0 / 16 * nb;
    const AmxAct* a1 = a0 + nb;
    __m512 acc[32];
    for (int t = 0; t < 32; ++t) acc[t] = _mm512_setzero_ps();
    auto terms = [&](int64_t i) {
      int32_t(*c)[16][16] = cs[i & 1];
      amx_k_terms_acc<kMins>(T[i], a0[i], m0, c[0], c[1], acc);
      if (m1) amx_k_terms_acc<kMins>(T[i], a1[i], m1, c[2], c[3], acc + 16);
    };
    for (int64_t i = 0; i < nb; ++i) {
      amx_block_tdp(T[i], a0[i], m1 ? &a1[i] : nullptr);
      if (i > 0) terms(i - 1);  // the previous super-block's float pass while these tdps run
      amx_block_store(cs[i & 1], m1 > 0);
    }
    terms(nb - 1);
    for (int t = 0; t < m0 + m1; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * ldy, rows, acc[t]);
  }
}

// Q8TileOps::gemm_rows: super-block by super-block, the 16 rows' planes are packed into an
// L1-resident AmxKTile and every token runs against them (the outputs accumulate in y), so the
// weight planes are written and read once, from L1, however many tokens there are. Tokens go
// in pairs of 16-token groups (the 2×2 block of load_config); the float pass of one pair runs
// while the next pair's tdps do (two sets of sums).
template <class Pack>
void amx_gemm_rows(const void* w, size_t row_bytes, int64_t nr, int64_t n, const void* act, int64_t n_tok, float* y,
                   size_t ldy) {
  const auto* A = static_cast<const AmxAct*>(act);
  const int64_t nb = n / QK_K, n_pairs = (n_tok + 31) / 32;
  const __mmask16 rows = static_cast<__mmask16>((1u << nr) - 1);
  load_config();
  if (n_tok > kFusedMaxTokens) {
    thread_local std::vector<AmxKTile> planes;
    if (planes.size() < static_cast<size_t>(nb)) planes.resize(static_cast<size_t>(nb));
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_super_block(w, row_bytes, i + 2, nb, Pack::kBlock);
      Pack::run(w, row_bytes, nr, i, planes[static_cast<size_t>(i)]);
    }
    amx_gemm_packed<Pack::kMins>(planes.data(), nb, A, n_tok, y, ldy, rows);
    return;
  }
  alignas(64) AmxKTile b;
  alignas(64) int32_t cs[2][4][16][16];
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_super_block(w, row_bytes, i + 2, nb, Pack::kBlock);
    Pack::run(w, row_bytes, nr, i, b);
    auto terms = [&](int64_t p) {
      const int64_t t0 = 32 * p;
      const int m0 = static_cast<int>(std::min<int64_t>(16, n_tok - t0));
      const int m1 = static_cast<int>(std::clamp<int64_t>(n_tok - t0 - 16, 0, 16));
      int32_t(*c)[16][16] = cs[p & 1];
      const AmxAct* a0 = A + (2 * p) * nb + i;
      amx_k_terms<Pack::kMins>(b, *a0, m0, c[0], c[1], i == 0, y + t0 * ldy, ldy, rows);
      if (m1) amx_k_terms<Pack::kMins>(b, a0[nb], m1, c[2], c[3], i == 0, y + (t0 + 16) * ldy, ldy, rows);
    };
    for (int64_t p = 0; p < n_pairs; ++p) {
      const bool two = n_tok - 32 * p > 16;
      const AmxAct* a0 = A + (2 * p) * nb + i;
      amx_block_tdp(b, *a0, two ? a0 + nb : nullptr);
      if (p > 0) terms(p - 1);
      amx_block_store(cs[p & 1], two);
    }
    terms(n_pairs - 1);
  }
}

Q8Kernels make_table() {
  Q8Kernels k = q8_table("avx512-amx");
  const auto tiles = [](auto gemm_rows) {
    Q8TileOps t;
    t.gemm_rows = gemm_rows;
    t.act_bytes = amx_act_bytes;
    t.act_pack = amx_act_pack;
    return t;
  };
  k.q4_K.tile = tiles(amx_gemm_rows<K4Pack<Q4KTile, block_q4_K, q4_K_tile_pack_512>>);
  k.q5_K.tile = tiles(amx_gemm_rows<K4Pack<Q5KTile, block_q5_K, q5_K_tile_pack_512>>);
  k.q6_K.tile = tiles(amx_gemm_rows<Q6Pack>);
  return k;
}

}  // namespace amx_q8

double amx_int8_macs(int64_t iters) {
  if (!q8_kernels_amx()) return 0;
  alignas(64) static const int8_t ones[16][64] = {};
  amx_q8::load_config();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  for (int64_t i = 0; i < iters; ++i) {  // four independent accumulators, as the 2×2 block
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  _tile_release();
  return static_cast<double>(iters) * 4 * 16 * 16 * 64;
}

const Q8Kernels* q8_kernels_amx() {
  static const Q8Kernels* table = []() -> const Q8Kernels* {
    const CpuFeatures& f = cpu_features();
    if (!f.amx_int8 || !f.avx512vnni || !f.avx512vbmi || !cpu_isa_available(CpuIsa::avx512)) return nullptr;
    if (!cpu_request_amx()) return nullptr;
    static const Q8Kernels k = amx_q8::make_table();
    return &k;
  }();
  return table;
}

}  // namespace sluice::cpu
