// backends/cpu/kernels_q8_ktiles_impl: the prefill tiles of the super-block types (Q4_K, Q5_K,
// Q6_K, Q3_K, Q2_K, IQ4_XS; kernels.h's Q8TileOps): packed 16-row super-blocks times a few
// tokens, at VNNI (512-bit) or without it (256-bit loops of kernels_q8_tiles_avx2.h), each with
// its scalar twin. Part of kernels_q8_impl.h, which includes it inside its namespace with the
// same SLUICE_Q8_* macros; includes nothing itself.

// ---- Q4_K prefill tiles (kernels.h, Q8TileOps) -----------------------------------------
// One packed super-block of 16 rows. qs[w][r] is the 4-byte word w (bytes 4w..4w+3) of row
// r's qs: word w = 8c + g of chunk c holds elements 64c + 4g + b (low nibbles, sub-block 2c)
// and 64c + 32 + 4g + b (high nibbles, sub-block 2c + 1), b < 4 — so one 64-byte row of qs
// is a vpdpbusd operand for 16 rows. m2 holds each 6-bit min twice (two int16 halves) so a
// vpdpwssd with the pair bsums[2j], bsums[2j+1] adds m_j·(bsums[2j] + bsums[2j+1]).
struct Q4KTile {
  uint32_t qs[32][kQ8TileRows];
  uint8_t sc[8][kQ8TileRows];
  uint32_t m2[8][kQ8TileRows];
  float d[kQ8TileRows], dmin[kQ8TileRows];
};
static_assert(sizeof(Q4KTile) % 64 == 0, "tiles are read as 64-byte vectors");

inline size_t q4_K_tile_bytes(int64_t n) { return static_cast<size_t>(n / QK_K) * sizeof(Q4KTile); }

// Every tile pack reads its 16 rows a (super-)block, a column, at a time: 16 short streams the
// hardware prefetcher does not follow, so every load of a pack stalled on memory (95% of
// q8_pack_words16's time at pp512 of the Qwen3.5-MoE synth on Zen 4, where an expert's 16 rows
// are packed for ~16 tokens). While packing the bytes [block, block + bytes) of its rows, a
// pack requests the same bytes of the next 16 rows (the next unit's, as matmul and the MoE walk
// them): one tile ahead, spread over the pack, into L2 (locality 2: as an L1 prefetch it gained
// a third as much). Packing 256 MB of Q4_K rows, 1 thread, Zen 4: 330-440 ns per 16-row
// super-block before, 140-190 after (~95 when the rows are in cache). A prefetch never faults,
// so an address past the tensor is harmless: the arithmetic is on integers, not pointers.
inline void q8_pack_prefetch(const uint8_t* block, size_t row_bytes, size_t bytes) {
  uintptr_t p = reinterpret_cast<uintptr_t>(block) + kQ8TileRows * row_bytes;
  for (int r = 0; r < kQ8TileRows; ++r, p += row_bytes) {
    for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(reinterpret_cast<const void*>(p + b), 0, 2);
    __builtin_prefetch(reinterpret_cast<const void*>(p + bytes - 1), 0, 2);
  }
}
// The 32-blocks are a few bytes per row: one prefetch span per kPrefetchBlocks of them.
template <class Block>
inline void q8_pack_prefetch_blocks(const uint8_t* wb, size_t row_bytes, int64_t i) {
  constexpr int64_t kPrefetchBlocks = (64 + sizeof(Block) - 1) / sizeof(Block);
  if (i % kPrefetchBlocks == 0)
    q8_pack_prefetch(wb + static_cast<size_t>(i) * sizeof(Block), row_bytes, kPrefetchBlocks * sizeof(Block));
}

inline void q4_K_tile_pack(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / QK_K;
  auto* T = reinterpret_cast<Q4KTile*>(tile);
  if (nr < kQ8TileRows) __builtin_memset(tile, 0, q4_K_tile_bytes(n));
  for (int64_t r = 0; r < nr; ++r) {
    const auto* x = reinterpret_cast<const block_q4_K*>(static_cast<const uint8_t*>(w) + r * row_bytes);
    for (int64_t i = 0; i < nb; ++i) {
      Q4KTile& b = T[i];
      uint8_t sc[8], m[8];
      q8_scales_mins_k4(x[i].scales, sc, m);
      for (int j = 0; j < 8; ++j) {
        b.sc[j][r] = sc[j];
        b.m2[j][r] = m[j] * 0x10001u;
      }
      b.d[r] = q8_half(x[i].d);
      b.dmin[r] = q8_half(x[i].dmin);
      for (int k = 0; k < 32; ++k) __builtin_memcpy(&b.qs[k][r], x[i].qs + 4 * k, 4);
    }
  }
}

#if SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
inline __m512i q8_bcst32(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// The packs below produce exactly the bytes of q4_K_tile_pack / q6_K_tile_pack (the scalar
// packs stay the twins): 4-byte words of 16 rows transposed by 16×16 blocks, the per-row
// scale fields gathered as 32-bit words of 16 rows and split lane-parallel. They are ~5x
// faster, which matters for expert matmuls of a few dozen tokens, where the scalar pack took
// a third of the time.

// out[w] = word w of rows 0..15 (in[r] = words 0..15 of row r), by 32-bit, 64-bit and
// 128-bit-lane unpacks.
inline void q8_transpose16_epi32(const __m512i in[16], __m512i out[16]) {
  __m512i t[16], v[16];
  for (int m = 0; m < 8; ++m) {
    t[2 * m] = _mm512_unpacklo_epi32(in[2 * m], in[2 * m + 1]);
    t[2 * m + 1] = _mm512_unpackhi_epi32(in[2 * m], in[2 * m + 1]);
  }
  // v[4q + e]: 128-bit lane L holds word 4L + e of rows 4q..4q+3.
  for (int q = 0; q < 4; ++q)
    for (int h = 0; h < 2; ++h) {
      v[4 * q + 2 * h] = _mm512_unpacklo_epi64(t[4 * q + h], t[4 * q + 2 + h]);
      v[4 * q + 2 * h + 1] = _mm512_unpackhi_epi64(t[4 * q + h], t[4 * q + 2 + h]);
    }
  for (int e = 0; e < 4; ++e) {
    const __m512i x0 = _mm512_shuffle_i32x4(v[e], v[4 + e], 0x44), x1 = _mm512_shuffle_i32x4(v[e], v[4 + e], 0xEE);
    const __m512i x2 = _mm512_shuffle_i32x4(v[8 + e], v[12 + e], 0x44),
                  x3 = _mm512_shuffle_i32x4(v[8 + e], v[12 + e], 0xEE);
    out[e] = _mm512_shuffle_i32x4(x0, x2, 0x88);
    out[4 + e] = _mm512_shuffle_i32x4(x0, x2, 0xDD);
    out[8 + e] = _mm512_shuffle_i32x4(x1, x3, 0x88);
    out[12 + e] = _mm512_shuffle_i32x4(x1, x3, 0xDD);
  }
}

// Words [16k, 16k + 16) of the 64-byte field at byte `off` of nr ≤ 16 rows, transposed into
// dst[16][16] (rows ≥ nr are zero).
inline void q8_pack_words16(const uint8_t* w, size_t row_bytes, int64_t nr, size_t off, uint32_t (*dst)[kQ8TileRows]) {
  __m512i in[16], out[16];
  for (int r = 0; r < 16; ++r) in[r] = r < nr ? _mm512_loadu_si512(w + r * row_bytes + off) : _mm512_setzero_si512();
  q8_transpose16_epi32(in, out);
  for (int k = 0; k < 16; ++k) _mm512_storeu_si512(dst[k], out[k]);
}

// The 32-bit word at byte `off` of each of nr rows (0 beyond nr).
inline __m512i q8_gather_rows(const uint8_t* w, size_t row_bytes, int64_t nr, size_t off) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                         _mm512_set1_epi32(static_cast<int32_t>(row_bytes)));
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), static_cast<__mmask16>((1u << nr) - 1), idx, w + off, 1);
}
// Byte k of each lane, as 16 bytes.
inline __m128i q8_lane_byte(__m512i v, int k) { return _mm512_cvtepi32_epi8(_mm512_srli_epi32(v, 8 * k)); }

