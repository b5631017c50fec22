// backends/cpu/kernels_q8_tiles_avx2: the prefill tiles (kernels.h, Q8TileOps) of Q2_K, Q4_K, Q5_K,
// Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, Q8_A, IQ4_NL and IQ4_XS for levels without VNNI (AVX2, and AVX-512 without VNNI), on the tile layouts and
// scalar packs of kernels_q8_impl.h. Included by kernels_q8_impl.h inside its namespace when
// SLUICE_Q8_SIMD && !SLUICE_Q8_VNNI; includes nothing itself.
//
// Why tiles pay without vpdpbusd: a row dot spends per 32 weights a maddubs, a madd by the
// sub-block scale and an add, plus the nibble unpacking and a horizontal sum per row, for
// every token. A 256-bit tile vector holds 4 inputs of 8 rows, so a vpmaddubsw gives 8 rows'
// pair sums at once; the pairs of a whole 32-input sub-block are added in 16 bits (exact:
// Q4_K 16 products of ≤ 15·127 per lane, Q5_K and Q6_K split so that a lane never passes
// 2^15 − 1), and ONE vpmaddwd by the row's scale (held twice per 32-bit lane) closes the
// sub-block: about 9 multiplies per 256 multiply-adds instead of 16, no horizontal sums, and
// the unpacked weights are reused by every token of the pass.
//
// Numerics: the same exact int32 sums per super-block and the same fused multiply-adds as the
// scalar twins (k4_tile_step, q6_K_tile_step), so the results are bitwise theirs. A tile's 16
// rows run as two halves of 8 (one vector each); a half past nr is skipped.

// Pins v in a register at this point (an empty asm the compiler cannot see through), so a chain
// of adds into it stays a chain (K4Rows16Decode). Nothing where the vector types are SIMDe's.
inline void q8_pin_256(__m256i& v) {
#if !defined(SLUICE_EMULATED_AVX512)
  asm("" : "+x"(v));
#else
  (void)v;
#endif
}
inline __m256i q8_bcst32_256(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
// A per-row scale for vpmaddwd: the 16-bit value in both halves of each 32-bit lane.
inline __m256i q8_pair16(__m256i v32) {
  return _mm256_or_si256(_mm256_and_si256(v32, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v32, 16));
}

// ---- packs: the bytes of the scalar packs (q4_K_tile_pack, q5_K_tile_pack, q6_K_tile_pack) ----

// in[r] = words 0..7 of row r; out[k] = word k of rows 0..7 (unpacks, then 128-bit halves).
inline void q8_transpose8_epi32(const __m256i in[8], __m256i out[8]) {
  __m256i t[8], u[8];
  for (int m = 0; m < 4; ++m) {
    t[2 * m] = _mm256_unpacklo_epi32(in[2 * m], in[2 * m + 1]);
    t[2 * m + 1] = _mm256_unpackhi_epi32(in[2 * m], in[2 * m + 1]);
  }
  // u[4q + e], 128-bit half L: word 4L + e of rows 4q..4q+3.
  for (int q = 0; q < 2; ++q)
    for (int h = 0; h < 2; ++h) {
      u[4 * q + 2 * h] = _mm256_unpacklo_epi64(t[4 * q + h], t[4 * q + 2 + h]);
      u[4 * q + 2 * h + 1] = _mm256_unpackhi_epi64(t[4 * q + h], t[4 * q + 2 + h]);
    }
  for (int e = 0; e < 4; ++e) {
    out[e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x20);
    out[4 + e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x31);
  }
}

// The n_words (8 or 16) 4-byte words at byte `off` of nr ≤ 16 rows, transposed into
// dst[k][r] (rows ≥ nr are zero).
inline void q8_pack_words_256(const uint8_t* w, size_t row_bytes, int64_t nr, size_t off, int n_words,
                              uint32_t (*dst)[kQ8TileRows]) {
  for (int rh = 0; rh < 2; ++rh)
    for (int wh = 0; wh < n_words / 8; ++wh) {
      __m256i in[8], out[8];
      for (int r = 0; r < 8; ++r) {
        const int64_t row = 8 * rh + r;
        in[r] = row < nr ? q8_load(w + row * row_bytes + off + 32 * wh) : _mm256_setzero_si256();
      }
      q8_transpose8_epi32(in, out);
      for (int k = 0; k < 8; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst[8 * wh + k] + 8 * rh), out[k]);
    }
}

// Words 0..3 of the 16 bytes at byte `off` of rows 8h..8h+7 (0 past nr): w[k] lane r = word k of row 8h + r.
inline void q8_rows_words4_256(const uint8_t* w, size_t row_bytes, int64_t nr, size_t off, int h, __m256i wk[4]) {
  auto row = [&](int r) {
    const int64_t rr = 8 * h + r;
    return rr < nr ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + rr * row_bytes + off)) : _mm_setzero_si128();
  };
  __m256i y[4];
  for (int r = 0; r < 4; ++r) y[r] = _mm256_set_m128i(row(r + 4), row(r));
  const __m256i t0 = _mm256_unpacklo_epi32(y[0], y[1]), t1 = _mm256_unpackhi_epi32(y[0], y[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(y[2], y[3]), t3 = _mm256_unpackhi_epi32(y[2], y[3]);
  wk[0] = _mm256_unpacklo_epi64(t0, t2);
  wk[1] = _mm256_unpackhi_epi64(t0, t2);
  wk[2] = _mm256_unpacklo_epi64(t1, t3);
  wk[3] = _mm256_unpackhi_epi64(t1, t3);
}
// Byte k of each 32-bit lane, as 8 bytes at dst.
inline void q8_store_lane_byte(__m256i v, int k, uint8_t* dst) {
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i b = _mm256_shuffle_epi8(_mm256_srli_epi32(v, 8 * k), pick);
  const __m256i p = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(p));
}
// The fp16 in the low 16 bits of each lane, as 8 floats.
inline __m256 q8_lane_half_256(__m256i v) {
  const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
  return _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1)));
}

