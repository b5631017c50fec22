// backends/cpu/kernels_q8_affine_impl: MLX affine weights (DType::MLX_A*, quant/mlx_affine.h) read
// where the file keeps them — codes packed LSB-first in uint32 words, one scale and one bias per
// group in their own arrays — against int8 activations. Part of kernels_q8_impl.h (its macros:
// SLUICE_Q8_SIMD, SLUICE_Q8_VNNI), so every level, the scalar twin and the emulated AVX-512 build
// get it.
//
// A weight is w = c·s + b (code c, the group's scale s and bias b), so for an activation block k
// quantized as x ≈ d_k·q (Q8_0's rounding),
//   Σ_i w_i·x_i ≈ Σ_k d_k·s_g·Σ_{i∈k} c_i·q_i  +  Σ_k d_k·b_g·Σ_{i∈k} q_i.
// The code sums are exact int32 per 32-bit lane, their float terms added per lane in 8 lanes and
// two accumulators (even and odd chunks, or the two halves of a chunk: one fma chain would make
// its latency the pace). The bias term is one dot per row of the group biases with the token's
// group sums gs_g = Σ_{k∈g} d_k·Σ q (8 lanes by g mod 8), added after.
//
// The activation row (affine_act_prepare, once per token) holds per 64 inputs (kAffineChunk):
//   q[64]   the int8 quants. 4-bit codes: [q(2j) for j < 32 | q(2j+1) for j < 32], because the
//           low nibbles of the chunk's 32 code bytes are its even elements and the high nibbles
//           its odd ones; then lane l (bytes 4l..4l+3 of both halves) covers inputs 8l..8l+7.
//           Other widths: in order, lane l of half h covering inputs 32h + 4l..+3.
//   dl[16]  per lane the activation block's d (4-bit: lanes 0-7 only);
//   ds[2]   per 32-block d · Σ of its quants (the group sums add them in block order).
// Byte-wide codes (8 bits as stored; 2, 3, 5, 6 bits unpacked into bytes first) are signed as
// c − 128 for the sign trick (maddubs would saturate 255·127·2) and the bias becomes b + 128·s.
//
// Determinism: the scalar twin walks the same 8 lanes with the same fma chain and sums them in
// q8_hsum's order, so every level gives the same bits, and a token's value does not depend on the
// tokens beside it (NT) or the rows around it.

// One token's activation row for `bits`-bit codes (layout above), from x quantized to Q8_0 with
// the level's quantizer (the same bytes at every level).
inline void affine_act_prepare_with(void (*quantize_q8_0)(const float*, void*, int64_t), const float* x, int64_t n,
                                    int bits, uint8_t* out) {
  thread_local std::vector<block_q8_0> blocks;
  blocks.resize(static_cast<size_t>(n / 32));
  if (quantize_q8_0)
    quantize_q8_0(x, blocks.data(), n);
  else
    quantize_row(DType::Q8_0, x, blocks.data(), n);
  for (int64_t c = 0; c < n / kAffineChunk; ++c) {
    uint8_t* o = out + static_cast<size_t>(c) * kAffineChunkBytes;
    auto* q = reinterpret_cast<int8_t*>(o);
    float dl[16] = {}, ds[16] = {};
    const block_q8_0* b = blocks.data() + 2 * c;
    const float d[2] = {fp16_to_fp32(b[0].d), fp16_to_fp32(b[1].d)};
    auto qv = [&](int i) { return static_cast<int>(b[i / 32].qs[i % 32]); };  // input i of the chunk
    if (bits == 4) {
      for (int j = 0; j < 32; ++j) {
        q[j] = static_cast<int8_t>(qv(2 * j));
        q[32 + j] = static_cast<int8_t>(qv(2 * j + 1));
      }
      for (int l = 0; l < 8; ++l) dl[l] = d[l / 4];
    } else {
      for (int i = 0; i < 64; ++i) q[i] = static_cast<int8_t>(qv(i));
      for (int l = 0; l < 16; ++l) dl[l] = d[l / 8];
    }
    for (int k = 0; k < 2; ++k) {
      int sum = 0;
      for (int i = 0; i < 32; ++i) sum += b[k].qs[i];
      ds[k] = d[k] * static_cast<float>(sum);
    }
    std::memcpy(o + 64, dl, sizeof dl);
    std::memcpy(o + 64 + sizeof dl, ds, sizeof ds);
  }
}

