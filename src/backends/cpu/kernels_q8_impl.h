// backends/cpu/kernels_q8_impl: int8 dot products of quantized weight rows with activations
// quantized once per token (Q8_K for the 256-blocks, Q8_0 for the 32-blocks), the scheme of
// ggml's ggml_vec_dot_<w>_<act>. Included inside its own namespace by kernels_generic.cpp
// (scalar), kernels_avx2.cpp and kernels_avx512.cpp (256-bit integer SIMD), which define
//   SLUICE_Q8_SIMD  0: scalar code, the twin of the SIMD code; 1: AVX2 intrinsics
//   SLUICE_Q8_VNNI  1: u8·s8 sums by AVX512-VNNI dpbusd instead of maddubs + madd (needs VL)
//   SLUICE_Q8_AVX512 1: 512-bit loops where written (Q4_K), needs AVX-512 BW
//   q8_half(h)      one fp16 -> float
// and include quant/blocks.h first. It includes only its own parts (the prefill tiles:
// kernels_q8_ktiles_impl.h, kernels_q8_tiles32_impl.h; the 256-bit loops without VNNI:
// kernels_q8_tiles_avx2.h, kernels_q8_rows16_avx2.h), nothing from outside.
//
// Legend: nb = blocks per row, x = weight blocks, a = activation blocks, sumi = exact int32
// sum of one super-block (or block), d = a.d·x.d its float scale.
//
// Exactness: every integer sum is exact at every level (maddubs products ≤ 63·127·2 < 2^15;
// a Q6_K super-block sum ≤ 256·63·127·127 < 2^31). The 32-block types add their float terms
// d·s in one documented order on every path (four lanes: see their section), the prefill tiles
// included, so every level and path give the same bits whatever batch a token came in. The
// super-block types' row dots add them in 8 or 16 lanes and their tiles in one chain per row
// (an order the row dots would pay ~15% more instructions for, where decode is compute-bound):
// those agree to float rounding, relative ~1e-7 per row.

#if SLUICE_Q8_SIMD
// Σ over each group of 4 bytes of u[i]·s[i] (u unsigned ≤ 127 here, s signed): 8 int32.
inline __m256i q8_dot_us(__m256i u, __m256i s) {
#if SLUICE_Q8_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
// Signed·signed via |x|·sign(y, x) (x, y in [-127, 127]).
inline __m256i q8_dot_ss(__m256i x, __m256i y) { return q8_dot_us(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)); }
inline float q8_hsum(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
inline __m256i q8_load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
#endif

// The eight 6-bit scales and mins of a q4_K/q5_K block (quant/blocks.h's get_scale_min_k4
// for j = 0..7) with four 32-bit word operations, as ggml's x86 dots: bytes 0-3 hold sc[0..3]
// and bytes 4-7 m[0..3] in their low 6 bits; bytes 8-11 hold the low nibbles of sc[4..7]
// and the high nibbles of m[4..7], whose top 2 bits are the top bits of bytes 0-3 / 4-7.
inline void q8_scales_mins_k4(const uint8_t* q, uint8_t* sc, uint8_t* m) {
  constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  uint32_t u[3];
  __builtin_memcpy(u, q, 12);
  const uint32_t s_lo = u[0] & kmask1, m_lo = u[1] & kmask1;
  const uint32_t s_hi = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
  __builtin_memcpy(sc, &s_lo, 4);
  __builtin_memcpy(sc + 4, &s_hi, 4);
  __builtin_memcpy(m, &m_lo, 4);
  __builtin_memcpy(m + 4, &m_hi, 4);
}

#if SLUICE_Q8_SIMD
// The same scales and mins as 16-bit lanes [sc0..sc7 | m0..m7] of one vector, by byte
// shuffles instead of word operations: bytes 0-3 and 4-7 are sc[0..3] / m[0..3] (low 6 bits),
// bytes 8-11 give sc[4..7] (low nibbles) / m[4..7] (high nibbles) their low 4 bits, the top 2
// bits of bytes 0-3 / 4-7 their high 2. Reads 16 bytes at q: the 12 scale bytes are followed
// by the block's codes.
inline __m256i q8_scales_mins_k4_16(const uint8_t* q) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  // [b0-3 | b8-11 | b4-7 | b8-11] and the bytes whose top 2 bits go to positions 4-7 / 12-15.
  const __m128i a = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i top = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  const __m128i low = _mm_and_si128(a, _mm_setr_epi8(0x3f, 0x3f, 0x3f, 0x3f, 0x0f, 0x0f, 0x0f, 0x0f, 0x3f, 0x3f, 0x3f,
                                                     0x3f, 0, 0, 0, 0));
  const __m128i high_nib = _mm_and_si128(_mm_srli_epi16(a, 4),
                                         _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0f, 0x0f, 0x0f, 0x0f));
  const __m128i top2 = _mm_and_si128(_mm_srli_epi16(top, 2), _mm_set1_epi8(0x30));
  return _mm256_cvtepu8_epi16(_mm_or_si128(_mm_or_si128(low, high_nib), top2));
}
#endif

// Every dot of this file takes NT activation rows (act + t·astride) and writes out[t·ostride]:
// the weights are loaded and unpacked once for NT tokens (prefill reuse), while each
// token's accumulators see exactly the operations of the NT = 1 instance, so a token's
// result does not depend on the batch it came in.
// ---- the codes of the legacy 32-blocks ------------------------------------------------
#if SLUICE_Q8_SIMD
// Byte j = 0xFF where bit j of `bits` is set, else 0 (32 bytes from 32 bits).
inline __m256i q8_bits_to_bytes(uint32_t bits) {
  // Each 128-bit lane of the broadcast holds all four bytes; byte j takes byte j/8 of them.
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
  const __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(bits)), pick);
  return _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
}
// Element j < 16 is the low nibble of qs[j], j >= 16 the high nibble of qs[j - 16].
inline __m256i q8_nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0xF));
}
#endif

inline uint32_t q8_qh32(const uint8_t* qh) {
  uint32_t v;
  __builtin_memcpy(&v, qh, 4);
  return v;
}

// The unsigned codes c of ggml's legacy 32-blocks (Q4_0, Q4_1: 4 bits; Q5_0, Q5_1: 5), shared by
// the row dots and the prefill tiles: element j < 16 is the low nibble of qs[j], j >= 16 the
// high nibble of qs[j - 16]; the 5-bit types add bit j of qh as bit 4. The value is
// d·(c − kOff) (Q4_0 8, Q5_0 16) or d·c + m (kMin: Q4_1, Q5_1). code(b, j) is the scalar twin
// of codes(b) (all 32 as bytes).
template <class B, int Off, bool Five>
struct LegacyCodes {
  using Block = B;
  static constexpr int kOff = Off;
  static constexpr bool kMin = Off == 0;
  static constexpr bool kWide = false;  // codes ≤ 31
  static constexpr bool kFive = Five;
  static constexpr bool kNibbles = true;  // the codes are qs's nibbles (and qh's fifth bits)
  static int code(const Block& b, int j) {
    int c = j < 16 ? b.qs[j] & 0xF : b.qs[j - 16] >> 4;
    if constexpr (Five) c |= static_cast<int>((q8_qh32(b.qh) >> j) & 1) << 4;
    return c;
  }
#if SLUICE_Q8_SIMD
  static __m256i codes(const Block& b) {
    const __m256i c = q8_nibbles32(b.qs);
    if constexpr (Five)
      return _mm256_or_si256(c, _mm256_and_si256(q8_bits_to_bytes(q8_qh32(b.qh)), _mm256_set1_epi8(0x10)));
    else
      return c;
  }
#endif
};
// Sluice's Q8_A (MLX's 6- and 8-bit affine groups): x = d·c + m with the 8-bit codes c as
// stored. kWide: a code may exceed 127, so maddubs (u8·s8 pairs into saturating int16) cannot
// take it as it is; Dot32 then multiplies c − 128 by the sign trick and adds 128·Σa.
struct AffineQ8Codes {
  using Block = block_q8_a;
  static constexpr int kOff = 0;
  static constexpr bool kMin = true;
  static constexpr bool kWide = true;
  static constexpr bool kFive = false;
  static constexpr bool kNibbles = false;
  static int code(const Block& b, int j) { return b.qs[j]; }
#if SLUICE_Q8_SIMD
  static __m256i codes(const Block& b) { return q8_load(b.qs); }
#endif
};
using LegacyQ4_0 = LegacyCodes<block_q4_0, 8, false>;
using LegacyQ4_1 = LegacyCodes<block_q4_1, 0, false>;
using LegacyQ5_0 = LegacyCodes<block_q5_0, 16, true>;
using LegacyQ5_1 = LegacyCodes<block_q5_1, 0, true>;