// d, dmin, the scales and the mins of the q4_K/q5_K super-block at byte o of nr rows (both
// blocks start with d, dmin, scales[12]) into a tile's fields: q8_scales_mins_k4 lane-parallel.
template <class Tile>
inline void q8_k4_tile_scales_256(const uint8_t* wb, size_t row_bytes, int64_t nr, size_t o, Tile& b) {
  const __m256i k3f = _mm256_set1_epi32(0x3f3f3f3f), k0f = _mm256_set1_epi32(0x0f0f0f0f),
                k03 = _mm256_set1_epi32(0x03030303), kff = _mm256_set1_epi32(0xFF);
  for (int h = 0; h < 2; ++h) {
    __m256i u[4];  // d | dmin << 16, then the three words of scales
    q8_rows_words4_256(wb, row_bytes, nr, o, h, u);
    const __m256i s_lo = _mm256_and_si256(u[1], k3f), m_lo = _mm256_and_si256(u[2], k3f);
    const __m256i s_hi = _mm256_or_si256(_mm256_and_si256(u[3], k0f),
                                         _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u[1], 6), k03), 4));
    const __m256i m_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u[3], 4), k0f),
                                         _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u[2], 6), k03), 4));
    for (int j = 0; j < 8; ++j) {
      q8_store_lane_byte(j < 4 ? s_lo : s_hi, j % 4, b.sc[j] + 8 * h);
      const __m256i m = _mm256_and_si256(_mm256_srli_epi32(j < 4 ? m_lo : m_hi, 8 * (j % 4)), kff);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.m2[j] + 8 * h), _mm256_or_si256(m, _mm256_slli_epi32(m, 16)));
    }
    _mm256_storeu_ps(b.d + 8 * h, q8_lane_half_256(u[0]));
    _mm256_storeu_ps(b.dmin + 8 * h, q8_lane_half_256(_mm256_srli_epi32(u[0], 16)));
  }
}

// The Q4_K and Q5_K packs (Q5_K's qh words too).
template <class Tile, class Block>
inline void k4_tile_pack_256(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  auto* T = reinterpret_cast<Tile*>(tile);
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const size_t o = static_cast<size_t>(i) * sizeof(Block);
    q8_pack_prefetch(wb + o, row_bytes, sizeof(Block));
    q8_pack_words_256(wb, row_bytes, nr, o + offsetof(Block, qs), 32, T[i].qs);
    if constexpr (requires { T[i].qh; }) q8_pack_words_256(wb, row_bytes, nr, o + offsetof(Block, qh), 8, T[i].qh);
    q8_k4_tile_scales_256(wb, row_bytes, nr, o, T[i]);
  }
}

// kPrefetchNext: as q6_K_tile_pack_512's.
template <bool kPrefetchNext = true>
inline void q6_K_tile_pack_256(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  auto* T = reinterpret_cast<Q6KTile*>(tile);
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    Q6KTile& b = T[i];
    const size_t o = static_cast<size_t>(i) * sizeof(block_q6_K);
    if constexpr (kPrefetchNext) q8_pack_prefetch(wb + o, row_bytes, sizeof(block_q6_K));
    q8_pack_words_256(wb, row_bytes, nr, o + offsetof(block_q6_K, ql), 32, b.ql);
    q8_pack_words_256(wb, row_bytes, nr, o + offsetof(block_q6_K, qh), 16, b.qh);
    for (int h = 0; h < 2; ++h) {
      __m256i g[4];  // the 16 scales: word k holds scales 4k..4k+3
      q8_rows_words4_256(wb, row_bytes, nr, o + offsetof(block_q6_K, scales), h, g);
      for (int k = 0; k < 16; ++k) q8_store_lane_byte(g[k / 4], k % 4, reinterpret_cast<uint8_t*>(b.sc[k]) + 8 * h);
      // 32·scale as int16: byte k % 4 of the word, sign-extended by a shift pair, times 32.
      auto x32 = [&](int k) {
        return _mm256_slli_epi32(_mm256_srai_epi32(_mm256_slli_epi32(g[k / 4], 24 - 8 * (k % 4)), 24), 5);
      };
      for (int k = 0; k < 8; ++k)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.sc2[k] + 8 * h),
                            _mm256_or_si256(_mm256_and_si256(x32(2 * k), _mm256_set1_epi32(0xFFFF)),
                                            _mm256_slli_epi32(x32(2 * k + 1), 16)));
    }
    for (int64_t r = 0; r < kQ8TileRows; ++r)
      b.d[r] = r < nr ? q8_half(reinterpret_cast<const block_q6_K*>(wb + r * row_bytes + o)->d) : 0.0f;
  }
}

