// backends/cpu/attn_kernels_impl: the bodies of attn_kernels.h, written once against a
// `Simd` struct and included by each attn_kernels_<isa>.cpp inside its own namespace, after
// it has defined Simd, kQ8Scores (its AttnKernels::q8_0_scores, or nullptr) and kAxpyI16Q8 /
// kAxpyI16Q4 (its q8_0_axpy_i16 / q4_0_axpy_i16, or nullptr) with kAxpyI16NeedsVnni (so this file
// includes nothing: the includer provides <cstring>, <cstdint>, attn_kernels.h and
// quant/blocks.h).
//
// Simd provides: W (lanes), V, zero, set1, load, store, add, sub, mul, swap<L> (lanes i and
// i ^ L exchanged, L < W a power of two), fma(a, b, c) = a·b + c,
// reduce_add (the same tree as that ISA's Kernels::dot_f32), reduce_n (out[k] =
// reduce_add(a[k]) for kReduceN vectors at once, bit for bit; kReduceN 0: none), half
// (fp16 -> float), load_f16
// (W halves -> float), from_i8
// (W int8 -> float), ubits(p, shift, mask) (W bytes -> float((p[i] >> shift) & mask)); the tq
// lookup: Tab, tab(t16, cb) and lookup<B>(tab, p) = W centroids of the W B-bit indices packed
// LSB-first at p (t16: the 2^B centroids repeated to fill 16 entries, so a lookup may ignore
// index bits above B; cb: the full codebook, for B = 8); and the tile shapes kScoreTT (query
// heads per score tile), kScoreAcc (score accumulators: positions per tile = kScoreAcc/TT,
// 1..4), kAxpyTT (query heads per V tile) and kAxpyU (vectors of y per V tile).
//
// Legend: P positions, G query heads (one GQA group), D head dim, j position, g query head,
// i element; TT / R / U: query heads / positions / vectors of one register tile.
//
// Keep std:: templates out of this file (kernels_impl.h says why: an inline std:: function
// instantiated with AVX-512 code generation could be merged with the generic one).

using V = Simd::V;
constexpr int W = Simd::W;
static_assert(32 % (Simd::kAxpyU * W) == 0, "a head of D % 32 == 0 must be whole V tiles");

constexpr int imin(int a, int b) { return a < b ? a : b; }
constexpr int imax(int a, int b) { return a > b ? a : b; }

// ---- formats: W elements of one stored head, decoded as the reference decodes them -------

struct NoCtx {};

// f16: read in place (what Kernels::gemm_f16 / axpy_rows_f16 did, with the same sums).
struct FmtF16 {
  static constexpr bool kGamma = false;
  using Ctx = NoCtx;
  static Ctx ctx(const float*, int64_t) { return {}; }
  static V load(const Ctx&, const uint8_t* h, int64_t i) {
    return Simd::load_f16(reinterpret_cast<const uint16_t*>(h) + i);
  }
  static float gamma(const uint8_t*) { return 1.0f; }
  static int64_t head_bytes(int64_t D) { return 2 * D; }
};

// q8_0: x = q·d (quant/'s dequantize_q8_0; kernels_impl.h's DecQ8_0).
struct FmtQ8_0 {
  static constexpr bool kGamma = false;
  using Ctx = NoCtx;
  static Ctx ctx(const float*, int64_t) { return {}; }
  static V load(const Ctx&, const uint8_t* h, int64_t i) {
    const block_q8_0* b = reinterpret_cast<const block_q8_0*>(h) + i / QK8_0;
    return Simd::mul(Simd::from_i8(b->qs + i % QK8_0), Simd::set1(Simd::half(b->d)));
  }
  static float gamma(const uint8_t*) { return 1.0f; }
  static int64_t head_bytes(int64_t D) { return D / QK8_0 * static_cast<int64_t>(sizeof(block_q8_0)); }
};

// q4_0: x = (q - 8)·d, elements 0..15 in the low nibbles of qs[0..15], 16..31 in the high
// nibbles (quant/'s dequantize_q4_0). W <= 16, so W lanes never straddle the two halves.
struct FmtQ4_0 {
  static constexpr bool kGamma = false;
  using Ctx = NoCtx;
  static Ctx ctx(const float*, int64_t) { return {}; }
  static V load(const Ctx&, const uint8_t* h, int64_t i) {
    const block_q4_0* b = reinterpret_cast<const block_q4_0*>(h) + i / QK4_0;
    const int e = static_cast<int>(i % QK4_0);
    const V q = Simd::ubits(b->qs + e % (QK4_0 / 2), e < QK4_0 / 2 ? 0 : 4, 0xF);
    return Simd::mul(Simd::sub(q, Simd::set1(8.0f)), Simd::set1(Simd::half(b->d)));
  }
  static float gamma(const uint8_t*) { return 1.0f; }
  static int64_t head_bytes(int64_t D) { return D / QK4_0 * static_cast<int64_t>(sizeof(block_q4_0)); }
};

