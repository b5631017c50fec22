// backends/cpu/kernels_impl: the kernel bodies, written once against a `Simd` struct and
// instantiated by each kernels_<isa>.cpp, which defines Simd in its own namespace and then
// includes this file inside that namespace (so this file includes nothing itself: the
// includer provides <cstring>, <cstdint>, <cstddef> and kernels.h).
//
// Simd provides: W (lanes), kTileTok (tokens per gemm tile), V, zero, set1, load, store,
// load_f16, store_f16, load_bf16, add, mul, div, fma(a, b, c) = a·b + c, max, reduce_add,
// reduce_max, exp.
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
inline void gemm_tile(const typename L::T* w, size_t ldw, const float* x, size_t ldx, int64_t n, float* y,
                      size_t ldy) {
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
    for_each_vec(n, [&](int64_t i, int64_t k) { storen(y + i, Simd::mul(Simd::mul(loadn(x + i, k), sv), loadn(w + i, k)), k); });
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

const Kernels kTable = {
    kIsa,   W,        gemm_f32,  gemm_f16, gemm_bf16,  dot_f32,     dot_f16,   axpy_f32, axpy_f16, f16_to_f32,
    f32_to_f16, bf16_to_f32, sum_sq, scale_mul, max_f32, exp_sub_sum, swiglu, gelu,     add,
};
