// backends/cpu/kernels_q8_rows16_avx2: Q8Ops::rows16 for levels without VNNI (AVX2, and AVX-512
// without VNNI): the interleaved groups (quant/rows16.h) of Q4_K, Q5_K, Q6_K, Q4_0 and Q4_1 read
// by the 256-bit tiles' loops of kernels_q8_tiles_avx2.h, whose code vectors (4 inputs of 8 rows)
// are the groups' words as they are. Included by kernels_q8_impl.h after that file; includes
// nothing itself.
//
// Why: a row dot pays per 32 weights a vpmaddubsw AND a vpmaddwd by the sub-block's scale, and
// on Zen 1/2 both issue on one pipe (two passes each at 256 bits): Q4_K decode ran ~7.4 GB/s of
// weights per core there (1 thread, qwen3-30b-a3b synth), under the 16 GB/s one core reads. A
// group's vpmaddubsw covers 8 rows, its pairs add in 16 bits over a whole sub-block and one
// vpmaddwd closes it: ~1.1 multiplies per 32 weights instead of 2, and no horizontal sums.
//
// Numerics: the exact int32 sums and the fused multiply-adds of the tiles' loops, so a group
// gives bitwise what its rows' tile gives (and the tiles' scalar twins), at every batch size.
// A few tokens (decode, small batches) run fused (K4Rows16Decode, Q6KRows16Decode,
// LegacyRows16Decode: each code vector unpacked in registers once for one or two tokens, the
// activation broadcasts shared by both halves of 8 rows); more go through q8_tile_gemm_256 /
// legacy_tile_gemm_256 (each super-block unpacked once per call into L1, then every token).

