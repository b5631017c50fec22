// backends/cpu/attn_v_i16_impl: attn_kernels.h's V sums on integers (q8_0_axpy_i16 /
// q4_0_axpy_i16) with AVX-512 VNNI, included by attn_kernels_avx512.cpp inside its namespace
// (the includer provides <immintrin.h>, <cstring>, attn_kernels.h and quant/blocks.h).
//
// Why: at 32K positions a 4-bit V's float sum cost what an f16 V's does (a decode to float,
// then one FMA per element, query head and position), so the smaller cache bought little
// time. Here vpdpwssd adds 2 positions' products to each of 16 elements at once, on the codes
// as stored: the two positions' code bytes interleaved (vpunpcklbw/hbw) and widened to int16
// (vpmovzxbw / vpmovsxbw) leave each int32 lane one element's pair of codes, in element order;
// a q4_0 byte holds element i (low nibble) and i + 16 (high), so one widened vector gives
// both halves of the block (mask, and shift + mask). The query row's two int16 weights are
// broadcast to every lane.

// Row h's int16 weights of one block for the chunk's np positions (wq, zeros past np), their
// sum and the step mx/32767; false when the block adds nothing (attn_kernels.h).
inline bool vi16_weights(const float* a, const float* dv, int64_t np, int16_t* wq, int32_t& z, float& sc) {
  __m512 w[4];
  __m512 mx = _mm512_setzero_ps();
  for (int c = 0; c < 4; ++c) {
    const int64_t left = np - 16 * c;
    const __mmask16 m = left >= 16 ? 0xFFFF : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
    w[c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + 16 * c), _mm512_load_ps(dv + 16 * c));
    mx = _mm512_max_ps(mx, _mm512_abs_ps(w[c]));
  }
  const float m = _mm512_reduce_max_ps(mx);
  if (!(m >= kAxpyI16MinScale)) return false;
  const __m512 inv = _mm512_set1_ps(32767.0f / m);
  __m512i zs = _mm512_setzero_si512();
  for (int c = 0; c < 4; ++c) {
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(w[c], inv));  // nearest even: nearbyint
    zs = _mm512_add_epi32(zs, q);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(wq + 16 * c), _mm512_cvtsepi32_epi16(q));
  }
  z = _mm512_reduce_add_epi32(zs);
  sc = m / 32767.0f;
  return true;
}

// 16 code bytes of positions j (p) and j + 1 (p + vs, or zeros when !two), interleaved and
// widened: int16 lane 2i = p[i], 2i + 1 = the next position's (signed for q8_0).
template <bool kSigned>
inline __m512i vi16_pair(const uint8_t* p, size_t vs, bool two) {
  const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i x1 = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + vs)) : _mm_setzero_si128();
  const __m256i il = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(x0, x1)),
                                             _mm_unpackhi_epi8(x0, x1), 1);
  return kSigned ? _mm512_cvtepi8_epi16(il) : _mm512_cvtepu8_epi16(il);
}

using vi16_u32 = uint32_t __attribute__((may_alias, aligned(1)));

