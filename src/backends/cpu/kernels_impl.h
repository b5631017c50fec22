// backends/cpu/kernels_impl: the kernel bodies, written once against a `Simd` struct and
// instantiated by each kernels_<isa>.cpp, which defines Simd in its own namespace and then
// includes this file inside that namespace (so this file includes nothing itself: the
// includer provides <cstring>, <cstdint>, <cstddef> and kernels.h).
//
// Simd provides: W (lanes), kTileTok (tokens per gemm tile), V, zero, set1, load, store,
// load_f16, store_f16, load_bf16, add, mul, div, fma(a, b, c) = a·b + c, max, reduce_add,
// reduce_max, exp; and, where the includer sets SLUICE_CPU_QUANT_FAST_PATHS to 1 (it must
// then also include quant/blocks.h), from_i8 (W int8 -> float), ubits(p, shift, mask)
// (W bytes -> float((p[i] >> shift) & mask)), half (one fp16 -> float) and
// mul_sub(a, b, c) = a·b - c rounded twice, never fused.
//
// Keep std:: templates out of ISA files: an inline function instantiated here with AVX-512
// code generation could be merged by the linker with the generic one and then run on a CPU
// without AVX-512.

using V = Simd::V;
constexpr int W = Simd::W;

struct LoadF32 {
  using T = float;
  static V load(const float* p) { return Simd::load(p); }
};
struct LoadF16 {
  using T = uint16_t;
  static V load(const uint16_t* p) { return Simd::load_f16(p); }
};
struct LoadBF16 {
  using T = uint16_t;
  static V load(const uint16_t* p) { return Simd::load_bf16(p); }
};

// Load k < W elements, zero-padded to a full vector.
template <class L>
inline V load_tail(const typename L::T* p, int64_t k) {
  typename L::T buf[W] = {};
  std::memcpy(buf, p, static_cast<size_t>(k) * sizeof(typename L::T));
  return L::load(buf);
}

