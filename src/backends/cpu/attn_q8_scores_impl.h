// backends/cpu/attn_q8_scores_impl: AttnKernels::q8_0_scores (attn_kernels.h) with integer
// vectors, included by attn_kernels_avx2.cpp (256-bit, q8_0_scores_hadd) and
// attn_kernels_avx512.cpp (also the VNNI kernel, 512-bit) inside their namespaces (the
// includer provides <immintrin.h>, attn_kernels.h and quant/blocks.h).
//
// Why not Q8Ops::gemm itself: it dots one K head with up to 4 query rows at a time, reducing
// each (head, row) pair's four block sums horizontally, and at a decode's 8 query rows of one
// KV head and 4 blocks per head that horizontal work is most of the cost (32K positions,
// 12-layer qwen3-30b-a3b synth: no faster than the float scores it replaced). Here the 8
// query rows of a group are the 8 lanes of every vector, and the block's scale is applied to
// all 8 at once. Two ways to get row h's block sum into lane h:
//   - AVX2 (q8_0_scores_hadd): 8 int8 dots per position and block, then one hadd tree;
//   - VNNI (q8_0_scores_vnni): no horizontal sums at all. The query rows are transposed once
//     per call, so that one vector holds 4 bytes of each of the 8 rows; vpdpbusd of it with 4
//     bytes of K broadcast to every lane adds 4 products to each row's lane, and 8 of them
//     (one per 4-byte group of the block) leave the block sums. vpdpbusd multiplies unsigned
//     by signed bytes, so the query goes in with +128 and 128·Σk is taken off again, Σk per
//     position and block computed once per call. Two positions share each 512-bit vpdpbusd
//     (lanes 0..7 and 8..15, q8s_pairs_vnni).
//
// Arithmetic: per position and block b, the exact int32 sum S_b = Σ k·q, then, as
// kernels_q8_impl.h's Dot32 orders it (so the result is Q8Ops::gemm's, bit for bit),
// L_(b mod 4) = fma(float(S_b), d_k,b · d_q,b, L_(b mod 4)) from L = 0, and the score
// (L_0 + L_2) + (L_1 + L_3).

// |k| as u8 times q with k's sign, 4 bytes per int32 lane: exact (|k| <= 128, |q| <= 127, so
// maddubs's int16 pairs cannot saturate).
inline __m256i q8s_dot(__m256i ux, __m256i sq) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ux, sq), _mm256_set1_epi16(1));
}

// Lane h = Σ of v[h]'s 8 int32 lanes (exact).
inline __m256i q8s_sum8x8(const __m256i v[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

inline float q8s_half(uint16_t h) { return _cvtsh_ss(h); }

inline void q8_0_scores_hadd(const uint8_t* k, size_t ks, int64_t P, const block_q8_0* q, int64_t G, int64_t D,
                             float* s, size_t lds) {
  const int64_t nb = D / QK8_0;
  const int64_t hb = nb * static_cast<int64_t>(sizeof(block_q8_0));
  alignas(32) float dq[kQ8ScoresMaxBlocks * 8];
  for (int64_t g0 = 0; g0 < G; g0 += 8) {
    const int ng = static_cast<int>(G - g0 < 8 ? G - g0 : 8);
    const block_q8_0* qg = q + g0 * nb;
    for (int64_t b = 0; b < nb; ++b)
      for (int h = 0; h < 8; ++h) dq[b * 8 + h] = h < ng ? q8s_half(qg[h * nb + b].d) : 0.0f;
    for (int64_t j = 0; j < P; ++j) {
      const auto* kb = reinterpret_cast<const block_q8_0*>(k + j * ks);
      prefetch_head(k + (j + kPrefetchAhead) * ks, hb);
      __m256 L[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t b = 0; b < nb; ++b) {
        const __m256i kv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kb[b].qs));
        const __m256i ux = _mm256_sign_epi8(kv, kv);
        __m256i v[8];
        for (int h = 0; h < 8; ++h) {
          v[h] = h < ng
                     ? q8s_dot(ux,
                               _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qg[h * nb + b].qs)),
                                                kv))
                     : _mm256_setzero_si256();
        }
        const __m256 w = _mm256_mul_ps(_mm256_set1_ps(q8s_half(kb[b].d)), _mm256_load_ps(dq + b * 8));
        L[b % 4] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q8s_sum8x8(v)), w, L[b % 4]);
      }
      alignas(32) float r[8];
      _mm256_store_ps(r, _mm256_add_ps(_mm256_add_ps(L[0], L[2]), _mm256_add_ps(L[1], L[3])));
      for (int h = 0; h < ng; ++h) s[(g0 + h) * lds + j] = r[h];
    }
  }
}