// The d, dmin, scales and mins of the q4_K/q5_K super-block at byte o of nr rows (both blocks
// start with d, dmin, scales[12]) into a tile's fields.
template <class Tile>
inline void q8_k4_tile_scales_512(const uint8_t* wb, size_t row_bytes, int64_t nr, size_t o, Tile& b) {
  const __m512i k3f = _mm512_set1_epi32(0x3f3f3f3f), k0f = _mm512_set1_epi32(0x0f0f0f0f),
                k03 = _mm512_set1_epi32(0x03030303);
  const __m512i kff = _mm512_set1_epi32(0xFF);
  const __m512i dd = q8_gather_rows(wb, row_bytes, nr, o);  // d | dmin << 16
  const __m512i u0 = q8_gather_rows(wb, row_bytes, nr, o + 4), u1 = q8_gather_rows(wb, row_bytes, nr, o + 8);
  const __m512i u2 = q8_gather_rows(wb, row_bytes, nr, o + 12);
  // q8_scales_mins_k4, 16 rows at once
  const __m512i s_lo = _mm512_and_si512(u0, k3f), m_lo = _mm512_and_si512(u1, k3f);
  const __m512i s_hi = _mm512_or_si512(_mm512_and_si512(u2, k0f),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), k03), 4));
  const __m512i m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), k0f),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), k03), 4));
  for (int j = 0; j < 8; ++j) {
    const __m512i sv = j < 4 ? s_lo : s_hi, mv = j < 4 ? m_lo : m_hi;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b.sc[j]), q8_lane_byte(sv, j % 4));
    const __m512i m = _mm512_and_si512(_mm512_srli_epi32(mv, 8 * (j % 4)), kff);
    _mm512_storeu_si512(b.m2[j], _mm512_or_si512(m, _mm512_slli_epi32(m, 16)));
  }
  _mm512_storeu_ps(b.d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
  _mm512_storeu_ps(b.dmin, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
}

inline void q4_K_tile_pack_512(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / QK_K;
  auto* T = reinterpret_cast<Q4KTile*>(tile);
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t i = 0; i < nb; ++i) {
    Q4KTile& b = T[i];
    const size_t o = static_cast<size_t>(i) * sizeof(block_q4_K);
    q8_pack_prefetch(wb + o, row_bytes, sizeof(block_q4_K));
    q8_pack_words16(wb, row_bytes, nr, o + offsetof(block_q4_K, qs), b.qs);
    q8_pack_words16(wb, row_bytes, nr, o + offsetof(block_q4_K, qs) + 64, b.qs + 16);
    q8_k4_tile_scales_512(wb, row_bytes, nr, o, b);
  }
}

// Q8TileOps::gemm for a tile type: the tokens in passes of 8 (up to kMaxNT), then 4, then 1. Run<NT>::run
// computes NT tokens against the whole tile (each type's kernel is a class template with a
// static run, because function templates cannot be template template arguments). sums: the
// activations' block sums (Q8TileOps::act_sums), nb per token, for the runs that read them.
template <class Tile, int QK, template <int> class Run, int kMaxNT = 8>
inline void q8_tile_gemm(const uint8_t* tile, int64_t n, const void* a, size_t astride, const int32_t* sums,
                         int64_t n_tok, float* y, size_t ldy, int64_t nr) {
  const auto* T = reinterpret_cast<const Tile*>(tile);
  const auto* ab = static_cast<const uint8_t*>(a);
  const int64_t nb = n / QK;
  const __mmask16 rows = static_cast<__mmask16>((1u << nr) - 1);
  auto at = [&](int64_t t) { return sums ? sums + t * nb : nullptr; };
  int64_t t = 0;
  if constexpr (kMaxNT >= 8)
    for (; t + 8 <= n_tok; t += 8) Run<8>::run(T, nb, ab + t * astride, astride, at(t), y + t * ldy, ldy, rows);
  for (; t + 4 <= n_tok; t += 4) Run<4>::run(T, nb, ab + t * astride, astride, at(t), y + t * ldy, ldy, rows);
  for (; t < n_tok; ++t) Run<1>::run(T, nb, ab + t * astride, astride, at(t), y + t * ldy, ldy, rows);
}

// Q8TileOps::gemm of Q4_K: K4TileTokens (in the Q5_K section below, which it shares).
#define SLUICE_Q8_Q4_K_TILE \
  { q4_K_tile_bytes, q4_K_tile_pack_512, q8_tile_gemm<Q4KTile, QK_K, K4TileTokens<Q4KTile>::Run> }
#elif !SLUICE_Q8_SIMD
// The scalar twin: k4_tile_step (in the Q5_K section below).
#define SLUICE_Q8_Q4_K_TILE \
  { q4_K_tile_bytes, q4_K_tile_pack, q8_tile_gemm_scalar<Q4KTile, block_q8_K, QK_K, k4_tile_step<Q4KTile>> }
#else
// Without VNNI: the 256-bit tiles (kernels_q8_tiles_avx2.h).
#define SLUICE_Q8_Q4_K_TILE \
  { q4_K_tile_bytes, k4_tile_pack_256<Q4KTile, block_q4_K>, q8_tile_gemm_256<Q4KTile, K4Tile256<Q4KTile>> }
#endif

// ---- Q5_K prefill tiles ------------------------------------------------------------------
// Q4KTile plus qh[g][r], the 4-byte word g of row r's qh: byte l of qh holds the fifth bit of
// element 64c + l in bit 2c and of element 64c + 32 + l in bit 2c + 1, so sub-block j takes
// bit j of the qh bytes that qs word 8(j/2) + g pairs with (elements 4g..4g+3 of the chunk).
struct Q5KTile {
  uint32_t qs[32][kQ8TileRows];
  uint32_t qh[8][kQ8TileRows];
  uint8_t sc[8][kQ8TileRows];
  uint32_t m2[8][kQ8TileRows];
  float d[kQ8TileRows], dmin[kQ8TileRows];
};
static_assert(sizeof(Q5KTile) % 64 == 0, "tiles are read as 64-byte vectors");

inline size_t q5_K_tile_bytes(int64_t n) { return static_cast<size_t>(n / QK_K) * sizeof(Q5KTile); }

inline void q5_K_tile_pack(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / QK_K;
  auto* T = reinterpret_cast<Q5KTile*>(tile);
  if (nr < kQ8TileRows) __builtin_memset(tile, 0, q5_K_tile_bytes(n));
  for (int64_t r = 0; r < nr; ++r) {
    const auto* x = reinterpret_cast<const block_q5_K*>(static_cast<const uint8_t*>(w) + r * row_bytes);
    for (int64_t i = 0; i < nb; ++i) {
      Q5KTile& b = T[i];
      uint8_t sc[8], m[8];
      q8_scales_mins_k4(x[i].scales, sc, m);
      for (int j = 0; j < 8; ++j) {
        b.sc[j][r] = sc[j];
        b.m2[j][r] = m[j] * 0x10001u;
      }
      b.d[r] = q8_half(x[i].d);
      b.dmin[r] = q8_half(x[i].dmin);
      for (int k = 0; k < 32; ++k) __builtin_memcpy(&b.qs[k][r], x[i].qs + 4 * k, 4);
      for (int k = 0; k < 8; ++k) __builtin_memcpy(&b.qh[k][r], x[i].qh + 4 * k, 4);
    }
  }
}

#if SLUICE_Q8_SIMD
// What the interleaved groups' readers share at every SIMD level (Q8Ops::rows16: the VNNI token
// loops below, the 256-bit ones of kernels_q8_rows16_avx2.h).
// Decode reads a group once from memory: the super-blocks kRows16PrefetchBlocks ahead are
// prefetched into L2, a few lines per step (2048x768 matrices cycled through 57-82 MB, 1 thread,
// Zen 4, GB/s of weights at 1 token: no prefetch ~20 / 8 for Q4_K / Q6_K; into L1 2 ahead 27.5 /
// 13.9, its line-fill buffers the limit; into L2 2 ahead 29.0 / 25.2, 4 ahead 39.6 / 27.8, 8
// ahead 42.2 / 28.5 — 4 wastes less past a matrix's last group).
constexpr int kRows16PrefetchBlocks = 4;
// The 32-input Q4_0 / Q4_1 groups (288 / 320 bytes): about as many bytes ahead.
constexpr int kLegacyPrefetchBlocks = 32;
// Prefetches part `step` (0..7) of the group kRows16PrefetchBlocks / kLegacyPrefetchBlocks after b.
template <class Group>
inline void group_prefetch(const Group& b, int step) {
  constexpr bool kSuper = std::is_same_v<Group, block_q4_K_x16> || std::is_same_v<Group, block_q5_K_x16> ||
                          std::is_same_v<Group, block_q6_K_x16>;
  constexpr bool kLegacy = std::is_same_v<Group, block_q4_0_x16> || std::is_same_v<Group, block_q4_1_x16>;
  if constexpr (kSuper || kLegacy) {
    constexpr int kLines = (sizeof(Group) + 63) / 64, kPerStep = (kLines + 7) / 8;
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(&b) +
                            (kSuper ? kRows16PrefetchBlocks : kLegacyPrefetchBlocks) * sizeof(Group);
    // A volatile asm, not _mm_prefetch: with the loops unrolled GCC schedules every prefetch of a
    // super-block into one burst at its start, which Zen 1 drops (1 thread, 2048 x 32768 Q4_K
    // from DRAM, AVX2 group decode: 6.7 GB/s with the burst, 11.0 spread; rows 7.8).
    for (int l = kPerStep * step; l < std::min(kLines, kPerStep * (step + 1)); ++l)
      asm volatile("prefetcht1 %0" : : "m"(*reinterpret_cast<const char*>(ahead + 64 * l)));
  }
}
// The 6-bit scales sc[j] and mins mn[j] of sub-block j of a Q4_K/Q5_K super-block of 16 rows,
// one byte per row: get_scale_min_k4 on the group's 12 byte planes (scales[k][r]) by a few
// 128-bit ops.
inline void q8_k4_group_scales_mins(const uint8_t (*planes)[16], __m128i sc[8], __m128i mn[8]) {
  const __m128i k63 = _mm_set1_epi8(63), k0f = _mm_set1_epi8(0xF), k30 = _mm_set1_epi8(0x30);
  __m128i S[K_SCALE_SIZE];
  for (int k = 0; k < K_SCALE_SIZE; ++k) S[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[k]));
  for (int j = 0; j < 4; ++j) {
    sc[j] = _mm_and_si128(S[j], k63);
    sc[j + 4] = _mm_or_si128(_mm_and_si128(S[j + 8], k0f), _mm_and_si128(_mm_srli_epi16(S[j], 2), k30));
    mn[j] = _mm_and_si128(S[j + 4], k63);
    mn[j + 4] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(S[j + 8], 4), k0f),
                             _mm_and_si128(_mm_srli_epi16(S[j + 4], 2), k30));
  }
}
// The exact Σ of each 32-block's quants of n_tok tokens' Q8_0 activations (nb blocks each,
// astride bytes apart), at [t·nb + i]: what the 32-block types' group loops read (act_sums),
// made once per call in the calling thread's buffer.
inline const int32_t* rows16_act_sums(const uint8_t* a, size_t astride, int64_t n_tok, int64_t nb) {
  thread_local std::vector<int32_t> buf;  // grows to the largest call's, once per thread
  buf.resize(static_cast<size_t>(n_tok * nb));
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t i = 0; i < nb; ++i)
      buf[static_cast<size_t>(t * nb + i)] = q8_0_quant_sum(
          reinterpret_cast<const block_q8_0*>(a + static_cast<size_t>(t) * astride)[i]);
  return buf.data();
}
#endif