// R rows × TT tokens of dot products, one accumulator each (see the contract in kernels.h).
template <class L, int R, int TT>
inline void gemm_tile(const typename L::T* w, size_t ldw, const float* x, size_t ldx, int64_t n, float* y, size_t ldy) {
  V acc[R][TT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) acc[r][t] = Simd::zero();
  const int64_t nf = n - n % W;
  for (int64_t i = 0; i < nf; i += W) {
    V xv[TT];
    for (int t = 0; t < TT; ++t) xv[t] = Simd::load(x + t * ldx + i);
    for (int r = 0; r < R; ++r) {
      const V wv = L::load(w + r * ldw + i);
      for (int t = 0; t < TT; ++t) acc[r][t] = Simd::fma(wv, xv[t], acc[r][t]);
    }
  }
  if (nf < n) {
    V xv[TT];
    for (int t = 0; t < TT; ++t) xv[t] = load_tail<LoadF32>(x + t * ldx + nf, n - nf);
    for (int r = 0; r < R; ++r) {
      const V wv = load_tail<L>(w + r * ldw + nf, n - nf);
      for (int t = 0; t < TT; ++t) acc[r][t] = Simd::fma(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) y[t * ldy + r] = Simd::reduce_add(acc[r][t]);
}

template <class L, int TT>
inline void gemm_rows(const typename L::T* w, size_t ldw, int64_t n_rows, const float* x, size_t ldx, int64_t n,
                      float* y, size_t ldy) {
  constexpr int R = 4;
  int64_t r = 0;
  for (; r + R <= n_rows; r += R) gemm_tile<L, R, TT>(w + r * ldw, ldw, x, ldx, n, y + r, ldy);
  for (; r < n_rows; ++r) gemm_tile<L, 1, TT>(w + r * ldw, ldw, x, ldx, n, y + r, ldy);
}

// Token tiles outside, rows inside: the TT activation rows stay in L1 while the weight rows
// (a block the caller sized for L2) stream past them.
template <class L>
void gemm(const typename L::T* w, size_t ldw, int64_t n_rows, const float* x, size_t ldx, int64_t n_tok, int64_t n,
          float* y, size_t ldy) {
  constexpr int TT = Simd::kTileTok;
  int64_t t = 0;
  for (; t + TT <= n_tok; t += TT) gemm_rows<L, TT>(w, ldw, n_rows, x + t * ldx, ldx, n, y + t * ldy, ldy);
  for (; t < n_tok; ++t) gemm_rows<L, 1>(w, ldw, n_rows, x + t * ldx, ldx, n, y + t * ldy, ldy);
}

void gemm_f32(const float* w, size_t ldw, int64_t n_rows, const float* x, size_t ldx, int64_t n_tok, int64_t n,
              float* y, size_t ldy) {
  gemm<LoadF32>(w, ldw, n_rows, x, ldx, n_tok, n, y, ldy);
}
void gemm_f16(const uint16_t* w, size_t ldw, int64_t n_rows, const float* x, size_t ldx, int64_t n_tok, int64_t n,
              float* y, size_t ldy) {
  gemm<LoadF16>(w, ldw, n_rows, x, ldx, n_tok, n, y, ldy);
}
void gemm_bf16(const uint16_t* w, size_t ldw, int64_t n_rows, const float* x, size_t ldx, int64_t n_tok, int64_t n,
               float* y, size_t ldy) {
  gemm<LoadBF16>(w, ldw, n_rows, x, ldx, n_tok, n, y, ldy);
}

float dot_f32(const float* a, const float* b, int64_t n) {
  float y = 0;
  gemm_tile<LoadF32, 1, 1>(a, 0, b, 0, n, &y, 0);
  return y;
}
float dot_f16(const uint16_t* a, const float* b, int64_t n) {
  float y = 0;
  gemm_tile<LoadF16, 1, 1>(a, 0, b, 0, n, &y, 0);
  return y;
}

// Apply f(i, k) for full vectors (k == W) and then the tail (k < W) of an elementwise loop.
// Elementwise ops go through a zero-padded buffer at the tail so every lane sees one code path.
template <class F>
inline void for_each_vec(int64_t n, F f) {
  const int64_t nf = n - n % W;
  for (int64_t i = 0; i < nf; i += W) f(i, static_cast<int64_t>(W));
  if (nf < n) f(nf, n - nf);
}

inline V loadn(const float* p, int64_t k) { return k == W ? Simd::load(p) : load_tail<LoadF32>(p, k); }
inline void storen(float* p, V v, int64_t k) {
  if (k == W) {
    Simd::store(p, v);
  } else {
    float buf[W];
    Simd::store(buf, v);
    std::memcpy(p, buf, static_cast<size_t>(k) * sizeof(float));
  }
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  const V av = Simd::set1(a);
  for_each_vec(n, [&](int64_t i, int64_t k) { storen(y + i, Simd::fma(av, loadn(x + i, k), loadn(y + i, k)), k); });
}
void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
  const V av = Simd::set1(a);
  for_each_vec(n, [&](int64_t i, int64_t k) {
    const V xv = k == W ? Simd::load_f16(x + i) : load_tail<LoadF16>(x + i, k);
    storen(y + i, Simd::fma(av, xv, loadn(y + i, k)), k);
  });
}

// Chunks of 4 vectors of y outside, rows inside: each element still sees the rows in order.
template <class L>
void axpy_rows(const float* a, const typename L::T* x, size_t ldx, int64_t n_rows, float* y, int64_t n) {
  constexpr int U = 4;
  int64_t i = 0;
  for (; i + U * W <= n; i += U * W) {
    V acc[U];
    for (int u = 0; u < U; ++u) acc[u] = Simd::load(y + i + u * W);
    for (int64_t j = 0; j < n_rows; ++j) {
      const V aj = Simd::set1(a[j]);
      for (int u = 0; u < U; ++u) acc[u] = Simd::fma(aj, L::load(x + j * ldx + i + u * W), acc[u]);
    }
    for (int u = 0; u < U; ++u) Simd::store(y + i + u * W, acc[u]);
  }
  for (; i < n; i += W) {
    const int64_t k = n - i < W ? n - i : W;
    V acc = loadn(y + i, k);
    for (int64_t j = 0; j < n_rows; ++j)
      acc = Simd::fma(Simd::set1(a[j]), k == W ? L::load(x + j * ldx + i) : load_tail<L>(x + j * ldx + i, k), acc);
    storen(y + i, acc, k);
  }
}
void axpy_rows_f32(const float* a, const float* x, size_t ldx, int64_t n_rows, float* y, int64_t n) {
  axpy_rows<LoadF32>(a, x, ldx, n_rows, y, n);
}
void axpy_rows_f16(const float* a, const uint16_t* x, size_t ldx, int64_t n_rows, float* y, int64_t n) {
  axpy_rows<LoadF16>(a, x, ldx, n_rows, y, n);
}

// matmul_acc_f32: R rows × NV vectors of C in registers; per p, NV loads of B's row p and one
// broadcast of A[i][p] per row. Columns past the last whole vector go element by element.
template <int R, int NV>
inline void matmul_acc_block(const float* a, size_t lda, const float* b, size_t ldb, float* c, size_t ldc, int64_t k) {
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = Simd::load(c + r * ldc + v * W);
  for (int64_t p = 0; p < k; ++p) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = Simd::load(b + p * ldb + v * W);
    for (int r = 0; r < R; ++r) {
      const V av = Simd::set1(a[r * lda + p]);
      for (int v = 0; v < NV; ++v) acc[r][v] = Simd::fma(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) Simd::store(c + r * ldc + v * W, acc[r][v]);
}

template <int NV>
inline void matmul_acc_cols(const float* a, size_t lda, const float* b, size_t ldb, float* c, size_t ldc, int64_t m,
                            int64_t k) {
  constexpr int R = 6;  // 12 accumulators at NV = 2: two FMAs per cycle through a 4-6 cycle latency
  int64_t i = 0;
  for (; i + R <= m; i += R) matmul_acc_block<R, NV>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, k);
  for (; i + 2 <= m; i += 2) matmul_acc_block<2, NV>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, k);
  for (; i < m; ++i) matmul_acc_block<1, NV>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, k);
}