// tqB: the centroids cb[idx] in the rotated space; the head's γ (its first 2 bytes, fp16)
// scales the score and the V weight, as TqCodec::decode_head_rotated's caller did.
template <int B>
struct FmtTq {
  static constexpr bool kGamma = true;
  using Ctx = Simd::Tab;
  static Ctx ctx(const float* cb, int64_t = 0) {
    float t16[16];
    for (int k = 0; k < 16; ++k) t16[k] = cb[B < 8 ? k % (1 << B) : k];
    return Simd::tab(t16, cb);
  }
  static V load(const Ctx& c, const uint8_t* h, int64_t i) { return Simd::template lookup<B>(c, h + 2 + i * B / 8); }
  static float gamma(const uint8_t* h) {
    uint16_t g;
    std::memcpy(&g, h, 2);
    return Simd::half(g);
  }
  static int64_t head_bytes(int64_t D) { return 2 + D * B / 8; }
};

// tqBg: groups of kTqGroup coordinates, each its fp16 scale s then its indices; an element
// is s·cb[idx] (one float product, as TqCodec::decode_head_rotated), W lanes never straddle
// two groups (W <= 16 divides 32).
template <int B>
struct FmtTqG {
  static constexpr bool kGamma = false;
  static constexpr int64_t kGroupBytes = 2 + 32 * B / 8;
  using Ctx = Simd::Tab;
  static Ctx ctx(const float* cb, int64_t = 0) { return FmtTq<B>::ctx(cb); }
  static V load(const Ctx& c, const uint8_t* h, int64_t i) {
    const uint8_t* g = h + i / 32 * kGroupBytes;
    uint16_t s;
    std::memcpy(&s, g, 2);
    return Simd::mul(Simd::template lookup<B>(c, g + 2 + i % 32 * B / 8), Simd::set1(Simd::half(s)));
  }
  static float gamma(const uint8_t*) { return 1.0f; }
  static int64_t head_bytes(int64_t D) { return D / 32 * kGroupBytes; }
};

// tq3s: a split head (kvcodec.h), its first half tq4g groups, its second half tq2g groups; cb
// holds the 16 4-bit centroids, then the 4 2-bit ones (attn_kernels.h). W lanes never straddle
// the halves (D/2 is a multiple of 32).
struct FmtTqS {
  static constexpr bool kGamma = false;
  struct Ctx {
    Simd::Tab hi, lo;
    int64_t half;
    int64_t lo_base;  // bytes of the first half
  };
  static Ctx ctx(const float* cb, int64_t D) {
    return {FmtTq<4>::ctx(cb), FmtTq<2>::ctx(cb + 16), D / 2, D / 64 * FmtTqG<4>::kGroupBytes};
  }
  static V load(const Ctx& c, const uint8_t* h, int64_t i) {
    if (i < c.half) return FmtTqG<4>::load(c.hi, h, i);
    return FmtTqG<2>::load(c.lo, h + c.lo_base, i - c.half);
  }
  static float gamma(const uint8_t*) { return 1.0f; }
  static int64_t head_bytes(int64_t D) { return D / 64 * (FmtTqG<4>::kGroupBytes + FmtTqG<2>::kGroupBytes); }
};

// Cache rows are [Hkv][D]: one KV head's positions are a row apart, a stride the hardware
// prefetchers followed poorly here (at 16K positions the loads of K heads stalled ~50% of the
// score kernel's time, far below the read bandwidth). So the kernels ask for the head
// kPrefetchAhead positions ahead, each of its cache lines. Prefetches never fault: running
// past the end of the cache is harmless.
constexpr int64_t kPrefetchAhead = 8;
inline void prefetch_head(const uint8_t* h, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(h + o);
  __builtin_prefetch(h + bytes - 1);  // the line a straddling head ends in
}

// ---- scores: R positions × TT query heads per register tile -------------------------------

template <class F, int R, int TT>
inline void scores_tile(const typename F::Ctx& cx, const uint8_t* k, size_t ks, const float* q, int64_t D, float* s,
                        size_t lds) {
  V acc[R][TT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) acc[r][t] = Simd::zero();
  for (int64_t i = 0; i < D; i += W) {
    V qv[TT];
    for (int t = 0; t < TT; ++t) qv[t] = Simd::load(q + t * D + i);
    for (int r = 0; r < R; ++r) {
      const V kv = F::load(cx, k + r * ks, i);
      for (int t = 0; t < TT; ++t) acc[r][t] = Simd::fma(kv, qv[t], acc[r][t]);
    }
  }
  float red[R * TT];
  if constexpr (R * TT == Simd::kReduceN) {
    Simd::reduce_n(&acc[0][0], red);
  } else {
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < TT; ++t) red[r * TT + t] = Simd::reduce_add(acc[r][t]);
  }
  for (int r = 0; r < R; ++r) {
    const float gm = F::gamma(k + r * ks);
    for (int t = 0; t < TT; ++t) s[t * lds + r] = F::kGamma ? gm * red[r * TT + t] : red[r * TT + t];
  }
}