#if SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
inline void q5_K_tile_pack_512(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / QK_K;
  auto* T = reinterpret_cast<Q5KTile*>(tile);
  const auto* wb = static_cast<const uint8_t*>(w);
  uint32_t qh[16][kQ8TileRows];  // qh's 8 words and the first 8 of qs, which follow it
  for (int64_t i = 0; i < nb; ++i) {
    Q5KTile& b = T[i];
    const size_t o = static_cast<size_t>(i) * sizeof(block_q5_K);
    q8_pack_prefetch(wb + o, row_bytes, sizeof(block_q5_K));
    q8_pack_words16(wb, row_bytes, nr, o + offsetof(block_q5_K, qs), b.qs);
    q8_pack_words16(wb, row_bytes, nr, o + offsetof(block_q5_K, qs) + 64, b.qs + 16);
    q8_pack_words16(wb, row_bytes, nr, o + offsetof(block_q5_K, qh), qh);
    __builtin_memcpy(b.qh, qh, sizeof(b.qh));
    q8_k4_tile_scales_512(wb, row_bytes, nr, o, b);
  }
}
// The close of a super-block for the tiles with mins (Q4_K, Q5_K, Q2_K): mins = Σ_k m2[k]·(bsums
// pair k) by vpdpwssd (m2 holds two int16 mins per lane: the same min twice for the K4 tiles, whose
// pairs share a 32-input sub-block), then acc = fma(sumi, d·d_a, acc), acc = fma(−mins, dmin·d_a,
// acc), as the scalar twins.
inline __m512 q8_tile_close_mins_512(const uint32_t (*m2)[kQ8TileRows], __m512 dv, __m512 dmv, const block_q8_K& a,
                                     __m512i sumi, __m512 acc) {
  __m512i mins = _mm512_setzero_si512();
  for (int k = 0; k < 8; ++k) mins = _mm512_dpwssd_epi32(mins, _mm512_loadu_si512(m2[k]), q8_bcst32(a.bsums + 2 * k));
  const __m512 ad = _mm512_set1_ps(a.d);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dv, ad), acc);
  return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dmv, ad), acc);
}

// The interleaved groups (quant/rows16.h, Q8Ops::rows16) run through the tiles' token loops
// below (K4TileTokens, Q6KTokens), which read a group's fields through these overloads: what a
// tile's pack did per call (scales and mins decoded, fp16 factors converted) done per
// super-block, so the same integer sums and float operations give bitwise the tile's results.
inline __m512 group_factors(const float* d) { return _mm512_loadu_ps(d); }
inline __m512 group_factors(const uint16_t* d) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d)));
}
// The 6-bit scales and mins of a Q4_K/Q5_K super-block of 16 rows as the token loop reads
// them: sc[j] 16 bytes, m2[j] each min twice (two int16 halves). A tile holds them packed; an
// interleaved group's 12 byte planes decode by a few 128-bit ops (get_scale_min_k4 for 16 rows).
template <class Tile>
struct K4ScalesMins {
  const uint8_t (*sc)[kQ8TileRows];
  const uint32_t (*m2)[kQ8TileRows];
  explicit K4ScalesMins(const Tile& b) : sc(b.sc), m2(b.m2) {}
};
template <class Group>
struct K4GroupScalesMins {
  alignas(64) uint8_t sc[8][kQ8TileRows];
  alignas(64) uint32_t m2[8][kQ8TileRows];
  explicit K4GroupScalesMins(const Group& b) {
    __m128i scv[8], mn[8];
    q8_k4_group_scales_mins(b.scales, scv, mn);
    for (int j = 0; j < 8; ++j) _mm_store_si128(reinterpret_cast<__m128i*>(sc[j]), scv[j]);
    for (int k = 0; k < 8; ++k) {
      const __m512i m = _mm512_cvtepu8_epi32(mn[k]);
      _mm512_store_si512(m2[k], _mm512_or_si512(m, _mm512_slli_epi32(m, 16)));
    }
  }
};

template <>
struct K4ScalesMins<block_q4_K_x16> : K4GroupScalesMins<block_q4_K_x16> {
  using K4GroupScalesMins::K4GroupScalesMins;
};
template <>
struct K4ScalesMins<block_q5_K_x16> : K4GroupScalesMins<block_q5_K_x16> {
  using K4GroupScalesMins::K4GroupScalesMins;
};

// NT tokens against one Q4_K or Q5_K tile (or a block_q4_K_x16 / block_q5_K_x16 group). Per
// sub-block: the 8 weight vectors are unpacked once (Q5_K: each OR'd with its fifth bit, bit j
// of the qh bytes moved to bit 4 by one 16-bit shift; the mask drops what crossed a byte), then
// each token runs 8 vpdpbusd (16 rows × 4 inputs each) and one vpmulld by the scales.
template <class Tile>
struct K4TileTokens {
  static constexpr bool kHighBit = requires(const Tile& t) { t.qh; };
  template <int NT>
  struct Run {
    static void run(const Tile* T, int64_t nb, const uint8_t* act, size_t astride, const int32_t*, float* y, size_t ldy,
                    __mmask16 rows) {
      const __m512i m4 = _mm512_set1_epi8(0xF), m10 = _mm512_set1_epi8(0x10);
      __m512 acc[NT];
      for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
      for (int64_t i = 0; i < nb; ++i) {
        const Tile& b = T[i];
        const K4ScalesMins<Tile> sm(b);
        const block_q8_K* a[NT];
        __m512i sumi[NT];
        for (int t = 0; t < NT; ++t) {
          a[t] = reinterpret_cast<const block_q8_K*>(act + t * astride) + i;
          sumi[t] = _mm512_setzero_si512();
        }
        for (int j = 0; j < 8; ++j) {  // sub-block j: chunk j/2, low (even j) or high nibbles
          group_prefetch(b, j);
          const int c = j / 2, hi = j % 2;
          __m512i wv[8];
          for (int g = 0; g < 8; ++g) {
            const __m512i raw = _mm512_loadu_si512(b.qs[8 * c + g]);
            wv[g] = _mm512_and_si512(hi ? _mm512_srli_epi16(raw, 4) : raw, m4);
            if constexpr (kHighBit) {
              const __m512i h = _mm512_loadu_si512(b.qh[g]);
              const __m512i hb = j < 4 ? _mm512_slli_epi16(h, 4 - j) : j == 4 ? h : _mm512_srli_epi16(h, j - 4);
              wv[g] = _mm512_or_si512(wv[g], _mm512_and_si512(hb, m10));
            }
          }
          const __m512i scv = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm.sc[j])));
          for (int t = 0; t < NT; ++t) {
            const int8_t* aq = a[t]->qs + 32 * j;
            __m512i s = _mm512_setzero_si512();
            for (int g = 0; g < 8; ++g) s = _mm512_dpbusd_epi32(s, wv[g], q8_bcst32(aq + 4 * g));
            sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(s, scv));
          }
        }
        const __m512 dv = group_factors(b.d), dmv = group_factors(b.dmin);
        for (int t = 0; t < NT; ++t) acc[t] = q8_tile_close_mins_512(sm.m2, dv, dmv, *a[t], sumi[t], acc[t]);
      }
      for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ldy, rows, acc[t]);
    }
  };
};
#define SLUICE_Q8_Q5_K_TILE \
  { q5_K_tile_bytes, q5_K_tile_pack_512, q8_tile_gemm<Q5KTile, QK_K, K4TileTokens<Q5KTile>::Run> }