void matmul_acc_f32(const float* a, size_t lda, const float* b, size_t ldb, float* c, size_t ldc, int64_t m, int64_t n,
                    int64_t k) {
  int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) matmul_acc_cols<2>(a, lda, b + j, ldb, c + j, ldc, m, k);
  for (; j + W <= n; j += W) matmul_acc_cols<1>(a, lda, b + j, ldb, c + j, ldc, m, k);
  // The last columns (callers pad to whole vectors to stay off this path): one lane of the
  // level's own fma, so a column's sums do not depend on where it falls.
  for (; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      float lane[W];
      V acc = Simd::set1(c[i * ldc + j]);
      for (int64_t p = 0; p < k; ++p) acc = Simd::fma(Simd::set1(a[i * lda + p]), Simd::set1(b[p * ldb + j]), acc);
      Simd::store(lane, acc);
      c[i * ldc + j] = lane[0];
    }
}

void f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  for_each_vec(n, [&](int64_t i, int64_t k) {
    storen(y + i, k == W ? Simd::load_f16(x + i) : load_tail<LoadF16>(x + i, k), k);
  });
}
void bf16_to_f32(const uint16_t* x, float* y, int64_t n) {
  for_each_vec(n, [&](int64_t i, int64_t k) {
    storen(y + i, k == W ? Simd::load_bf16(x + i) : load_tail<LoadBF16>(x + i, k), k);
  });
}
void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  for_each_vec(n, [&](int64_t i, int64_t k) {
    if (k == W) {
      Simd::store_f16(y + i, Simd::load(x + i));
    } else {
      uint16_t buf[W];
      Simd::store_f16(buf, loadn(x + i, k));
      std::memcpy(y + i, buf, static_cast<size_t>(k) * sizeof(uint16_t));
    }
  });
}

float sum_sq(const float* x, int64_t n) {
  V acc = Simd::zero();
  for_each_vec(n, [&](int64_t i, int64_t k) {
    const V v = loadn(x + i, k);
    acc = Simd::fma(v, v, acc);
  });
  return Simd::reduce_add(acc);
}

void scale_mul(const float* x, float s, const float* w, float* y, int64_t n) {
  const V sv = Simd::set1(s);
  if (w) {
    for_each_vec(n, [&](int64_t i, int64_t k) {
      storen(y + i, Simd::mul(Simd::mul(loadn(x + i, k), sv), loadn(w + i, k)), k);
    });
  } else {
    for_each_vec(n, [&](int64_t i, int64_t k) { storen(y + i, Simd::mul(loadn(x + i, k), sv), k); });
  }
}