// NG query rows (a: row h at a + h·lda) over one chunk of np <= kAxpyI16Chunk positions.
template <bool kQ4, int NG>
void vi16_rows(const float* a, size_t lda, const uint8_t* v, size_t vs, int64_t np, int64_t nb, int64_t D,
               const float* dv, float* y) {
  constexpr size_t kBlock = kQ4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
  constexpr int32_t kOff = kQ4 ? 8 : 0;
  const __m512i lo4 = _mm512_set1_epi16(0x0F);
  alignas(64) int16_t wq[NG][kAxpyI16Chunk];
  int32_t z[NG];
  float sc[NG];
  bool on[NG];
  for (int64_t b = 0; b < nb; ++b) {
    bool any = false;
    for (int h = 0; h < NG; ++h) {
      on[h] = vi16_weights(a + h * lda, dv + b * kAxpyI16Chunk, np, wq[h], z[h], sc[h]);
      any |= on[h];
    }
    if (!any) continue;
    __m512i acc[NG][2];
    for (int h = 0; h < NG; ++h) acc[h][0] = acc[h][1] = _mm512_setzero_si512();
    const uint8_t* qs = v + b * kBlock + 2;
    for (int64_t j = 0; j < np; j += 2) {
      const bool two = j + 1 < np;
      __m512i c0, c1;
      if constexpr (kQ4) {
        const __m512i x = vi16_pair<false>(qs + j * vs, vs, two);
        c0 = _mm512_and_si512(x, lo4);
        c1 = _mm512_srli_epi16(x, 4);  // bytes widened to int16: the high nibble alone
      } else {
        c0 = vi16_pair<true>(qs + j * vs, vs, two);
        c1 = vi16_pair<true>(qs + j * vs + 16, vs, two);
      }
      for (int h = 0; h < NG; ++h) {
        const __m512i w = _mm512_set1_epi32(static_cast<int>(*reinterpret_cast<const vi16_u32*>(wq[h] + j)));
        acc[h][0] = _mm512_dpwssd_epi32(acc[h][0], c0, w);
        acc[h][1] = _mm512_dpwssd_epi32(acc[h][1], c1, w);
      }
    }
    for (int h = 0; h < NG; ++h) {
      if (!on[h]) continue;
      const __m512i oz = _mm512_set1_epi32(kOff * z[h]);
      const __m512 s = _mm512_set1_ps(sc[h]);
      for (int u = 0; u < 2; ++u) {
        float* yp = y + h * D + b * 32 + 16 * u;
        const __m512 r = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[h][u], oz));
        _mm512_storeu_ps(yp, _mm512_fmadd_ps(r, s, _mm512_loadu_ps(yp)));
      }
    }
  }
}

template <bool kQ4>
void vi16_axpy(const float* a, size_t lda, const uint8_t* v, size_t vs, int64_t P, int64_t G, int64_t D, float* y) {
  constexpr size_t kBlock = kQ4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
  // No prefetch here: attention.cpp's block_scores asks for each block's V heads before its
  // scores, and a second stream for the next chunk cost ~7% of a 32K-position layer.
  const int64_t nb = D / 32;
  alignas(64) float dv[kQ8ScoresMaxBlocks * kAxpyI16Chunk];  // [b][j]: the blocks' scales, zeros past np
  for (int64_t j0 = 0; j0 < P; j0 += kAxpyI16Chunk) {
    const int64_t np = P - j0 < kAxpyI16Chunk ? P - j0 : kAxpyI16Chunk;
    const uint8_t* vc = v + j0 * vs;
    // The scales as halves first (position-major, as the rows lie), then 16 at a time to float
    // rather than one conversion each (8 rows of 128, hot, 1 thread, AMD EPYC Zen 4: 17.5 ->
    // 17.0 ns per position, interleaved minima).
    alignas(64) uint16_t dh[kQ8ScoresMaxBlocks * kAxpyI16Chunk];
    for (int64_t j = 0; j < np; ++j)
      for (int64_t b = 0; b < nb; ++b) std::memcpy(dh + b * kAxpyI16Chunk + j, vc + j * vs + b * kBlock, 2);
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t j = np; j < kAxpyI16Chunk; ++j) dh[b * kAxpyI16Chunk + j] = 0;
    for (int64_t i = 0; i < nb * kAxpyI16Chunk; i += 16)
      _mm512_store_ps(dv + i, _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh + i))));
    int64_t g = 0;
    for (; g + 8 <= G; g += 8) vi16_rows<kQ4, 8>(a + g * lda + j0, lda, vc, vs, np, nb, D, dv, y + g * D);
    const float* ar = a + g * lda + j0;
    float* yr = y + g * D;
    switch (G - g) {
      case 7: vi16_rows<kQ4, 7>(ar, lda, vc, vs, np, nb, D, dv, yr); break;
      case 6: vi16_rows<kQ4, 6>(ar, lda, vc, vs, np, nb, D, dv, yr); break;
      case 5: vi16_rows<kQ4, 5>(ar, lda, vc, vs, np, nb, D, dv, yr); break;
      case 4: vi16_rows<kQ4, 4>(ar, lda, vc, vs, np, nb, D, dv, yr); break;
      case 3: vi16_rows<kQ4, 3>(ar, lda, vc, vs, np, nb, D, dv, yr); break;
      case 2: vi16_rows<kQ4, 2>(ar, lda, vc, vs, np, nb, D, dv, yr); break;
      case 1: vi16_rows<kQ4, 1>(ar, lda, vc, vs, np, nb, D, dv, yr); break;
      default: break;
    }
  }
}