// ---- kernels --------------------------------------------------------------------------------
// Each super-block's 64 weight vectors of one half (8 rows × 4 inputs each) are unpacked once
// per call into an L1 buffer, with its sub-block scales as vpmaddwd operands; then every
// token of the chunk runs against the buffer, two tokens at a time so that each weight load
// feeds two vpmaddubsw. Without VNNI the 16 ymm registers cannot hold a sub-block's unpacked
// vectors plus several tokens' sums (the compiler spilled both, ~25 multiply-adds per cycle);
// from L1, loads are what it takes (three per cycle).

struct Tile256Buf {
  __m256i w[64];   // K4: sub-block j = w[8j..8j+7]; Q6_K: the 32-element group (hh, p) = w[8(4hh + p)..]
  __m256i sc[16];  // per-row scales, twice per 32-bit lane: K4 sub-block j = sc[j]; Q6_K 16-input sub-block s = sc[s]
  __m256i m2[8];   // the close's vpmaddwd operands: K4 and Q2_K the tile's m2[k], Q6_K its sc2[k]
  __m256 d, dmin;
};

// The close of a super-block for the tiles with mins (Q4_K, Q5_K, Q2_K), rows 8h..8h+7:
// mins = Σ_k m2[k]·(bsums pair k), then the two fused multiply-adds of the scalar twins.
inline __m256 q8_tile_close_mins_256(const Tile256Buf& u, const block_q8_K& a, __m256i sumi, __m256 acc) {
  __m256i mins = _mm256_setzero_si256();
  for (int k = 0; k < 8; ++k) mins = _mm256_add_epi32(mins, _mm256_madd_epi16(u.m2[k], q8_bcst32_256(a.bsums + 2 * k)));
  const __m256 ad = _mm256_set1_ps(a.d);
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_mul_ps(u.d, ad), acc);
  return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(u.dmin, ad), acc);
}

// A super-block's per-row scales, mins and factors of rows 8h..8h+7 as the token loops read them
// (Tile256Buf's sc, m2, d, dmin): a tile holds them decoded (its pack's work); an interleaved
// group (quant/rows16.h, read by kernels_q8_rows16_avx2.h) decodes its scale planes and fp16
// factors here, into the same values.
// Bytes 8h..8h+7 of v, each twice as int16 (unsigned or signed bytes): vpmaddwd's per-row operand.
inline __m256i q8_pair16_u8(__m128i v, int h) {
  return _mm256_cvtepu8_epi16(h ? _mm_unpackhi_epi8(v, v) : _mm_unpacklo_epi8(v, v));
}
inline __m256i q8_pair16_i8(__m128i v, int h) {
  return _mm256_cvtepi8_epi16(h ? _mm_unpackhi_epi8(v, v) : _mm_unpacklo_epi8(v, v));
}
inline __m256 q8_half8_256(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
template <class Tile>
inline void k4_scales_256(const Tile& b, int h, Tile256Buf& u) {
  for (int j = 0; j < 8; ++j) {
    u.sc[j] = q8_pair16(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.sc[j] + 8 * h))));
    u.m2[j] = q8_load(b.m2[j] + 8 * h);
  }
  u.d = _mm256_loadu_ps(b.d + 8 * h);
  u.dmin = _mm256_loadu_ps(b.dmin + 8 * h);
}
template <class Group>
requires std::is_same_v<Group, block_q4_K_x16> || std::is_same_v<Group, block_q5_K_x16>
inline void k4_scales_256(const Group& b, int h, Tile256Buf& u) {
  __m128i sc[8], mn[8];
  q8_k4_group_scales_mins(b.scales, sc, mn);
  for (int j = 0; j < 8; ++j) {
    u.sc[j] = q8_pair16_u8(sc[j], h);
    u.m2[j] = q8_pair16_u8(mn[j], h);
  }
  u.d = q8_half8_256(b.d + 8 * h);
  u.dmin = q8_half8_256(b.dmin + 8 * h);
}
// Q6_K: sc[s] the 16 signed scales, m2[k] = (32·sc[2k], 32·sc[2k+1]) per lane (the tile's sc2).
inline void q6_scales_256(const Q6KTile& b, int h, Tile256Buf& u) {
  for (int s = 0; s < 16; ++s)
    u.sc[s] = q8_pair16(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.sc[s] + 8 * h))));
  for (int k = 0; k < 8; ++k) u.m2[k] = q8_load(b.sc2[k] + 8 * h);
  u.d = _mm256_loadu_ps(b.d + 8 * h);
}
inline __m256i q6_group_sc2_256(const block_q6_K_x16& b, int k, int h) {
  auto half = [&](int s) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales[s] + 8 * h)); };
  return _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(half(2 * k), half(2 * k + 1))), 5);
}
inline void q6_scales_256(const block_q6_K_x16& b, int h, Tile256Buf& u) {
  for (int s = 0; s < 16; ++s)
    u.sc[s] = q8_pair16_i8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales[s])), h);
  for (int k = 0; k < 8; ++k) u.m2[k] = q6_group_sc2_256(b, k, h);
  u.d = q8_half8_256(b.d + 8 * h);
}