// ---- VNNI: transposed query rows (AVX-512 VL + VNNI; instantiated in the avx512 file only) ----
#if defined(__AVX512F__)  // the AVX2 file includes this one for q8_0_scores_hadd only

// qt[(b·8 + c)·8 + h] = bytes 4c..4c+3 of row h's block b, each + 128 (as u8); rows h >= ng
// hold query 0 (0x80 bytes), so their lanes come out 0 after the correction. Per block an
// 8×8 transpose of dwords.
inline void q8s_transpose(const block_q8_0* qg, int ng, int64_t nb, uint32_t* qt) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    __m256i r[8], t[8];
    for (int h = 0; h < 8; ++h)
      r[h] = h < ng ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qg[h * nb + b].qs)) : _mm256_setzero_si256();
    for (int h = 0; h < 8; h += 2) {  // t[h] = [r_h c0, r_h+1 c0, r_h c1, r_h+1 c1 | c4, c5], t[h+1]: c2, c3 | c6, c7
      t[h] = _mm256_unpacklo_epi32(r[h], r[h + 1]);
      t[h + 1] = _mm256_unpackhi_epi32(r[h], r[h + 1]);
    }
    for (int h = 0; h < 8; h += 4)
      for (int u = 0; u < 2; ++u) {  // r[h + 2u]: c(2u) of rows h..h+3 | c(2u+4); r[h + 2u + 1]: c(2u+1) | c(2u+5)
        r[h + 2 * u] = _mm256_unpacklo_epi64(t[h + u], t[h + 2 + u]);
        r[h + 2 * u + 1] = _mm256_unpackhi_epi64(t[h + u], t[h + 2 + u]);
      }
    __m256i* out = reinterpret_cast<__m256i*>(qt + b * 64);
    for (int c = 0; c < 4; ++c) {  // rows 0..3 from r[c], rows 4..7 from r[4 + c]
      _mm256_store_si256(out + c, _mm256_xor_si256(_mm256_permute2x128_si256(r[c], r[4 + c], 0x20), bias));
      _mm256_store_si256(out + c + 4, _mm256_xor_si256(_mm256_permute2x128_si256(r[c], r[4 + c], 0x31), bias));
    }
  }
}

// ncorr[j·nb + b] = -128·Σ of position j's block b (exact: what the +128 of the query adds,
// taken off again) and dk[j·nb + b] its scale as float.
// The pass that first reads each K head: it has next to no arithmetic to hide a miss behind,
// so the score loop of the previous pass asks for these heads (see there); this prefetch
// only covers a call's first pass.
inline void q8s_k_sums(const uint8_t* k, size_t ks, int64_t P, int64_t nb, int32_t* ncorr, float* dk) {
  const __m256i ones = _mm256_set1_epi8(1);
  const int64_t hb = nb * static_cast<int64_t>(sizeof(block_q8_0));
  __m256i v[8];
  int n = 0;
  int64_t out = 0;
  for (int64_t j = 0; j < P; ++j) {
    const auto* kb = reinterpret_cast<const block_q8_0*>(k + j * ks);
    prefetch_head(k + (j + kPrefetchAhead) * ks, hb);
    for (int64_t b = 0; b < nb; ++b) {
      dk[j * nb + b] = q8s_half(kb[b].d);
      v[n++] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones,
                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kb[b].qs)));
      if (n == 8 || (j == P - 1 && b == nb - 1)) {
        for (int i = n; i < 8; ++i) v[i] = _mm256_setzero_si256();
        const __m256i nc = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(q8s_sum8x8(v), 7));
        if (n == 8) {  // a vector store: the copy loop below became a libc memcpy call per 8 blocks
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(ncorr + out), nc);
          out += 8;
        } else {
          alignas(32) int32_t t[8];
          _mm256_store_si256(reinterpret_cast<__m256i*>(t), nc);
          for (int i = 0; i < n; ++i) ncorr[out++] = t[i];
        }
        n = 0;
      }
    }
  }
}