// Group -> its tile type and the tile's token loop (Q8Ops::rows16 from kRows16TileTokens tokens
// on, below), per type beside its conversion (q8_group_tile).
template <class Group>
struct GroupTile;

// A Q4_K / Q5_K group's tile: the codes as they are, the scales and mins decoded as the token
// loop decodes them, the fp16 factors converted (the bytes q4_K_tile_pack makes of the rows).
inline void q8_k4_group_scales(const auto& g, auto& b) {
  const K4GroupScalesMins sm(g);
  __builtin_memcpy(b.sc, sm.sc, sizeof b.sc);
  __builtin_memcpy(b.m2, sm.m2, sizeof b.m2);
  _mm512_storeu_ps(b.d, group_factors(g.d));
  _mm512_storeu_ps(b.dmin, group_factors(g.dmin));
}
inline void q8_group_tile(const block_q4_K_x16& g, Q4KTile& b) {
  __builtin_memcpy(b.qs, g.qs, sizeof b.qs);
  q8_k4_group_scales(g, b);
}
inline void q8_group_tile(const block_q5_K_x16& g, Q5KTile& b) {
  __builtin_memcpy(b.qs, g.qs, sizeof b.qs);
  __builtin_memcpy(b.qh, g.qh, sizeof b.qh);
  q8_k4_group_scales(g, b);
}
template <class T>
struct K4GroupTile {
  using Tile = T;
  template <int NT>
  using Run = typename K4TileTokens<T>::template Run<NT>;
};
template <>
struct GroupTile<block_q4_K_x16> : K4GroupTile<Q4KTile> {};
template <>
struct GroupTile<block_q5_K_x16> : K4GroupTile<Q5KTile> {};

// From this many tokens Q8Ops::rows16 turns each group into its tile (GroupTile below: the bytes
// the tile's pack makes from the same 16 rows) and runs the tile's token loop: the groups' loop
// decodes a super-block's scales and factors once per pass of 8 tokens, the tile once for all of
// them. 2048 x 4096, 1 thread, Zen 4, GMAC/s tiles vs groups: Q4_K 111 / 140 at 8 tokens, 142 /
// 150 at 32, 146 / 141 at 64, 145 / 133 at 512; Q6_K 80 / 107, 110 / 112, 118 / 113, 129 / 117.
// The same bits either way, and the rows themselves are never read (a copy's originals may
// have gone back to the file: format/gguf.h, release_pages).
constexpr int64_t kRows16TileTokens = 64;
// Q8Ops::rows16: rows [0, nr) of the groups at w16, tokens 8 (at most kMaxNT), 4, then 3/2/1 at
// a time (each token's sums are its own: the split never changes a result), or from
// kRows16TileTokens on each group's tile. kSums: Run reads each activation block's Σa (the
// 32-block types): the caller's sums, or made here once per call.
template <class Group, template <int> class Run, int kMaxNT = 8, bool kSums = false>
inline void rows16_gemm(const void* w16, int64_t nr, int64_t n, const void* a, size_t astride,
                        const int32_t* given_sums, int64_t n_tok, float* y, size_t ldy) {
  constexpr int64_t kBlock = kSums ? 32 : QK_K;
  const int64_t nb = n / kBlock;
  const auto* ab = static_cast<const uint8_t*>(a);
  const int32_t* sums = !kSums ? nullptr : given_sums ? given_sums : rows16_act_sums(ab, astride, n_tok, nb);
  if (n_tok >= kRows16TileTokens) {
    using GT = GroupTile<Group>;
    thread_local std::vector<typename GT::Tile> tile;  // one group's, grows to the widest call's
    tile.resize(static_cast<size_t>(nb));
    for (int64_t g = 0; g < nr / 16; ++g) {
      const auto* G = static_cast<const Group*>(w16) + g * nb;
      for (int64_t i = 0; i < nb; ++i) q8_group_tile(G[i], tile[static_cast<size_t>(i)]);
      q8_tile_gemm<typename GT::Tile, kBlock, GT::template Run, kMaxNT>(reinterpret_cast<const uint8_t*>(tile.data()),
                                                                        n, a, astride, sums, n_tok, y + 16 * g, ldy,
                                                                        16);
    }
    return;
  }
  constexpr __mmask16 kAll = 0xFFFF;
  for (int64_t g = 0; g < nr / 16; ++g) {
    const auto* T = static_cast<const Group*>(w16) + g * nb;
    float* yg = y + 16 * g;
    auto go = [&]<int NT>(int64_t t) {
      Run<NT>::run(T, nb, ab + t * astride, astride, sums ? sums + t * nb : nullptr, yg + t * ldy, ldy, kAll);
    };
    int64_t t = 0;
    if constexpr (kMaxNT >= 8)
      for (; t + 8 <= n_tok; t += 8) go.template operator()<8>(t);
    for (; t + 4 <= n_tok; t += 4) go.template operator()<4>(t);
    switch (n_tok - t) {
      case 3: go.template operator()<3>(t); break;
      case 2: go.template operator()<2>(t); break;
      case 1: go.template operator()<1>(t); break;
      default: break;
    }
  }
}
#elif !SLUICE_Q8_SIMD
// The scalar twin of K4TileTokens (Q4_K and Q5_K tiles): the same exact integer sums per
// super-block and the same two fused multiply-adds, so the results are bitwise equal.
template <class Tile>
inline float k4_tile_step(const Tile& b, const block_q8_K& a, int64_t r, float acc) {
  int32_t sumi = 0, mins = 0;
  for (int j = 0; j < 8; ++j) {
    int32_t s = 0;
    for (int k = 0; k < 32; ++k) {
      const int g = k / 4, byte = k % 4;
      const uint8_t q = reinterpret_cast<const uint8_t*>(&b.qs[8 * (j / 2) + g][r])[byte];
      int v = (j % 2) ? q >> 4 : q & 0xF;
      if constexpr (requires { b.qh; }) v |= ((reinterpret_cast<const uint8_t*>(&b.qh[g][r])[byte] >> j) & 1) << 4;
      s += v * a.qs[32 * j + k];
    }
    sumi += b.sc[j][r] * s;
    mins += static_cast<int32_t>(b.m2[j][r] & 0xFFFF) * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
  }
  acc = std::fma(static_cast<float>(sumi), b.d[r] * a.d, acc);
  return std::fma(-static_cast<float>(mins), b.dmin[r] * a.d, acc);
}
#define SLUICE_Q8_Q5_K_TILE \
  { q5_K_tile_bytes, q5_K_tile_pack, q8_tile_gemm_scalar<Q5KTile, block_q8_K, QK_K, k4_tile_step<Q5KTile>> }
#else
// Without VNNI: the 256-bit tiles (kernels_q8_tiles_avx2.h).
#define SLUICE_Q8_Q5_K_TILE \
  { q5_K_tile_bytes, k4_tile_pack_256<Q5KTile, block_q5_K>, q8_tile_gemm_256<Q5KTile, K4Tile256<Q5KTile>> }
#endif

// ---- Q6_K prefill tiles ------------------------------------------------------------------
// ql[w][r] / qh[v][r]: the 4-byte words of row r's ql and qh, as Q4KTile. Elements
// 128h + 32p + 4g + b (b < 4) of a 32-element group (h, p) take their low nibble from ql word
// 16h + 8(p & 1) + g (low nibble for p < 2, high for p ≥ 2) and their two high bits from
// bits 2p, 2p+1 of qh word 8h + g. Sub-block s = 8h + 2p + g/4 has scale sc[s]; sc2 holds
// (32·sc[2k], 32·sc[2k+1]) as two int16 for the -32 offset by vpdpwssd with bsums[2k], [2k+1].
struct Q6KTile {
  uint32_t ql[32][kQ8TileRows];
  uint32_t qh[16][kQ8TileRows];
  int8_t sc[16][kQ8TileRows];
  uint32_t sc2[8][kQ8TileRows];
  float d[kQ8TileRows];
};
static_assert(sizeof(Q6KTile) % 64 == 0, "tiles are read as 64-byte vectors");

inline size_t q6_K_tile_bytes(int64_t n) { return static_cast<size_t>(n / QK_K) * sizeof(Q6KTile); }