// NT tokens (1 or 2; activation rows astride apart) against a Q4_K / Q5_K group's nb
// super-blocks: y[t·ldy + 0..16). Each code vector is unpacked once for all NT tokens.
template <class Group>
struct K4Rows16Decode {
  static constexpr bool kHighBit = requires(const Group& g) { g.qh; };
  static constexpr int64_t kFusedTokens = 4;
  template <int NT>
  static void run(const Group* G, int64_t nb, const uint8_t* a, size_t astride, float* y, size_t ldy) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc[NT][2];
    for (auto& t : acc) t[0] = t[1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const Group& b = G[i];
      const block_q8_K* ai[NT];
      for (int t = 0; t < NT; ++t) ai[t] = reinterpret_cast<const block_q8_K*>(a + t * astride) + i;
      __m128i sc[8], mn[8];
      q8_k4_group_scales_mins(b.scales, sc, mn);
      __m256i sumi[NT][2];
      for (auto& t : sumi) t[0] = t[1] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int c = 0; c < 4; ++c) {  // chunk c: sub-blocks 2c (low nibbles) and 2c + 1 (high)
        group_prefetch(b, 2 * c);
        group_prefetch(b, 2 * c + 1);
        constexpr int kRun = kHighBit ? 4 : 8;  // as K4Tile256: 16-bit runs never pass 2^15 - 1
#pragma GCC unroll 8
        for (int g0 = 0; g0 < 8; g0 += kRun) {
          __m256i lo[NT][2], hi[NT][2];
          for (int t = 0; t < NT; ++t) lo[t][0] = lo[t][1] = hi[t][0] = hi[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int g = g0; g < g0 + kRun; ++g) {
            __m256i al[NT], ah[NT];
            for (int t = 0; t < NT; ++t) {
              al[t] = q8_bcst32_256(ai[t]->qs + 64 * c + 4 * g);
              ah[t] = q8_bcst32_256(ai[t]->qs + 64 * c + 32 + 4 * g);
            }
#pragma GCC unroll 8
            for (int h = 0; h < 2; ++h) {
              const __m256i raw = q8_load(b.qs[8 * c + g] + 8 * h);
              __m256i vl = _mm256_and_si256(raw, m4), vh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
              if constexpr (kHighBit) {
                const __m256i q = q8_load(b.qh[g] + 8 * h);
                vl = _mm256_or_si256(vl, q5_high_bit_256(q, 2 * c));
                vh = _mm256_or_si256(vh, q5_high_bit_256(q, 2 * c + 1));
              }
              for (int t = 0; t < NT; ++t) {
                lo[t][h] = _mm256_add_epi16(lo[t][h], _mm256_maddubs_epi16(vl, al[t]));
                hi[t][h] = _mm256_add_epi16(hi[t][h], _mm256_maddubs_epi16(vh, ah[t]));
                // Q4_K: each sum stays one chain in a register. Left to itself GCC computes a run's
                // products first and adds them as a tree, spilling them (94 ymm stores per super-block
                // at 1 token, 236 at 2). 1 thread, Zen 1, 2048 x 128 from L2, -O3, GMAC/s: 2 tokens
                // 21.4-22.0 -> 23.2-25.0, 4 20.0-21.7 -> 23.6-24.7, 1 unchanged. Q5_K and Q6_K (the
                // same pins on their sums) lost 5-10%: left as they are.
                if constexpr (!kHighBit) {
                  q8_pin_256(lo[t][h]);
                  q8_pin_256(hi[t][h]);
                }
              }
            }
          }
#pragma GCC unroll 8
          for (int h = 0; h < 2; ++h) {
            const __m256i s0 = q8_pair16_u8(sc[2 * c], h), s1 = q8_pair16_u8(sc[2 * c + 1], h);
            for (int t = 0; t < NT; ++t)
              sumi[t][h] = _mm256_add_epi32(sumi[t][h], _mm256_add_epi32(_mm256_madd_epi16(lo[t][h], s0),
                                                                         _mm256_madd_epi16(hi[t][h], s1)));
          }
        }
      }
      for (int t = 0; t < NT; ++t) {
        const __m256 ad = _mm256_set1_ps(ai[t]->d);
        // The activation's sub-block sums bsums[2j] + bsums[2j + 1] (|s| <= 32·127) as int16
        // pairs (j = 2k, 2k + 1) in word k: the mins of two sub-blocks per vpmaddwd.
        const __m128i bs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ai[t]->bsums)),
                      bs2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ai[t]->bsums + 8));
        const __m128i pairs = _mm_packs_epi32(_mm_madd_epi16(bs, _mm_set1_epi16(1)),
                                              _mm_madd_epi16(bs2, _mm_set1_epi16(1)));
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {  // q8_tile_close_mins_256's integer sum and fused multiply-adds
          __m256i mins = _mm256_setzero_si256();
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) {
            const __m128i m = h ? _mm_unpackhi_epi8(mn[2 * k], mn[2 * k + 1])
                                : _mm_unpacklo_epi8(mn[2 * k], mn[2 * k + 1]);
            mins = _mm256_add_epi32(mins, _mm256_madd_epi16(_mm256_cvtepu8_epi16(m),
                                                            _mm256_set1_epi32(_mm_extract_epi32(pairs, k))));
          }
          acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t][h]), _mm256_mul_ps(q8_half8_256(b.d + 8 * h), ad),
                                      acc[t][h]);
          acc[t][h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(q8_half8_256(b.dmin + 8 * h), ad),
                                       acc[t][h]);
        }
      }
    }
    for (int t = 0; t < NT; ++t) {
      _mm256_storeu_ps(y + t * ldy, acc[t][0]);
      _mm256_storeu_ps(y + t * ldy + 8, acc[t][1]);
    }
  }
};

// NT tokens (1 or 2; activation rows astride apart) against a Q6_K group: y[t·ldy + 0..16).
// Per 128-input half hh and step g, one word triple gives the four groups' code vectors
// (q6_group_codes_256); each unpacked once for all NT tokens, 8 rows (h) at a time.
struct Q6KRows16Decode {
  static constexpr int64_t kFusedTokens = 2;
  template <int NT>
  static void run(const block_q6_K_x16* G, int64_t nb, const uint8_t* act, size_t astride, float* y, size_t ldy) {
    __m256 acc[NT][2];
    for (auto& t : acc) t[0] = t[1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const block_q6_K_x16& b = G[i];
      const block_q8_K* ai[NT];
      for (int t = 0; t < NT; ++t) ai[t] = reinterpret_cast<const block_q8_K*>(act + t * astride) + i;
      __m128i sc[16];
#pragma GCC unroll 8
      for (int s = 0; s < 16; ++s) sc[s] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales[s]));
      __m256i sumi[NT][2];
      for (auto& t : sumi) t[0] = t[1] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int hh = 0; hh < 2; ++hh)