// n scales (or biases) of scale type st at p as floats: exact conversions, so the SIMD and
// scalar loops give the same values.
inline void affine_groups_f32(const uint8_t* p, DType st, int64_t n, float* out) {
  int64_t g = 0;
#if SLUICE_Q8_SIMD
  for (; g + 8 <= n; g += 8) {
    __m256 v;
    if (st == DType::BF16)
      v = _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * g))), 16));
    else if (st == DType::F16)
      v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * g)));
    else
      v = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 4 * g));
    _mm256_storeu_ps(out + g, v);
  }
  if (g + 4 <= n) {
    // Four more, stored with four zeros as one 8-float store (out has room: the groups are
    // padded to a multiple of 8): the later 8-float loads of the bias term then forward from
    // one store (a load that spans two stores, or a store and memory, waits for both to retire).
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 2 * g));
    __m128 v;
    if (st == DType::BF16)
      v = _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16));
    else if (st == DType::F16)
      v = _mm_cvtph_ps(h);
    else
      v = _mm_loadu_ps(reinterpret_cast<const float*>(p + 4 * g));
    _mm256_storeu_ps(out + g, _mm256_insertf128_ps(_mm256_setzero_ps(), v, 0));
    g += 4;
    if (g == n) return;
  }
#endif
  for (; g < n; ++g) {
    if (st == DType::F32) {
      std::memcpy(&out[g], p + 4 * g, 4);
      continue;
    }
    uint16_t h;
    std::memcpy(&h, p + 2 * g, 2);
    if (st == DType::F16) {
      out[g] = q8_half(h);
    } else {
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(&out[g], &bits, 4);
    }
  }
}

// One row's group scales and biases as floats (biases + 128·scale for byte-wide codes).
inline void affine_row_groups(const AffineRows& w, int64_t r, int64_t n_groups, bool bytes, float* sf, float* bf) {
  const size_t off = static_cast<size_t>(r) * w.group_row_bytes;
  affine_groups_f32(w.scales + off, w.scale_type, n_groups, sf);
  affine_groups_f32(w.biases + off, w.scale_type, n_groups, bf);
  if (!bytes) return;
  int64_t g = 0;
#if SLUICE_Q8_SIMD
  for (; g + 8 <= n_groups; g += 8)
    _mm256_storeu_ps(bf + g, _mm256_fmadd_ps(_mm256_set1_ps(128.0f), _mm256_loadu_ps(sf + g), _mm256_loadu_ps(bf + g)));
  if (g + 4 == n_groups) {  // and the 4 zeros after them, as affine_groups_f32's last store
    _mm256_storeu_ps(bf + g, _mm256_fmadd_ps(_mm256_set1_ps(128.0f), _mm256_loadu_ps(sf + g), _mm256_loadu_ps(bf + g)));
    g += 4;
  } else if (g + 4 < n_groups) {
    _mm_storeu_ps(bf + g, _mm_fmadd_ps(_mm_set1_ps(128.0f), _mm_loadu_ps(sf + g), _mm_loadu_ps(bf + g)));
    g += 4;
  }
#endif
  for (; g < n_groups; ++g) bf[g] = std::fma(128.0f, sf[g], bf[g]);
}

// Row r's codes as bytes (2, 3, 5, 6 bits: unpacked from the stream), into u[n].
inline void affine_unpack_bytes(const uint8_t* codes, int bits, int64_t n, uint8_t* u) {
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits, byte = bit / 8, shift = bit % 8;
    uint32_t v = codes[byte];
    if (shift + bits > 8) v |= static_cast<uint32_t>(codes[byte + 1]) << 8;
    u[i] = static_cast<uint8_t>((v >> shift) & mask);
  }
}

// The group of lane l of chunk c (or of half h of it), groups of 2^lg inputs (a shift: a
// division by the group size in the chunk loop cost more than the dot products).
inline int64_t affine_group_4bit(int64_t c, int l, int lg) { return (c * 64 + 8 * l) >> lg; }
inline int64_t affine_group_bytes(int64_t c, int h, int lg) { return (c * 64 + 32 * h) >> lg; }