template <class F, int TT>
inline void scores_rows(const typename F::Ctx& cx, const uint8_t* k, size_t ks, int64_t P, const float* q, int64_t D,
                        float* s, size_t lds) {
  constexpr int R = imax(1, imin(4, Simd::kScoreAcc / TT));
  const int64_t hb = F::head_bytes(D);
  int64_t j = 0;
  for (; j + R <= P; j += R) {
    for (int r = 0; r < R; ++r) prefetch_head(k + (j + r + kPrefetchAhead) * ks, hb);
    scores_tile<F, R, TT>(cx, k + j * ks, ks, q, D, s + j, lds);
  }
  for (; j < P; ++j) scores_tile<F, 1, TT>(cx, k + j * ks, ks, q, D, s + j, lds);
}

template <class F>
void scores(const uint8_t* k, size_t ks, int64_t P, const float* q, int64_t G, int64_t D, const float* cb, float* s,
            size_t lds) {
  const typename F::Ctx cx = F::ctx(cb, D);
  constexpr int T0 = Simd::kScoreTT;
  int64_t g = 0;
  for (; g + T0 <= G; g += T0) scores_rows<F, T0>(cx, k, ks, P, q + g * D, D, s + g * lds, lds);
  if constexpr (T0 > 4)
    for (; g + 4 <= G; g += 4) scores_rows<F, 4>(cx, k, ks, P, q + g * D, D, s + g * lds, lds);
  if constexpr (T0 > 2)
    for (; g + 2 <= G; g += 2) scores_rows<F, 2>(cx, k, ks, P, q + g * D, D, s + g * lds, lds);
  for (; g < G; ++g) scores_rows<F, 1>(cx, k, ks, P, q + g * D, D, s + g * lds, lds);
}

// ---- V sum: TT query heads × U vectors of y per register tile ------------------------------

// Positions per pass: the weights a·γ of TT heads for kPosChunk positions sit in a stack
// buffer, computed once and reused by every U-vector slice of y.
constexpr int64_t kPosChunk = 64;

// y[t·D + i0 .. + U·W) += Σ_j ag[t·kPosChunk + j]·V_j, positions in order.
template <class F, int TT, int U>
inline void axpy_tile(const typename F::Ctx& cx, const float* ag, const uint8_t* v, size_t vs, int64_t P, float* y,
                      int64_t D, int64_t i0) {
  V acc[TT][U];
  for (int t = 0; t < TT; ++t)
    for (int u = 0; u < U; ++u) acc[t][u] = Simd::load(y + t * D + i0 + u * W);
  for (int64_t j = 0; j < P; ++j) {
    V x[U];
    for (int u = 0; u < U; ++u) x[u] = F::load(cx, v + j * vs, i0 + u * W);
    for (int t = 0; t < TT; ++t) {
      const V a = Simd::set1(ag[t * kPosChunk + j]);
      for (int u = 0; u < U; ++u) acc[t][u] = Simd::fma(a, x[u], acc[t][u]);
    }
  }
  for (int t = 0; t < TT; ++t)
    for (int u = 0; u < U; ++u) Simd::store(y + t * D + i0 + u * W, acc[t][u]);
}

template <class F, int TT>
inline void axpy_rows(const typename F::Ctx& cx, const float* a, size_t lda, const uint8_t* v, size_t vs, int64_t P,
                      int64_t D, float* y) {
  constexpr int U = Simd::kAxpyU;
  const int64_t hb = F::head_bytes(D);
  alignas(64) float ag[TT * kPosChunk];
  for (int64_t p0 = 0; p0 < P; p0 += kPosChunk) {
    const int64_t np = P - p0 < kPosChunk ? P - p0 : kPosChunk;
    for (int64_t j = 0; j < np; ++j) {
      prefetch_head(v + (p0 + j + kPrefetchAhead) * vs, hb);
      const float gm = F::gamma(v + (p0 + j) * vs);
      for (int t = 0; t < TT; ++t) {
        const float w = a[t * lda + p0 + j];
        ag[t * kPosChunk + j] = F::kGamma ? w * gm : w;  // the product the decode path formed
      }
    }
    for (int64_t i0 = 0; i0 < D; i0 += U * W) axpy_tile<F, TT, U>(cx, ag, v + p0 * vs, vs, np, y, D, i0);
  }
}