// The high bits of a code vector from its qh vector, by 16-bit shifts (the mask drops what
// crossed a byte): Q5_K's fifth bit of sub-block j (bit j of each byte) to bit 4; Q6_K's two
// top bits of group p (bits 2p, 2p+1) to bits 4, 5. For the tiles' unpacks and the groups'
// fused decode loops (kernels_q8_rows16_avx2.h).
inline __m256i q5_high_bit_256(__m256i qh, int j) {
  const __m256i hb = j < 4 ? _mm256_slli_epi16(qh, 4 - j) : j == 4 ? qh : _mm256_srli_epi16(qh, j - 4);
  return _mm256_and_si256(hb, _mm256_set1_epi8(0x10));
}
// The four 6-bit code vectors (groups p = 0..3, 8 rows x inputs 4g..4g+3 of each) of a Q6_K
// group's word triple (quant/blocks.h block_q6_K_x16): groups 0-2 by one vpand each, group 3
// from the three bytes' top bits by three shifts (the masks drop what crossed a byte).
inline void q6_group_codes_256(const block_q6_K_x16& b, int hh, int g, int h, __m256i v[4]) {
  const __m256i m3f = _mm256_set1_epi8(0x3F);
  const uint32_t(*q)[16] = b.q + 24 * hh + 3 * g;
  const __m256i x = q8_load(q[0] + 8 * h), y = q8_load(q[1] + 8 * h), z = q8_load(q[2] + 8 * h);
  v[0] = _mm256_and_si256(x, m3f);
  v[1] = _mm256_and_si256(y, m3f);
  v[2] = _mm256_and_si256(z, m3f);
  v[3] = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x, 6), _mm256_set1_epi8(0x03)),
                                         _mm256_and_si256(_mm256_srli_epi16(y, 4), _mm256_set1_epi8(0x0C))),
                         _mm256_and_si256(_mm256_srli_epi16(z, 2), _mm256_set1_epi8(0x30)));
}
inline __m256i q6_high_bits_256(__m256i qh, int p) {
  const __m256i hb = p == 0   ? _mm256_slli_epi16(qh, 4)
                     : p == 1 ? _mm256_slli_epi16(qh, 2)
                     : p == 2 ? qh
                              : _mm256_srli_epi16(qh, 2);
  return _mm256_and_si256(hb, _mm256_set1_epi8(0x30));
}

// The Q4_K / Q5_K tiles: codes ≤ 15 add 8 maddubs in one 16-bit run, Q5_K's ≤ 31 two runs of 4.
template <class Tile>
struct K4Tile256 {
  static constexpr bool kHighBit = requires(const Tile& t) { t.qh; };
  static void unpack(const Tile& b, int h, Tile256Buf& u) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int j = 0; j < 8; ++j) {  // sub-block j: chunk j/2, low (even j) or high nibbles
      for (int g = 0; g < 8; ++g) {
        const __m256i raw = q8_load(b.qs[8 * (j / 2) + g] + 8 * h);
        __m256i v = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(raw, 4) : raw, m4);
        if constexpr (kHighBit) v = _mm256_or_si256(v, q5_high_bit_256(q8_load(b.qh[g] + 8 * h), j));
        u.w[8 * j + g] = v;
      }
    }
    k4_scales_256(b, h, u);
  }
  // NT (1 or 2) tokens' super-block: acc[t] after it, as k4_tile_step.
  template <int NT>
  static void tokens(const Tile&, int, const Tile256Buf& u, const block_q8_K* const a[NT], __m256 acc[NT]) {
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
    constexpr int kRun = kHighBit ? 4 : 8;
    for (int j = 0; j < 8; ++j)
      for (int g0 = 0; g0 < 8; g0 += kRun) {
        __m256i s[NT];  // zero-initialized: GCC's -Wmaybe-uninitialized cannot see the g == g0 pattern
        for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
        for (int g = g0; g < g0 + kRun; ++g) {
          const __m256i w = u.w[8 * j + g];
          for (int t = 0; t < NT; ++t)
            s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(w, q8_bcst32_256(a[t]->qs + 32 * j + 4 * g)));
        }
        for (int t = 0; t < NT; ++t) sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s[t], u.sc[j]));
      }
    for (int t = 0; t < NT; ++t) acc[t] = q8_tile_close_mins_256(u, *a[t], sumi[t], acc[t]);
  }
};