// Positions per pass of q8_0_scores_vnni: the K sums of a pass sit in a stack buffer (no std::
// containers in an ISA file: attn_kernels_impl.h says why).
constexpr int64_t kQ8ScoresChunk = 64;

// 4 bytes broadcast straight from memory (vpbroadcastd m32): through a general register
// (memcpy to an int) it cost a slow register-to-vector move per vpdpbusd.
using q8s_u32 = uint32_t __attribute__((may_alias, aligned(1)));

// s[h·lds] = lane h of r for h < ng.
template <int NG>
inline void q8s_store(__m256 r, float* s, size_t lds, int ng) {
  alignas(32) float t[8];
  _mm256_store_ps(t, r);
  const int n = NG > 0 ? NG : ng;
  for (int h = 0; h < n; ++h) s[h * lds] = t[h];
}

// The 32-bit value at p broadcast to lanes 0..7 and at q to lanes 8..15.
inline __m512i q8s_bcast4_pair(const void* p, const void* q) {
  return _mm512_mask_set1_epi32(_mm512_set1_epi32(static_cast<int>(*static_cast<const q8s_u32*>(p))), 0xFF00,
                                static_cast<int>(*static_cast<const q8s_u32*>(q)));
}
inline __m512 q8s_bcastf_pair(const float* p, const float* q) {
  return _mm512_mask_broadcastss_ps(_mm512_set1_ps(*p), 0xFF00, _mm_load_ss(q));
}

// NP pairs of positions, a pair per 512-bit vector: lanes 0..7 the group's 8 rows against
// the pair's first position, lanes 8..15 against its second (VNNI's 512-bit vpdpbusd does
// twice the 256-bit one's work at about the same rate here: AMD EPYC Zen 4, 1.55 vs 1.83 per
// ns). kb[2i], kb[2i + 1]: pair i's blocks; cj / dj: per position its -128·Σk and K scales
// (nb apart), c0[2i], c0[2i + 1] the offsets of pair i's in them. Each transposed query
// vector is read once (broadcast to both halves) for the NP pairs. The lanes' arithmetic is
// the 256-bit kernel's, term for term.
template <int NP>
inline void q8s_pairs_vnni(const block_q8_0* const kb[2 * NP], const uint32_t* qt, const float* dq, const int32_t* cj,
                           const float* dj, const int64_t c0[2 * NP], int64_t nb, __m512 out[NP]) {
  __m512 L[NP][4];
  for (int r = 0; r < NP; ++r)
    for (int u = 0; u < 4; ++u) L[r][u] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i acc[NP][2];
    for (int r = 0; r < NP; ++r) {
      acc[r][0] = q8s_bcast4_pair(cj + c0[2 * r] + b, cj + c0[2 * r + 1] + b);
      acc[r][1] = _mm512_setzero_si512();
    }
    const uint32_t* qb = qt + b * 64;
    for (int c = 0; c < 8; ++c) {
      const __m512i qv = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(qb + 8 * c)));
      for (int r = 0; r < NP; ++r)
        acc[r][c & 1] = _mm512_dpbusd_epi32(acc[r][c & 1], qv,
                                            q8s_bcast4_pair(kb[2 * r][b].qs + 4 * c, kb[2 * r + 1][b].qs + 4 * c));
    }
    const __m512 dqb = _mm512_broadcast_f32x8(_mm256_load_ps(dq + b * 8));
    for (int r = 0; r < NP; ++r) {
      const __m512 w = _mm512_mul_ps(q8s_bcastf_pair(dj + c0[2 * r] + b, dj + c0[2 * r + 1] + b), dqb);
      L[r][b % 4] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc[r][0], acc[r][1])), w, L[r][b % 4]);
    }
  }
  for (int r = 0; r < NP; ++r) out[r] = _mm512_add_ps(_mm512_add_ps(L[r][0], L[r][2]), _mm512_add_ps(L[r][1], L[r][3]));
}

