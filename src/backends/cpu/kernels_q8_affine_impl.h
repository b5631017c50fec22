// backends/cpu/kernels_q8_affine_impl: MLX affine weights (DType::MLX_A*, quant/mlx_affine.h) read
// where the file keeps them — codes packed LSB-first in uint32 words, one scale and one bias per
// group in their own arrays — against int8 activations. Part of kernels_q8_impl.h (its macros:
// SLUICE_Q8_SIMD, SLUICE_Q8_VNNI), so every level, the scalar twin and the emulated AVX-512 build
// get it.
//
// A weight is w = c·s + b (code c, the group's scale s and bias b), so for an activation block k
// quantized as x ≈ d_k·q (Q8_0's rounding),
//   Σ_i w_i·x_i ≈ Σ_k d_k·s_g·Σ_{i∈k} c_i·q_i  +  Σ_k d_k·b_g·Σ_{i∈k} q_i.
// Both sums are exact int32 per 32-bit lane; the float terms are added per lane in 8 lanes.
//
// The activation row (affine_act_prepare, once per token) holds per 64 inputs (kAffineChunk):
//   q[64]   the int8 quants. 4-bit codes: [q(2j) for j < 32 | q(2j+1) for j < 32], because the
//           low nibbles of the chunk's 32 code bytes are its even elements and the high nibbles
//           its odd ones; then lane l (bytes 4l..4l+3 of both halves) covers inputs 8l..8l+7.
//           Other widths: in order, lane l of half h covering inputs 32h + 4l..+3.
//   dl[16]  per lane the activation block's d (4-bit: lanes 0-7 only);
//   dq[16]  per lane d · Σ of the lane's quants (for the bias term).
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
    float dl[16] = {}, dq[16] = {};
    const block_q8_0* b = blocks.data() + 2 * c;
    const float d[2] = {fp16_to_fp32(b[0].d), fp16_to_fp32(b[1].d)};
    auto qv = [&](int i) { return static_cast<int>(b[i / 32].qs[i % 32]); };  // input i of the chunk
    if (bits == 4) {
      for (int j = 0; j < 32; ++j) {
        q[j] = static_cast<int8_t>(qv(2 * j));
        q[32 + j] = static_cast<int8_t>(qv(2 * j + 1));
      }
      for (int l = 0; l < 8; ++l) {
        int s = 0;
        for (int i = 8 * l; i < 8 * l + 8; ++i) s += qv(i);
        dl[l] = d[l / 4];
        dq[l] = d[l / 4] * static_cast<float>(s);
      }
    } else {
      for (int i = 0; i < 64; ++i) q[i] = static_cast<int8_t>(qv(i));
      for (int l = 0; l < 16; ++l) {
        int s = 0;
        for (int i = 4 * l; i < 4 * l + 4; ++i) s += qv(i);
        dl[l] = d[l / 8];
        dq[l] = d[l / 8] * static_cast<float>(s);
      }
    }
    std::memcpy(o + 64, dl, sizeof dl);
    std::memcpy(o + 64 + sizeof dl, dq, sizeof dq);
  }
}