// NT tokens (activation rows a + t·astride) against one row: y[t·ystride].
// The bias term Σ_g bf[g]·gs[g] over the groups in 8 lanes B[l] (g mod 8, fma chains in
// increasing g); the row's code term adds them before its lanes are summed. bf and gs are
// zero-padded to ng8, a multiple of 8 (fma(0, 0, b) = b): no scalar tail, whose stores a vector
// load of B could not forward from (a stall of a fifth of a 768-input row's time).
inline void affine_bias_lanes(const float* bf, const float* gs, int64_t ng8, float* B) {
#if SLUICE_Q8_SIMD
  __m256 v = _mm256_setzero_ps();
  for (int64_t g = 0; g < ng8; g += 8) v = _mm256_fmadd_ps(_mm256_loadu_ps(bf + g), _mm256_loadu_ps(gs + g), v);
  _mm256_store_ps(B, v);
#else
  for (int l = 0; l < 8; ++l) B[l] = 0.0f;
  for (int64_t g = 0; g < ng8; ++g) B[g % 8] = std::fma(bf[g], gs[g], B[g % 8]);
#endif
}

#if SLUICE_Q8_SIMD
// The scales of chunks c and c + 1 (c even) in the low lanes: 4 groups of 32, 2 of 64 or 1 of
// 128, each read no wider than it is, so the load sits inside one of affine_groups_f32's stores.
inline __m128 affine_pair_scales(const float* sf, int64_t c, int lg) {
  if (lg == 5) return _mm_loadu_ps(sf + 2 * c);
  if (lg == 6) return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(sf + c)));
  return _mm_load_ss(sf + c / 2);
}

// Σ_lanes of 4-byte groups: lo·a0 + hi·a1 (4-bit codes ≤ 15: the two maddubs pairs add in int16).
inline __m256i affine_dot4(__m256i lo, __m256i hi, const uint8_t* a) {
#if SLUICE_Q8_VNNI
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, q8_load(a)), hi, q8_load(a + 32));
#else
  const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, q8_load(a)), _mm256_maddubs_epi16(hi, q8_load(a + 32)));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}
#endif

#if SLUICE_Q8_SIMD
// acc + chunk c's code term of one 4-bit row against the activation chunk at `at` (256-bit).
inline __m256 affine_chunk4(const uint8_t* codes, const float* sf, int64_t c, int lg, const uint8_t* at, __m256 acc) {
  const __m256i raw = q8_load(codes + 32 * c);
  const __m256i lo = _mm256_and_si256(raw, _mm256_set1_epi8(0x0F));
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0x0F));
  const __m256 sv = lg == 5 ? _mm256_set_m128(_mm_set1_ps(sf[2 * c + 1]), _mm_set1_ps(sf[2 * c]))
                            : _mm256_set1_ps(sf[(c * 64) >> lg]);
  const __m256 dl = _mm256_loadu_ps(reinterpret_cast<const float*>(at + 64));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(affine_dot4(lo, hi, at)), _mm256_mul_ps(dl, sv), acc);
}
#endif

#if SLUICE_Q8_SIMD && SLUICE_Q8_AVX512
// Chunks c and c + 1 at 512 bits: the activations (at: chunk c's), and acc + the code term of one
// 4-bit row with them (lanes 0-7 chunk c, 8-15 chunk c + 1).
struct AffinePairAct {
  __m512i a0, a1;
  __m512 dl;
  explicit AffinePairAct(const uint8_t* at) {
    const uint8_t* bt = at + kAffineChunkBytes;
    a0 = _mm512_inserti64x4(_mm512_castsi256_si512(q8_load(at)), q8_load(bt), 1);
    a1 = _mm512_inserti64x4(_mm512_castsi256_si512(q8_load(at + 32)), q8_load(bt + 32), 1);
    dl = _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_loadu_pd(reinterpret_cast<const double*>(at + 64))),
                           _mm256_loadu_pd(reinterpret_cast<const double*>(bt + 64)), 1));
  }
};
// One 4-bit row's codes of chunks c and c + 1 and their scales (gidx: lane l's group, as
// affine_row_dot makes it).
struct AffinePairCodes {
  __m512i lo, hi;
  __m512 sv;
  AffinePairCodes(const uint8_t* codes, const float* sf, int64_t c, int lg, __m512i gidx) {
    const __m512i raw = _mm512_loadu_si512(codes + 32 * c);
    lo = _mm512_and_si512(raw, _mm512_set1_epi8(0x0F));
    hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), _mm512_set1_epi8(0x0F));
    sv = _mm512_permutexvar_ps(gidx, _mm512_castps128_ps512(affine_pair_scales(sf, c, lg)));
  }
};
inline __m512 affine_pair4(const AffinePairCodes& w, const AffinePairAct& p, __m512 acc) {
#if SLUICE_Q8_VNNI
  const __m512i isum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w.lo, p.a0), w.hi, p.a1);