// ---- the 32-block types (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1) · Q8_0 -----------------------------
// Q8_0, Q4_0 and Q5_0 are x = d·v with v signed (Q8_0's quant, or the code minus 8 / 16), so
// per block s = Σ v·a; Q4_1 and Q5_1 are x = d·c + m with c unsigned, so per block s = Σ c·a
// and Σa. All exact int32 sums. One float order for every path that multiplies these weights
// (the row dots at every level, the prefill tiles and their scalar twins), so that a token's
// result never depends on which path its batch took:
//   lane j = i mod 4:  L_j = fma(s_i, d_i·d_a,i, L_j)      [min types, then L_j = fma(Σa_i, m_i·d_a,i, L_j)]
//   result = (L_0 + L_2) + (L_1 + L_3).
// Four lanes because the row dots then add four blocks with one 128-bit fma (one scalar fma
// chain per block would be latency-bound at decode), while a 16-row tile keeps four
// accumulators per token in registers.
struct Q8Unpack_q8_0 {
  using Block = block_q8_0;
  static constexpr bool kMin = false;
  static constexpr bool kNibbles = false;
  static constexpr bool kNarrow = false;  // |value| <= 127: maddubs pairs up to 32258
#if SLUICE_Q8_SIMD
  static __m256i bytes(const Block& b) { return q8_load(b.qs); }
#endif
  static int value(const Block& b, int j) { return b.qs[j]; }
};
// Q4_0 and Q5_0: their codes minus the offset.
template <class C>
struct Q8Unpack_offset {
  using Block = typename C::Block;
  static constexpr bool kMin = false;
  static constexpr bool kNarrow = true;  // |c - off| <= 16
  static constexpr bool kNibbles = C::kNibbles;
  static constexpr bool kFive = C::kFive;
  static constexpr int kOff = C::kOff;
#if SLUICE_Q8_SIMD
  static __m256i bytes(const Block& b) { return _mm256_sub_epi8(C::codes(b), _mm256_set1_epi8(C::kOff)); }
#endif
  static int value(const Block& b, int j) { return C::code(b, j) - C::kOff; }
};
// Q4_1 and Q5_1: their unsigned codes.
template <class C>
struct Q8Unpack_min {
  using Block = typename C::Block;
  static constexpr bool kMin = true;
  static constexpr bool kWide = C::kWide;
  static constexpr bool kNarrow = !C::kWide;  // c <= 31
  static constexpr bool kNibbles = C::kNibbles;
  static constexpr bool kFive = C::kFive;
  static constexpr int kOff = 0;
#if SLUICE_Q8_SIMD
  static __m256i bytes(const Block& b) { return C::codes(b); }
#endif
  static int value(const Block& b, int j) { return C::code(b, j); }
};
using Q8Unpack_q4_0 = Q8Unpack_offset<LegacyQ4_0>;
using Q8Unpack_q5_0 = Q8Unpack_offset<LegacyQ5_0>;
using Q8Unpack_q4_1 = Q8Unpack_min<LegacyQ4_1>;
using Q8Unpack_q5_1 = Q8Unpack_min<LegacyQ5_1>;
using Q8Unpack_q8_a = Q8Unpack_min<AffineQ8Codes>;

#if SLUICE_Q8_SIMD
// kIq4nlValues in both 128-bit lanes: one byte shuffle by 4-bit codes gives their levels.
inline __m256i q8_iq4_levels() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
}
#endif
// IQ4_NL: x = d·kIq4nlValues[q], the 4-bit q in Q4_0's layout. As codes (the prefill tiles), the
// level + 128 (unsigned, like Q8_0's quants in its tile): kOff 128, kWide (above 127: no maddubs
// tiles). The row dots take the levels themselves, signed (|v| <= 127), like Q8_0's quants.
struct Iq4NlCodes {
  using Block = block_iq4_nl;
  static constexpr int kOff = 128;
  static constexpr bool kMin = false;
  static constexpr bool kWide = true;
  static constexpr bool kFive = false;
  static int code(const Block& b, int j) { return kIq4nlValues[j < 16 ? b.qs[j] & 0xF : b.qs[j - 16] >> 4] + 128; }
#if SLUICE_Q8_SIMD
  static __m256i levels(const Block& b) { return _mm256_shuffle_epi8(q8_iq4_levels(), q8_nibbles32(b.qs)); }
  static __m256i codes(const Block& b) {
    return _mm256_xor_si256(levels(b), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
#endif
};
struct Q8Unpack_iq4_nl {
  using Block = block_iq4_nl;
  static constexpr bool kMin = false;
  static constexpr bool kNibbles = false;
  static constexpr bool kNarrow = false;
#if SLUICE_Q8_SIMD
  static __m256i bytes(const Block& b) { return Iq4NlCodes::levels(b); }
#endif
  static int value(const Block& b, int j) { return Iq4NlCodes::code(b, j) - 128; }
};

// One token's Q8_0 activations with what every weight row needs of them, computed once per
// token and call: d_a per block as float and, for the min types, Σa per block as float (exact),
// both zero-padded to a multiple of 4 blocks (the row dots read four at a time).
struct Q8Act32 {
  const block_q8_0* q;
  const float* d;
  const float* sa;
  const uint8_t* split = nullptr;  // q8_act32_split's layout, where the row dot reads it
};
inline int64_t q8_pad4(int64_t nb) { return (nb + 3) & ~int64_t{3}; }
#if SLUICE_Q8_SIMD
inline __m128i q8_sum4x16(const __m256i p[4]);
template <class Block, bool kMin>
inline void q8_dm4(const Block* x, __m128& dx, __m128& mx);
#endif
// Per call of a row unit (16 rows at decode), so four blocks at a time where the level has
// vectors: the scalar loop cost a fifth of a 576-input Q4_1 row unit.
inline void q8_act32(const block_q8_0* a, int64_t nb, bool sums, float* d, float* sa) {
  int64_t i0 = 0;
#if SLUICE_Q8_SIMD
  for (; i0 + 4 <= nb; i0 += 4) {
    __m128 dv, unused;
    q8_dm4<block_q8_0, false>(a + i0, dv, unused);
    _mm_storeu_ps(d + i0, dv);
    if (!sums) continue;
    __m256i p[4];  // Σ of 32 quants: byte pairs by maddubs with 1 (|pair| ≤ 254), then q8_sum4x16
    for (int k = 0; k < 4; ++k) p[k] = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q8_load(a[i0 + k].qs));
    _mm_storeu_ps(sa + i0, _mm_cvtepi32_ps(q8_sum4x16(p)));
  }
#endif
  for (int64_t i = i0; i < q8_pad4(nb); ++i) {
    d[i] = i < nb ? q8_half(a[i].d) : 0.0f;
    if (sums) sa[i] = i < nb ? static_cast<float>(q8_0_quant_sum(a[i])) : 0.0f;
  }
}

#if SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
// The quants of blocks 4g..4g+3 as the 512-bit row dot of the 4-bit codes reads them (Dot32::
// group_split): 128 bytes per group g, first elements 0..15 of each block (the low nibbles'
// partners), then 16..31 (the high nibbles'); zero past nb.
inline void q8_act32_split(const block_q8_0* a, int64_t nb, uint8_t* split) {
  for (int64_t i = 0; i < q8_pad4(nb); ++i) {
    const __m256i v = i < nb ? q8_load(a[i].qs) : _mm256_setzero_si256();
    uint8_t* g = split + (i / 4) * 128 + (i % 4) * 16;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(g), _mm256_castsi256_si128(v));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(g + 64), _mm256_extracti128_si256(v, 1));
  }
}
#endif

#if SLUICE_Q8_SIMD
// [Σ v0, Σ v1, Σ v2, Σ v3] of four vectors of 8 int32 (exact).
inline __m128i q8_sum4x8(const __m256i v[4]) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
// The same four sums from four blocks' maddubs pairs p (16 int16 each) where every |pair| <= 7874
// (codes of at most 5 bits, |c| <= 31, times |a| <= 127): two rounds of 16-bit pair sums stay
// below 2^15 (4·7874), so one madd finishes them: three instructions fewer than a madd per block.
inline __m128i q8_sum4x16(const __m256i p[4]) {
  const __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]), _mm256_hadd_epi16(p[2], p[3]));
  const __m256i s = _mm256_madd_epi16(h, _mm256_set1_epi16(1));
  return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}