float max_f32(const float* x, int64_t n) {
  if (n <= 0) return -__builtin_inff();
  V m = Simd::set1(x[0]);  // the tail pads with x[0], which cannot change the max
  for_each_vec(n, [&](int64_t i, int64_t k) {
    V v;
    if (k == W) {
      v = Simd::load(x + i);
    } else {
      float buf[W];
      for (int j = 0; j < W; ++j) buf[j] = x[0];
      std::memcpy(buf, x + i, static_cast<size_t>(k) * sizeof(float));
      v = Simd::load(buf);
    }
    m = Simd::max(m, v);
  });
  return Simd::reduce_max(m);
}

float exp_sub_sum(float* x, float m, int64_t n) {
  const V mv = Simd::set1(m);
  V acc = Simd::zero();
  for_each_vec(n, [&](int64_t i, int64_t k) {
    const V e = Simd::exp(Simd::sub(loadn(x + i, k), mv));
    storen(x + i, e, k);
    if (k == W) {
      acc = Simd::add(acc, e);
    } else {  // padded lanes hold exp(0 - m): zero them before summing
      float buf[W];
      Simd::store(buf, e);
      for (int j = static_cast<int>(k); j < W; ++j) buf[j] = 0.0f;
      acc = Simd::add(acc, Simd::load(buf));
    }
  });
  return Simd::reduce_add(acc);
}

// silu(g)·u = g / (1 + exp(-g)) · u
void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  const V one = Simd::set1(1.0f), zero = Simd::zero();
  for_each_vec(n, [&](int64_t i, int64_t k) {
    const V g = loadn(gate + i, k);
    const V s = Simd::div(g, Simd::add(one, Simd::exp(Simd::sub(zero, g))));
    storen(out + i, Simd::mul(s, loadn(up + i, k)), k);
  });
}

// min(silu(g), L) · clamp(u, -L, L), with min(a, b) = -max(-a, -b).
void swiglu_limit(const float* gate, const float* up, float* out, int64_t n, float limit) {
  const V one = Simd::set1(1.0f), zero = Simd::zero(), lo = Simd::set1(-limit);
  for_each_vec(n, [&](int64_t i, int64_t k) {
    const V g = loadn(gate + i, k);
    const V s = Simd::div(g, Simd::add(one, Simd::exp(Simd::sub(zero, g))));
    const V s_min = Simd::sub(zero, Simd::max(Simd::sub(zero, s), lo));
    const V u = Simd::max(Simd::sub(zero, Simd::max(Simd::sub(zero, loadn(up + i, k)), lo)), lo);
    storen(out + i, Simd::mul(s_min, u), k);
  });
}

// gelu(x) = 0.5x(1 + tanh(y)), y = sqrt(2/π)(x + 0.044715x³). Since 1 + tanh(y) = 2/(1 + e^(-2y)),
// this is x / (1 + e^(-2y)): no cancellation for large negative x, unlike 1 - 2/(e^(2y) + 1).
void gelu(const float* x, float* out, int64_t n) {
  const V one = Simd::set1(1.0f), c = Simd::set1(0.044715f), m2k = Simd::set1(-2.0f * 0.7978845608028654f);
  for_each_vec(n, [&](int64_t i, int64_t k) {
    const V v = loadn(x + i, k);
    const V y = Simd::mul(v, Simd::fma(Simd::mul(c, v), v, one));  // x + 0.044715x³
    storen(out + i, Simd::div(v, Simd::add(one, Simd::exp(Simd::mul(m2k, y)))), k);
  });
}

void add(const float* a, const float* b, float* out, int64_t n) {
  for_each_vec(n, [&](int64_t i, int64_t k) { storen(out + i, Simd::add(loadn(a + i, k), loadn(b + i, k)), k); });
}

