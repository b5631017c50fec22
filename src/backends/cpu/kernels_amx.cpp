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
// Measured (Intel Xeon, AMX, 1 thread, 768×2048): Q4_K 32 tokens 204 GMAC/s with the pack
// (VNNI tiles 139), 512 tokens 303 (150); Q6_K 165 (117) and 336 (126). That is ~10% of the
// tdp peak: what bounds it is the 16-row tile loads of activations 2.3 KB apart (a dense 1 KB
// A tile in L1 runs 1.6x faster), the store and float pass per super-block, and the pack
// (a third of the time at 32 tokens, an expert's share of a 512-token batch).
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
// order: 4 bytes per row). Q4_K/Q5_K's mins stay as in Q4KTile (m2: each min twice, as int16).
struct AmxKTile {
  int8_t lo[4][16][64];
  int8_t hi[4][16][64];
  uint32_t m2[8][kQ8TileRows];
  float d[kQ8TileRows], dmin[kQ8TileRows];
};
static_assert(sizeof(AmxKTile) % 64 == 0, "tiles are read as 64-byte rows");

size_t amx_k_tile_bytes(int64_t n) { return static_cast<size_t>(n / QK_K) * sizeof(AmxKTile); }

// sc·q per byte, for q (unsigned, < 64) in the 4 bytes of each 32-bit lane and the lane's scale
// sc (int8, in every byte of the lane), minus `offs`·sc; split into lo (bits 0..5) and hi (the
// rest, arithmetic): two vpmaddubsw give the even and odd bytes' products as int16, a
// vpermt2b gathers their low bytes back into byte order.
struct ScaleSplit {
  // byte 2p <- byte 2p of e (lane p's low byte), byte 2p+1 <- byte 2p of o
  __m512i even_idx = _mm512_set_epi8(126, 62, 124, 60, 122, 58, 120, 56, 118, 54, 116, 52, 114, 50, 112, 48, 110, 46,
                                     108, 44, 106, 42, 104, 40, 102, 38, 100, 36, 98, 34, 96, 32, 94, 30, 92, 28, 90,
                                     26, 88, 24, 86, 22, 84, 20, 82, 18, 80, 16, 78, 14, 76, 12, 74, 10, 72, 8, 70, 6,
                                     68, 4, 66, 2, 64, 0);
  __m512i m6 = _mm512_set1_epi8(0x3F);
  void operator()(__m512i q, __m512i sc_bytes, __m512i offs16, int8_t* lo, int8_t* hi) const {
    const __m512i se = _mm512_and_si512(sc_bytes, _mm512_set1_epi16(0x00FF));
    const __m512i so = _mm512_andnot_si512(_mm512_set1_epi16(0x00FF), sc_bytes);
    const __m512i e = _mm512_sub_epi16(_mm512_maddubs_epi16(q, se), offs16);
    const __m512i o = _mm512_sub_epi16(_mm512_maddubs_epi16(q, so), offs16);
    _mm512_store_si512(lo, _mm512_and_si512(_mm512_permutex2var_epi8(e, even_idx, o), m6));
    _mm512_store_si512(hi, _mm512_permutex2var_epi8(_mm512_srai_epi16(e, 6), even_idx, _mm512_srai_epi16(o, 6)));
  }
};

// The 16 per-row bytes v[0..15] repeated in the 4 bytes of each row's 32-bit lane.
inline __m512i lane_bytes(const uint8_t* v) {
  return _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v))),
                            _mm512_set1_epi32(0x01010101));
}