// The fp16 fields at byte offset `off` of blocks x[0..nk) as floats (0 past nk).
template <class Block>
inline __m128 q8_half4(const Block* x, int nk, size_t off) {
  uint64_t h = 0;
  for (int k = 0; k < nk; ++k) {
    uint16_t v;
    __builtin_memcpy(&v, reinterpret_cast<const uint8_t*>(x + k) + off, 2);
    h |= static_cast<uint64_t>(v) << (16 * k);
  }
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(h)));
}
// d (and m) of four whole blocks from one 32-bit load each (every block here starts with d,
// then m where it has one): the word's two halves converted together and split by shuffles,
// instead of q8_half4's 16-bit gathers (a third of a decode row dot's instructions).
template <class Block, bool kMin>
inline void q8_dm4(const Block* x, __m128& dx, __m128& mx) {
  static_assert(offsetof(Block, d) == 0 && sizeof(Block) >= 4);
  uint32_t w[4];
  for (int k = 0; k < 4; ++k) __builtin_memcpy(&w[k], x + k, 4);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  if constexpr (kMin) {
    static_assert(offsetof(Block, m) == 2);
    const __m256 f = _mm256_cvtph_ps(v);  // d0 m0 d1 m1 | d2 m2 d3 m3
    const __m128 lo = _mm256_castps256_ps128(f), hi = _mm256_extractf128_ps(f, 1);
    dx = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
    mx = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
  } else {
    dx = _mm_cvtph_ps(_mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1)));
  }
}
// (L_0 + L_2) + (L_1 + L_3).
inline float q8_sum_lanes4(__m128 l) {
  const __m128 t = _mm_add_ps(l, _mm_movehl_ps(l, l));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
#endif

// The legacy codes (Q4_0, Q4_1, Q5_0, Q5_1) at AVX-512 VNNI: four blocks a pass (Dot32::group_split),
// against activations q8_gemm32 lays out once per call (q8_act32_split).
template <class V>
constexpr bool kQ8Split = V::kNibbles&& SLUICE_Q8_AVX512&& SLUICE_Q8_VNNI;

template <class V, int NT>
struct Dot32 {
  using Block = typename V::Block;
#if SLUICE_Q8_SIMD
  // Codes above 127 without dpbusd: the signed route (see AffineQ8Codes).
  static constexpr bool kWideSigned = [] {
    if constexpr (V::kMin)
      return V::kWide && !SLUICE_Q8_VNNI;
    else
      return false;
  }();
  // Without dpbusd, 4- and 5-bit codes sum their maddubs pairs in 16 bits (q8_sum4x16); the
  // integer sums, and so the results, are the same.
  static constexpr bool kPairs16 = V::kNarrow && !SLUICE_Q8_VNNI;
  static constexpr bool kSplit = kQ8Split<V>;
#if SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
  // Blocks i..i+3 with 512-bit vectors: their 64 code bytes in one register (low nibbles:
  // elements 0..15 of each block, high: 16..31; the 5-bit types' fifth bits or-ed in by
  // byte masks from qh), two vpdpbusd against the activations in
  // q8_act32_split's matching order, each block's 16 int32 partial sums (one 128-bit lane)
  // added within the lane: the same exact s_i as group<4>, in fewer instructions than its
  // per-block unpacks and sums (1 thread, Zen 4, 2048x4096 Q4_1 matrices cycled through
  // 200 MB: 11.5-14.0 -> 16.1-17.0 GB/s). An offset type's s_i = Σ c·a − kOff·Σa: both exact
  // integers below 2^24, so the float difference is exact too.
  static void group_split(const Block* x, const Q8Act32* a, int64_t i, __m128 acc[NT]) {
    auto qs = [&](int k) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i + k].qs)); };
    __m512i w = _mm512_castsi128_si512(qs(0));
    w = _mm512_inserti32x4(w, qs(1), 1);
    w = _mm512_inserti32x4(w, qs(2), 2);
    w = _mm512_inserti32x4(w, qs(3), 3);
    const __m512i m4 = _mm512_set1_epi8(0xF);
    __m512i lo = _mm512_and_si512(w, m4), hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
    if constexpr (V::kFive) {  // bit j of qh is bit 4 of element j: masks in the split order
      uint64_t mlo = 0, mhi = 0;
      for (int k = 0; k < 4; ++k) {
        const uint64_t qh = q8_qh32(x[i + k].qh);
        mlo |= (qh & 0xFFFF) << (16 * k);
        mhi |= (qh >> 16) << (16 * k);
      }
      const __m512i b4 = _mm512_set1_epi8(0x10);
      lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(mlo, b4));
      hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(mhi, b4));
    }
    __m128 dx, mx = _mm_setzero_ps();
    q8_dm4<Block, V::kMin>(x + i, dx, mx);
    const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int t = 0; t < NT; ++t) {
      const uint8_t* g = a[t].split + i * 32;  // 128 bytes per 4 blocks
      __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(g));
      s = _mm512_dpbusd_epi32(s, hi, _mm512_loadu_si512(g + 64));
      s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, static_cast<_MM_PERM_ENUM>(0x4E)));
      s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, static_cast<_MM_PERM_ENUM>(0xB1)));
      __m128 sf = _mm_cvtepi32_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(first, s)));
      if constexpr (!V::kMin)
        sf = _mm_fnmadd_ps(_mm_set1_ps(static_cast<float>(V::kOff)), _mm_loadu_ps(a[t].sa + i), sf);
      const __m128 da = _mm_loadu_ps(a[t].d + i);
      __m128 r = _mm_fmadd_ps(sf, _mm_mul_ps(dx, da), acc[t]);
      if constexpr (V::kMin) r = _mm_fmadd_ps(_mm_loadu_ps(a[t].sa + i), _mm_mul_ps(mx, da), r);
      acc[t] = r;
    }
  }
#endif
  // Blocks i..i+NK of the row into lanes 0..NK (NK < 4: the row's last group; the other
  // lanes keep their sums).
  template <int NK>
  static void group(const Block* x, const Q8Act32* a, int64_t i, __m128 acc[NT]) {
#if SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
    if constexpr (kSplit && NK == 4) return group_split(x, a, i, acc);
#endif
    __m256i xv[4], ux[4];
    for (int k = 0; k < 4; ++k) {
      xv[k] = k < NK ? V::bytes(x[i + k]) : _mm256_setzero_si256();
      if constexpr (kWideSigned) xv[k] = _mm256_xor_si256(xv[k], _mm256_set1_epi8(static_cast<char>(0x80)));  // c − 128
      ux[k] = _mm256_sign_epi8(xv[k], xv[k]);  // |v| ≤ 128: 128·127·2 fits maddubs' int16
    }
    __m128 dx, mx = _mm_setzero_ps();
    if constexpr (NK == 4) {
      q8_dm4<Block, V::kMin>(x + i, dx, mx);
    } else {
      dx = q8_half4(x + i, NK, offsetof(Block, d));
      if constexpr (V::kMin) mx = q8_half4(x + i, NK, offsetof(Block, m));
    }
    for (int t = 0; t < NT; ++t) {
      __m256i v[4];
      for (int k = 0; k < 4; ++k) {
        if (k >= NK) {
          v[k] = _mm256_setzero_si256();
          continue;
        }
        const __m256i aq = q8_load(a[t].q[i + k].qs);
        if constexpr (kPairs16)  // maddubs pairs only; q8_sum4x16 sums them
          v[k] = V::kMin ? _mm256_maddubs_epi16(xv[k], aq) : _mm256_maddubs_epi16(ux[k], _mm256_sign_epi8(aq, xv[k]));
        else if constexpr (kWideSigned)
          v[k] = q8_dot_us(ux[k], _mm256_sign_epi8(aq, xv[k]));
        else
          v[k] = V::kMin ? q8_dot_us(xv[k], aq) : q8_dot_us(ux[k], _mm256_sign_epi8(aq, xv[k]));
      }
      const __m128 da = _mm_loadu_ps(a[t].d + i);
      __m128i si = kPairs16 ? q8_sum4x16(v) : q8_sum4x8(v);
      // Σ c·a = Σ (c − 128)·a + 128·Σa (Σa exact in its float; the padding lanes hold 0).
      if constexpr (kWideSigned) si = _mm_add_epi32(si, _mm_slli_epi32(_mm_cvtps_epi32(_mm_loadu_ps(a[t].sa + i)), 7));
      __m128 r = _mm_fmadd_ps(_mm_cvtepi32_ps(si), _mm_mul_ps(dx, da), acc[t]);
      if constexpr (V::kMin) r = _mm_fmadd_ps(_mm_loadu_ps(a[t].sa + i), _mm_mul_ps(mx, da), r);
      if constexpr (NK == 4)
        acc[t] = r;
      else
        acc[t] = _mm_blend_ps(r, acc[t], 0xF & (0xF << NK));
    }
  }
#endif
  static void run(const void* w, const Q8Act32* a, int64_t nb, float* out, size_t ostride) {
    const auto* x = static_cast<const Block*>(w);
#if SLUICE_Q8_SIMD
    __m128 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) group<4>(x, a, i, acc);
    switch (nb - i) {
      case 3: group<3>(x, a, i, acc); break;
      case 2: group<2>(x, a, i, acc); break;
      case 1: group<1>(x, a, i, acc); break;
      default: break;
    }
    for (int t = 0; t < NT; ++t) out[t * ostride] = q8_sum_lanes4(acc[t]);
#else
    for (int t = 0; t < NT; ++t) {
      float L[4] = {0, 0, 0, 0};
      for (int64_t i = 0; i < nb; ++i) {
        int32_t s = 0;
        for (int j = 0; j < 32; ++j) s += V::value(x[i], j) * a[t].q[i].qs[j];
        const float da = a[t].d[i];
        float& l = L[i % 4];
        l = std::fma(static_cast<float>(s), q8_half(x[i].d) * da, l);
        if constexpr (V::kMin) l = std::fma(a[t].sa[i], q8_half(x[i].m) * da, l);
      }
      out[t * ostride] = (L[0] + L[2]) + (L[1] + L[3]);
    }
#endif
  }
};

// Q8Ops::gemm of the 32-block types: tokens in passes of up to 4, each pass's activation
// scales (and sums) computed once, then every row against them.
template <class V>
void q8_gemm32(const void* w, size_t row_bytes, int64_t n_rows, const void* act, size_t a_row_bytes, int64_t n_tok,
               int64_t n, float* y, size_t ldy) {
  constexpr int kNT = 4;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32, nbp = q8_pad4(nb);
  constexpr bool kSplit = kQ8Split<V>;
  thread_local std::vector<float> buf;
  if (buf.size() < static_cast<size_t>(2 * kNT * nbp)) buf.resize(static_cast<size_t>(2 * kNT * nbp));
  thread_local std::vector<uint8_t> split_buf;
  if (kSplit && split_buf.size() < static_cast<size_t>(32 * kNT * nbp + 64))
    split_buf.resize(static_cast<size_t>(32 * kNT * nbp + 64));
  // 64-byte aligned: group_split reads it in whole 512-bit vectors.
  [[maybe_unused]] uint8_t* split = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(split_buf.data()) + 63) &
                                                               ~uintptr_t{63});
  for (int64_t t = 0; t < n_tok; t += kNT) {
    const int nt = static_cast<int>(std::min<int64_t>(kNT, n_tok - t));
    Q8Act32 a[kNT];
    for (int k = 0; k < nt; ++k) {
      float* d = buf.data() + 2 * k * nbp;
      a[k] = {reinterpret_cast<const block_q8_0*>(ab + (t + k) * a_row_bytes), d, d + nbp};
      q8_act32(a[k].q, nb, V::kMin || kSplit, d, d + nbp);  // group_split takes Σa for any type
#if SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
      if constexpr (kSplit) {
        a[k].split = split + 32 * k * nbp;
        q8_act32_split(a[k].q, nb, split + 32 * k * nbp);
      }
#endif
    }
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* wr = wb + r * row_bytes;
      prefetch_lines(wr + row_bytes, row_bytes);
      float* yr = y + t * ldy + r;
      switch (nt) {
        case 4: Dot32<V, 4>::run(wr, a, nb, yr, ldy); break;
        case 3: Dot32<V, 3>::run(wr, a, nb, yr, ldy); break;
        case 2: Dot32<V, 2>::run(wr, a, nb, yr, ldy); break;
        default: Dot32<V, 1>::run(wr, a, nb, yr, ldy); break;
      }
    }
  }
}