template <class F>
void axpy(const float* a, size_t lda, const uint8_t* v, size_t vs, int64_t P, int64_t G, int64_t D, const float* cb,
          float* y) {
  const typename F::Ctx cx = F::ctx(cb, D);
  constexpr int T0 = Simd::kAxpyTT;
  int64_t g = 0;
  for (; g + T0 <= G; g += T0) axpy_rows<F, T0>(cx, a + g * lda, lda, v, vs, P, D, y + g * D);
  if constexpr (T0 > 4)
    for (; g + 4 <= G; g += 4) axpy_rows<F, 4>(cx, a + g * lda, lda, v, vs, P, D, y + g * D);
  if constexpr (T0 > 2)
    for (; g + 2 <= G; g += 2) axpy_rows<F, 2>(cx, a + g * lda, lda, v, vs, P, D, y + g * D);
  for (; g < G; ++g) axpy_rows<F, 1>(cx, a + g * lda, lda, v, vs, P, D, y + g * D);
}

template <class F>
constexpr AttnKvOps attn_ops() {
  return {scores<F>, axpy<F>};
}

// One butterfly stage whose pairs (j, j + L) lie inside one vector: y = x·sgn + swap<L>(x)
// with sgn = +1 on the lower lane of each pair and -1 on the upper, i.e. a + b and a - b,
// each rounded once as the scalar butterfly rounds it (x·±1 is exact, fma rounds once).
template <int L>
inline void rotate_stage_in_vector(float* y, int64_t B) {
  float sg[W];
  for (int i = 0; i < W; ++i) sg[i] = (i & L) ? -1.0f : 1.0f;
  const V sgn = Simd::load(sg);
  for (int64_t j = 0; j < B; j += W) {
    const V a = Simd::load(y + j);
    Simd::store(y + j, Simd::fma(a, sgn, Simd::template swap<L>(a)));
  }
}

// Stages L, 2L, ... < W.
template <int L>
inline void rotate_stages_in_vector(float* y, int64_t B) {
  if constexpr (L < W) {
    rotate_stage_in_vector<L>(y, B);
    rotate_stages_in_vector<2 * L>(y, B);
  }
}

// attn_kernels.h's rotate. Blocks of at least W elements run on whole vectors: the first
// log2(W) stages (pairs inside one vector) with lane swaps, the rest on vector pairs; smaller
// blocks element by element.
void rotate(float* x, int64_t n, int64_t B, const float* s, bool inverse, float scale) {
  for (int64_t b0 = 0; b0 < n; b0 += B) {
    float* y = x + b0;
    if (s && !inverse)
      for (int64_t i = 0; i < B; ++i) y[i] *= s[i];
    int64_t len = 1;
    if (B >= W) {
      rotate_stages_in_vector<1>(y, B);
      len = W;
    }
    for (; len < B && len < W; len *= 2)
      for (int64_t i = 0; i < B; i += 2 * len)
        for (int64_t j = i; j < i + len; ++j) {
          const float a = y[j], c = y[j + len];
          y[j] = a + c;
          y[j + len] = a - c;
        }
    for (; len < B; len *= 2)  // len is a multiple of W here
      for (int64_t i = 0; i < B; i += 2 * len)
        for (int64_t j = i; j < i + len; j += W) {
          const V a = Simd::load(y + j), c = Simd::load(y + j + len);
          Simd::store(y + j, Simd::add(a, c));
          Simd::store(y + j + len, Simd::sub(a, c));
        }
    int64_t i = 0;
    if (!(s && inverse))
      for (const V k = Simd::set1(scale); i + W <= B; i += W) Simd::store(y + i, Simd::mul(Simd::load(y + i), k));
    for (; i < B; ++i) y[i] *= s && inverse ? scale * s[i] : scale;
  }
}

// constexpr: constant-initialized, so no start-up code runs with this file's ISA flags.
constexpr AttnKernels kAttnTable = {
    .name = kAttnName,
    .f16 = attn_ops<FmtF16>(),
    .q8_0 = {nullptr, axpy<FmtQ8_0>},  // q8_0 K scores: int8, attention.cpp (attn_kernels.h)
    .q4_0 = attn_ops<FmtQ4_0>(),
    .tq2 = attn_ops<FmtTq<2>>(),
    .tq3 = attn_ops<FmtTq<3>>(),
    .tq4 = attn_ops<FmtTq<4>>(),
    .tq8 = attn_ops<FmtTq<8>>(),
    .tq2g = attn_ops<FmtTqG<2>>(),
    .tq3g = attn_ops<FmtTqG<3>>(),
    .tq4g = attn_ops<FmtTqG<4>>(),
    .tq3s = attn_ops<FmtTqS>(),
    .q8_0_scores = kQ8Scores,
    .rotate = rotate,
    .q8_0_axpy_i16 = kAxpyI16Q8,
    .q4_0_axpy_i16 = kAxpyI16Q4,
    .axpy_i16_needs_vnni = kAxpyI16NeedsVnni,
};