// The Q6_K tiles: codes ≤ 63, so two maddubs per 16-bit run (≤ 4·63·127), two runs per
// 16-input sub-block; the -32 offset by vpmaddwd of sc2 with the bsum pairs, as q6_K_tile_step.
template <class Tile>
struct Q6KTile256 {
  static void unpack(const Tile& b, int h, Tile256Buf& u) {
    if constexpr (std::is_same_v<Tile, block_q6_K_x16>) {  // an interleaved group's word triples
      for (int hh = 0; hh < 2; ++hh)
        for (int g = 0; g < 8; ++g) {
          __m256i v[4];
          q6_group_codes_256(b, hh, g, h, v);
          for (int p = 0; p < 4; ++p) u.w[8 * (4 * hh + p) + g] = v[p];
        }
    } else {  // a tile's ggml ql/qh words
      const __m256i m4 = _mm256_set1_epi8(0xF);
      for (int hh = 0; hh < 2; ++hh)
        for (int p = 0; p < 4; ++p)
          for (int g = 0; g < 8; ++g) {
            const __m256i l = q8_load(b.ql[16 * hh + 8 * (p & 1) + g] + 8 * h);
            const __m256i lo = _mm256_and_si256(p < 2 ? l : _mm256_srli_epi16(l, 4), m4);
            u.w[8 * (4 * hh + p) + g] = _mm256_or_si256(lo, q6_high_bits_256(q8_load(b.qh[8 * hh + g] + 8 * h), p));
          }
    }
    q6_scales_256(b, h, u);
  }
  template <int NT>
  static void tokens(const Tile&, int, const Tile256Buf& u, const block_q8_K* const a[NT], __m256 acc[NT]) {
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
    for (int q = 0; q < 8; ++q)  // group (hh, p) = (q / 4, q % 4): inputs 32q..32q+31, sub-blocks 2q, 2q + 1
      for (int g0 = 0; g0 < 8; g0 += 2) {
        __m256i s[NT];
        for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
        for (int g = g0; g < g0 + 2; ++g) {
          const __m256i w = u.w[8 * q + g];
          for (int t = 0; t < NT; ++t)
            s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(w, q8_bcst32_256(a[t]->qs + 32 * q + 4 * g)));
        }
        for (int t = 0; t < NT; ++t) sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s[t], u.sc[2 * q + g0 / 4]));
      }
    for (int t = 0; t < NT; ++t) {
      __m256i offs = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k)
        offs = _mm256_add_epi32(offs, _mm256_madd_epi16(u.m2[k], q8_bcst32_256(a[t]->bsums + 2 * k)));
      const __m256 sf = _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], offs));
      acc[t] = _mm256_fmadd_ps(sf, _mm256_mul_ps(u.d, _mm256_set1_ps(a[t]->d)), acc[t]);
    }
  }
};

// The Q2_K tiles: codes ≤ 3, so the 4 maddubs of a 16-input sub-block add in one 16-bit run
// (≤ 4·2·3·127); the mins of two sub-blocks per vpmaddwd with the bsum pairs, as q2_K_tile_step.
struct Q2KTile256 {
  static void unpack(const Q2KTile& b, int h, Tile256Buf& u) {
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int hh = 0; hh < 2; ++hh)
      for (int j = 0; j < 4; ++j) {
        const __m128i shift = _mm_cvtsi32_si128(2 * j);
        for (int g = 0; g < 8; ++g)
          u.w[8 * (4 * hh + j) + g] = _mm256_and_si256(_mm256_srl_epi16(q8_load(b.qs[8 * hh + g] + 8 * h), shift), m3);
      }
    for (int k = 0; k < 16; ++k)
      u.sc[k] = q8_pair16(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.sc[k] + 8 * h))));
    for (int k = 0; k < 8; ++k) u.m2[k] = q8_load(b.m2[k] + 8 * h);
    u.d = _mm256_loadu_ps(b.d + 8 * h);
    u.dmin = _mm256_loadu_ps(b.dmin + 8 * h);
  }
  template <int NT>
  static void tokens(const Q2KTile&, int, const Tile256Buf& u, const block_q8_K* const a[NT], __m256 acc[NT]) {
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
    for (int q = 0; q < 8; ++q)  // group (hh, j) = (q / 4, q % 4): inputs 32q..32q+31, sub-blocks 2q, 2q + 1
      for (int g0 = 0; g0 < 8; g0 += 4) {
        __m256i s[NT];
        for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
        for (int g = g0; g < g0 + 4; ++g) {
          const __m256i w = u.w[8 * q + g];
          for (int t = 0; t < NT; ++t)
            s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(w, q8_bcst32_256(a[t]->qs + 32 * q + 4 * g)));
        }
        for (int t = 0; t < NT; ++t) sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s[t], u.sc[2 * q + g0 / 4]));
      }
    for (int t = 0; t < NT; ++t) acc[t] = q8_tile_close_mins_256(u, *a[t], sumi[t], acc[t]);
  }
};
// q2_K_tile_pack's bytes: the qs words transposed 8 rows at a time, the scales' words 8 rows at a time.
inline void q2_K_tile_pack_256(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const auto* wb = static_cast<const uint8_t*>(w);
  auto* T = reinterpret_cast<Q2KTile*>(tile);
  const __m256i kf = _mm256_set1_epi32(0xF);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    Q2KTile& b = T[i];
    const size_t o = static_cast<size_t>(i) * sizeof(block_q2_K);
    q8_pack_prefetch(wb + o, row_bytes, sizeof(block_q2_K));
    q8_pack_words_256(wb, row_bytes, nr, o + offsetof(block_q2_K, qs), 16, b.qs);
    for (int h = 0; h < 2; ++h) {
      __m256i g[4];  // the 16 scale bytes: word k holds scales 4k..4k+3
      q8_rows_words4_256(wb, row_bytes, nr, o + offsetof(block_q2_K, scales), h, g);
      for (int k = 0; k < 16; ++k)
        q8_store_lane_byte(_mm256_and_si256(g[k / 4], _mm256_set1_epi8(0xF)), k % 4, b.sc[k] + 8 * h);
      for (int k = 0; k < 8; ++k) {  // bytes 2k and 2k + 1: the 16-bit half k % 2 of word k / 2
        const __m256i v = _mm256_srli_epi32(g[k / 2], 16 * (k % 2));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.m2[k] + 8 * h),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(v, 4), kf),
                                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(v, 12), kf), 16)));
      }
    }
    for (int64_t r = 0; r < kQ8TileRows; ++r) {
      const auto* x = reinterpret_cast<const block_q2_K*>(wb + r * row_bytes + o);
      b.d[r] = r < nr ? q8_half(x->d) : 0.0f;
      b.dmin[r] = r < nr ? q8_half(x->dmin) : 0.0f;
    }
  }
}