#if SLUICE_Q8_SIMD
// The super-block types' float step: each token's exact super-block sum into its 8 float lanes,
// acc += (d_a·d)·sumi.
template <int NT>
inline void q8_acc_superblock(__m256 acc[NT], const __m256i sumi[NT], const block_q8_K* const a[NT], float xd) {
  for (int t = 0; t < NT; ++t)
    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t]->d * xd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
}
#endif

// ---- Q4_K / Q5_K · Q8_K: x = (d·sc)·q - dmin·m per sub-block of 32, so
// dot = d·Σ_j sc_j·Σ q·a - dmin·Σ_j m_j·(bsums[2j] + bsums[2j+1]). Chunk c of 64 elements
// is the low nibbles (sub-block 2c) then the high nibbles (2c+1) of qs[32c..32c+32]; Q5_K's
// fifth bit of element 64c + l is bit 2c of qh[l], of 64c + 32 + l bit 2c+1.
template <bool kHighBit, class Block, int NT>
inline void q8_dot_k4(const void* w, const uint8_t* act, size_t astride, int64_t nb, float* out, size_t ostride) {
  const auto* x = static_cast<const Block*>(w);
  float summ[NT], sum[NT];
  for (int t = 0; t < NT; ++t) summ[t] = sum[t] = 0;
#if SLUICE_Q8_SIMD
  // Decode is bound by this loop's instruction count on 256-bit cores (AMD Zen 3: ~40 cycles a
  // super-block before): the scales and mins go straight into 16-bit lanes (no bytes stored
  // and reloaded), each sub-block scale is one byte shuffle of them (not a scalar broadcast),
  // and the mins term stays in four float lanes (no horizontal sum per super-block).
  const __m256i m4 = _mm256_set1_epi8(0xF), m1 = _mm256_set1_epi8(1);
  // Shuffle k: int16 lane k of a 128-bit lane to all eight (bytes 2k, 2k+1).
  __m256i pick[8];
  for (int k = 0; k < 8; ++k) pick[k] = _mm256_set1_epi16(static_cast<int16_t>((2 * k + 1) << 8 | 2 * k));
  __m256 acc[NT];
  __m128 accm[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps(), accm[t] = _mm_setzero_ps();
#endif
  for (int64_t i = 0; i < nb; ++i) {
#if SLUICE_Q8_SIMD
    const __m256i scm = q8_scales_mins_k4_16(x[i].scales);  // [sc0..sc7 | m0..m7]
    const __m256i sc = _mm256_permute2x128_si256(scm, scm, 0x00);
    const __m128i m16 = _mm256_extracti128_si256(scm, 1);
#else
    uint8_t sc[8], m[8];
    q8_scales_mins_k4(x[i].scales, sc, m);
#endif
    const float xd = q8_half(x[i].d), xdmin = q8_half(x[i].dmin);
    const block_q8_K* a[NT];
    for (int t = 0; t < NT; ++t) {
      a[t] = reinterpret_cast<const block_q8_K*>(act + t * astride) + i;
#if SLUICE_Q8_SIMD
      // m_j·(bsums[2j] + bsums[2j+1]) in four int32 lanes (exact), scaled into float lanes.
      const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[t]->bsums));
      const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[t]->bsums + 8));
      const __m128i pm = _mm_madd_epi16(_mm_hadd_epi16(b0, b1), m16);
      accm[t] = _mm_fmadd_ps(_mm_set1_ps(a[t]->d * xdmin), _mm_cvtepi32_ps(pm), accm[t]);
#else
      int32_t mins = 0;
      for (int j = 0; j < 8; ++j) mins += m[j] * (a[t]->bsums[2 * j] + a[t]->bsums[2 * j + 1]);
      summ[t] += a[t]->d * xdmin * static_cast<float>(mins);
#endif
    }
#if SLUICE_Q8_SIMD
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
    __m256i hb = _mm256_setzero_si256();
    if constexpr (kHighBit) hb = q8_load(x[i].qh);
    for (int c = 0; c < 4; ++c) {
      const __m256i q = q8_load(x[i].qs + 32 * c);
      __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (kHighBit) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), m1), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), m1), 4));
      }
      const __m256i s0 = _mm256_shuffle_epi8(sc, pick[2 * c]), s1 = _mm256_shuffle_epi8(sc, pick[2 * c + 1]);
      for (int t = 0; t < NT; ++t) {
        const __m256i p0 = _mm256_maddubs_epi16(lo, q8_load(a[t]->qs + 64 * c));
        const __m256i p1 = _mm256_maddubs_epi16(hi, q8_load(a[t]->qs + 64 * c + 32));
        // madd by the sub-block scale: pair sums and the scale in one instruction.
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(_mm256_madd_epi16(p0, s0), _mm256_madd_epi16(p1, s1)));
      }
    }
    q8_acc_superblock<NT>(acc, sumi, a, xd);
#else
    for (int t = 0; t < NT; ++t) {
      int32_t sumi = 0;
      for (int j = 0; j < 8; ++j) {
        const uint8_t* q = x[i].qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        int32_t s = 0;
        for (int l = 0; l < 32; ++l) {
          int v = (q[l] >> shift) & 0xF;
          if constexpr (kHighBit) v |= ((x[i].qh[l] >> j) & 1) << 4;
          s += v * a[t]->qs[32 * j + l];
        }
        sumi += sc[j] * s;
      }
      sum[t] += a[t]->d * xd * static_cast<float>(sumi);
    }
#endif
  }
#if SLUICE_Q8_SIMD
  for (int t = 0; t < NT; ++t) {
    sum[t] = q8_hsum(acc[t]);
    const __m128 h = _mm_add_ps(accm[t], _mm_movehl_ps(accm[t], accm[t]));
    summ[t] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
  }
#endif
  for (int t = 0; t < NT; ++t) out[t * ostride] = sum[t] - summ[t];
}

#if SLUICE_Q8_AVX512
// Q4_K with 512-bit vectors (AVX-512 BW): half the instructions of the 256-bit loop. A
// 64-byte load of qs holds chunks c and c+1; the low and high nibbles are regrouped by
// 128-bit lane shuffles into [low(c) | high(c)], which is sub-blocks 2c, 2c+1 in the order of
// the 64 contiguous activation bytes. The scale vector of a chunk (sc[2c] in the low 16
// int16 lanes, sc[2c+1] in the high 16) comes from one vpermw.
template <int NT>
inline void q8_dot_q4_K_512(const void* w, const uint8_t* act, size_t astride, int64_t nb, float* out, size_t ostride) {
  const auto* x = static_cast<const block_q4_K*>(w);
  const __m512i m4 = _mm512_set1_epi8(0xF);
  __m512i idx[4];
  for (int c = 0; c < 4; ++c)
    idx[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<int16_t>(2 * c))),
                                _mm256_set1_epi16(static_cast<int16_t>(2 * c + 1)), 1);
  __m512 acc[NT];
  __m128 accm[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm512_setzero_ps();
    accm[t] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    // The scales and mins straight into 16-bit lanes, the mins term kept in four float lanes
    // per token (no horizontal sum per super-block), as the 256-bit loop does.
    const __m256i scm = q8_scales_mins_k4_16(x[i].scales);  // [sc0..sc7 | m0..m7]
    const float xd = q8_half(x[i].d), xdmin = q8_half(x[i].dmin);
    const __m512i sc16 = _mm512_castsi256_si512(scm);  // vpermw below reads lanes 0..7 only
    const __m128i m16 = _mm256_extracti128_si256(scm, 1);
    const block_q8_K* a[NT];
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) {
      a[t] = reinterpret_cast<const block_q8_K*>(act + t * astride) + i;
      const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[t]->bsums));
      const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[t]->bsums + 8));
      const __m128i pm = _mm_madd_epi16(_mm_hadd_epi16(b0, b1), m16);
      accm[t] = _mm_fmadd_ps(_mm_set1_ps(a[t]->d * xdmin), _mm_cvtepi32_ps(pm), accm[t]);
      sumi[t] = _mm512_setzero_si512();
    }
    for (int h = 0; h < 2; ++h) {
      const __m512i q = _mm512_loadu_si512(x[i].qs + 64 * h);
      const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
      const __m512i wv[2] = {_mm512_shuffle_i64x2(lo, hi, 0x44), _mm512_shuffle_i64x2(lo, hi, 0xEE)};
      for (int k = 0; k < 2; ++k) {
        const int c = 2 * h + k;
        const __m512i scv = _mm512_permutexvar_epi16(idx[c], sc16);
        for (int t = 0; t < NT; ++t) {
          const __m512i p = _mm512_maddubs_epi16(wv[k], _mm512_loadu_si512(a[t]->qs + 64 * c));
#if SLUICE_Q8_VNNI
          sumi[t] = _mm512_dpwssd_epi32(sumi[t], p, scv);
#else
          sumi[t] = _mm512_add_epi32(sumi[t], _mm512_madd_epi16(p, scv));
#endif
        }
      }
    }
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(a[t]->d * xd), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) {
    const __m128 h = _mm_add_ps(accm[t], _mm_movehl_ps(accm[t], accm[t]));
    out[t * ostride] = _mm512_reduce_add_ps(acc[t]) - _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
  }
}
#endif