// Q4_K and Q5_K: the VNNI tile of each super-block (q8_*_tile_pack_512), then its planes.
template <class VTile, class Block, void (*VPack)(const void*, size_t, int64_t, int64_t, uint8_t*)>
void amx_k4_pack(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  constexpr bool kHighBit = requires(const VTile& t) { t.qh; };
  const int64_t nb = n / QK_K;
  auto* T = reinterpret_cast<AmxKTile*>(tile);
  const ScaleSplit split;
  const __m512i m4 = _mm512_set1_epi8(0xF), m10 = _mm512_set1_epi8(0x10), zero = _mm512_setzero_si512();
  alignas(64) VTile b;
  for (int64_t i = 0; i < nb; ++i) {
    VPack(static_cast<const uint8_t*>(w) + static_cast<size_t>(i) * sizeof(Block), row_bytes, nr, QK_K,
          reinterpret_cast<uint8_t*>(&b));
    AmxKTile& a = T[i];
    for (int j = 0; j < 8; ++j) {  // sub-block j: inputs 32j.., plane j/2, rows 8(j%2)..+7
      const int c = j / 2, hi = j % 2;
      const __m512i sc = lane_bytes(b.sc[j]);
      for (int g = 0; g < 8; ++g) {
        const __m512i raw = _mm512_loadu_si512(b.qs[8 * c + g]);
        __m512i q = _mm512_and_si512(hi ? _mm512_srli_epi16(raw, 4) : raw, m4);
        if constexpr (kHighBit) {
          const __m512i h = _mm512_loadu_si512(b.qh[g]);
          const __m512i hb = j < 4 ? _mm512_slli_epi16(h, 4 - j) : j == 4 ? h : _mm512_srli_epi16(h, j - 4);
          q = _mm512_or_si512(q, _mm512_and_si512(hb, m10));
        }
        split(q, sc, zero, a.lo[c][8 * hi + g], a.hi[c][8 * hi + g]);
      }
    }
    std::memcpy(a.m2, b.m2, sizeof a.m2);
    std::memcpy(a.d, b.d, sizeof a.d);
    std::memcpy(a.dmin, b.dmin, sizeof a.dmin);
  }
}

void amx_q6_K_pack(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / QK_K;
  auto* T = reinterpret_cast<AmxKTile*>(tile);
  const ScaleSplit split;
  alignas(64) Q6KTile b;
  for (int64_t i = 0; i < nb; ++i) {
    q6_K_tile_pack_512(static_cast<const uint8_t*>(w) + static_cast<size_t>(i) * sizeof(block_q6_K), row_bytes, nr,
                       QK_K, reinterpret_cast<uint8_t*>(&b));
    AmxKTile& a = T[i];
    // Plane c, row k: inputs 64c + 4k = 128h + 32p + 4g (h = c/2, p = 2(c%2) + k/8, g = k%8),
    // sub-block 8h + 2p + g/4 (as Q6KTileTokens).
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 16; ++k) {
        const int h = c / 2, p = 2 * (c % 2) + k / 8, g = k % 8, s = 8 * h + 2 * p + g / 4;
        const __m512i q = q6_K_tile_q(b, h, p, g);
        const __m512i sc = lane_bytes(reinterpret_cast<const uint8_t*>(b.sc[s]));
        // 32·sc as int16 in both halves of each lane (sc sign-extended from its byte).
        const __m512i sc16 = _mm512_srai_epi16(_mm512_slli_epi16(sc, 8), 8);
        split(q, sc, _mm512_slli_epi16(sc16, 5), a.lo[c][k], a.hi[c][k]);
      }
    std::memcpy(a.d, b.d, sizeof a.d);
  }
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Two 16-token halves of up to 32 tokens against one 16-row tile: tiles 0-1 hold the first
// half's lo and hi sums (m0 tokens × 16 rows of int32), 2-3 the second half's (m1 tokens), 4-5
// their activations (m × 64 bytes), 6-7 the weight planes (16 × 64 bytes). A 2×2 block: each
// weight plane loaded from L2 serves both halves, so the tile loads keep up with the tdps.
inline void load_config(int m0, int m1) {
  TileConfig cfg;
  const int rows[8] = {m0, m0, m1, m1, m0, m1, 16, 16};
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = rows[t] ? 64 : 0;
    cfg.rows[t] = static_cast<uint8_t>(rows[t]);
  }
  // Not _tile_loadconfig: GCC 12 declares its operand as the first 8 bytes only, so the stores
  // to colsb and rows above are dead to it and were dropped (every tile then faults).
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