// The IQ4_XS tiles: levels are signed (|v| ≤ 127), so per vector and token the sign trick and one
// vpmaddwd by the sub-block's scale (pairs ≤ 2·127·127 leave no room for 16-bit runs); the buffer
// holds the levels (one byte shuffle of the codes at unpack), as iq4_xs_tile_step.
struct Iq4XsTile256 {
  static void unpack(const QIq4XsTile& b, int h, Tile256Buf& u) {
    const __m256i m4 = _mm256_set1_epi8(0xF), levels = q8_iq4_levels();
    for (int sb = 0; sb < 8; ++sb) {
      for (int g = 0; g < 4; ++g) {
        const __m256i raw = q8_load(b.qs[4 * sb + g] + 8 * h);
        u.w[8 * sb + g] = _mm256_shuffle_epi8(levels, _mm256_and_si256(raw, m4));
        u.w[8 * sb + 4 + g] = _mm256_shuffle_epi8(levels, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
      }
      u.sc[sb] = q8_pair16(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.sc[sb] + 8 * h))));
    }
    u.d = _mm256_loadu_ps(b.d + 8 * h);
  }
  template <int NT>
  static void tokens(const QIq4XsTile&, int, const Tile256Buf& u, const block_q8_K* const a[NT], __m256 acc[NT]) {
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
    for (int sb = 0; sb < 8; ++sb)
      for (int g = 0; g < 8; ++g) {
        const __m256i w = u.w[8 * sb + g], uw = _mm256_sign_epi8(w, w);
        for (int t = 0; t < NT; ++t) {
          const __m256i av = _mm256_sign_epi8(q8_bcst32_256(a[t]->qs + 32 * sb + 4 * g), w);
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(uw, av), u.sc[sb]));
        }
      }
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), _mm256_mul_ps(u.d, _mm256_set1_ps(a[t]->d)), acc[t]);
  }
};
// iq4_xs_tile_pack's bytes: the qs words transposed 8 rows at a time.
inline void iq4_xs_tile_pack_256(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  const auto* wb = static_cast<const uint8_t*>(w);
  auto* T = reinterpret_cast<QIq4XsTile*>(tile);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    q8_pack_prefetch(wb + static_cast<size_t>(i) * sizeof(block_iq4_xs), row_bytes, sizeof(block_iq4_xs));
    const size_t o = static_cast<size_t>(i) * sizeof(block_iq4_xs) + offsetof(block_iq4_xs, qs);
    q8_pack_words_256(wb, row_bytes, nr, o, 16, T[i].qs);
    q8_pack_words_256(wb, row_bytes, nr, o + 64, 16, T[i].qs + 16);
    iq4_xs_tile_scales(wb, row_bytes, nr, i, T[i]);
  }
}

// The first `rows` (1..8) of a tile half's results for one token, at yt.
inline void q8_store_rows_256(float* yt, __m256 v, int64_t rows) {
  if (rows == 8) {
    _mm256_storeu_ps(yt, v);
    return;
  }
  alignas(32) float part[8];
  _mm256_store_ps(part, v);
  for (int64_t r = 0; r < rows; ++r) yt[r] = part[r];
}

// Q8TileOps::gemm: tokens in chunks of kChunk (their accumulators in an L1 buffer); per chunk
// and half of 8 rows that holds any of the nr, each super-block is unpacked once (Kind::unpack)
// and run against the chunk's tokens in pairs, then a single one.
template <class Tile, class Kind>
inline void q8_tile_gemm_256(const uint8_t* tile, int64_t n, const void* a, size_t astride, const int32_t*,
                             int64_t n_tok, float* y, size_t ldy, int64_t nr) {
  constexpr int64_t kChunk = 64;
  const auto* T = reinterpret_cast<const Tile*>(tile);
  const auto* ab = static_cast<const uint8_t*>(a);
  const int64_t nb = n / QK_K;
  Tile256Buf u;
  __m256 acc[kChunk];
  for (int64_t t0 = 0; t0 < n_tok; t0 += kChunk) {
    const int64_t nt = std::min(kChunk, n_tok - t0);
    for (int h = 0; h < 2 && 8 * h < nr; ++h) {
      for (int64_t t = 0; t < nt; ++t) acc[t] = _mm256_setzero_ps();
      auto act = [&](int64_t t) { return reinterpret_cast<const block_q8_K*>(ab + (t0 + t) * astride); };
      for (int64_t i = 0; i < nb; ++i) {
        Kind::unpack(T[i], h, u);
        int64_t t = 0;
        for (; t + 2 <= nt; t += 2) {
          const block_q8_K* const at[2] = {act(t) + i, act(t + 1) + i};
          Kind::template tokens<2>(T[i], h, u, at, acc + t);
        }
        if (t < nt) {
          const block_q8_K* const at[1] = {act(t) + i};
          Kind::template tokens<1>(T[i], h, u, at, acc + t);
        }
      }
      const int64_t rows = std::min<int64_t>(8, nr - 8 * h);
      for (int64_t t = 0; t < nt; ++t) q8_store_rows_256(y + (t0 + t) * ldy + 8 * h, acc[t], rows);
    }
  }
}

