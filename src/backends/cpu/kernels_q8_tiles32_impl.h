// backends/cpu/kernels_q8_tiles32_impl: the prefill tiles of the 32-block types (Q8_0, then
// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_A / IQ4_NL through their codes), in the one float order of
// kernels_q8_impl.h's 32-block section, so a token's result does not depend on its batch. Part
// of kernels_q8_impl.h, which includes it inside its namespace with the same SLUICE_Q8_* macros;
// includes nothing itself.

// ---- Q8_0 prefill tiles ------------------------------------------------------------------
// One 32-element block of 16 rows: qs[g][r] is word g of row r's quants with 128 added to
// each byte (q ^ 0x80), so vpdpbusd can take them as its unsigned operand; the dot then
// carries 128·Σa, which is subtracted per block: Σ (q + 128)·a − 128·Σ a = Σ q·a exactly.
struct Q80Tile {
  uint32_t qs[8][kQ8TileRows];
  float d[kQ8TileRows];
};
static_assert(sizeof(Q80Tile) % 64 == 0, "tiles are read as 64-byte vectors");

inline size_t q8_0_tile_bytes(int64_t n) { return static_cast<size_t>(n / QK8_0) * sizeof(Q80Tile); }

inline void q8_0_tile_pack(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / QK8_0;
  auto* T = reinterpret_cast<Q80Tile*>(tile);
  if (nr < kQ8TileRows) __builtin_memset(tile, 0, q8_0_tile_bytes(n));
  for (int64_t r = 0; r < nr; ++r) {
    const auto* x = reinterpret_cast<const block_q8_0*>(static_cast<const uint8_t*>(w) + r * row_bytes);
    for (int64_t i = 0; i < nb; ++i) {
      for (int g = 0; g < 8; ++g) {
        uint32_t v;
        __builtin_memcpy(&v, x[i].qs + 4 * g, 4);
        T[i].qs[g][r] = v ^ 0x80808080u;
      }
      T[i].d[r] = q8_half(x[i].d);
    }
  }
}

#if SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
// The 8 quant words of 16 rows (row[r]: row r's 32 bytes) into qs[8][16]. Two 8x8 word
// transposes side by side: z[r] holds row r's words in its low half and row r + 8's in its
// high half; unpacks give, per 128-bit lane, one word of 4 rows, and a qword permute puts the
// four row quads of a word in order.
inline void q8_tile_words8_512(const __m256i row[16], uint32_t (*qs)[kQ8TileRows]) {
  const __m512i lo_idx = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0),
                hi_idx = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
  __m512i z[8], t[8], v[8];
  for (int r = 0; r < 8; ++r) z[r] = _mm512_inserti64x4(_mm512_castsi256_si512(row[r]), row[r + 8], 1);
  for (int m = 0; m < 4; ++m) {
    t[2 * m] = _mm512_unpacklo_epi32(z[2 * m], z[2 * m + 1]);
    t[2 * m + 1] = _mm512_unpackhi_epi32(z[2 * m], z[2 * m + 1]);
  }
  for (int q = 0; q < 2; ++q)  // v[4q + e], lane L: word 4(L % 2) + e of rows 4q..4q+3 (+ 8 in lanes 2, 3)
    for (int h = 0; h < 2; ++h) {
      v[4 * q + 2 * h] = _mm512_unpacklo_epi64(t[4 * q + h], t[4 * q + 2 + h]);
      v[4 * q + 2 * h + 1] = _mm512_unpackhi_epi64(t[4 * q + h], t[4 * q + 2 + h]);
    }
  for (int e = 0; e < 4; ++e) {
    _mm512_storeu_si512(qs[e], _mm512_permutex2var_epi64(v[e], lo_idx, v[4 + e]));
    _mm512_storeu_si512(qs[4 + e], _mm512_permutex2var_epi64(v[e], hi_idx, v[4 + e]));
  }
}

inline void q8_0_tile_pack_512(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / QK8_0;
  auto* T = reinterpret_cast<Q80Tile*>(tile);
  const auto* wb = static_cast<const uint8_t*>(w);
  const __m256i k80 = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t i = 0; i < nb; ++i) {
    const size_t o = static_cast<size_t>(i) * sizeof(block_q8_0) + offsetof(block_q8_0, qs);
    q8_pack_prefetch_blocks<block_q8_0>(wb, row_bytes, i);
    __m256i rows[16];  // rows past nr are zero, as the scalar pack leaves them
    for (int r = 0; r < 16; ++r)
      rows[r] = r < nr ? _mm256_xor_si256(q8_load(wb + r * row_bytes + o), k80) : _mm256_setzero_si256();
    q8_tile_words8_512(rows, T[i].qs);
    // d is the low half of the block's first word.
    _mm512_storeu_ps(T[i].d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
                                 q8_gather_rows(wb, row_bytes, nr, o - offsetof(block_q8_0, qs)))));
  }
}