inline void q6_K_tile_pack(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / QK_K;
  auto* T = reinterpret_cast<Q6KTile*>(tile);
  if (nr < kQ8TileRows) __builtin_memset(tile, 0, q6_K_tile_bytes(n));
  for (int64_t r = 0; r < nr; ++r) {
    const auto* x = reinterpret_cast<const block_q6_K*>(static_cast<const uint8_t*>(w) + r * row_bytes);
    for (int64_t i = 0; i < nb; ++i) {
      Q6KTile& b = T[i];
      for (int k = 0; k < 32; ++k) __builtin_memcpy(&b.ql[k][r], x[i].ql + 4 * k, 4);
      for (int k = 0; k < 16; ++k) __builtin_memcpy(&b.qh[k][r], x[i].qh + 4 * k, 4);
      for (int k = 0; k < 16; ++k) b.sc[k][r] = x[i].scales[k];
      for (int k = 0; k < 8; ++k)
        b.sc2[k][r] = static_cast<uint16_t>(32 * x[i].scales[2 * k]) |
                      static_cast<uint32_t>(static_cast<uint16_t>(32 * x[i].scales[2 * k + 1])) << 16;
      b.d[r] = q8_half(x[i].d);
    }
  }
}

#if SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
// The 6-bit q (0..63) of inputs 128h + 32p + 4g..+3 of the tile's 16 rows, 4 bytes per row.
template <class Tile>  // Q6KTile (ggml's ql/qh words); a block_q6_K_x16 group: the overload below
inline __m512i q6_K_tile_q(const Tile& b, int h, int p, int g) {
  const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
  const __m512i l = _mm512_loadu_si512(b.ql[16 * h + 8 * (p & 1) + g]);
  const __m512i lo = _mm512_and_si512(p < 2 ? l : _mm512_srli_epi16(l, 4), m4);
  const __m512i qh = _mm512_loadu_si512(b.qh[8 * h + g]);
  // bits 2p, 2p+1 of each byte to bits 4, 5 (16-bit shifts; the mask drops what crossed bytes)
  const __m512i hb = p == 0   ? _mm512_slli_epi16(qh, 4)
                     : p == 1 ? _mm512_slli_epi16(qh, 2)
                     : p == 2 ? qh
                              : _mm512_srli_epi16(qh, 2);
  return _mm512_or_si512(lo, _mm512_and_si512(hb, m30));
}

// The same from an interleaved group's word triple (quant/blocks.h block_q6_K_x16): groups 0-2
// in bits 0-5 of their word, group 3 from the three words' bits 6-7.
inline __m512i q6_group_q_512(const block_q6_K_x16& b, int h, int p, int g) {
  const uint32_t(*q)[16] = b.q + 24 * h + 3 * g;
  if (p < 3) return _mm512_and_si512(_mm512_loadu_si512(q[p]), _mm512_set1_epi8(0x3F));
  const __m512i x = _mm512_loadu_si512(q[0]), y = _mm512_loadu_si512(q[1]), z = _mm512_loadu_si512(q[2]);
  return _mm512_or_si512(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(x, 6), _mm512_set1_epi8(0x03)),
                                         _mm512_and_si512(_mm512_srli_epi16(y, 4), _mm512_set1_epi8(0x0C))),
                         _mm512_and_si512(_mm512_srli_epi16(z, 2), _mm512_set1_epi8(0x30)));
}
inline __m512i q6_K_tile_q(const block_q6_K_x16& b, int h, int p, int g) { return q6_group_q_512(b, h, p, g); }

// The sub-block scales of a Q6_K super-block of 16 rows (int8, 16 bytes per sub-block), and the
// (32·sc[2k], 32·sc[2k+1]) int16 pairs of the -32 offset: a tile holds the pairs, a group's are
// formed from its scales as the tile's pack forms them.
inline const int8_t* q6_scales(const Q6KTile& b, int s) { return b.sc[s]; }
inline const int8_t* q6_scales(const block_q6_K_x16& b, int s) { return b.scales[s]; }
inline __m512i q6_offset_pair(const Q6KTile& b, int k) { return _mm512_loadu_si512(b.sc2[k]); }
inline __m512i q6_offset_pair(const block_q6_K_x16& b, int k) {
  auto x32 = [&](int s) {
    return _mm512_slli_epi32(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales[s]))), 5);
  };
  return _mm512_or_si512(_mm512_and_si512(x32(2 * k), _mm512_set1_epi32(0xFFFF)),
                         _mm512_slli_epi32(x32(2 * k + 1), 16));
}

// NT tokens against one Q6_K tile (or a block_q6_K_x16 group).
template <class Tile>
struct Q6KTokens {
  template <int NT>
  struct Run {
    // The −32 offset of the codes: with one or two tokens (decode) subtracted per sub-block
    // (32·its activation sum, one broadcast) before the scale, which costs less than forming
    // the tile's offset pairs from the scales for every group; with more tokens the pairs,
    // formed once per group, cost less. The same integers either way (exact int32 sums).
    static constexpr bool kOffsetPerSubBlock = NT <= 2;
    static void run(const Tile* T, int64_t nb, const uint8_t* act, size_t astride, const int32_t*, float* y, size_t ldy,
                    __mmask16 rows) {
      __m512 acc[NT];
      for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
      for (int64_t i = 0; i < nb; ++i) {
        const Tile& b = T[i];
        const block_q8_K* a[NT];
        __m512i sumi[NT];
        for (int t = 0; t < NT; ++t) {
          a[t] = reinterpret_cast<const block_q8_K*>(act + t * astride) + i;
          sumi[t] = _mm512_setzero_si512();
        }
        for (int h = 0; h < 2; ++h)
          for (int p = 0; p < 4; ++p) {  // the 32-element group (h, p): sub-blocks 8h + 2p and + 1
            group_prefetch(b, 4 * h + p);
            __m512i wv[8];
            for (int g = 0; g < 8; ++g) wv[g] = q6_K_tile_q(b, h, p, g);
            const int s0 = 8 * h + 2 * p;
            const __m512i sc0 = _mm512_cvtepi8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(q6_scales(b, s0))));
            const __m512i sc1 = _mm512_cvtepi8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(q6_scales(b, s0 + 1))));
            for (int t = 0; t < NT; ++t) {
              const int8_t* aq = a[t]->qs + 128 * h + 32 * p;
              __m512i s = _mm512_setzero_si512(), u = _mm512_setzero_si512();
              for (int g = 0; g < 4; ++g) s = _mm512_dpbusd_epi32(s, wv[g], q8_bcst32(aq + 4 * g));
              for (int g = 4; g < 8; ++g) u = _mm512_dpbusd_epi32(u, wv[g], q8_bcst32(aq + 4 * g));
              if constexpr (kOffsetPerSubBlock) {  // Σ (q − 32)·a of each sub-block before its scale
                s = _mm512_sub_epi32(s, _mm512_set1_epi32(32 * a[t]->bsums[s0]));
                u = _mm512_sub_epi32(u, _mm512_set1_epi32(32 * a[t]->bsums[s0 + 1]));
              }
              sumi[t] = _mm512_add_epi32(sumi[t],
                                         _mm512_add_epi32(_mm512_mullo_epi32(s, sc0), _mm512_mullo_epi32(u, sc1)));
            }
          }
        const __m512 dv = group_factors(b.d);
        if constexpr (kOffsetPerSubBlock) {
          for (int t = 0; t < NT; ++t)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[t]), _mm512_mul_ps(dv, _mm512_set1_ps(a[t]->d)), acc[t]);
        } else {
          __m512i pairs[8];
          for (int k = 0; k < 8; ++k) pairs[k] = q6_offset_pair(b, k);
          for (int t = 0; t < NT; ++t) {
            __m512i offs = _mm512_setzero_si512();
            for (int k = 0; k < 8; ++k) offs = _mm512_dpwssd_epi32(offs, pairs[k], q8_bcst32(a[t]->bsums + 2 * k));
            const __m512 sf = _mm512_cvtepi32_ps(_mm512_sub_epi32(sumi[t], offs));
            acc[t] = _mm512_fmadd_ps(sf, _mm512_mul_ps(dv, _mm512_set1_ps(a[t]->d)), acc[t]);
          }
        }
      }
      for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ldy, rows, acc[t]);
    }
  };
};