// One row's group scales and biases as floats (biases + 128·scale for byte-wide codes).
inline void affine_row_groups(const AffineRows& w, int64_t r, int64_t n_groups, bool bytes, float* sf, float* bf) {
  const uint8_t* s = w.scales + static_cast<size_t>(r) * w.group_row_bytes;
  const uint8_t* b = w.biases + static_cast<size_t>(r) * w.group_row_bytes;
  auto at = [&](const uint8_t* p, int64_t i) {
    if (w.scale_type == DType::F32) {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return w.scale_type == DType::F16 ? q8_half(h) : bf16_to_fp32(h);
  };
  for (int64_t g = 0; g < n_groups; ++g) {
    sf[g] = at(s, g);
    bf[g] = bytes ? std::fma(128.0f, sf[g], at(b, g)) : at(b, g);
  }
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

// Scale (or bias) of lane l of a chunk (or half h of it) with group size G.
inline int64_t affine_group_4bit(int64_t c, int l, int G) { return (c * 64 + 8 * l) / G; }
inline int64_t affine_group_bytes(int64_t c, int h, int G) { return (c * 64 + 32 * h) / G; }

// NT tokens (activation rows a + t·astride) against one row: y[t·ystride].
template <int NT>
void affine_row_dot(const uint8_t* codes, bool four, const float* sf, const float* bf, int G, int64_t n,
                    const uint8_t* a, size_t astride, float* y, size_t ystride) {
  const int64_t nc = n / kAffineChunk;
#if SLUICE_Q8_SIMD
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t c = 0; c < nc; ++c) {
    const uint8_t* ac = a + static_cast<size_t>(c) * kAffineChunkBytes;
    if (four) {
      const __m256i raw = q8_load(codes + 32 * c);
      const __m256i lo = _mm256_and_si256(raw, _mm256_set1_epi8(0x0F));
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0x0F));
      __m256 sv, bv;
      if (G == 32) {
        sv = _mm256_set_m128(_mm_set1_ps(sf[2 * c + 1]), _mm_set1_ps(sf[2 * c]));
        bv = _mm256_set_m128(_mm_set1_ps(bf[2 * c + 1]), _mm_set1_ps(bf[2 * c]));
      } else {
        sv = _mm256_set1_ps(sf[c * 64 / G]);
        bv = _mm256_set1_ps(bf[c * 64 / G]);
      }
      for (int t = 0; t < NT; ++t) {
        const uint8_t* at = ac + t * astride;
        const __m256i isum = _mm256_add_epi32(q8_dot_us(lo, q8_load(at)), q8_dot_us(hi, q8_load(at + 32)));
        const __m256 dl = _mm256_loadu_ps(reinterpret_cast<const float*>(at + 64));
        const __m256 dq = _mm256_loadu_ps(reinterpret_cast<const float*>(at + 128));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dl, sv), acc[t]);
        acc[t] = _mm256_fmadd_ps(dq, bv, acc[t]);
      }
    } else {
      for (int h = 0; h < 2; ++h) {
        const __m256i x = _mm256_xor_si256(q8_load(codes + 64 * c + 32 * h), _mm256_set1_epi8(static_cast<char>(0x80)));
        const int64_t g = affine_group_bytes(c, h, G);
        const __m256 sv = _mm256_set1_ps(sf[g]), bv = _mm256_set1_ps(bf[g]);
        for (int t = 0; t < NT; ++t) {
          const uint8_t* at = ac + t * astride;
          const __m256i isum = q8_dot_ss(x, q8_load(at + 32 * h));
          const __m256 dl = _mm256_loadu_ps(reinterpret_cast<const float*>(at + 64) + 8 * h);
          const __m256 dq = _mm256_loadu_ps(reinterpret_cast<const float*>(at + 128) + 8 * h);
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dl, sv), acc[t]);
          acc[t] = _mm256_fmadd_ps(dq, bv, acc[t]);
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) y[t * ystride] = q8_hsum(acc[t]);
#else
  for (int t = 0; t < NT; ++t) {
    float L[8] = {};
    for (int64_t c = 0; c < nc; ++c) {
      const uint8_t* at = a + static_cast<size_t>(c) * kAffineChunkBytes + t * astride;
      const auto* q = reinterpret_cast<const int8_t*>(at);
      float dl[16], dq[16];
      std::memcpy(dl, at + 64, sizeof dl);
      std::memcpy(dq, at + 128, sizeof dq);
      for (int h = 0; h < (four ? 1 : 2); ++h)
        for (int l = 0; l < 8; ++l) {
          int32_t isum = 0;
          int64_t g;
          if (four) {
            for (int i = 0; i < 4; ++i) {
              const uint8_t raw = codes[32 * c + 4 * l + i];
              isum += (raw & 0xF) * q[4 * l + i] + (raw >> 4) * q[32 + 4 * l + i];
            }
            g = affine_group_4bit(c, l, G);
          } else {
            for (int i = 0; i < 4; ++i)
              isum += (static_cast<int>(codes[64 * c + 32 * h + 4 * l + i]) - 128) * q[32 * h + 4 * l + i];
            g = affine_group_bytes(c, h, G);
          }
          L[l] = std::fma(static_cast<float>(isum), dl[8 * h + l] * sf[g], L[l]);
          L[l] = std::fma(dq[8 * h + l], bf[g], L[l]);
        }
    }
    // q8_hsum's order
    y[t * ystride] = ((L[0] + L[4]) + (L[2] + L[6])) + ((L[1] + L[5]) + (L[3] + L[7]));
  }
#endif
}

// AffineOps::gemm: y[t·ldy + r] = dot(W_r, A_t) for r < n_rows, t < n_tok.
inline void affine_gemm(const AffineRows& w, int64_t n_rows, const uint8_t* a, size_t a_row_bytes, int64_t n_tok,
                        int64_t n, float* y, size_t ldy) {
  const int G = w.group_size;
  const int64_t n_groups = n / G;
  const bool four = w.bits == 4, unpack = w.bits != 4 && w.bits != 8;
  thread_local std::vector<float> groups;
  thread_local std::vector<uint8_t> bytes;
  groups.resize(static_cast<size_t>(2 * n_groups));
  if (unpack) bytes.resize(static_cast<size_t>(n));
  float *sf = groups.data(), *bf = sf + n_groups;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* codes = w.codes + static_cast<size_t>(r) * w.code_row_bytes;
    if (r + 1 < n_rows) prefetch_lines(codes + w.code_row_bytes, w.code_row_bytes);
    if (unpack) {
      affine_unpack_bytes(codes, w.bits, n, bytes.data());
      codes = bytes.data();
    }
    affine_row_groups(w, r, n_groups, !four, sf, bf);
    int64_t t = 0;
    for (; t + 4 <= n_tok; t += 4)
      affine_row_dot<4>(codes, four, sf, bf, G, n, a + t * a_row_bytes, a_row_bytes, y + t * ldy + r, ldy);
    switch (n_tok - t) {
      case 3:
        affine_row_dot<3>(codes, four, sf, bf, G, n, a + t * a_row_bytes, a_row_bytes, y + t * ldy + r, ldy);
        break;
      case 2:
        affine_row_dot<2>(codes, four, sf, bf, G, n, a + t * a_row_bytes, a_row_bytes, y + t * ldy + r, ldy);
        break;
      case 1:
        affine_row_dot<1>(codes, four, sf, bf, G, n, a + t * a_row_bytes, a_row_bytes, y + t * ldy + r, ldy);
        break;
      default: break;
    }
  }
}

inline void affine_act_prepare(const float* x, int64_t n, int bits, uint8_t* out) {
  affine_act_prepare_with(SLUICE_Q8_QUANTIZE_Q8_0, x, n, bits, out);
}