// One 32-block of a row-interleaved tile against one Q8_0 activation block: the 16 rows'
// Σ u·a (u the tile's unsigned bytes, by vpdpbusd). Q8_0's and the legacy types' tiles share it.
inline __m512i q8_tile_dot32(const __m512i wv[8], const block_q8_0& a) {
  __m512i s = _mm512_setzero_si512();
  for (int g = 0; g < 8; ++g) s = _mm512_dpbusd_epi32(s, wv[g], q8_bcst32(a.qs + 4 * g));
  return s;
}

// One 32-block's 8 code vectors (16 rows x 4 inputs each): a tile holds them as they are; an
// interleaved Q4_0 / Q4_1 group (quant/rows16.h) holds nibbles, unpacked here as the tile's
// pack does (word w's low nibbles are inputs 4w..4w+3, its high ones 16+4w..16+4w+3), and the
// groups 32 blocks ahead (~9-10 KB, as the K-quants' 4 super-blocks) are prefetched into L2.
template <class Tile>
inline void offset_codes(const Tile& b, __m512i wv[8]) {
  for (int g = 0; g < 8; ++g) wv[g] = _mm512_loadu_si512(b.qs[g]);
}
template <class Group>
requires std::is_same_v<Group, block_q4_0_x16> || std::is_same_v<Group, block_q4_1_x16>
inline void offset_codes(const Group& b, __m512i wv[8]) {
  constexpr int kLines = (sizeof(Group) + 63) / 64;
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(&b) + 32 * sizeof(Group);
  for (int l = 0; l < kLines; ++l) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T1);
  const __m512i m4 = _mm512_set1_epi8(0xF);
  for (int g = 0; g < 4; ++g) {
    const __m512i raw = _mm512_loadu_si512(b.qs[g]);
    wv[g] = _mm512_and_si512(raw, m4);
    wv[g + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
  }
}
// The codes' view of an interleaved group (OffsetTileTokens' C): the block type's codes, the
// group as its tile.
template <class Codes, class Group>
struct Rows16Codes : Codes {
  using Tile = Group;
};

// Q8TileOps::gemm's token passes for the tiles of unsigned codes u = q + off (C: Tile, kOff,
// and kMin for the types with a min m per block), with s = Σ u·a and Σa exact per block, in
// the 32-block types' four-lane order (Dot32 above): block i into lane i mod 4,
//   L = fma(s − off·Σa, d·d_a, L), or with a min L = fma(s, d·d_a, L) then L = fma(Σa, m·d_a, L),
// and (L_0 + L_2) + (L_1 + L_3) at the end. Q8_0 is off 128 (its quants xor 0x80). Four
// accumulators per token: passes of at most 4 tokens (q8_tile_gemm's kMaxNT). Σa comes from
// the activations' block sums (Q8TileOps::act_sums: once per matmul, not once per 16 rows).
template <class C>
struct OffsetTileTokens {
  template <int NT>
  struct Run {
    static void block(const typename C::Tile& b, int64_t i, const uint8_t* act, size_t astride, const int32_t* sums,
                      int64_t nb, __m512 acc[NT]) {
      __m512i wv[8];
      offset_codes(b, wv);
      const __m512 dv = group_factors(b.d);
      for (int t = 0; t < NT; ++t) {
        const auto& a = reinterpret_cast<const block_q8_0*>(act + t * astride)[i];
        const int32_t asum = sums[t * nb + i];
        const __m512i s = q8_tile_dot32(wv, a);
        const __m512 da = _mm512_set1_ps(q8_half(a.d));
        if constexpr (C::kMin) {
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv, da), acc[t]);
          acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(static_cast<float>(asum)), _mm512_mul_ps(group_factors(b.m), da),
                                   acc[t]);
        } else {
          const __m512 sf = _mm512_cvtepi32_ps(_mm512_sub_epi32(s, _mm512_set1_epi32(C::kOff * asum)));
          acc[t] = _mm512_fmadd_ps(sf, _mm512_mul_ps(dv, da), acc[t]);
        }
      }
    }
    static void run(const typename C::Tile* T, int64_t nb, const uint8_t* act, size_t astride, const int32_t* sums,
                    float* y, size_t ldy, __mmask16 rows) {
      __m512 acc[4][NT];
      for (auto& l : acc)
        for (int t = 0; t < NT; ++t) l[t] = _mm512_setzero_ps();
      int64_t i = 0;
      for (; i + 4 <= nb; i += 4)
        for (int j = 0; j < 4; ++j) block(T[i + j], i + j, act, astride, sums, nb, acc[j]);
      for (int j = 0; j < 3; ++j)
        if (i + j < nb) block(T[i + j], i + j, act, astride, sums, nb, acc[j]);
      for (int t = 0; t < NT; ++t)
        _mm512_mask_storeu_ps(y + t * ldy, rows,
                              _mm512_add_ps(_mm512_add_ps(acc[0][t], acc[2][t]), _mm512_add_ps(acc[1][t], acc[3][t])));
    }
  };
};
struct Q80TileCodes {
  using Tile = Q80Tile;
  static constexpr int kOff = 128;
  static constexpr bool kMin = false;
};