// A Q6_K group's tile: ggml's ql and qh words again from the word triples, the scales as they
// are, the offset pairs and the factor as the token loop forms them (the bytes q6_K_tile_pack
// makes of the rows).
inline void q8_group_tile(const block_q6_K_x16& g, Q6KTile& b) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  auto bits = [](__m512i v, int mask) { return _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(mask))); };
  for (int h = 0; h < 2; ++h)
    for (int s = 0; s < 8; ++s) {
      __m512i v[4];
      for (int p = 0; p < 4; ++p) v[p] = q6_group_q_512(g, h, p, s);
      // ql: groups 0 | 2 and 1 | 3 as low | high nibbles; qh: the four groups' bits 4-5 at 2p.
      _mm512_storeu_si512(b.ql[16 * h + s], _mm512_or_si512(_mm512_and_si512(v[0], m4),
                                                            _mm512_slli_epi16(_mm512_and_si512(v[2], m4), 4)));
      _mm512_storeu_si512(b.ql[16 * h + 8 + s], _mm512_or_si512(_mm512_and_si512(v[1], m4),
                                                                _mm512_slli_epi16(_mm512_and_si512(v[3], m4), 4)));
      _mm512_storeu_si512(b.qh[8 * h + s],
                          _mm512_or_si512(_mm512_or_si512(bits(_mm512_srli_epi16(v[0], 4), 0x03),
                                                          bits(_mm512_srli_epi16(v[1], 2), 0x0C)),
                                          _mm512_or_si512(bits(v[2], 0x30), bits(_mm512_slli_epi16(v[3], 2), 0xC0))));
    }
  __builtin_memcpy(b.sc, g.scales, sizeof b.sc);
  for (int k = 0; k < 8; ++k) _mm512_storeu_si512(b.sc2[k], q6_offset_pair(g, k));
  _mm512_storeu_ps(b.d, group_factors(g.d));
}
template <>
struct GroupTile<block_q6_K_x16> {
  using Tile = Q6KTile;
  template <int NT>
  using Run = Q6KTokens<Q6KTile>::Run<NT>;
};

// kPrefetchNext: request the next 16 rows' bytes (q8_pack_prefetch); off where the rows are a
// staging copy on the stack with nothing after them (q3_K_tile_pack).
template <bool kPrefetchNext = true>
inline void q6_K_tile_pack_512(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / QK_K;
  auto* T = reinterpret_cast<Q6KTile*>(tile);
  const auto* wb = static_cast<const uint8_t*>(w);
  const __m512i k16 = _mm512_set1_epi32(0xFFFF);
  for (int64_t i = 0; i < nb; ++i) {
    Q6KTile& b = T[i];
    const size_t o = static_cast<size_t>(i) * sizeof(block_q6_K);
    if constexpr (kPrefetchNext) q8_pack_prefetch(wb + o, row_bytes, sizeof(block_q6_K));
    q8_pack_words16(wb, row_bytes, nr, o + offsetof(block_q6_K, ql), b.ql);
    q8_pack_words16(wb, row_bytes, nr, o + offsetof(block_q6_K, ql) + 64, b.ql + 16);
    q8_pack_words16(wb, row_bytes, nr, o + offsetof(block_q6_K, qh), b.qh);
    __m512i g[4];
    for (int k = 0; k < 4; ++k) g[k] = q8_gather_rows(wb, row_bytes, nr, o + offsetof(block_q6_K, scales) + 4 * k);
    for (int k = 0; k < 16; ++k) _mm_storeu_si128(reinterpret_cast<__m128i*>(b.sc[k]), q8_lane_byte(g[k / 4], k % 4));
    // 32·scale as int16: byte k % 4 of the word, sign-extended by a shift pair, times 32.
    auto x32 = [&](int k) {
      return _mm512_slli_epi32(_mm512_srai_epi32(_mm512_slli_epi32(g[k / 4], 24 - 8 * (k % 4)), 24), 5);
    };
    for (int k = 0; k < 8; ++k)
      _mm512_storeu_si512(b.sc2[k],
                          _mm512_or_si512(_mm512_and_si512(x32(2 * k), k16), _mm512_slli_epi32(x32(2 * k + 1), 16)));
    // d: the high half of the word that ends with it (scales[14], scales[15], d)
    const __m512i gd = q8_gather_rows(wb, row_bytes, nr, o + offsetof(block_q6_K, d) - 2);
    _mm512_storeu_ps(b.d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(gd, 16))));
  }
}
#define SLUICE_Q8_Q6_K_TILE \
  { q6_K_tile_bytes, q6_K_tile_pack_512<>, q8_tile_gemm<Q6KTile, QK_K, Q6KTokens<Q6KTile>::Run> }
#elif !SLUICE_Q8_SIMD
// The scalar twin, bitwise equal to the vector code (exact integer sums, one fma per super-block).
inline float q6_K_tile_step(const Q6KTile& b, const block_q8_K& a, int64_t r, float acc) {
  int32_t sumi = 0, offs = 0;
  for (int h = 0; h < 2; ++h)
    for (int p = 0; p < 4; ++p)
      for (int half = 0; half < 2; ++half) {
        int32_t s = 0;
        for (int g = 4 * half; g < 4 * half + 4; ++g)
          for (int byte = 0; byte < 4; ++byte) {
            const uint8_t l = reinterpret_cast<const uint8_t*>(&b.ql[16 * h + 8 * (p & 1) + g][r])[byte];
            const uint8_t qh = reinterpret_cast<const uint8_t*>(&b.qh[8 * h + g][r])[byte];
            const int q = (p < 2 ? l & 0xF : l >> 4) | (((qh >> (2 * p)) & 3) << 4);
            s += q * a.qs[128 * h + 32 * p + 4 * g + byte];
          }
        sumi += b.sc[8 * h + 2 * p + half][r] * s;
      }
  for (int k = 0; k < 16; ++k) offs += 32 * b.sc[k][r] * a.bsums[k];
  return std::fma(static_cast<float>(sumi - offs), b.d[r] * a.d, acc);
}
#define SLUICE_Q8_Q6_K_TILE \
  { q6_K_tile_bytes, q6_K_tile_pack, q8_tile_gemm_scalar<Q6KTile, block_q8_K, QK_K, q6_K_tile_step> }
#else
// Without VNNI: the 256-bit tiles (kernels_q8_tiles_avx2.h).
#define SLUICE_Q8_Q6_K_TILE \
  { q6_K_tile_bytes, q6_K_tile_pack_256<>, q8_tile_gemm_256<Q6KTile, Q6KTile256<Q6KTile>> }
#endif

// ---- Q3_K prefill tiles: the Q6_K ones ------------------------------------------------------
// A Q3_K super-block is exactly a Q6_K one: codes q + 28 (so code − 32 = q − 4, the Q3_K value;
// 28..35 fit six bits), scales sc − 32 (its signed 6-bit scales), the same d, sub-blocks of 16 in
// the same element order. The pack converts the rows' super-blocks and packs them as Q6_K; the
// level's Q6_K tile kernel then computes the same exact integer sums per super-block as
// q8_dot_q3_K (one fused multiply-add per super-block and row, where the row dot adds lanes).
// Every level (VNNI too: 12-layer qwen3-30b-a3b Q3_K synth, pp512, 2 threads, Zen 4: 113-117
// tok/s with the row dots, 180-195 with these tiles, llama.cpp 143).
inline void q3_K_as_q6_K(const block_q3_K& x, block_q6_K& y) {
  uint8_t sc[16];
  q8_q3_K_scales(x.scales, sc);
  for (int k = 0; k < 16; ++k) y.scales[k] = static_cast<int8_t>(sc[k] - 32);
  y.d = x.d;
  // Eight elements 128h + 32p + 8k.. at a time, one per byte of a 64-bit word: q = two plane bits
  // | the hmask bit << 2 (≤ 7, so q + 28 carries into no neighbour).
  constexpr uint64_t k1 = 0x0101010101010101ull;
  uint64_t ql[16] = {}, qh[8] = {};
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k) {
      uint64_t qs, hm;
      __builtin_memcpy(&qs, x.qs + 32 * h + 8 * k, 8);
      __builtin_memcpy(&hm, x.hmask + 8 * k, 8);
      for (int p = 0; p < 4; ++p) {
        const uint64_t c = (((qs >> (2 * p)) & 3 * k1) | (((hm >> (4 * h + p)) & k1) << 2)) + 28 * k1;
        ql[8 * h + 4 * (p & 1) + k] |= (c & 0xF * k1) << (4 * (p >> 1));
        qh[4 * h + k] |= ((c >> 4) & 3 * k1) << (2 * p);
      }
    }
  __builtin_memcpy(y.ql, ql, sizeof ql);
  __builtin_memcpy(y.qh, qh, sizeof qh);
}
template <void (*Q6Pack)(const void*, size_t, int64_t, int64_t, uint8_t*)>
inline void q3_K_tile_pack(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  block_q6_K rows[kQ8TileRows];
  for (int64_t i = 0; i < n / QK_K; ++i) {
    q8_pack_prefetch(static_cast<const uint8_t*>(w) + static_cast<size_t>(i) * sizeof(block_q3_K), row_bytes,
                     sizeof(block_q3_K));
    for (int64_t r = 0; r < nr; ++r)
      q3_K_as_q6_K(*reinterpret_cast<const block_q3_K*>(static_cast<const uint8_t*>(w) + r * row_bytes +
                                                        static_cast<size_t>(i) * sizeof(block_q3_K)),
                   rows[r]);
    Q6Pack(rows, sizeof(block_q6_K), nr, QK_K, tile + static_cast<size_t>(i) * sizeof(Q6KTile));
  }
}
#if SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
#define SLUICE_Q8_Q3_K_TILE \
  { q6_K_tile_bytes, q3_K_tile_pack<q6_K_tile_pack_512<false>>, q8_tile_gemm<Q6KTile, QK_K, Q6KTokens<Q6KTile>::Run> }