template <int NT>
inline void q8_dot_q4_K(const void* w, const uint8_t* a, size_t as, int64_t nb, float* out, size_t os) {
#if SLUICE_Q8_AVX512
  q8_dot_q4_K_512<NT>(w, a, as, nb, out, os);
#else
  q8_dot_k4<false, block_q4_K, NT>(w, a, as, nb, out, os);
#endif
}
template <int NT>
inline void q8_dot_q5_K(const void* w, const uint8_t* a, size_t as, int64_t nb, float* out, size_t os) {
  q8_dot_k4<true, block_q5_K, NT>(w, a, as, nb, out, os);
}

// ---- Q6_K · Q8_K: per 128-element half h, element 32p + l has low nibble from ql (l or
// l + 32, low nibble for p < 2) and two high bits (qh[l] >> 2p) & 3; value q - 32 with
// q in [0, 63]; 16 int8 scales per 16 elements. dot = d·(Σ_s sc_s·Σ q·a - 32·Σ_s sc_s·bsums_s).
template <int NT>
inline void q8_dot_q6_K(const void* w, const uint8_t* act, size_t astride, int64_t nb, float* out, size_t ostride) {
  const auto* x = static_cast<const block_q6_K*>(w);
#if SLUICE_Q8_SIMD
  const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
  // Shuffle p: int16 lane 2p of a 128-bit lane to the low lane's eight, 2p + 1 to the high's (the
  // scales of sub-blocks 2p and 2p + 1 of a half, one vpshufb instead of two scalar broadcasts).
  __m256i pick[4];
  for (int p = 0; p < 4; ++p)
    pick[p] = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((4 * p + 3) << 8 | (4 * p + 2))),
                               _mm_set1_epi16(static_cast<int16_t>((4 * p + 1) << 8 | 4 * p)));
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const block_q8_K* a[NT];
    __m256i sumi[NT];
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    // sc[0..7] (half 0) and sc[8..15] (half 1), each in both 128-bit lanes.
    const __m256i sch[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00), _mm256_permute2x128_si256(sc16, sc16, 0x11)};
    for (int t = 0; t < NT; ++t) {
      a[t] = reinterpret_cast<const block_q8_K*>(act + t * astride) + i;
      // The -32 offset: 32·Σ_s sc_s·bsums_s, exact in int32.
      sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                 _mm256_slli_epi32(_mm256_madd_epi16(q8_load(a[t]->bsums), sc16), 5));
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i q0 = q8_load(x[i].ql + 64 * h), q1 = q8_load(x[i].ql + 64 * h + 32);
      const __m256i qh = q8_load(x[i].qh + 32 * h);
      for (int p = 0; p < 4; ++p) {
        const __m256i src = (p & 1) ? q1 : q0;
        const __m256i lo = p < 2 ? _mm256_and_si256(src, m4) : _mm256_and_si256(_mm256_srli_epi16(src, 4), m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), m3);
        const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
        // int16 lanes 0-7 hold elements 0-15 (scale 2p), lanes 8-15 elements 16-31 (2p+1).
        const __m256i scv = _mm256_shuffle_epi8(sch[h], pick[p]);
        for (int t = 0; t < NT; ++t) {
          const __m256i prod = _mm256_maddubs_epi16(q, q8_load(a[t]->qs + 128 * h + 32 * p));
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(prod, scv));
        }
      }
    }
    q8_acc_superblock<NT>(acc, sumi, a, q8_half(x[i].d));
  }
  for (int t = 0; t < NT; ++t) out[t * ostride] = q8_hsum(acc[t]);
#else
  for (int t = 0; t < NT; ++t) {
    const auto* a = reinterpret_cast<const block_q8_K*>(act + t * astride);
    float sum = 0;
    for (int64_t i = 0; i < nb; ++i) {
      int32_t sumi = 0;
      for (int s = 0; s < 16; ++s) sumi -= 32 * x[i].scales[s] * a[i].bsums[s];
      for (int h = 0; h < 2; ++h)
        for (int p = 0; p < 4; ++p)
          for (int half = 0; half < 2; ++half) {
            int32_t s = 0;
            for (int l = 16 * half; l < 16 * half + 16; ++l) {
              const uint8_t b = x[i].ql[64 * h + 32 * (p & 1) + l];
              const int lo = p < 2 ? (b & 0xF) : (b >> 4);
              const int q = lo | (((x[i].qh[32 * h + l] >> (2 * p)) & 3) << 4);
              s += q * a[i].qs[128 * h + 32 * p + l];
            }
            sumi += x[i].scales[8 * h + 2 * p + half] * s;
          }
      sum += a[i].d * q8_half(x[i].d) * static_cast<float>(sumi);
    }
    out[t * ostride] = sum;
  }
#endif
}

// ---- Q2_K / Q3_K · Q8_K: 16 sub-blocks of 16, the 2-bit planes laid out as Q6_K's low nibbles
// (per 128-element half h, element 128h + 32p + l is bits 2p, 2p+1 of qs[32h + l]), so one
// loop serves both, with Q6_K's scale picks (sub-block 8h + 2p for l < 16, 8h + 2p + 1 above).
// Q2_K: x = d·sc_s·q − dmin·m_s (4-bit sc, m), so dot = d·Σ_s sc_s·Σ q·a − dmin·Σ_s m_s·bsums_s.
// Q3_K: x = d·(sc_s − 32)·(q − 4) with q = the two plane bits | the hmask bit << 2 (bit 4h + p of
// hmask[l]), so dot = d·(Σ_s sc'_s·Σ q·a − 4·Σ_s sc'_s·bsums_s). All exact int32 sums
// (|Σ| ≤ 16·32·16·7·127 < 2^31); maddubs pairs ≤ 7·127·2.
// The sixteen 6-bit scales of a Q3_K block as stored (0..63; the value is 32 less): bytes 0-7 give
// the low nibbles of scales 0-7 (low) and 8-15 (high), bytes 8-11 the top 2 bits (scale j: bits
// 2(j/4) of byte 8 + j%4), regrouped four at a time in 32-bit words.
inline void q8_q3_K_scales(const uint8_t* s, uint8_t* out) {
  uint32_t w[3], r[4];
  __builtin_memcpy(w, s, 12);
  constexpr uint32_t lo4 = 0x0F0F0F0F, lo2 = 0x03030303;
  r[0] = (w[0] & lo4) | ((w[2] & lo2) << 4);
  r[1] = (w[1] & lo4) | (((w[2] >> 2) & lo2) << 4);
  r[2] = ((w[0] >> 4) & lo4) | (((w[2] >> 4) & lo2) << 4);
  r[3] = ((w[1] >> 4) & lo4) | (((w[2] >> 6) & lo2) << 4);
  __builtin_memcpy(out, r, 16);
}
#if SLUICE_Q8_SIMD
// The same sixteen scales minus 32, as signed bytes of one vector (no trip through memory: a
// vector load of scalar stores stalls on store forwarding, a quarter of the Q3_K decode time).
// Byte j: the low 4 bits from scales[j] (j < 8) or scales[j − 8] >> 4; the top 2 bits from byte
// j % 4 of the word at scales + 8, shifted right by 2(j / 4) in 32-bit lane j / 4.
inline __m128i q8_q3_K_scales_128(const uint8_t* s) {
  const __m128i m4 = _mm_set1_epi8(0xF);
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
  const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(b, m4), _mm_and_si128(_mm_srli_epi16(b, 4), m4));
  uint32_t w;
  __builtin_memcpy(&w, s + 8, 4);
  const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(w)), _mm_setr_epi32(0, 2, 4, 6)),
                                   _mm_set1_epi8(3));
  return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}