#pragma GCC unroll 8
        for (int g0 = 0; g0 < 8; g0 += 2) {  // runs of two steps (≤ 4·63·127 per lane)
          group_prefetch(b, 4 * hh + g0 / 2);
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            __m256i s[4][NT];
            for (auto& p : s)
              for (auto& t : p) t = _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int g = g0; g < g0 + 2; ++g) {
              __m256i v[4];
              q6_group_codes_256(b, hh, g, h, v);
#pragma GCC unroll 4
              for (int p = 0; p < 4; ++p)
                for (int t = 0; t < NT; ++t)
                  s[p][t] = _mm256_add_epi16(s[p][t], _mm256_maddubs_epi16(v[p], q8_bcst32_256(ai[t]->qs + 128 * hh +
                                                                                               32 * p + 4 * g)));
            }
#pragma GCC unroll 4
            for (int p = 0; p < 4; ++p) {  // sub-block 2(4hh + p) + g0/4
              const __m256i c = q8_pair16_i8(sc[8 * hh + 2 * p + g0 / 4], h);
              for (int t = 0; t < NT; ++t) sumi[t][h] = _mm256_add_epi32(sumi[t][h], _mm256_madd_epi16(s[p][t], c));
            }
          }
        }
      for (int t = 0; t < NT; ++t) {
        const __m256 ad = _mm256_set1_ps(ai[t]->d);
#pragma GCC unroll 8
        for (int h = 0; h < 2; ++h) {  // Q6KTile256::tokens' close
          __m256i offs = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k)
            offs = _mm256_add_epi32(offs,
                                    _mm256_madd_epi16(q6_group_sc2_256(b, k, h), q8_bcst32_256(ai[t]->bsums + 2 * k)));
          const __m256 sf = _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t][h], offs));
          acc[t][h] = _mm256_fmadd_ps(sf, _mm256_mul_ps(q8_half8_256(b.d + 8 * h), ad), acc[t][h]);
        }
      }
    }
    for (int t = 0; t < NT; ++t) {
      _mm256_storeu_ps(y + t * ldy, acc[t][0]);
      _mm256_storeu_ps(y + t * ldy + 8, acc[t][1]);
    }
  }
};

// NT tokens (1 or 2; activation rows astride apart, sa their blocks' Σa, nb per token) against
// a Q4_0 / Q4_1 group's nb blocks: y[t·ldy + 0..16). LegacyTile256::block's sums and fused
// multiply-adds (each block into accumulator i % 4 of its half, summed as the tile loop sums
// them); each code vector unpacked once for all NT tokens.
template <class C, class Group>
struct LegacyRows16Decode {
  static constexpr int64_t kFusedTokens = 4;
  template <int NT>
  static void run(const Group* G, int64_t nb, const uint8_t* act, size_t astride, const int32_t* sa, float* y,
                  size_t ldy) {
    const __m256i m4 = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1);
    __m256 acc[NT][2][4];
    for (auto& t : acc)
      for (auto& half : t)
        for (auto& l : half) l = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const Group& b = G[i];
      const block_q8_0* a[NT];
      for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const block_q8_0*>(act + t * astride) + i;
      __m256i r[NT][2];  // 8·2·15·127 < 2^15
      for (auto& t : r) t[0] = t[1] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int w = 0; w < 4; ++w) {  // word w: inputs 4w.. (low nibbles) and 16 + 4w.. (high)
        group_prefetch(b, 2 * w);
        group_prefetch(b, 2 * w + 1);
        __m256i al[NT], ah[NT];
        for (int t = 0; t < NT; ++t) {
          al[t] = q8_bcst32_256(a[t]->qs + 4 * w);
          ah[t] = q8_bcst32_256(a[t]->qs + 16 + 4 * w);
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m256i raw = q8_load(b.qs[w] + 8 * h);
          const __m256i vl = _mm256_and_si256(raw, m4), vh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
          for (int t = 0; t < NT; ++t) {
            r[t][h] = _mm256_add_epi16(r[t][h], _mm256_maddubs_epi16(vl, al[t]));
            r[t][h] = _mm256_add_epi16(r[t][h], _mm256_maddubs_epi16(vh, ah[t]));
          }
        }
      }
      for (int t = 0; t < NT; ++t) {
        const __m256 da = _mm256_set1_ps(q8_half(a[t]->d));
        const int32_t s = sa[t * nb + i];
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m256i si = _mm256_madd_epi16(r[t][h], ones);
          __m256& l = acc[t][h][i % 4];
          if constexpr (C::kMin) {
            l = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(legacy_d_256(b, h), da), l);
            l = _mm256_fmadd_ps(_mm256_set1_ps(static_cast<float>(s)), _mm256_mul_ps(legacy_m_256(b, h), da), l);
          } else {
            const __m256 sf = _mm256_cvtepi32_ps(_mm256_sub_epi32(si, _mm256_set1_epi32(C::kOff * s)));
            l = _mm256_fmadd_ps(sf, _mm256_mul_ps(legacy_d_256(b, h), da), l);
          }
        }
      }
    }
    for (int t = 0; t < NT; ++t)
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
        _mm256_storeu_ps(y + t * ldy + 8 * h, _mm256_add_ps(_mm256_add_ps(acc[t][h][0], acc[t][h][2]),
                                                            _mm256_add_ps(acc[t][h][1], acc[t][h][3])));
  }
};