#else
  const __m512i isum = _mm512_madd_epi16(_mm512_add_epi16(_mm512_maddubs_epi16(w.lo, p.a0),
                                                          _mm512_maddubs_epi16(w.hi, p.a1)),
                                         _mm512_set1_epi16(1));
#endif
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(p.dl, w.sv), acc);
}
#endif

// The code term of NT tokens (activation rows a + t·astride) against one row, into y[t·ystride].
template <int NT, bool four>
void affine_row_dot(const uint8_t* codes, const float* sf, const float* bf, const float* gs, int64_t ng, int lg,
                    int64_t n, const uint8_t* a, size_t astride, float* y, size_t ystride) {
  const int64_t nc = n / kAffineChunk;
#if SLUICE_Q8_SIMD
  // Two accumulator sets indexed by constants only (acc[c & 1] made GCC keep them in memory).
  __m256 acc0[NT], acc1[NT];
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  // 4-bit: chunk c into acc (even chunks acc0, odd acc1).
  auto four_chunk = [&](int64_t c, __m256(&acc)[NT]) {
    const uint8_t* ac = a + static_cast<size_t>(c) * kAffineChunkBytes;
    for (int t = 0; t < NT; ++t) acc[t] = affine_chunk4(codes, sf, c, lg, ac + t * astride, acc[t]);
  };
  // Byte-wide codes: half h of chunk c into acc (h = 0 acc0, h = 1 acc1).
  auto byte_half = [&](int64_t c, int h, __m256(&acc)[NT]) {
    const uint8_t* ac = a + static_cast<size_t>(c) * kAffineChunkBytes;
    const __m256i x = _mm256_xor_si256(q8_load(codes + 64 * c + 32 * h), _mm256_set1_epi8(static_cast<char>(0x80)));
    const __m256 sv = _mm256_set1_ps(sf[affine_group_bytes(c, h, lg)]);
    for (int t = 0; t < NT; ++t) {
      const uint8_t* at = ac + t * astride;
      const __m256 dl = _mm256_loadu_ps(reinterpret_cast<const float*>(at + 64) + 8 * h);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q8_dot_ss(x, q8_load(at + 32 * h))), _mm256_mul_ps(dl, sv), acc[t]);
    }
  };
  if constexpr (four) {
    int64_t c = 0;
#if SLUICE_Q8_AVX512
    // Two chunks per 512-bit step: lanes 0-7 are acc0's (even chunks), 8-15 acc1's (odd), the
    // same fma chains as the 256-bit loop below.
    __m512 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    // Lane l's group within a pair of chunks: 4 groups of 32, 2 of 64 or 1 of 128.
    const __m512i gidx = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           static_cast<unsigned>(lg - 3));
    for (; c + 2 <= nc; c += 2) {
      const uint8_t* ac = a + static_cast<size_t>(c) * kAffineChunkBytes;
      const AffinePairCodes w(codes, sf, c, lg, gidx);
      for (int t = 0; t < NT; ++t) acc[t] = affine_pair4(w, AffinePairAct(ac + t * astride), acc[t]);
    }
    for (int t = 0; t < NT; ++t) {
      acc0[t] = _mm512_castps512_ps256(acc[t]);
      acc1[t] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t]), 1));
    }
#endif
    for (; c + 2 <= nc; c += 2) {
      four_chunk(c, acc0);
      four_chunk(c + 1, acc1);
    }
    if (c < nc) four_chunk(c, acc0);
  } else {
    for (int64_t c = 0; c < nc; ++c) {
      byte_half(c, 0, acc0);
      byte_half(c, 1, acc1);
    }
  }
  for (int t = 0; t < NT; ++t) {
    alignas(32) float B[8];
    affine_bias_lanes(bf, gs + t * ng, ng, B);
    y[t * ystride] = q8_hsum(_mm256_add_ps(_mm256_add_ps(acc0[t], acc1[t]), _mm256_load_ps(B)));
  }