#elif !SLUICE_Q8_SIMD
#define SLUICE_Q8_Q3_K_TILE \
  { q6_K_tile_bytes, q3_K_tile_pack<q6_K_tile_pack>, q8_tile_gemm_scalar<Q6KTile, block_q8_K, QK_K, q6_K_tile_step> }
#else
#define SLUICE_Q8_Q3_K_TILE \
  { q6_K_tile_bytes, q3_K_tile_pack<q6_K_tile_pack_256<false>>, q8_tile_gemm_256<Q6KTile, Q6KTile256<Q6KTile>> }
#endif

// ---- Q2_K prefill tiles ------------------------------------------------------------------
// One packed super-block of 16 rows: qs[w][r] is word w of row r's qs as stored (word 8h + g holds
// in bit pair 2j of its byte b element 128h + 32j + 4g + b, so for every j a lane's 4 elements
// are consecutive: one vpdpbusd operand after a shift and a mask), sc[k][r] the 4-bit scale of
// sub-block k (16 elements), m2[k][r] the 4-bit mins of sub-blocks 2k and 2k + 1 as the two int16
// halves (one vpdpwssd against the bsums pair), d[r] and dmin[r] as floats. Per super-block and row,
// with the exact int32 sums sumi = Σ_k sc_k·Σ q·a and mins = Σ_k m_k·bsums_k:
//   acc = fma(sumi, d·d_a, acc);  acc = fma(−mins, dmin·d_a, acc)
// (the row dots add the same terms in another float order: equal to float rounding). The VNNI
// tiles, the AVX2 ones (kernels_q8_tiles_avx2.h) and this scalar twin are bitwise equal. 12-layer
// qwen3-30b-a3b Q2_K synth, pp512, 2 threads, Zen 4: 117 tok/s with the row dots, 233-246 with
// the tiles, llama.cpp 107.
struct Q2KTile {
  uint32_t qs[16][kQ8TileRows];
  uint8_t sc[16][kQ8TileRows];
  uint32_t m2[8][kQ8TileRows];
  float d[kQ8TileRows], dmin[kQ8TileRows];
};
static_assert(sizeof(Q2KTile) % 64 == 0, "tiles are read as 64-byte vectors");
inline size_t q2_K_tile_bytes(int64_t n) { return static_cast<size_t>(n / QK_K) * sizeof(Q2KTile); }
inline void q2_K_tile_pack(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / QK_K;
  auto* T = reinterpret_cast<Q2KTile*>(tile);
  if (nr < kQ8TileRows) __builtin_memset(tile, 0, q2_K_tile_bytes(n));
  for (int64_t r = 0; r < nr; ++r) {
    const auto* x = reinterpret_cast<const block_q2_K*>(static_cast<const uint8_t*>(w) + r * row_bytes);
    for (int64_t i = 0; i < nb; ++i) {
      Q2KTile& b = T[i];
      for (int k = 0; k < 16; ++k) __builtin_memcpy(&b.qs[k][r], x[i].qs + 4 * k, 4);
      for (int k = 0; k < 16; ++k) b.sc[k][r] = x[i].scales[k] & 0xF;
      for (int k = 0; k < 8; ++k)
        b.m2[k][r] = static_cast<uint32_t>(x[i].scales[2 * k] >> 4) | static_cast<uint32_t>(x[i].scales[2 * k + 1] >> 4)
                                                                          << 16;
      b.d[r] = q8_half(x[i].d);
      b.dmin[r] = q8_half(x[i].dmin);
    }
  }
}
#if !SLUICE_Q8_SIMD
inline float q2_K_tile_step(const Q2KTile& b, const block_q8_K& a, int64_t r, float acc) {
  int32_t sumi = 0, mins = 0;
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int half = 0; half < 2; ++half) {
        int32_t s = 0;
        for (int g = 4 * half; g < 4 * half + 4; ++g)
          for (int byte = 0; byte < 4; ++byte) {
            const uint8_t q = reinterpret_cast<const uint8_t*>(&b.qs[8 * h + g][r])[byte];
            s += ((q >> (2 * j)) & 3) * a.qs[128 * h + 32 * j + 4 * g + byte];
          }
        sumi += b.sc[8 * h + 2 * j + half][r] * s;
      }
  for (int k = 0; k < 8; ++k)
    mins += static_cast<int32_t>(b.m2[k][r] & 0xFFFF) * a.bsums[2 * k] +
            static_cast<int32_t>(b.m2[k][r] >> 16) * a.bsums[2 * k + 1];
  acc = std::fma(static_cast<float>(sumi), b.d[r] * a.d, acc);
  return std::fma(-static_cast<float>(mins), b.dmin[r] * a.d, acc);
}
#define SLUICE_Q8_Q2_K_TILE \
  { q2_K_tile_bytes, q2_K_tile_pack, q8_tile_gemm_scalar<Q2KTile, block_q8_K, QK_K, q2_K_tile_step> }
#elif SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
inline void q2_K_tile_pack_512(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const auto* wb = static_cast<const uint8_t*>(w);
  auto* T = reinterpret_cast<Q2KTile*>(tile);
  const __m512i kf = _mm512_set1_epi32(0xF);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    Q2KTile& b = T[i];
    const size_t o = static_cast<size_t>(i) * sizeof(block_q2_K);
    q8_pack_prefetch(wb + o, row_bytes, sizeof(block_q2_K));
    q8_pack_words16(wb, row_bytes, nr, o + offsetof(block_q2_K, qs), b.qs);
    __m512i g[4];  // the scales' words
    for (int k = 0; k < 4; ++k) g[k] = q8_gather_rows(wb, row_bytes, nr, o + offsetof(block_q2_K, scales) + 4 * k);
    for (int k = 0; k < 16; ++k)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(b.sc[k]),
                       _mm512_cvtepi32_epi8(_mm512_and_si512(_mm512_srli_epi32(g[k / 4], 8 * (k % 4)), kf)));
    for (int k = 0; k < 8; ++k) {  // bytes 2k and 2k + 1: the 16-bit half k % 2 of word k / 2
      const __m512i v = _mm512_srli_epi32(g[k / 2], 16 * (k % 2));
      _mm512_storeu_si512(b.m2[k],
                          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v, 4), kf),
                                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(v, 12), kf), 16)));
    }
    const __m512i dd = q8_gather_rows(wb, row_bytes, nr, o + offsetof(block_q2_K, d));  // d | dmin << 16
    _mm512_storeu_ps(b.d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
    _mm512_storeu_ps(b.dmin, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
  }
}
// NT tokens against one Q2_K tile: per (half h, shift j) the 8 weight vectors are the qs words
// shifted by 2j and masked (codes 0..3, unsigned: vpdpbusd as they are), 4 words per sub-block.
struct Q2KTileTokens {
  template <int NT>
  struct Run {
    static void run(const Q2KTile* T, int64_t nb, const uint8_t* act, size_t astride, const int32_t*, float* y,
                    size_t ldy, __mmask16 rows) {
      const __m512i m3 = _mm512_set1_epi8(3);
      __m512 acc[NT];
      for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
      for (int64_t i = 0; i < nb; ++i) {
        const Q2KTile& b = T[i];
        const block_q8_K* a[NT];
        __m512i sumi[NT];
        for (int t = 0; t < NT; ++t) {
          a[t] = reinterpret_cast<const block_q8_K*>(act + t * astride) + i;
          sumi[t] = _mm512_setzero_si512();
        }
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 4; ++j) {
            const __m128i shift = _mm_cvtsi32_si128(2 * j);
            __m512i wv[8];
            for (int g = 0; g < 8; ++g)
              wv[g] = _mm512_and_si512(_mm512_srl_epi16(_mm512_loadu_si512(b.qs[8 * h + g]), shift), m3);
            const int k = 8 * h + 2 * j;
            const __m512i sc0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.sc[k])));
            const __m512i sc1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.sc[k + 1])));
            for (int t = 0; t < NT; ++t) {
              const int8_t* aq = a[t]->qs + 128 * h + 32 * j;
              __m512i x0 = _mm512_setzero_si512(), x1 = _mm512_setzero_si512();
              for (int g = 0; g < 4; ++g) x0 = _mm512_dpbusd_epi32(x0, wv[g], q8_bcst32(aq + 4 * g));
              for (int g = 0; g < 4; ++g) x1 = _mm512_dpbusd_epi32(x1, wv[4 + g], q8_bcst32(aq + 16 + 4 * g));
              sumi[t] = _mm512_add_epi32(sumi[t],
                                         _mm512_add_epi32(_mm512_mullo_epi32(x0, sc0), _mm512_mullo_epi32(x1, sc1)));
            }
          }
        const __m512 dv = _mm512_loadu_ps(b.d), dmv = _mm512_loadu_ps(b.dmin);
        for (int t = 0; t < NT; ++t) acc[t] = q8_tile_close_mins_512(b.m2, dv, dmv, *a[t], sumi[t], acc[t]);
      }
      for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ldy, rows, acc[t]);
    }
  };
};
#define SLUICE_Q8_Q2_K_TILE \
  { q2_K_tile_bytes, q2_K_tile_pack_512, q8_tile_gemm<Q2KTile, QK_K, Q2KTileTokens::Run> }