// ---- Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_A / IQ4_NL tiles (QLegacyTile: codes already unpacked) ---
// Per block and token: the 8 code vectors against the block's activations, maddubs pairs
// added in 16 bits (4-bit codes: one run of 8; 5-bit: two runs of 4), one vpmaddwd by 1, then
// the four-lane float order of the 32-block types (legacy_tile_step): block i into lane i % 4.
// 8-bit codes (Q8_A's, IQ4_NL's levels + 128) would saturate vpmaddubsw's pairs as they are:
// they go through the sign trick, a vpmaddwd per vector (Zen 3, 1 thread, 2048×768, 32 tokens,
// two runs: IQ4_NL 46 and 33 GMAC/s vs 28 and 21 for rows, Q8_A 27 and 38 vs 18 and 23). Q8_0 (its own
// tile) keeps the row path.

template <class C>
inline void legacy_tile_pack_256(const void* w, size_t row_bytes, int64_t nr, int64_t n, uint8_t* tile) {
  using Block = typename C::Block;
  auto* T = reinterpret_cast<QLegacyTile*>(tile);
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t i = 0; i < n / 32; ++i) {
    const size_t o = static_cast<size_t>(i) * sizeof(Block);
    q8_pack_prefetch_blocks<Block>(wb, row_bytes, i);
    for (int rh = 0; rh < 2; ++rh) {
      __m256i in[8], out[8];
      for (int r = 0; r < 8; ++r) {
        const int64_t row = 8 * rh + r;
        in[r] = row < nr ? C::codes(*reinterpret_cast<const Block*>(wb + row * row_bytes + o)) : _mm256_setzero_si256();
      }
      q8_transpose8_epi32(in, out);
      for (int k = 0; k < 8; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(T[i].qs[k] + 8 * rh), out[k]);
    }
    for (int64_t r = 0; r < kQ8TileRows; ++r) {
      const auto* x = reinterpret_cast<const Block*>(wb + r * row_bytes + o);
      T[i].d[r] = r < nr ? q8_half(x->d) : 0.0f;
      if constexpr (C::kMin)
        T[i].m[r] = r < nr ? q8_half(x->m) : 0.0f;
      else
        T[i].m[r] = 0.0f;
    }
  }
}

// Code vector g (inputs 4g..4g+3 of rows 8h..8h+7) and the factors of a tile, or of an
// interleaved Q4_0 / Q4_1 group (quant/rows16.h): its word w's low nibbles are inputs 4w..4w+3,
// its high ones 16+4w..16+4w+3, its factors fp16.
inline __m256i legacy_codes_256(const QLegacyTile& b, int g, int h) { return q8_load(b.qs[g] + 8 * h); }
inline __m256 legacy_d_256(const QLegacyTile& b, int h) { return _mm256_loadu_ps(b.d + 8 * h); }
inline __m256 legacy_m_256(const QLegacyTile& b, int h) { return _mm256_loadu_ps(b.m + 8 * h); }
template <class Group>
concept LegacyGroup = std::is_same_v<Group, block_q4_0_x16> || std::is_same_v<Group, block_q4_1_x16>;
template <LegacyGroup Group>
inline __m256i legacy_codes_256(const Group& b, int g, int h) {
  const __m256i raw = q8_load(b.qs[g % 4] + 8 * h);
  return _mm256_and_si256(g < 4 ? raw : _mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0xF));
}
template <LegacyGroup Group>
inline __m256 legacy_d_256(const Group& b, int h) {
  return q8_half8_256(b.d + 8 * h);
}
inline __m256 legacy_m_256(const block_q4_1_x16& b, int h) { return q8_half8_256(b.m + 8 * h); }