// The float terms of one super-block for m tokens (sums c_lo, c_hi as stored by the tiles),
// as the scalar twin: acc = fma(sumi, d·d_t, acc), then Q4_K/Q5_K acc = fma(-mins, dmin·d_t, acc).
template <bool kMins>
inline void amx_k_terms(const AmxKTile& b, const uint8_t* act, size_t astride, int64_t i, int m,
                        const int32_t (*c_lo)[16], const int32_t (*c_hi)[16], __m512* acc) {
  const __m512 dv = _mm512_loadu_ps(b.d), dmv = _mm512_loadu_ps(b.dmin);
  for (int t = 0; t < m; ++t) {
    const auto* a = reinterpret_cast<const block_q8_K*>(act + static_cast<size_t>(t) * astride) + i;
    const __m512i sumi = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c_hi[t]), 6), _mm512_load_si512(c_lo[t]));
    const __m512 ad = _mm512_set1_ps(a->d);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dv, ad), acc[t]);
    if constexpr (kMins) {
      __m512i mins = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j)
        mins = _mm512_dpwssd_epi32(mins, _mm512_loadu_si512(b.m2[j]), q8_bcst32(a->bsums + 2 * j));
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dmv, ad), acc[t]);
    }
  }
}

template <bool kMins>
void amx_k_gemm(const uint8_t* tile, int64_t n, const void* act, size_t astride, int64_t n_tok, float* y, size_t ldy,
                int64_t nr) {
  const auto* T = reinterpret_cast<const AmxKTile*>(tile);
  const auto* ab = static_cast<const uint8_t*>(act);
  const int64_t nb = n / QK_K;
  const __mmask16 rows = static_cast<__mmask16>((1u << nr) - 1);
  alignas(64) int32_t c[4][16][16];
  int cfg0 = -1, cfg1 = -1;
  for (int64_t t0 = 0; t0 < n_tok; t0 += 32) {
    const int m0 = static_cast<int>(std::min<int64_t>(16, n_tok - t0));
    const int m1 = static_cast<int>(std::clamp<int64_t>(n_tok - t0 - 16, 0, 16));
    if (m0 != cfg0 || m1 != cfg1) load_config(cfg0 = m0, cfg1 = m1);
    const uint8_t* a0 = ab + static_cast<size_t>(t0) * astride;
    const uint8_t* a1 = a0 + 16 * astride;
    __m512 acc[32];
    for (int t = 0; t < 32; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const AmxKTile& b = T[i];
      const size_t qs = static_cast<size_t>(i) * sizeof(block_q8_K) + offsetof(block_q8_K, qs);
      _tile_zero(0);
      _tile_zero(1);
      if (m1) {
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int k = 0; k < 4; ++k) {
        _tile_loadd(4, a0 + qs + 64 * k, static_cast<long>(astride));
        _tile_loadd(6, b.lo[k], 64);
        _tile_loadd(7, b.hi[k], 64);
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        if (m1) {
          _tile_loadd(5, a1 + qs + 64 * k, static_cast<long>(astride));
          _tile_dpbssd(2, 5, 6);
          _tile_dpbssd(3, 5, 7);
        }
      }
      _tile_stored(0, c[0], 64);
      _tile_stored(1, c[1], 64);
      if (m1) {
        _tile_stored(2, c[2], 64);
        _tile_stored(3, c[3], 64);
      }
      amx_k_terms<kMins>(b, a0, astride, i, m0, c[0], c[1], acc);
      if (m1) amx_k_terms<kMins>(b, a1, astride, i, m1, c[2], c[3], acc + 16);
    }
    for (int t = 0; t < m0 + m1; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * ldy, rows, acc[t]);
  }
  // Back to the init state: a thread that leaves tiles configured makes every context switch
  // save and restore their 8 KiB.
  _tile_release();
}

Q8Kernels make_table() {
  Q8Kernels k = q8_table("avx512-amx");
  k.q4_K.tile = {amx_k_tile_bytes, amx_k4_pack<Q4KTile, block_q4_K, q4_K_tile_pack_512>, amx_k_gemm<true>, true};
  k.q5_K.tile = {amx_k_tile_bytes, amx_k4_pack<Q5KTile, block_q5_K, q5_K_tile_pack_512>, amx_k_gemm<true>, true};
  k.q6_K.tile = {amx_k_tile_bytes, amx_q6_K_pack, amx_k_gemm<false>, true};
  return k;
}

}  // namespace amx_q8

double amx_int8_macs(int64_t iters) {
  if (!q8_kernels_amx()) return 0;
  alignas(64) static const int8_t ones[16][64] = {};
  amx_q8::load_config(16, 16);
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