#define SLUICE_Q8_Q8_0_TILE                                                                        \
  {                                                                                                \
    .bytes = q8_0_tile_bytes, .pack = q8_0_tile_pack_512,                                          \
    .gemm = q8_tile_gemm<Q80Tile, QK8_0, OffsetTileTokens<Q80TileCodes>::Run, 4>, .act_sums = true \
  }
#elif !SLUICE_Q8_SIMD
// The scalar twin: Σ q·a is exact either way; one fma per block as the vector code.
inline float q8_0_tile_step(const Q80Tile& b, const block_q8_0& a, int64_t r, float acc) {
  int32_t sumi = 0;
  for (int k = 0; k < QK8_0; ++k) {
    const uint8_t u = reinterpret_cast<const uint8_t*>(&b.qs[k / 4][r])[k % 4];
    sumi += (static_cast<int32_t>(u) - 128) * a.qs[k];
  }
  return std::fma(static_cast<float>(sumi), b.d[r] * q8_half(a.d), acc);
}
#define SLUICE_Q8_Q8_0_TILE \
  { q8_0_tile_bytes, q8_0_tile_pack, q8_tile_gemm_scalar<Q80Tile, block_q8_0, QK8_0, q8_0_tile_step, 4> }
#else
// Without VNNI: the legacy 256-bit tiles (kernels_q8_tiles_avx2.h) with the quants as codes
// q + 128, which take the sign trick's path of the 8-bit codes: Σ(q + 128)·a − 128·Σa is
// Σ q·a exactly, so the row path's float order holds (a 6-layer qwen3-30b-a3b Q8_0 synth,
// pp512 on Zen 4 run as AVX2: 141-186 tok/s with the row dots, 205-241 with these tiles). The
// codes go back to q by one xor and 128·Σa is added then taken off: two cheap ops per block
// and token, for sharing the legacy tiles' pack and kernel.
struct Q80LegacyCodes {
  using Block = block_q8_0;
  static constexpr int kOff = 128;
  static constexpr bool kMin = false;
  static constexpr bool kWide = true;
  static constexpr bool kFive = false;
  static int code(const Block& b, int j) { return b.qs[j] + 128; }
  static __m256i codes(const Block& b) {
    return _mm256_xor_si256(q8_load(b.qs), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
};
#define SLUICE_Q8_Q8_0_TILE SLUICE_Q8_LEGACY_TILE(LegacyTileCodes<Q80LegacyCodes>)
#endif

// ---- Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_A / IQ4_NL prefill tiles ------------------------------
// The Q8_0 tile's layout with each weight's unsigned code c (4, 5 or 8 bits) in place of the
// quant: qs[g][r] is word g (elements 4g..4g+3) of row r's 32 codes, so vpdpbusd takes them as
// its unsigned operand. Per block, with s = Σ c·a and Σa exact int32 sums, into lane i mod 4,
//   Q4_0, Q5_0, IQ4_NL (x = d·(c − off), off 8, 16, 128):  L = fma(s − off·Σa, d·d_a, L)
//   Q4_1, Q5_1, Q8_A (x = d·c + m):             L = fma(s, d·d_a, L); L = fma(Σa, m·d_a, L)
// (m is unused for the first two): the row path's (Dot32) exact sums and float operations, so
// tiles and rows agree bitwise.
struct QLegacyTile {
  uint32_t qs[8][kQ8TileRows];
  float d[kQ8TileRows], m[kQ8TileRows];
};
static_assert(sizeof(QLegacyTile) % 64 == 0, "tiles are read as 64-byte vectors");

// The tile pack and kernels' view of a block type: its codes plus the tile they fill.
template <class Codes>
struct LegacyTileCodes : Codes {
  using Tile = QLegacyTile;
};

inline size_t legacy_tile_bytes(int64_t n) { return static_cast<size_t>(n / 32) * sizeof(QLegacyTile); }

template <class C>
inline void legacy_tile_pack(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / 32;
  auto* T = reinterpret_cast<QLegacyTile*>(tile);
  __builtin_memset(tile, 0, legacy_tile_bytes(n));
  for (int64_t r = 0; r < nr; ++r) {
    const auto* x = reinterpret_cast<const typename C::Block*>(static_cast<const uint8_t*>(w) + r * row_bytes);
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t c[32];
      for (int j = 0; j < 32; ++j) c[j] = static_cast<uint8_t>(C::code(x[i], j));
      for (int g = 0; g < 8; ++g) __builtin_memcpy(&T[i].qs[g][r], c + 4 * g, 4);
      T[i].d[r] = q8_half(x[i].d);
      if constexpr (C::kMin) T[i].m[r] = q8_half(x[i].m);
    }
  }
}

#if SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
// The same bytes as legacy_tile_pack: codes unpacked per row, words transposed as Q8_0's.
template <class C>
inline void legacy_tile_pack_512(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const int64_t nb = n / 32;
  auto* T = reinterpret_cast<QLegacyTile*>(tile);
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t i = 0; i < nb; ++i) {
    const size_t o = static_cast<size_t>(i) * sizeof(typename C::Block);
    __m256i rows[16];
    q8_pack_prefetch_blocks<typename C::Block>(wb, row_bytes, i);
    for (int r = 0; r < 16; ++r)
      rows[r] = r < nr ? C::codes(*reinterpret_cast<const typename C::Block*>(wb + r * row_bytes + o))
                       : _mm256_setzero_si256();
    q8_tile_words8_512(rows, T[i].qs);
    const __m512i dm = q8_gather_rows(wb, row_bytes, nr, o);  // d | m << 16 (m only in Q4_1, Q5_1)
    _mm512_storeu_ps(T[i].d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm)));
    _mm512_storeu_ps(T[i].m,
                     C::kMin ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16))) : _mm512_setzero_ps());
  }
}

