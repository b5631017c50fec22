// backends/cpu/attn_q8_scores_impl: AttnKernels::q8_0_scores (attn_kernels.h) with integer
// vectors, included by attn_kernels_avx2.cpp (256-bit, q8_0_scores_hadd) and
// attn_kernels_avx512.cpp (also the VNNI kernel, 512-bit) inside their namespaces (the
// includer provides <immintrin.h>, attn_kernels.h and quant/blocks.h).
//
// Why not Q8Ops::gemm itself: it dots one K head with up to 4 query rows at a time, reducing
// each (head, row) pair's four block sums horizontally, and at a decode's 8 query rows of one
// KV head and 4 blocks per head that horizontal work is most of the cost (32K positions,
// 12-layer qwen3-30b-a3b synth: no faster than the float scores it replaced). Here the 8
// query rows of a group share every vector (a lane, or a pair of lanes, each), and the block's
// scale is applied to all 8 at once. Two ways to get row h's block sum into its lane:
//   - AVX2 (q8_0_scores_hadd): 8 int8 dots per position and block, then one hadd tree;
//   - VNNI (q8_0_scores_vnni): no horizontal sums across the block. The query rows are laid
//     out once per call so that one vector holds 8 bytes of each of the 8 rows (lanes 2h,
//     2h + 1: row h's bytes 8c..8c+3 and 8c+4..8c+7); vpdpbusd of it with 8 bytes of K
//     broadcast to every lane (vpbroadcastq from memory) adds 4 products to each lane, 4 of
//     them cover the block, and one shift and add per block joins each row's two lanes.
//     vpdpbusd multiplies unsigned by signed bytes, so K goes in with +128 (an xor) and
//     128·Σq is taken off again, Σq per row and block a constant of the call. Two positions
//     share the float work (even lanes one position, odd lanes the other, q8s_pair_vnni).
//     Against the previous VNNI kernel (4 bytes of K per vpdpbusd, two positions per vector
//     by masked broadcasts, K's sums in a pass of their own): 45.5 -> 26 ns per position of
//     8 rows of 128 (hot, 1 thread, AMD EPYC Zen 4), bit for bit the same scores.
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

// ---- VNNI: 8 bytes of K against 8 query rows per vpdpbusd (AVX-512 VL + VNNI; avx512 file only) ----
#if defined(__AVX512F__)  // the AVX2 file includes this one for q8_0_scores_hadd only

// The query rows of one call, laid out for q8s_pair_vnni (per block b, G rows as 8 lanes
// pairs): qv[(b·4 + c)·16 + 2h + e] = bytes 8c + 4e .. 8c + 4e + 3 of row h's block b;
// corr[b·16 + 2h] = -128·Σ of row h's block b (what K's +128 adds, taken off again), 0 in the
// odd lanes; dq[b·16 + 2h + e] = row h's block scale. Rows h >= ng are zeros.
struct Q8sQuery {
  alignas(64) int32_t qv[kQ8ScoresMaxBlocks * 4 * 16];
  alignas(64) int32_t corr[kQ8ScoresMaxBlocks * 16];
  alignas(64) float dq[kQ8ScoresMaxBlocks * 16];
};

inline void q8s_prepare(const block_q8_0* qg, int ng, int64_t nb, Q8sQuery& w) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    int32_t* qv = w.qv + b * 64;
    for (int h = 0; h < 8; ++h) {
      int32_t sum = 0;
      float d = 0.0f;
      if (h < ng) {
        const block_q8_0& x = qg[h * nb + b];
        // Σq = Σ(q + 128) − 32·128, the biased bytes' sum by vpsadbw.
        const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs)),
                                                             bias),
                                            _mm256_setzero_si256());
        const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
        sum = static_cast<int32_t>(_mm_cvtsi128_si64(_mm_add_epi64(s2, _mm_unpackhi_epi64(s2, s2)))) - 32 * 128;
        d = q8s_half(x.d);
        for (int c = 0; c < 4; ++c) std::memcpy(qv + c * 16 + 2 * h, x.qs + 8 * c, 8);
      } else {
        for (int c = 0; c < 4; ++c) qv[c * 16 + 2 * h] = qv[c * 16 + 2 * h + 1] = 0;
      }
      w.corr[b * 16 + 2 * h] = -128 * sum;
      w.corr[b * 16 + 2 * h + 1] = 0;
      w.dq[b * 16 + 2 * h] = w.dq[b * 16 + 2 * h + 1] = d;
    }
  }
}