#endif
template <bool kQ3, class Block, int NT>
inline void q8_dot_q23_K(const void* w, const uint8_t* act, size_t astride, int64_t nb, float* out, size_t ostride) {
  const auto* x = static_cast<const Block*>(w);
#if SLUICE_Q8_SIMD
  const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
  __m256i pick[4];  // as q8_dot_q6_K's
  for (int p = 0; p < 4; ++p)
    pick[p] = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((4 * p + 3) << 8 | (4 * p + 2))),
                               _mm_set1_epi16(static_cast<int16_t>((4 * p + 1) << 8 | 4 * p)));
  __m256 acc[NT], accm[NT];
  for (int t = 0; t < NT; ++t) acc[t] = accm[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    __m256i sc16, m16 = _mm256_setzero_si256();
    if constexpr (kQ3) {
      sc16 = _mm256_cvtepi8_epi16(q8_q3_K_scales_128(x[i].scales));
    } else {
      const __m128i sb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
      sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0xF)));
      m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0xF)));
    }
    const __m256i sch[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00), _mm256_permute2x128_si256(sc16, sc16, 0x11)};
    const block_q8_K* a[NT];
    __m256i sumi[NT], mins[NT];
    for (int t = 0; t < NT; ++t) {
      a[t] = reinterpret_cast<const block_q8_K*>(act + t * astride) + i;
      // Q3_K: the −4 offset, 4·Σ_s sc'_s·bsums_s; Q2_K: Σ_s m_s·bsums_s (m16 is 0 for Q3_K).
      const __m256i sb = _mm256_madd_epi16(q8_load(a[t]->bsums), kQ3 ? sc16 : m16);
      sumi[t] = kQ3 ? _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sb, 2)) : _mm256_setzero_si256();
      mins[t] = sb;
    }
    __m256i hm = _mm256_setzero_si256();
    if constexpr (kQ3) hm = q8_load(x[i].hmask);
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = q8_load(x[i].qs + 32 * h);
      for (int p = 0; p < 4; ++p) {
        __m256i q = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * p), m3);
        if constexpr (kQ3)
          q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + p), m1), 2));
        const __m256i scv = _mm256_shuffle_epi8(sch[h], pick[p]);
        for (int t = 0; t < NT; ++t) {
          const __m256i prod = _mm256_maddubs_epi16(q, q8_load(a[t]->qs + 128 * h + 32 * p));
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(prod, scv));
        }
      }
    }
    q8_acc_superblock<NT>(acc, sumi, a, q8_half(x[i].d));
    if constexpr (!kQ3) {
      const float xdmin = q8_half(x[i].dmin);  // once per super-block, not per token
      for (int t = 0; t < NT; ++t)
        accm[t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t]->d * xdmin), _mm256_cvtepi32_ps(mins[t]), accm[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * ostride] = kQ3 ? q8_hsum(acc[t]) : q8_hsum(acc[t]) - q8_hsum(accm[t]);
#else
  for (int t = 0; t < NT; ++t) {
    const auto* a = reinterpret_cast<const block_q8_K*>(act + t * astride);
    float sum = 0, summ = 0;
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t sc3[16];
      if constexpr (kQ3) q8_q3_K_scales(x[i].scales, sc3);
      int32_t sumi = 0, mins = 0;
      for (int s = 0; s < 16; ++s) {
        int32_t ss = 0;
        for (int e = 16 * s; e < 16 * s + 16; ++e) {
          const int h = e / 128, p = (e % 128) / 32, l = e % 32;
          int q = (x[i].qs[32 * h + l] >> (2 * p)) & 3;
          if constexpr (kQ3) q = q + 4 * ((x[i].hmask[l] >> (4 * h + p)) & 1) - 4;
          ss += q * a[i].qs[e];
        }
        if constexpr (kQ3) {
          sumi += (sc3[s] - 32) * ss;
        } else {
          sumi += (x[i].scales[s] & 0xF) * ss;
          mins += (x[i].scales[s] >> 4) * a[i].bsums[s];
        }
      }
      sum += a[i].d * q8_half(x[i].d) * static_cast<float>(sumi);
      if constexpr (!kQ3) summ += a[i].d * q8_half(x[i].dmin) * static_cast<float>(mins);
    }
    out[t * ostride] = sum - summ;
  }
#endif
}
template <int NT>
inline void q8_dot_q2_K(const void* w, const uint8_t* act, size_t astride, int64_t nb, float* out, size_t ostride) {
  q8_dot_q23_K<false, block_q2_K, NT>(w, act, astride, nb, out, ostride);
}
template <int NT>
inline void q8_dot_q3_K(const void* w, const uint8_t* act, size_t astride, int64_t nb, float* out, size_t ostride) {
  q8_dot_q23_K<true, block_q3_K, NT>(w, act, astride, nb, out, ostride);
}

// ---- IQ4_XS · Q8_K: x = d·(ls_s − 32)·kIq4nlValues[c] per sub-block s of 32 (qs[16s..16s+16) in
// Q4_0's nibble order), so dot = d·d_a·Σ_s (ls_s − 32)·Σ v·a, an exact int32 sum
// (8·32·(32·127·127) < 2^31). The levels are signed: |v|·sign(a, v) by maddubs, then one madd
// by the sub-block's scale, as the K-quants.
#if SLUICE_Q8_SIMD
// ls_s − 32 of the eight sub-blocks as int16 lanes. Lane s takes scales_l[s/2] (× 16 on even
// lanes, then >> 4: its low or high nibble) and bits 2s, 2s+1 of scales_h (shifted to the top
// of the lane by a multiply, then down by 14).
inline __m128i q8_iq4_xs_scales(const block_iq4_xs& b) {
  uint32_t sl;
  __builtin_memcpy(&sl, b.scales_l, 4);
  const __m128i lb = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(sl)),
                                      _mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1));
  const __m128i lo = _mm_and_si128(_mm_srli_epi16(_mm_mullo_epi16(lb, _mm_setr_epi16(16, 1, 16, 1, 16, 1, 16, 1)), 4),
                                   _mm_set1_epi16(0xF));
  const __m128i hi =
      _mm_srli_epi16(_mm_mullo_epi16(_mm_set1_epi16(static_cast<int16_t>(b.scales_h)),
                                     _mm_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1)),
                     14);
  return _mm_sub_epi16(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi16(32));
}
#endif
template <int NT>
inline void q8_dot_iq4_xs(const void* w, const uint8_t* act, size_t astride, int64_t nb, float* out, size_t ostride) {
  const auto* x = static_cast<const block_iq4_xs*>(w);
#if SLUICE_Q8_SIMD
  const __m256i levels = q8_iq4_levels();
  __m256i pick[8];  // int16 lane s of a 128-bit lane to all eight
  for (int s = 0; s < 8; ++s) pick[s] = _mm256_set1_epi16(static_cast<int16_t>((2 * s + 1) << 8 | 2 * s));
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i sc = _mm256_broadcastsi128_si256(q8_iq4_xs_scales(x[i]));
    const block_q8_K* a[NT];
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) {
      a[t] = reinterpret_cast<const block_q8_K*>(act + t * astride) + i;
      sumi[t] = _mm256_setzero_si256();
    }
    for (int s = 0; s < 8; ++s) {
      const __m256i v = _mm256_shuffle_epi8(levels, q8_nibbles32(x[i].qs + 16 * s));
      const __m256i u = _mm256_sign_epi8(v, v);
      const __m256i scs = _mm256_shuffle_epi8(sc, pick[s]);
      for (int t = 0; t < NT; ++t) {
        const __m256i p = _mm256_maddubs_epi16(u, _mm256_sign_epi8(q8_load(a[t]->qs + 32 * s), v));
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, scs));
      }
    }
    q8_acc_superblock<NT>(acc, sumi, a, q8_half(x[i].d));
  }
  for (int t = 0; t < NT; ++t) out[t * ostride] = q8_hsum(acc[t]);
#else
  for (int t = 0; t < NT; ++t) {
    const auto* a = reinterpret_cast<const block_q8_K*>(act + t * astride);
    float sum = 0;
    for (int64_t i = 0; i < nb; ++i) {
      int32_t sumi = 0;
      for (int s = 0; s < 8; ++s) {
        const uint8_t* qs = x[i].qs + 16 * s;
        int32_t ss = 0;
        for (int j = 0; j < 16; ++j)
          ss += kIq4nlValues[qs[j] & 0xF] * a[i].qs[32 * s + j] + kIq4nlValues[qs[j] >> 4] * a[i].qs[32 * s + 16 + j];
        sumi += (iq4_xs_scale(x[i], s) - 32) * ss;
      }
      sum += a[i].d * q8_half(x[i].d) * static_cast<float>(sumi);
    }
    out[t * ostride] = sum;
  }
#endif
}

#if SLUICE_Q8_AVX512
// Q6_K with 512-bit vectors: per half h, one 64-byte load of ql gives [p0 | p1] (low
// nibbles) and [p2 | p3] (high nibbles), already in activation order (128h + 32p + l). The
// two high bits come from qh broadcast to both 256-bit halves and shifted per half by
// vpsrlvw (2p), and each 16-element sub-block's scale is placed on its 8 int16 lanes by vpermw.
template <int NT>
inline void q8_dot_q6_K_512(const void* w, const uint8_t* act, size_t astride, int64_t nb, float* out, size_t ostride) {
  const auto* x = static_cast<const block_q6_K*>(w);
  const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3);
  auto halves16 = [](int lo, int hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<int16_t>(lo))),
                              _mm256_set1_epi16(static_cast<int16_t>(hi)), 1);
  };
  const __m512i shift[2] = {halves16(0, 2), halves16(4, 6)};
  // int16 lane j of the maddubs result holds elements 2j, 2j+1: sub-block 4k + j/8 of the half.
  __m512i idx[2][2];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 2; ++k) {
      alignas(64) int16_t v[32];
      for (int j = 0; j < 32; ++j) v[j] = static_cast<int16_t>(8 * h + 4 * k + j / 8);
      idx[h][k] = _mm512_load_si512(v);
    }
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i sc16_256 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    const __m512i sc16 = _mm512_castsi256_si512(sc16_256);
    const block_q8_K* a[NT];
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) {
      a[t] = reinterpret_cast<const block_q8_K*>(act + t * astride) + i;
      const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(q8_load(a[t]->bsums), sc16_256), 5);
      sumi[t] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), off));
    }
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(x[i].ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(q8_load(x[i].qh + 32 * h));
      const __m512i lo[2] = {_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4)};
      for (int k = 0; k < 2; ++k) {
        const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(qh, shift[k]), m3);
        const __m512i q = _mm512_or_si512(lo[k], _mm512_slli_epi16(hb, 4));
        const __m512i scv = _mm512_permutexvar_epi16(idx[h][k], sc16);
        for (int t = 0; t < NT; ++t) {
          const __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512(a[t]->qs + 128 * h + 64 * k));