#define SLUICE_Q8_LEGACY_TILE(C)                                                         \
  {                                                                                      \
    .bytes = legacy_tile_bytes, .pack = legacy_tile_pack_512<C>,                         \
    .gemm = q8_tile_gemm<QLegacyTile, 32, OffsetTileTokens<C>::Run, 4>, .act_sums = true \
  }
// A Q4_0 / Q4_1 group's tile: the nibbles unpacked as the groups' loop unpacks them, the fp16
// factors converted (Q4_0's m zero), the bytes legacy_tile_pack makes of the rows.
template <class Group>
requires std::is_same_v<Group, block_q4_0_x16> || std::is_same_v<Group, block_q4_1_x16>
inline void q8_group_tile(const Group& g, QLegacyTile& b) {
  __m512i wv[8];
  offset_codes(g, wv);
  for (int k = 0; k < 8; ++k) _mm512_storeu_si512(b.qs[k], wv[k]);
  _mm512_storeu_ps(b.d, group_factors(g.d));
  if constexpr (std::is_same_v<Group, block_q4_1_x16>)
    _mm512_storeu_ps(b.m, group_factors(g.m));
  else
    _mm512_storeu_ps(b.m, _mm512_setzero_ps());
}
template <class Codes>
struct LegacyGroupTile {
  using Tile = QLegacyTile;
  template <int NT>
  using Run = typename OffsetTileTokens<LegacyTileCodes<Codes>>::template Run<NT>;
};
template <>
struct GroupTile<block_q4_0_x16> : LegacyGroupTile<LegacyQ4_0> {};
template <>
struct GroupTile<block_q4_1_x16> : LegacyGroupTile<LegacyQ4_1> {};
#elif !SLUICE_Q8_SIMD
// The scalar twin: the same exact sums and fused multiply-adds per block as the vector code.
template <class C>
inline float legacy_tile_step(const QLegacyTile& b, const block_q8_0& a, int64_t r, float acc) {
  int32_t s = 0;
  for (int k = 0; k < 32; ++k) s += reinterpret_cast<const uint8_t*>(&b.qs[k / 4][r])[k % 4] * a.qs[k];
  const int32_t sa = q8_0_quant_sum(a);
  const float da = q8_half(a.d);
  if constexpr (C::kMin) {
    acc = std::fma(static_cast<float>(s), b.d[r] * da, acc);
    return std::fma(static_cast<float>(sa), b.m[r] * da, acc);
  }
  return std::fma(static_cast<float>(s - C::kOff * sa), b.d[r] * da, acc);
}
#define SLUICE_Q8_LEGACY_TILE(C) \
  { legacy_tile_bytes, legacy_tile_pack<C>, q8_tile_gemm_scalar<QLegacyTile, block_q8_0, 32, legacy_tile_step<C>, 4> }
#else
// Without VNNI: the 256-bit tiles of the 4- and 5-bit codes (kernels_q8_tiles_avx2.h).
#define SLUICE_Q8_LEGACY_TILE(C) legacy_tile_ops_256<C>()
#endif
