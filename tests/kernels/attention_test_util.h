// tests/kernels/attention_test_util: random attention problems over a KV cache of any type,
// shared by the cpu and cuda attention parity tests.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/backend.h"
#include "kernels/kernel_test_util.h"
#include "quant/quant.h"

namespace sluice::test {

// T tokens, H query heads over Hkv KV heads of D dims, N cached positions, token 0 at pos0.
struct AttnCase {
  int64_t T, H, Hkv, D, N, pos0;
};

// N cache rows of `row_elems` elements of type t (F32 copied, else quant/'s encoder), with
// `pad` spare bytes per row (a row stride larger than the row, as a paged cache may have).
inline std::vector<uint8_t> make_cache(DType t, int64_t N, int64_t row_elems, size_t pad, uint32_t seed,
                                       size_t* row_bytes) {
  const int64_t n = row_elems;
  *row_bytes = dtype_row_bytes(t, n) + pad;
  std::vector<uint8_t> c(*row_bytes * static_cast<size_t>(N), 0);
  const auto f = randn(static_cast<size_t>(N * n), seed);
  for (int64_t p = 0; p < N; ++p) {
    if (t == DType::F32)
      std::memcpy(c.data() + p * *row_bytes, f.data() + p * n, static_cast<size_t>(n) * 4);
    else
      quantize_row(t, f.data() + p * n, c.data() + p * *row_bytes, n);
  }
  return c;
}

struct AttnData {
  std::vector<float> q;
  std::vector<uint8_t> k, v;
  AttentionArgs args;  // points into q, k, v; out left null
};

inline AttnData make_attention(const AttnCase& c, DType kt, DType vt, uint32_t seed) {
  AttnData d;
  d.q = randn(static_cast<size_t>(c.T * c.H * c.D), seed, 2.0f);  // ×2: sharper softmax
  size_t krb = 0, vrb = 0;
  d.k = make_cache(kt, c.N, c.Hkv * c.D, kt == DType::F16 ? 16 : 0, seed + 1, &krb);
  d.v = make_cache(vt, c.N, c.Hkv * c.D, vt == DType::F16 ? 32 : 0, seed + 2, &vrb);
  AttentionArgs& a = d.args;
  a.q = d.q.data();
  a.k = d.k.data();
  a.k_type = kt;
  a.k_row_bytes = krb;
  a.v = d.v.data();
  a.v_type = vt;
  a.v_row_bytes = vrb;
  a.n_tok = c.T;
  a.n_head = c.H;
  a.n_head_kv = c.Hkv;
  a.head_dim_k = a.head_dim_v = c.D;
  a.n_kv = c.N;
  a.pos0 = c.pos0;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  return d;
}

inline std::vector<float> run_attention(Backend& b, AttentionArgs a) {
  std::vector<float> out(static_cast<size_t>(a.n_tok * a.n_head * a.head_dim_v), NAN);
  a.out = out.data();
  b.attention(a);
  return out;
}

}  // namespace sluice::test
