// backends/cpu/kernels_q8_impl: int8 dot products of quantized weight rows with activations
// quantized once per token (Q8_K for the 256-blocks, Q8_0 for the 32-blocks), the scheme of
// ggml's ggml_vec_dot_<w>_<act>. Included inside its own namespace by kernels_generic.cpp
// (scalar), kernels_avx2.cpp and kernels_avx512.cpp (256-bit integer SIMD), which define
//   SLUICE_Q8_SIMD  0: scalar code, the twin of the SIMD code; 1: AVX2 intrinsics
//   SLUICE_Q8_VNNI  1: u8·s8 sums by AVX512-VNNI dpbusd instead of maddubs + madd (needs VL)
//   SLUICE_Q8_AVX512 1: 512-bit loops where written (Q4_K), needs AVX-512 BW
//   q8_half(h)      one fp16 -> float
// and include quant/blocks.h first. This file includes nothing itself.
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
template <class Tile>  // Q6KTile or block_q6_K_x16: the same ql/qh words
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
              sumi[t] = _mm512_add_epi32(sumi[t],
                                         _mm512_add_epi32(_mm512_mullo_epi32(s, sc0), _mm512_mullo_epi32(u, sc1)));
            }
          }
        __m512i pairs[8];
        for (int k = 0; k < 8; ++k) pairs[k] = q6_offset_pair(b, k);
        const __m512 dv = group_factors(b.d);
        for (int t = 0; t < NT; ++t) {
          __m512i offs = _mm512_setzero_si512();
          for (int k = 0; k < 8; ++k) offs = _mm512_dpwssd_epi32(offs, pairs[k], q8_bcst32(a[t]->bsums + 2 * k));
          const __m512 sf = _mm512_cvtepi32_ps(_mm512_sub_epi32(sumi[t], offs));
          acc[t] = _mm512_fmadd_ps(sf, _mm512_mul_ps(dv, _mm512_set1_ps(a[t]->d)), acc[t]);
        }
      }
      for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ldy, rows, acc[t]);
    }
  };
};

// A Q6_K group's tile: ql, qh and the scales as they are, the offset pairs and the factor as the
// token loop forms them (the bytes q6_K_tile_pack makes of the rows).
inline void q8_group_tile(const block_q6_K_x16& g, Q6KTile& b) {
  __builtin_memcpy(b.ql, g.ql, sizeof b.ql);
  __builtin_memcpy(b.qh, g.qh, sizeof b.qh);
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