// ---- quantized weights ------------------------------------------------------------------
// Each decoder mirrors quant/'s dequantize_row_* operation for operation. The packed
// integers are unpacked straight into float lanes (Simd::ubits: (byte >> shift) & mask),
// and every integer the reference forms (q - 8, low | high << 4, ... - 32) is rebuilt by
// float adds of small integers, which is exact. Then y = a·q - b per sub-block, with a and b
// computed in float exactly as the reference computes them. Simd::mul_sub must not fuse
// (an FMA would round once where the reference rounds twice).
#if SLUICE_CPU_QUANT_FAST_PATHS

struct DecQ8_0 {
  static constexpr int QK = QK8_0;
  using Block = block_q8_0;
  static void block(const Block& b, float* y) {
    const V d = Simd::set1(Simd::half(b.d));
    for (int k = 0; k < QK; k += W) Simd::store(y + k, Simd::mul(Simd::from_i8(b.qs + k), d));
  }
};

struct DecQ4_0 {
  static constexpr int QK = QK4_0;
  using Block = block_q4_0;
  static void block(const Block& b, float* y) {
    const V d = Simd::set1(Simd::half(b.d)), eight = Simd::set1(8.0f);
    for (int k = 0; k < QK / 2; k += W) {
      Simd::store(y + k, Simd::mul(Simd::sub(Simd::ubits(b.qs + k, 0, 0xF), eight), d));
      Simd::store(y + k + QK / 2, Simd::mul(Simd::sub(Simd::ubits(b.qs + k, 4, 0xF), eight), d));
    }
  }
};

// x = q·d + m, computed as q·d - (-m): subtracting the negation is the same IEEE operation.
struct DecQ4_1 {
  static constexpr int QK = QK4_1;
  using Block = block_q4_1;
  static void block(const Block& b, float* y) {
    const V d = Simd::set1(Simd::half(b.d)), negm = Simd::set1(-Simd::half(b.m));
    for (int k = 0; k < QK / 2; k += W) {
      Simd::store(y + k, Simd::mul_sub(Simd::ubits(b.qs + k, 0, 0xF), d, negm));
      Simd::store(y + k + QK / 2, Simd::mul_sub(Simd::ubits(b.qs + k, 4, 0xF), d, negm));
    }
  }
};

// Q8_A (MLX's 6-/8-bit groups): x = q·d + m with 8-bit codes, as DecQ4_1.
struct DecQ8_A {
  static constexpr int QK = 32;
  using Block = block_q8_a;
  static void block(const Block& b, float* y) {
    const V d = Simd::set1(Simd::half(b.d)), negm = Simd::set1(-Simd::half(b.m));
    for (int k = 0; k < QK; k += W) Simd::store(y + k, Simd::mul_sub(Simd::ubits(b.qs + k, 0, 0xFF), d, negm));
  }
};

// q2_K: per 128-element half, 4 planes (shift 0, 2, 4, 6) of 32 bytes, each two sub-blocks
// of 16 with scale (d·(sc & 15)) and min (dmin·(sc >> 4)).
struct DecQ2_K {
  static constexpr int QK = QK_K;
  using Block = block_q2_K;
  static void block(const Block& b, float* y) {
    const float d = Simd::half(b.d), dmin = Simd::half(b.dmin);
    int is = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = b.qs + 32 * h;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int k = 0; k < 2; ++k, ++is, y += 16) {
          const uint8_t sc = b.scales[is];
          const V dl = Simd::set1(d * static_cast<float>(sc & 0xF)),
                  ml = Simd::set1(dmin * static_cast<float>(sc >> 4));
          for (int l = 0; l < 16; l += W)
            Simd::store(y + l, Simd::mul_sub(dl, Simd::ubits(q + 16 * k + l, shift, 3), ml));
        }
      }
    }
  }
};

// q3_K: element 128h + 32p + l has low bits (qs[32h + l] >> 2p) & 3 and high bit
// (hmask[l] >> (4h + p)) & 1; q = low - 4 + 4·high; 16 signed 6-bit scales (quant/'s
// q3_K_scale), y = (d·scale)·q.
struct DecQ3_K {
  static constexpr int QK = QK_K;
  using Block = block_q3_K;
  static int scale(const uint8_t* s, int j) {
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
  }
  static void block(const Block& b, float* y) {
    const float d = Simd::half(b.d);
    const V four = Simd::set1(4.0f);
    for (int h = 0; h < 2; ++h)
      for (int p = 0; p < 4; ++p)
        for (int l = 0; l < 32; l += W) {
          const V lo = Simd::ubits(b.qs + 32 * h + l, 2 * p, 3);
          const V q = Simd::sub(Simd::fma(Simd::ubits(b.hmask + l, 4 * h + p, 1), four, lo), four);
          const int e = 128 * h + 32 * p + l;  // W ≤ 16: these lanes share sub-block e / 16
          Simd::store(y + e, Simd::mul(Simd::set1(d * static_cast<float>(scale(b.scales, e / 16))), q));
        }
  }
};