#if SLUICE_Q8_VNNI
          sumi[t] = _mm512_dpwssd_epi32(sumi[t], p, scv);
#else
          sumi[t] = _mm512_add_epi32(sumi[t], _mm512_madd_epi16(p, scv));
#endif
        }
      }
    }
    const float xd = q8_half(x[i].d);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(a[t]->d * xd), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t * ostride] = _mm512_reduce_add_ps(acc[t]);
}
#define SLUICE_Q8_Q6_K_DOT q8_dot_q6_K_512
#else
#define SLUICE_Q8_Q6_K_DOT q8_dot_q6_K
#endif

#if !SLUICE_Q8_SIMD
// The scalar twins of the tile kernels: Step(tile block i, activation block i, row r, acc)
// returns acc after that (super-)block with the vector code's integer sums and fused
// multiply-adds, so twin and vector results are bitwise equal.
// kLanes 4: the 32-block types' four-lane order (Dot32), else one sum over the super-blocks.
// The activation sums (Q8TileOps::act_sums) are not read: the steps form them, exactly.
template <class Tile, class Act, int QK, float (*Step)(const Tile&, const Act&, int64_t, float), int kLanes = 1>
inline void q8_tile_gemm_scalar(const uint8_t* tile, int64_t n, const void* act, size_t astride, const int32_t*,
                                int64_t n_tok, float* y, size_t ldy, int64_t nr) {
  static_assert(kLanes == 1 || kLanes == 4);
  const auto* T = reinterpret_cast<const Tile*>(tile);
  for (int64_t t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const Act*>(static_cast<const uint8_t*>(act) + t * astride);
    for (int64_t r = 0; r < nr; ++r) {
      float L[4] = {0, 0, 0, 0};
      for (int64_t i = 0; i < n / QK; ++i) L[i % kLanes] = Step(T[i], a[i], r, L[i % kLanes]);
      y[t * ldy + r] = kLanes == 1 ? L[0] : (L[0] + L[2]) + (L[1] + L[3]);
    }
  }
}
#endif

// The prefill tiles (kernels.h, Q8TileOps): the super-block types, then the 32-block types.
#include "backends/cpu/kernels_q8_ktiles_impl.h"
#include "backends/cpu/kernels_q8_tiles32_impl.h"

// Rows outside, tokens inside, up to kNT tokens per weight pass: a weight row (≤ a few KiB)
// stays in L1 while the activation rows stream past it, and each pass unpacks the weight
// blocks once. Each output is the same computation whatever the grouping (see above). Eight
// tokens per pass where the level has the registers for it (512-bit dots: 8 sums and 8
// accumulators): 8 sequences decoding together unpack each weight row once, not twice.
template <template <int> class Dot, int QK>
void q8_gemm(const void* w, size_t row_bytes, int64_t n_rows, const void* act, size_t a_row_bytes, int64_t n_tok,
             int64_t n, float* y, size_t ldy) {
  constexpr int kNT = SLUICE_Q8_AVX512 ? 8 : 4;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  const int64_t nb = n / QK;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* wr = wb + r * row_bytes;
    prefetch_lines(wr + row_bytes, row_bytes);
    int64_t t = 0;
    for (; t + kNT <= n_tok; t += kNT) Dot<kNT>::run(wr, ab + t * a_row_bytes, a_row_bytes, nb, y + t * ldy + r, ldy);
    if constexpr (kNT > 4)
      if (n_tok - t >= 4) {
        Dot<4>::run(wr, ab + t * a_row_bytes, a_row_bytes, nb, y + t * ldy + r, ldy);
        t += 4;
      }
    // The last 1-3 tokens in one pass too (an expert serving 2 or 3 of a few sequences'
    // tokens unpacks its rows once, not per token).
    switch (n_tok - t) {
      case 3: Dot<3>::run(wr, ab + t * a_row_bytes, a_row_bytes, nb, y + t * ldy + r, ldy); break;
      case 2: Dot<2>::run(wr, ab + t * a_row_bytes, a_row_bytes, nb, y + t * ldy + r, ldy); break;
      case 1: Dot<1>::run(wr, ab + t * a_row_bytes, a_row_bytes, nb, y + t * ldy + r, ldy); break;
      default: break;
    }
  }
}

// Function templates cannot be template template arguments: one struct per dot.
#define SLUICE_Q8_DOT(name)                                                                          \
  template <int NT>                                                                                  \
  struct Dot_##name {                                                                                \
    static void run(const void* w, const uint8_t* a, size_t as, int64_t nb, float* out, size_t os) { \
      q8_dot_##name<NT>(w, a, as, nb, out, os);                                                      \
    }                                                                                                \
  };
SLUICE_Q8_DOT(q4_K)
SLUICE_Q8_DOT(q5_K)
SLUICE_Q8_DOT(iq4_xs)
SLUICE_Q8_DOT(q2_K)
SLUICE_Q8_DOT(q3_K)
#undef SLUICE_Q8_DOT
template <int NT>
struct Dot_q6_K {
  static void run(const void* w, const uint8_t* a, size_t as, int64_t nb, float* out, size_t os) {
    SLUICE_Q8_Q6_K_DOT<NT>(w, a, as, nb, out, os);
  }
};
#undef SLUICE_Q8_Q6_K_DOT

#if SLUICE_Q8_AVX512
// quant/'s quantize_q8_K with 16 lanes: the same operations per element (iscale·x rounded to
// nearest even, as nearest_int), the same first-largest-|x| choice of the block's max, so the
// same bytes for finite input.
inline void q8_quantize_q8_K_512(const float* x, void* yv, int64_t n) {
  auto* y = static_cast<block_q8_K*>(yv);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    __m512 v[16];
    __m512 amaxv = _mm512_setzero_ps();
    for (int k = 0; k < 16; ++k) {
      v[k] = _mm512_loadu_ps(x + 16 * k);
      amaxv = _mm512_max_ps(amaxv, _mm512_abs_ps(v[k]));
    }
    const float amax = _mm512_reduce_max_ps(amaxv);
    if (amax == 0.0f) {
      __builtin_memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    float max = 0;
    for (int k = 0; k < 16; ++k) {
      const __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(v[k]), _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (m) {
        max = x[16 * k + __builtin_ctz(m)];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m512 is = _mm512_set1_ps(iscale);
    for (int k = 0; k < 16; ++k) {
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(is, v[k]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * k), _mm512_cvtsepi32_epi8(q));
      y[i].bsums[k] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
    y[i].d = 1 / iscale;
  }
}
#define SLUICE_Q8_QUANTIZE_Q8_K q8_quantize_q8_K_512

// quant/'s quantize_q8_0 with 16 lanes: the same amax, d = amax/127 and its fp16, id = 1/d,
// and roundf's ties away from zero done exactly (the truncation t of v = x·id, plus sign(v)
// where |v − t| ≥ 0.5; v − t is exact), then clamped to int8 by the saturating narrow: the
// same bytes for finite input. Activations of every 32-block weight type go through it.
inline uint16_t q8_fp16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline void q8_quantize_q8_0_512(const float* x, void* yv, int64_t n) {
  auto* y = static_cast<block_q8_0*>(yv);
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = q8_fp16(d);
    const __m512 idv = _mm512_set1_ps(id);
    for (int h = 0; h < 2; ++h) {
      const __m512 v = _mm512_mul_ps(h ? v1 : v0, idv);
      const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), half, _CMP_GE_OQ);
      const __m512 r = _mm512_mask_add_ps(t, up, t, _mm512_or_ps(one, _mm512_and_ps(v, _mm512_set1_ps(-0.0f))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * h), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(r)));
    }
  }
}
#define SLUICE_Q8_QUANTIZE_Q8_0 q8_quantize_q8_0_512
#elif SLUICE_Q8_SIMD
// The same two quantizers with 8 lanes (the same operations, so the same bytes): AVX2 has no
// saturating 32->8 narrow, so two saturating packs and a lane permute put 32 quants in order.
inline __m256i q8_narrow32(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
inline int32_t q8_hsum_epi32(__m256i v) {
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
  return _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
}
inline __m256 q8_abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
inline float q8_hmax_ps(__m256 v) {
  const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
}

inline void q8_quantize_q8_K_256(const float* x, void* yv, int64_t n) {
  auto* y = static_cast<block_q8_K*>(yv);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    __m256 v[32];
    __m256 amaxv = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      amaxv = _mm256_max_ps(amaxv, q8_abs_ps(v[k]));
    }
    const float amax = q8_hmax_ps(amaxv);
    if (amax == 0.0f) {
      __builtin_memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    float max = 0;
    for (int k = 0; k < 32; ++k) {
      const int m = _mm256_movemask_ps(_mm256_cmp_ps(q8_abs_ps(v[k]), _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (m) {
        max = x[8 * k + __builtin_ctz(static_cast<unsigned>(m))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 is = _mm256_set1_ps(iscale);
    for (int k = 0; k < 8; ++k) {  // 32 quants, two bsums of 16
      __m256i q[4];
      for (int e = 0; e < 4; ++e) q[e] = _mm256_cvtps_epi32(_mm256_mul_ps(is, v[4 * k + e]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + 32 * k), q8_narrow32(q[0], q[1], q[2], q[3]));
      y[i].bsums[2 * k] = static_cast<int16_t>(q8_hsum_epi32(_mm256_add_epi32(q[0], q[1])));
      y[i].bsums[2 * k + 1] = static_cast<int16_t>(q8_hsum_epi32(_mm256_add_epi32(q[2], q[3])));
    }
    y[i].d = 1 / iscale;
  }
}
#define SLUICE_Q8_QUANTIZE_Q8_K q8_quantize_q8_K_256

inline void q8_quantize_q8_0_256(const float* x, void* yv, int64_t n) {
  auto* y = static_cast<block_q8_0*>(yv);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    __m256 v[4];
    __m256 amaxv = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      amaxv = _mm256_max_ps(amaxv, q8_abs_ps(v[k]));
    }
    const float amax = q8_hmax_ps(amaxv);
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = static_cast<uint16_t>(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {  // roundf: truncate, then away from zero where |v − t| ≥ 0.5
      const __m256 s = _mm256_mul_ps(v[k], idv);
      const __m256 t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 up = _mm256_cmp_ps(q8_abs_ps(_mm256_sub_ps(s, t)), half, _CMP_GE_OQ);
      const __m256 r = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(s, sign))));
      q[k] = _mm256_cvtps_epi32(r);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), q8_narrow32(q[0], q[1], q[2], q[3]));
  }
}
#define SLUICE_Q8_QUANTIZE_Q8_0 q8_quantize_q8_0_256
#else
#define SLUICE_Q8_QUANTIZE_Q8_K nullptr
#define SLUICE_Q8_QUANTIZE_Q8_0 nullptr
#endif