// Up to Decode::kFusedTokens tokens the fused loops run in pairs (each code vector unpacked
// once per pair), past it the tile loop (each super-block unpacked once into L1 for all tokens).
// 1 thread, Zen 1, 2048 x 768 from L2, GMAC/s tile loop -> pairs: Q4_K 2 tokens 15.2 -> 20.8,
// 3 17.2 -> 21.2, 4 19.5 -> 22.4, 8 22.6 -> 22.5 (Q5_K at 8: 19.6 -> 16.1); Q4_1 2 tokens
// 14.8 -> 20.3, 4 17.4 -> 19.9, 8 19.5 -> 20.3; Q6_K 2 tokens 11.2 -> 13.7, 4 14.9 -> 13.9.

// Q8Ops::rows16 of the super-block types: per group of 16 rows, up to Decode::kFusedTokens tokens
// fused, more through the tile loop (Kind) reading the group as its tile.
template <class Group, class Kind, class Decode>
inline void rows16_gemm_256(const void* w16, int64_t nr, int64_t n, const void* a, size_t astride, const int32_t*,
                            int64_t n_tok, float* y, size_t ldy) {
  const int64_t nb = n / QK_K;
  const auto* ab = static_cast<const uint8_t*>(a);
  const bool fused = n_tok <= Decode::kFusedTokens;
  for (int64_t g = 0; g < nr / 16; ++g) {
    const Group* G = static_cast<const Group*>(w16) + g * nb;
    if (!fused) {
      q8_tile_gemm_256<Group, Kind>(reinterpret_cast<const uint8_t*>(G), n, a, astride, nullptr, n_tok, y + 16 * g, ldy,
                                    16);
      continue;
    }
    int64_t t = 0;
    for (; t + 2 <= n_tok; t += 2) Decode::template run<2>(G, nb, ab + t * astride, astride, y + t * ldy + 16 * g, ldy);
    if (t < n_tok) Decode::template run<1>(G, nb, ab + t * astride, astride, y + t * ldy + 16 * g, ldy);
  }
}

// Q8Ops::rows16 of Q4_0 / Q4_1: up to Decode::kFusedTokens tokens fused (LegacyRows16Decode), more
// through the legacy tile loop on the group (legacy_codes_256 unpacks its nibbles), with each
// activation block's Σa the caller's or made once per call.
template <class C, class Group>
inline void rows16_legacy_256(const void* w16, int64_t nr, int64_t n, const void* a, size_t astride,
                              const int32_t* given_sums, int64_t n_tok, float* y, size_t ldy) {
  using Decode = LegacyRows16Decode<C, Group>;
  const int64_t nb = n / 32;
  const auto* ab = static_cast<const uint8_t*>(a);
  const int32_t* sums = given_sums ? given_sums : rows16_act_sums(ab, astride, n_tok, nb);
  for (int64_t g = 0; g < nr / 16; ++g) {
    const Group* G = static_cast<const Group*>(w16) + g * nb;
    if (n_tok > Decode::kFusedTokens) {
      legacy_tile_gemm_256<C, Group>(reinterpret_cast<const uint8_t*>(G), n, a, astride, sums, n_tok, y + 16 * g, ldy,
                                     16);
      continue;
    }
    int64_t t = 0;
    for (; t + 2 <= n_tok; t += 2)
      Decode::template run<2>(G, nb, ab + t * astride, astride, sums + t * nb, y + t * ldy + 16 * g, ldy);
    if (t < n_tok) Decode::template run<1>(G, nb, ab + t * astride, astride, sums + t * nb, y + t * ldy + 16 * g, ldy);
  }
}