template <class C>
struct LegacyTile256 {
  // Tokens t0..t0+NT-1 (NT 1 or 2) against block i of rows 8h..8h+7: lane i % 4 of acc.
  template <int NT, class Tile>
  static void block(const Tile& b, int64_t i, int h, const block_q8_0* const a[NT], const int32_t* const sa[NT],
                    __m256 (*acc)[4]) {
    constexpr int kRun = C::kFive ? 4 : 8;  // 8·2·15·127 < 2^15; 5 bits: 4·2·31·127
    __m256i s[NT];
    for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
    if constexpr (C::kWide) {
      // 8-bit codes c: v = c − 128 by the sign trick (|v|·sign(a, v), pairs ≤ 2·128·127 < 2^15),
      // one vpmaddwd per vector; then Σ c·a = Σ v·a + 128·Σa, the sum the narrow codes give.
      for (int g = 0; g < 8; ++g) {
        const __m256i v = _mm256_xor_si256(legacy_codes_256(b, g, h), _mm256_set1_epi8(static_cast<char>(0x80)));
        const __m256i u = _mm256_sign_epi8(v, v);
        for (int t = 0; t < NT; ++t)
          s[t] = _mm256_add_epi32(
              s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(q8_bcst32_256(a[t]->qs + 4 * g), v)),
                                      _mm256_set1_epi16(1)));
      }
      for (int t = 0; t < NT; ++t) s[t] = _mm256_add_epi32(s[t], _mm256_set1_epi32(128 * *sa[t]));
    }
    for (int g0 = 0; g0 < (C::kWide ? 0 : 8); g0 += kRun) {
      __m256i r[NT];
      for (int t = 0; t < NT; ++t) r[t] = _mm256_setzero_si256();
      for (int g = g0; g < g0 + kRun; ++g) {
        const __m256i wv = legacy_codes_256(b, g, h);
        for (int t = 0; t < NT; ++t)
          r[t] = _mm256_add_epi16(r[t], _mm256_maddubs_epi16(wv, q8_bcst32_256(a[t]->qs + 4 * g)));
      }
      for (int t = 0; t < NT; ++t) s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(r[t], _mm256_set1_epi16(1)));
    }
    const __m256 dv = legacy_d_256(b, h);
    for (int t = 0; t < NT; ++t) {
      const __m256 da = _mm256_set1_ps(q8_half(a[t]->d));
      __m256& l = acc[t][i % 4];
      if constexpr (C::kMin) {
        l = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(dv, da), l);
        l = _mm256_fmadd_ps(_mm256_set1_ps(static_cast<float>(*sa[t])), _mm256_mul_ps(legacy_m_256(b, h), da), l);
      } else {
        const __m256 sf = _mm256_cvtepi32_ps(_mm256_sub_epi32(s[t], _mm256_set1_epi32(C::kOff * *sa[t])));
        l = _mm256_fmadd_ps(sf, _mm256_mul_ps(dv, da), l);
      }
    }
  }
};

// Q8TileOps::gemm of the legacy tiles: as q8_tile_gemm_256, four accumulators per token. Tile:
// QLegacyTile, or a Q4_0 / Q4_1 group (Q8Ops::rows16), whose blocks kLegacyPrefetchBlocks ahead
// (~10 KB, as the K-quants' kRows16PrefetchBlocks) the first pass prefetches into L2.
template <class C, class Tile = QLegacyTile>
inline void legacy_tile_gemm_256(const uint8_t* tile, int64_t n, const void* a, size_t astride, const int32_t* sums,
                                 int64_t n_tok, float* y, size_t ldy, int64_t nr) {
  constexpr int64_t kChunk = 32;
  const auto* T = reinterpret_cast<const Tile*>(tile);
  const auto* ab = static_cast<const uint8_t*>(a);
  const int64_t nb = n / 32;
  __m256 acc[kChunk][4];
  for (int64_t t0 = 0; t0 < n_tok; t0 += kChunk) {
    const int64_t nt = std::min(kChunk, n_tok - t0);
    auto act = [&](int64_t t) { return reinterpret_cast<const block_q8_0*>(ab + (t0 + t) * astride); };
    auto sum = [&](int64_t t) { return sums + (t0 + t) * nb; };
    for (int h = 0; h < 2 && 8 * h < nr; ++h) {
      for (int64_t t = 0; t < nt; ++t)
        for (auto& l : acc[t]) l = _mm256_setzero_ps();
      for (int64_t i = 0; i < nb; ++i) {
        if constexpr (LegacyGroup<Tile>)
          if (h == 0 && t0 == 0)
            for (size_t l = 0; l < sizeof(Tile); l += 64)
              _mm_prefetch(reinterpret_cast<const char*>(T + i + kLegacyPrefetchBlocks) + l, _MM_HINT_T1);
        int64_t t = 0;
        for (; t + 2 <= nt; t += 2) {
          const block_q8_0* const at[2] = {act(t) + i, act(t + 1) + i};
          const int32_t* const st[2] = {sum(t) + i, sum(t + 1) + i};
          LegacyTile256<C>::template block<2>(T[i], i, h, at, st, acc + t);
        }
        if (t < nt) {
          const block_q8_0* const at[1] = {act(t) + i};
          const int32_t* const st[1] = {sum(t) + i};
          LegacyTile256<C>::template block<1>(T[i], i, h, at, st, acc + t);
        }
      }
      const int64_t rows = std::min<int64_t>(8, nr - 8 * h);
      for (int64_t t = 0; t < nt; ++t)
        q8_store_rows_256(y + (t0 + t) * ldy + 8 * h,
                          _mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][2]), _mm256_add_ps(acc[t][1], acc[t][3])),
                          rows);
    }
  }
}

template <class C>
constexpr Q8TileOps legacy_tile_ops_256() {
  return {.bytes = legacy_tile_bytes,
          .pack = legacy_tile_pack_256<C>,
          .gemm = legacy_tile_gemm_256<C>,
          .act_sums = true};
}