// The 6-bit scale and min of sub-block j of a q4_K/q5_K block (quant/blocks.h's
// get_scale_min_k4, repeated here so no inline function is compiled with ISA flags and
// shared with generic code by the linker).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// q4_K (kHighBit false) and q5_K: 4 chunks of 64 = two sub-blocks of 32 each (low nibbles,
// then high nibbles of the same 32 bytes); x = (d·sc)·q - dmin·m.
template <bool kHighBit>
inline void decode_k4(float d, float dmin, const uint8_t* scales, const uint8_t* qs, const uint8_t* qh, float* y) {
  const V sixteen = Simd::set1(16.0f);
  for (int c = 0; c < QK_K / 64; ++c, qs += 32, y += 64) {
    uint8_t sc, m;
    scale_min_k4(2 * c, scales, &sc, &m);
    const V d1 = Simd::set1(d * sc), m1 = Simd::set1(dmin * m);
    scale_min_k4(2 * c + 1, scales, &sc, &m);
    const V d2 = Simd::set1(d * sc), m2 = Simd::set1(dmin * m);
    for (int k = 0; k < 32; k += W) {
      V lo = Simd::ubits(qs + k, 0, 0xF), hi = Simd::ubits(qs + k, 4, 0xF);
      if (kHighBit) {  // bit 2c of qh[l] is bit 4 of element 64c + l, bit 2c+1 of 64c + 32 + l
        lo = Simd::fma(Simd::ubits(qh + k, 2 * c, 1), sixteen, lo);
        hi = Simd::fma(Simd::ubits(qh + k, 2 * c + 1, 1), sixteen, hi);
      }
      Simd::store(y + k, Simd::mul_sub(d1, lo, m1));
      Simd::store(y + 32 + k, Simd::mul_sub(d2, hi, m2));
    }
  }
}

struct DecQ4_K {
  static constexpr int QK = QK_K;
  using Block = block_q4_K;
  static void block(const Block& b, float* y) {
    decode_k4<false>(Simd::half(b.d), Simd::half(b.dmin), b.scales, b.qs, nullptr, y);
  }
};

struct DecQ5_K {
  static constexpr int QK = QK_K;
  using Block = block_q5_K;
  static void block(const Block& b, float* y) {
    decode_k4<true>(Simd::half(b.d), Simd::half(b.dmin), b.scales, b.qs, b.qh, y);
  }
};

// q6_K: per 128-element half, element l + 32p (p < 4) has low nibble from ql (l or l + 32,
// low or high nibble) and 2 high bits from qh[l] at shift 2p; q - 32; sub-blocks of 16
// scaled by (d·sc[s]), the reference's left-to-right d·sc·q.
struct DecQ6_K {
  static constexpr int QK = QK_K;
  using Block = block_q6_K;
  static void block(const Block& b, float* y) {
    const float d = Simd::half(b.d);
    const V sixteen = Simd::set1(16.0f), m32 = Simd::set1(32.0f);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      const int8_t* sc = b.scales + 8 * h;
      float* yh = y + 128 * h;
      for (int p = 0; p < 4; ++p) {
        const uint8_t* qlp = ql + 32 * (p & 1);
        const int nib_shift = p < 2 ? 0 : 4;
        for (int l = 0; l < 32; l += W) {
          const V lo = Simd::ubits(qlp + l, nib_shift, 0xF);
          const V q = Simd::sub(Simd::fma(Simd::ubits(qh + l, 2 * p, 3), sixteen, lo), m32);
          // W ≤ 16, so the W lanes at l lie in one 16-element sub-block: (32p + l) / 16.
          const float a = d * static_cast<float>(sc[(32 * p + l) / 16]);
          Simd::store(yh + 32 * p + l, Simd::mul(Simd::set1(a), q));
        }
      }
    }
  }
};