// 8 bytes broadcast straight from memory (vpbroadcastq m64).
using q8s_u64 = uint64_t __attribute__((may_alias, aligned(1)));

// Positions a and b (their heads' blocks) against the query rows: lane 2h of the result is row
// h's score against a, lane 2h + 1 against b. Per block and 8 bytes of a position's K (as
// unsigned, +128 by xor), broadcast to every lane, one vpdpbusd adds row h's 4 products of the
// first 4 bytes to lane 2h and of the last 4 to lane 2h + 1; the two lanes are added after the
// block's 4 steps. The lanes' arithmetic is the 256-bit kernel's, term for term.
inline __m512 q8s_pair_vnni(const block_q8_0* a, const block_q8_0* b, const Q8sQuery& w, int64_t nb) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 L[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  // Blocks 4 at a time, so that L's index is a constant and L stays in registers.
  for (int64_t i0 = 0; i0 < nb; i0 += 4) {
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      const int64_t i = i0 + u;
      if (i >= nb) break;
      const __m512i c0 = _mm512_load_si512(w.corr + i * 16);
      // Two accumulators per position: the 4 steps are 2 short dependency chains.
      __m512i sa[2] = {c0, _mm512_setzero_si512()}, sb[2] = {c0, _mm512_setzero_si512()};
      for (int c = 0; c < 4; ++c) {
        const __m512i q = _mm512_load_si512(w.qv + (i * 4 + c) * 16);
        const auto ka = static_cast<long long>(*reinterpret_cast<const q8s_u64*>(a[i].qs + 8 * c));
        const auto kb = static_cast<long long>(*reinterpret_cast<const q8s_u64*>(b[i].qs + 8 * c));
        sa[c & 1] = _mm512_dpbusd_epi32(sa[c & 1], _mm512_xor_si512(_mm512_set1_epi64(ka), bias), q);
        sb[c & 1] = _mm512_dpbusd_epi32(sb[c & 1], _mm512_xor_si512(_mm512_set1_epi64(kb), bias), q);
      }
      __m512i ta = _mm512_add_epi32(sa[0], sa[1]), tb = _mm512_add_epi32(sb[0], sb[1]);
      ta = _mm512_add_epi32(ta, _mm512_srli_epi64(ta, 32));  // a's sums in the even lanes
      tb = _mm512_add_epi32(tb, _mm512_slli_epi64(tb, 32));  // b's in the odd lanes
      const __m512 dk = _mm512_mask_blend_ps(0xAAAA, _mm512_set1_ps(q8s_half(a[i].d)),
                                             _mm512_set1_ps(q8s_half(b[i].d)));
      const __m512 wt = _mm512_mul_ps(dk, _mm512_load_ps(w.dq + i * 16));
      L[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mask_blend_epi32(0xAAAA, ta, tb)), wt, L[u]);
    }
  }
  return _mm512_add_ps(_mm512_add_ps(L[0], L[2]), _mm512_add_ps(L[1], L[3]));
}

inline void q8_0_scores_vnni(const uint8_t* k, size_t ks, int64_t P, const block_q8_0* q, int64_t G, int64_t D,
                             float* s, size_t lds) {
  const int64_t nb = D / QK8_0;
  const int64_t hb = nb * static_cast<int64_t>(sizeof(block_q8_0));
  Q8sQuery w;
  for (int64_t g0 = 0; g0 < G; g0 += 8) {
    const int ng = static_cast<int>(G - g0 < 8 ? G - g0 : 8);
    q8s_prepare(q + g0 * nb, ng, nb, w);
    float* sg = s + g0 * lds;
    for (int64_t j = 0; j < P; j += 2) {
      const bool two = j + 1 < P;
      if (g0 == 0) {
        prefetch_head(k + (j + kPrefetchAhead) * ks, hb);
        prefetch_head(k + (j + 1 + kPrefetchAhead) * ks, hb);
      }
      const auto* a = reinterpret_cast<const block_q8_0*>(k + j * ks);
      const auto* b = two ? reinterpret_cast<const block_q8_0*>(k + (j + 1) * ks) : a;
      alignas(64) float r[16];
      _mm512_store_ps(r, q8s_pair_vnni(a, b, w, nb));
      for (int h = 0; h < ng; ++h) {
        sg[h * lds + j] = r[2 * h];
        if (two) sg[h * lds + j + 1] = r[2 * h + 1];
      }
    }
  }
}
#endif  // __AVX512F__