#else
// Without VNNI: the 256-bit tiles (kernels_q8_tiles_avx2.h).
#define SLUICE_Q8_Q2_K_TILE \
  { q2_K_tile_bytes, q2_K_tile_pack_256, q8_tile_gemm_256<Q2KTile, Q2KTile256> }
#endif

// ---- IQ4_XS prefill tiles -----------------------------------------------------------------
// One packed super-block of 16 rows: qs[w][r] is word w of row r's qs as stored (word 4s + g of
// sub-block s: its elements 4g..4g+3 in the low nibbles, 16 + 4g.. in the high), sc[s][r] its
// scale ls − 32, d[r] its fp16 d as float. Per super-block and row, with the exact int32
//   sumi = Σ_s sc_s·Σ_k level(q_k)·a_k:   acc = fma(sumi, d·d_a, acc)
// (the row dots add the same sums in 8 lanes: equal to float rounding). The AVX2 tiles
// (kernels_q8_tiles_avx2.h), the VNNI tiles (Iq4XsTileTokens) and this scalar twin are bitwise equal.
struct QIq4XsTile {
  uint32_t qs[32][kQ8TileRows];
  int8_t sc[8][kQ8TileRows];
  float d[kQ8TileRows];
};
static_assert(sizeof(QIq4XsTile) % 64 == 0, "tiles are read as 64-byte vectors");
inline size_t iq4_xs_tile_bytes(int64_t n) { return static_cast<size_t>(n / QK_K) * sizeof(QIq4XsTile); }
// The scales and d of super-block i of nr rows (zero past nr), shared by both packs.
inline void iq4_xs_tile_scales(const uint8_t* wb, size_t row_bytes, int64_t nr, int64_t i, QIq4XsTile& b) {
  for (int64_t r = 0; r < kQ8TileRows; ++r) {
    const auto* x = reinterpret_cast<const block_iq4_xs*>(wb + r * row_bytes) + i;
    for (int sb = 0; sb < 8; ++sb) b.sc[sb][r] = static_cast<int8_t>(r < nr ? iq4_xs_scale(*x, sb) - 32 : 0);
    b.d[r] = r < nr ? q8_half(x->d) : 0.0f;
  }
}
inline void iq4_xs_tile_pack(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const auto* wb = static_cast<const uint8_t*>(w);
  auto* T = reinterpret_cast<QIq4XsTile*>(tile);
  __builtin_memset(tile, 0, iq4_xs_tile_bytes(n));
  for (int64_t i = 0; i < n / QK_K; ++i) {
    for (int64_t r = 0; r < nr; ++r) {
      const auto* x = reinterpret_cast<const block_iq4_xs*>(wb + r * row_bytes) + i;
      for (int k = 0; k < 32; ++k) __builtin_memcpy(&T[i].qs[k][r], x->qs + 4 * k, 4);
    }
    iq4_xs_tile_scales(wb, row_bytes, nr, i, T[i]);
  }
}
#if !SLUICE_Q8_SIMD
inline float iq4_xs_tile_step(const QIq4XsTile& b, const block_q8_K& a, int64_t r, float acc) {
  int32_t sumi = 0;
  for (int sb = 0; sb < 8; ++sb) {
    int32_t ss = 0;
    for (int k = 0; k < 16; ++k) {
      const uint8_t q = reinterpret_cast<const uint8_t*>(&b.qs[4 * sb + k / 4][r])[k % 4];
      ss += kIq4nlValues[q & 0xF] * a.qs[32 * sb + k] + kIq4nlValues[q >> 4] * a.qs[32 * sb + 16 + k];
    }
    sumi += b.sc[sb][r] * ss;
  }
  return std::fma(static_cast<float>(sumi), b.d[r] * a.d, acc);
}
#define SLUICE_Q8_IQ4_XS_TILE \
  { iq4_xs_tile_bytes, iq4_xs_tile_pack, q8_tile_gemm_scalar<QIq4XsTile, block_q8_K, QK_K, iq4_xs_tile_step> }
#elif SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
inline void iq4_xs_tile_pack_512(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const auto* wb = static_cast<const uint8_t*>(w);
  auto* T = reinterpret_cast<QIq4XsTile*>(tile);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const size_t o = static_cast<size_t>(i) * sizeof(block_iq4_xs);
    q8_pack_prefetch(wb + o, row_bytes, sizeof(block_iq4_xs));
    q8_pack_words16(wb, row_bytes, nr, o + offsetof(block_iq4_xs, qs), T[i].qs);
    q8_pack_words16(wb, row_bytes, nr, o + offsetof(block_iq4_xs, qs) + 64, T[i].qs + 16);
    iq4_xs_tile_scales(wb, row_bytes, nr, i, T[i]);
  }
}
// NT tokens against one IQ4_XS tile. vpdpbusd wants an unsigned operand: the nibbles become
// level + 128 (1..241) by one byte shuffle, so a sub-block's dot carries 128·Σa over its 32
// activations, Σa = bsums[2s] + bsums[2s+1]; the offsets of the 8 sub-blocks, each times its
// scale, come off once per super-block by vpdpwssd (the scale held in both 16-bit halves) against
// the bsums pairs. The int32 sumi is then exactly the scalar twin's, and so is its one fma.
// 12-layer qwen3-30b-a3b IQ4_XS synth, pp512, 2 threads, Zen 4: 102-117 tok/s with the row dots,
// 252-255 with the tiles, llama.cpp 173-179.
struct Iq4XsTileTokens {
  template <int NT>
  struct Run {
    static void run(const QIq4XsTile* T, int64_t nb, const uint8_t* act, size_t astride, const int32_t*, float* y,
                    size_t ldy, __mmask16 rows) {
      alignas(16) int8_t lv[16];
      for (int k = 0; k < 16; ++k) lv[k] = static_cast<int8_t>(kIq4nlValues[k] + 128);
      const __m512i lut = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(lv)));
      const __m512i m4 = _mm512_set1_epi8(0xF), k16 = _mm512_set1_epi32(0xFFFF);
      __m512 acc[NT];
      for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
      for (int64_t i = 0; i < nb; ++i) {
        const QIq4XsTile& b = T[i];
        const block_q8_K* a[NT];
        __m512i sumi[NT];
        for (int t = 0; t < NT; ++t) {
          a[t] = reinterpret_cast<const block_q8_K*>(act + t * astride) + i;
          sumi[t] = _mm512_setzero_si512();
        }
        for (int sb = 0; sb < 8; ++sb) {
          __m512i wl[4], wh[4];
          for (int g = 0; g < 4; ++g) {
            const __m512i raw = _mm512_loadu_si512(b.qs[4 * sb + g]);
            wl[g] = _mm512_shuffle_epi8(lut, _mm512_and_si512(raw, m4));
            wh[g] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4));
          }
          const __m512i scv = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.sc[sb])));
          for (int t = 0; t < NT; ++t) {
            const int8_t* aq = a[t]->qs + 32 * sb;
            __m512i x = _mm512_setzero_si512();
            for (int g = 0; g < 4; ++g) x = _mm512_dpbusd_epi32(x, wl[g], q8_bcst32(aq + 4 * g));
            for (int g = 0; g < 4; ++g) x = _mm512_dpbusd_epi32(x, wh[g], q8_bcst32(aq + 16 + 4 * g));
            sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(x, scv));
          }
        }
        __m512i sc2[8];
        for (int sb = 0; sb < 8; ++sb) {
          const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.sc[sb])));
          sc2[sb] = _mm512_or_si512(_mm512_and_si512(v, k16), _mm512_slli_epi32(v, 16));
        }
        const __m512 dv = _mm512_loadu_ps(b.d);
        for (int t = 0; t < NT; ++t) {
          __m512i off = _mm512_setzero_si512();
          for (int sb = 0; sb < 8; ++sb) off = _mm512_dpwssd_epi32(off, sc2[sb], q8_bcst32(a[t]->bsums + 2 * sb));
          const __m512i s = _mm512_sub_epi32(sumi[t], _mm512_slli_epi32(off, 7));
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv, _mm512_set1_ps(a[t]->d)), acc[t]);
        }
      }
      for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ldy, rows, acc[t]);
    }
  };
};
#define SLUICE_Q8_IQ4_XS_TILE \
  { iq4_xs_tile_bytes, iq4_xs_tile_pack_512, q8_tile_gemm<QIq4XsTile, QK_K, Iq4XsTileTokens::Run> }
#else
#define SLUICE_Q8_IQ4_XS_TILE \
  { iq4_xs_tile_bytes, iq4_xs_tile_pack_256, q8_tile_gemm_256<QIq4XsTile, Iq4XsTile256> }
#endif