template <class D>
void decode_row(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const typename D::Block*>(src);
  for (int64_t i = 0; i < n / D::QK; ++i) D::block(b[i], dst + i * D::QK);
}

// Rows in groups of 4 (one accumulator each, like gemm_tile<4, 1>): each block of the 4 rows
// is decoded into an L1 buffer and consumed at once. n is a multiple of QK and QK of W,
// so the per-lane FMA sequence equals gemm_f32's over the decoded row.
template <class D, int R>
inline void gemv_rows(const uint8_t* w, size_t row_bytes, const float* x, int64_t n, float* y) {
  alignas(64) float buf[R][D::QK];
  V acc[R];
  for (int r = 0; r < R; ++r) acc[r] = Simd::zero();
  for (int64_t i = 0; i < n / D::QK; ++i) {
    for (int r = 0; r < R; ++r) D::block(reinterpret_cast<const typename D::Block*>(w + r * row_bytes)[i], buf[r]);
    const float* xb = x + i * D::QK;
    for (int k = 0; k < D::QK; k += W) {
      const V xv = Simd::load(xb + k);
      for (int r = 0; r < R; ++r) acc[r] = Simd::fma(Simd::load(buf[r] + k), xv, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = Simd::reduce_add(acc[r]);
}

template <class D>
void gemv(const void* w, size_t row_bytes, int64_t n_rows, const float* x, int64_t n, float* y) {
  const auto* wb = static_cast<const uint8_t*>(w);
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    prefetch_lines(wb + (r + 4) * row_bytes, 4 * row_bytes);
    gemv_rows<D, 4>(wb + r * row_bytes, row_bytes, x, n, y + r);
  }
  for (; r < n_rows; ++r) gemv_rows<D, 1>(wb + r * row_bytes, row_bytes, x, n, y + r);
}

template <class D>
constexpr QuantOps quant_ops() {
  static_assert(D::QK % W == 0);
  return {decode_row<D>, gemv<D>};
}

constexpr QuantOps kQ8_0 = quant_ops<DecQ8_0>(), kQ4_0 = quant_ops<DecQ4_0>(), kQ4_1 = quant_ops<DecQ4_1>(),
                   kQ8_A = quant_ops<DecQ8_A>(), kQ2_K = quant_ops<DecQ2_K>(), kQ3_K = quant_ops<DecQ3_K>(),
                   kQ4_K = quant_ops<DecQ4_K>(), kQ5_K = quant_ops<DecQ5_K>(), kQ6_K = quant_ops<DecQ6_K>();
#else
constexpr QuantOps kQ8_0{}, kQ4_0{}, kQ4_1{}, kQ8_A{}, kQ2_K{}, kQ3_K{}, kQ4_K{}, kQ5_K{}, kQ6_K{};
#endif

// constexpr: constant-initialized, so no start-up code runs with this file's ISA flags.
constexpr Kernels kTable = {
    .isa = kIsa,
    .lanes = W,
    .gemm_f32 = gemm_f32,
    .gemm_f16 = gemm_f16,
    .gemm_bf16 = gemm_bf16,
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .axpy_f32 = axpy_f32,
    .axpy_f16 = axpy_f16,
    .axpy_rows_f32 = axpy_rows_f32,
    .axpy_rows_f16 = axpy_rows_f16,
    .matmul_acc_f32 = matmul_acc_f32,
    .f16_to_f32 = f16_to_f32,
    .f32_to_f16 = f32_to_f16,
    .bf16_to_f32 = bf16_to_f32,
    .sum_sq = sum_sq,
    .scale_mul = scale_mul,
    .max = max_f32,
    .exp_sub_sum = exp_sub_sum,
    .swiglu = swiglu,
    .swiglu_limit = swiglu_limit,
    .gelu = gelu,
    .add = add,
    .q8_0 = kQ8_0,
    .q4_0 = kQ4_0,
    .q4_1 = kQ4_1,
    .q8_a = kQ8_A,
    .q2_K = kQ2_K,
    .q3_K = kQ3_K,
    .q4_K = kQ4_K,
    .q5_K = kQ5_K,
    .q6_K = kQ6_K,
};