#if SLUICE_Q8_SIMD && !SLUICE_Q8_VNNI
#include "backends/cpu/kernels_q8_tiles_avx2.h"
// (after the tiles: the groups' readers run the tiles' loops)
#include "backends/cpu/kernels_q8_rows16_avx2.h"
#endif

#include "backends/cpu/kernels_q8_affine_impl.h"

constexpr Q8Kernels q8_table(const char* name) {
  Q8Kernels k{
      .name = name,
      .q4_0 = {DType::Q8_0, q8_gemm32<Q8Unpack_q4_0>, SLUICE_Q8_LEGACY_TILE(LegacyTileCodes<LegacyQ4_0>)},
      .q4_1 = {DType::Q8_0, q8_gemm32<Q8Unpack_q4_1>, SLUICE_Q8_LEGACY_TILE(LegacyTileCodes<LegacyQ4_1>)},
      .q5_0 = {DType::Q8_0, q8_gemm32<Q8Unpack_q5_0>, SLUICE_Q8_LEGACY_TILE(LegacyTileCodes<LegacyQ5_0>)},
      .q5_1 = {DType::Q8_0, q8_gemm32<Q8Unpack_q5_1>, SLUICE_Q8_LEGACY_TILE(LegacyTileCodes<LegacyQ5_1>)},
      .q8_a = {DType::Q8_0, q8_gemm32<Q8Unpack_q8_a>, SLUICE_Q8_LEGACY_TILE(LegacyTileCodes<AffineQ8Codes>)},
      .q8_0 = {DType::Q8_0, q8_gemm32<Q8Unpack_q8_0>, SLUICE_Q8_Q8_0_TILE},
      .q4_K = {DType::Q8_K, q8_gemm<Dot_q4_K, QK_K>, SLUICE_Q8_Q4_K_TILE},
      .q5_K = {DType::Q8_K, q8_gemm<Dot_q5_K, QK_K>, SLUICE_Q8_Q5_K_TILE},
      .q6_K = {DType::Q8_K, q8_gemm<Dot_q6_K, QK_K>, SLUICE_Q8_Q6_K_TILE},
      .q2_K = {DType::Q8_K, q8_gemm<Dot_q2_K, QK_K>, SLUICE_Q8_Q2_K_TILE},
      .q3_K = {DType::Q8_K, q8_gemm<Dot_q3_K, QK_K>, SLUICE_Q8_Q3_K_TILE},
      .iq4_nl = {DType::Q8_0, q8_gemm32<Q8Unpack_iq4_nl>, SLUICE_Q8_LEGACY_TILE(LegacyTileCodes<Iq4NlCodes>)},
      .iq4_xs = {DType::Q8_K, q8_gemm<Dot_iq4_xs, QK_K>, SLUICE_Q8_IQ4_XS_TILE},
      .quantize_q8_K = SLUICE_Q8_QUANTIZE_Q8_K,
      .quantize_q8_0 = SLUICE_Q8_QUANTIZE_Q8_0,
      .affine = {affine_act_prepare, affine_gemm},
  };
#if SLUICE_Q8_AVX512 && SLUICE_Q8_VNNI
  // The VNNI K-quant tiles beat the row dots from a few tokens, now that a pack prefetches the
  // next 16 rows (q8_pack_prefetch): 2048x4096 matrices cycled through 260 MB, 2 threads, Zen 4,
  // GB/s of weights rows vs tiles: Q4_K 15.4 vs 15.9 at 4 tokens, 11.1 vs 12.8 at 5, 7.8 vs 10.6
  // at 8; Q5_K 16.6 vs 15.1 at 4, 7.8 vs 11.6 at 8; Q6_K 14.6 vs 13.1 at 6, 11.6 vs 13.4 at 8.
  // Q2_K and IQ4_XS (same matrices, two runs each): rows 5.1-7.7 and 9.2-9.3 GB/s at 4 tokens,
  // tiles 10.3-12.2 and 12.3-12.9; at 3 tokens even (IQ4_XS rows 11.6-11.8, tiles 10.5-11.1).
  // Q8_0 rows 15.2-19.6 at 4 tokens, tiles 23.3-25.2 (at 2-3 the rows win: 17.8-25.5 vs
  // 15.2-22.9). Q3_K (through the Q6_K tile) keeps 9: rows 5.0-6.1 vs tiles 4.6-5.5 at 8, tiles
  // ahead at 12 (3.6-4.5 vs 3.2).
  // Several sequences decoding together run their dense matmuls at these batch sizes.
  k.q4_K.tile.min_tokens = 5;
  k.q4_K.rows16 = rows16_gemm<block_q4_K_x16, K4TileTokens<block_q4_K_x16>::Run>;
  // The 32-block types: four accumulators per token (their one float order), so 4 tokens a pass.
  k.q4_0.rows16 = rows16_gemm<block_q4_0_x16, OffsetTileTokens<Rows16Codes<LegacyQ4_0, block_q4_0_x16>>::Run, 4, true>;
  k.q4_1.rows16 = rows16_gemm<block_q4_1_x16, OffsetTileTokens<Rows16Codes<LegacyQ4_1, block_q4_1_x16>>::Run, 4, true>;
  k.q5_K.rows16 = rows16_gemm<block_q5_K_x16, K4TileTokens<block_q5_K_x16>::Run>;
  k.q6_K.rows16 = rows16_gemm<block_q6_K_x16, Q6KTokens<block_q6_K_x16>::Run>;
  k.q5_K.tile.min_tokens = 6;
  k.q6_K.tile.min_tokens = 8;
  k.q2_K.tile.min_tokens = 4;
  k.iq4_xs.tile.min_tokens = 4;
  k.q8_0.tile.min_tokens = 4;
#elif SLUICE_Q8_SIMD
  // The 256-bit tiles (Zen 4 run as AVX2, same matrices, two runs, rows vs tiles GB/s): Q4_K
  // 7.2-8.3 vs 9.6-10.1 at 6 tokens (even at 4); Q5_K 7.5-9.5 vs 8.3-10.6 at 6, 5.9-7.5 vs
  // 7.2-9.2 at 8; Q8_0 even at 4 and 6, 8.1-9.2 vs 10.6-10.7 at 8; Q6_K even at 6 and 8 (keeps 9).
  k.q4_K.tile.min_tokens = 6;
  k.q5_K.tile.min_tokens = 6;
  k.q8_0.tile.min_tokens = 8;
  k.q4_K.rows16 = rows16_gemm_256<block_q4_K_x16, K4Tile256<block_q4_K_x16>, K4Rows16Decode<block_q4_K_x16>>;
  k.q5_K.rows16 = rows16_gemm_256<block_q5_K_x16, K4Tile256<block_q5_K_x16>, K4Rows16Decode<block_q5_K_x16>>;
  k.q6_K.rows16 = rows16_gemm_256<block_q6_K_x16, Q6KTile256<block_q6_K_x16>, Q6KRows16Decode>;
  k.q4_0.rows16 = rows16_legacy_256<LegacyTileCodes<LegacyQ4_0>, block_q4_0_x16>;
  k.q4_1.rows16 = rows16_legacy_256<LegacyTileCodes<LegacyQ4_1>, block_q4_1_x16>;
#endif
  return k;
}
#undef SLUICE_Q8_Q4_K_TILE
#undef SLUICE_Q8_Q5_K_TILE
#undef SLUICE_Q8_Q6_K_TILE
#undef SLUICE_Q8_Q3_K_TILE
#undef SLUICE_Q8_Q2_K_TILE
#undef SLUICE_Q8_IQ4_XS_TILE
#undef SLUICE_Q8_Q8_0_TILE
#undef SLUICE_Q8_LEGACY_TILE
#undef SLUICE_Q8_QUANTIZE_Q8_K
#undef SLUICE_Q8_QUANTIZE_Q8_0