#else
  for (int t = 0; t < NT; ++t) {
    float L[2][8] = {};
    for (int64_t c = 0; c < nc; ++c) {
      const uint8_t* at = a + static_cast<size_t>(c) * kAffineChunkBytes + t * astride;
      const auto* q = reinterpret_cast<const int8_t*>(at);
      float dl[16];
      std::memcpy(dl, at + 64, sizeof dl);
      for (int h = 0; h < (four ? 1 : 2); ++h)
        for (int l = 0; l < 8; ++l) {
          int32_t isum = 0;
          int64_t g;
          if (four) {
            for (int i = 0; i < 4; ++i) {
              const uint8_t raw = codes[32 * c + 4 * l + i];
              isum += (raw & 0xF) * q[4 * l + i] + (raw >> 4) * q[32 + 4 * l + i];
            }
            g = affine_group_4bit(c, l, lg);
          } else {
            for (int i = 0; i < 4; ++i)
              isum += (static_cast<int>(codes[64 * c + 32 * h + 4 * l + i]) - 128) * q[32 * h + 4 * l + i];
            g = affine_group_bytes(c, h, lg);
          }
          float& acc = L[four ? c & 1 : h][l];
          acc = std::fma(static_cast<float>(isum), dl[8 * h + l] * sf[g], acc);
        }
    }
    float B[8], S[8];
    affine_bias_lanes(bf, gs + t * ng, ng, B);
    for (int l = 0; l < 8; ++l) S[l] = (L[0][l] + L[1][l]) + B[l];
    y[t * ystride] = ((S[0] + S[4]) + (S[2] + S[6])) + ((S[1] + S[5]) + (S[3] + S[7]));  // q8_hsum's order
  }
#endif
}

#if SLUICE_Q8_SIMD && SLUICE_Q8_AVX512
// Rows r and r + 1 of 4-bit codes against one token (decode): affine_row_dot<1, true>'s
// operations for each row, interleaved so that one row's accumulator chain and reduction overlap
// the other's loads and dot products (a row of 768 inputs spent a third of its time waiting on
// its own chain), and each activation vector is loaded once for both.
inline void affine_two_rows_4bit(const uint8_t* const codes[2], const float* const sf[2], const float* const bf[2],
                                 const float* gs, int64_t ng, int lg, int64_t n, const uint8_t* a, float* const y[2]) {
  const int64_t nc = n / kAffineChunk;
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512i gidx = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         static_cast<unsigned>(lg - 3));
  int64_t c = 0;
  for (; c + 2 <= nc; c += 2) {
    const AffinePairAct p(a + static_cast<size_t>(c) * kAffineChunkBytes);
    for (int r = 0; r < 2; ++r) acc[r] = affine_pair4(AffinePairCodes(codes[r], sf[r], c, lg, gidx), p, acc[r]);
  }
  for (int r = 0; r < 2; ++r) {
    __m256 acc0 = _mm512_castps512_ps256(acc[r]);
    const __m256 acc1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r]), 1));
    // the last, even chunk: affine_row_dot's four_chunk into acc0
    if (c < nc) acc0 = affine_chunk4(codes[r], sf[r], c, lg, a + static_cast<size_t>(c) * kAffineChunkBytes, acc0);
    alignas(32) float B[8];
    affine_bias_lanes(bf[r], gs, ng, B);
    *y[r] = q8_hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_load_ps(B)));
  }
}
#endif

// A token's group sums gs[ng] from its activation row (the blocks' d·Σq in block order).
inline void affine_group_sums(const uint8_t* a, int64_t n, int lg, float* gs) {
  const int64_t nb = n / 32, per = (int64_t{1} << lg) / 32;
  for (int64_t g = 0; g < nb / per; ++g) {
    float s = 0.0f;
    for (int64_t k = g * per; k < (g + 1) * per; ++k) {
      float v;
      std::memcpy(&v, a + static_cast<size_t>(k / 2) * kAffineChunkBytes + 128 + 4 * (k % 2), 4);
      s += v;
    }
    gs[g] = s;
  }
}

// One row against n_tok tokens, four at a time.
template <bool four>
void affine_row_tokens(const uint8_t* codes, const float* sf, const float* bf, const float* gs, int64_t ng, int lg,
                       int64_t n, const uint8_t* a, size_t a_row_bytes, int64_t n_tok, float* y, size_t ldy) {
  int64_t t = 0;
  for (; t + 4 <= n_tok; t += 4)
    affine_row_dot<4, four>(codes, sf, bf, gs + t * ng, ng, lg, n, a + t * a_row_bytes, a_row_bytes, y + t * ldy, ldy);
  const int64_t rest = n_tok - t;
  const uint8_t* at = a + t * a_row_bytes;
  const float* gt = gs + t * ng;
  float* yt = y + t * ldy;
  if (rest == 3) affine_row_dot<3, four>(codes, sf, bf, gt, ng, lg, n, at, a_row_bytes, yt, ldy);
  if (rest == 2) affine_row_dot<2, four>(codes, sf, bf, gt, ng, lg, n, at, a_row_bytes, yt, ldy);
  if (rest == 1) affine_row_dot<1, four>(codes, sf, bf, gt, ng, lg, n, at, a_row_bytes, yt, ldy);
}