// Pairs of positions per step of q8_0_scores_vnni (q8s_pairs_vnni's NP).
constexpr int kQ8ScoresPairs = 2;

inline void q8_0_scores_vnni(const uint8_t* k, size_t ks, int64_t P, const block_q8_0* q, int64_t G, int64_t D,
                             float* s, size_t lds) {
  const int64_t nb = D / QK8_0;
  const int64_t hb = nb * static_cast<int64_t>(sizeof(block_q8_0));
  alignas(32) float dq[kQ8ScoresMaxBlocks * 8];
  alignas(32) uint32_t qt[kQ8ScoresMaxBlocks * 64];
  int32_t ncorr[kQ8ScoresChunk * kQ8ScoresMaxBlocks];
  float dk[kQ8ScoresChunk * kQ8ScoresMaxBlocks];
  for (int64_t j0 = 0; j0 < P; j0 += kQ8ScoresChunk) {
    const int64_t np = P - j0 < kQ8ScoresChunk ? P - j0 : kQ8ScoresChunk;
    q8s_k_sums(k + j0 * ks, ks, np, nb, ncorr, dk);
    for (int64_t g0 = 0; g0 < G; g0 += 8) {
      const int ng = static_cast<int>(G - g0 < 8 ? G - g0 : 8);
      const block_q8_0* qg = q + g0 * nb;
      for (int64_t b = 0; b < nb; ++b)
        for (int h = 0; h < 8; ++h) dq[b * 8 + h] = h < ng ? q8s_half(qg[h * nb + b].d) : 0.0f;
      q8s_transpose(qg, ng, nb, qt);
      // Positions j .. j + 2·NP - 1 (the last pair's second position repeats its first when
      // n is odd: read, then not stored).
      auto run = [&]<int NP>(int64_t j, int64_t n) {
        const block_q8_0* kb[2 * NP];
        int64_t c0[2 * NP];
        for (int r = 0; r < 2 * NP; ++r) {
          const int64_t jr = j + (r < n ? r : n - 1);
          kb[r] = reinterpret_cast<const block_q8_0*>(k + (j0 + jr) * ks);
          c0[r] = jr * nb;
          // The next pass's heads (or the next call's: attention asks for the next block of
          // positions of the same KV head next), one per position, behind this loop's work:
          // with the K sums' pass alone reading them cold, the misses were ~40% of the time.
          if (g0 == 0 && r < n) prefetch_head(k + (j0 + jr + kQ8ScoresChunk) * ks, hb);
        }
        __m512 out[NP];
        q8s_pairs_vnni<NP>(kb, qt, dq, ncorr, dk, c0, nb, out);
        for (int r = 0; r < 2 * NP && r < n; ++r) {
          const __m256 o = r % 2 ? _mm512_extractf32x8_ps(out[r / 2], 1) : _mm512_castps512_ps256(out[r / 2]);
          if (ng == 8)
            q8s_store<8>(o, s + g0 * lds + j0 + j + r, lds, 8);
          else
            q8s_store<0>(o, s + g0 * lds + j0 + j + r, lds, ng);
        }
      };
      int64_t j = 0;
      for (; j + 2 * kQ8ScoresPairs <= np; j += 2 * kQ8ScoresPairs)
        run.template operator()<kQ8ScoresPairs>(j, 2 * kQ8ScoresPairs);
      for (; j < np; j += 2) run.template operator()<1>(j, np - j < 2 ? np - j : 2);
    }
  }
}
#endif  // __AVX512F__