// Rows prefetched ahead (MLX 4-bit 2048x131072, one thread, Zen 4: 4 rows ahead towards L2
// 13.6-16.2 GB/s, 1 row into L1 12.0-13.7; noisy, within the VM's spread).
constexpr int64_t kAffinePrefetchRows = 4;

// AffineOps::gemm: y[t·ldy + r] = dot(W_r, A_t) for r < n_rows, t < n_tok.
inline void affine_gemm(const AffineRows& w, int64_t n_rows, const uint8_t* a, size_t a_row_bytes, int64_t n_tok,
                        int64_t n, float* y, size_t ldy) {
  const int G = w.group_size, lg = G == 32 ? 5 : G == 64 ? 6 : 7;
  // ng8: the groups zero-padded to a multiple of 8 (affine_bias_lanes); + 4: a pair of chunks
  // reads 4 scales.
  const int64_t n_groups = n / G, ng8 = (n_groups + 7) / 8 * 8, stride = ng8 + 4;
  const bool four = w.bits == 4, unpack = w.bits != 4 && w.bits != 8;
  thread_local std::vector<float> groups;
  thread_local std::vector<uint8_t> bytes;
  groups.assign(static_cast<size_t>(4 * stride + n_tok * ng8), 0.0f);
  if (unpack) bytes.resize(static_cast<size_t>(n));
  // Two rows' scales and biases (sf[i], bf[i]), then each token's group sums gs.
  const float* const sf[2] = {groups.data(), groups.data() + 2 * stride};
  const float* const bf[2] = {sf[0] + stride, sf[1] + stride};
  float* gs = groups.data() + 4 * stride;
  for (int64_t t = 0; t < n_tok; ++t) affine_group_sums(a + t * a_row_bytes, n, lg, gs + t * ng8);
  // Row r's codes (unpacked to bytes for 2, 3, 5, 6 bits) and its groups into slot i.
  auto row = [&](int64_t r, int i) {
    // The rows kAffinePrefetchRows ahead towards L2 (codes and planes): three streams of one
    // row each per 100 ns or so, more than the hardware prefetchers keep ahead of on their own.
    if (r + kAffinePrefetchRows < n_rows) {
      const size_t g = static_cast<size_t>(r + kAffinePrefetchRows);
      for (size_t o = 0; o < w.code_row_bytes; o += 64) __builtin_prefetch(w.codes + g * w.code_row_bytes + o, 0, 2);
      __builtin_prefetch(w.scales + g * w.group_row_bytes, 0, 2);
      __builtin_prefetch(w.biases + g * w.group_row_bytes, 0, 2);
    }
    const uint8_t* codes = w.codes + static_cast<size_t>(r) * w.code_row_bytes;
    if (unpack) {
      affine_unpack_bytes(codes, w.bits, n, bytes.data());
      codes = bytes.data();
    }
    affine_row_groups(w, r, n_groups, !four, const_cast<float*>(sf[i]), const_cast<float*>(bf[i]));
    return codes;
  };
  int64_t r = 0;
#if SLUICE_Q8_SIMD && SLUICE_Q8_AVX512
  if (four && n_tok == 1)
    for (; r + 2 <= n_rows; r += 2) {
      const uint8_t* const codes[2] = {row(r, 0), row(r + 1, 1)};
      float* const yr[2] = {y + r, y + r + 1};
      affine_two_rows_4bit(codes, sf, bf, gs, ng8, lg, n, a, yr);
    }
#endif
  for (; r < n_rows; ++r) {
    const uint8_t* codes = row(r, 0);
    if (four)
      affine_row_tokens<true>(codes, sf[0], bf[0], gs, ng8, lg, n, a, a_row_bytes, n_tok, y + r, ldy);
    else
      affine_row_tokens<false>(codes, sf[0], bf[0], gs, ng8, lg, n, a, a_row_bytes, n_tok, y + r, ldy);
  }
}

inline void affine_act_prepare(const float* x, int64_t n, int bits, uint8_t* out) {
  affine_act_prepare_with(SLUICE_Q8_QUANTIZE_Q8_0, x, n, bits, out);
}
