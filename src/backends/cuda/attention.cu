// backends/cuda/attention: causal GQA attention over a KV cache of F32/F16/BF16/Q8_0/Q4_0
// rows, flash-decode style (Dao et al., "Flash-Decoding for long-context inference", 2023):
// the visible positions are cut into splits of kAttnChunk; one thread block per (split, head,
// token) runs an online softmax (running max m, running sum l, rescaled accumulator) over its
// split and writes (m, l, acc[Dv]); a second kernel merges the splits of each (token, head).
// The cache is read in place: query head h reads KV head h / (H / Hkv), nothing is copied per
// head, and quantized rows are decoded element by element as they are read (no dequantized
// copy of the cache). Rotated-codebook (tq*) caches are refused on the host. A q8_0 K is
// scored against the query's Q8_0 quantization, as the ref and cpu backends (and llama.cpp) do.
//
// Inside a block each warp takes every 4th position: the 32 lanes split the q·k dot product
// over Dk (coalesced row reads), and own Dv/32 accumulator columns each. Precision: float32
// everywhere with expf, as the cpu backend; the merge is exact rescaling.
//
// Legend: T = tokens, H = query heads, Hkv = KV heads, Dk/Dv = head dims, N = cached positions,
// S = splits.
#include <cfloat>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxPerLane = static_cast<int>(kAttnMaxDv / 32);

struct AttnParams {
  const float* q;
  const uint8_t* k;
  const uint8_t* v;
  DType k_type, v_type;
  size_t k_row_bytes, v_row_bytes;
  int64_t T, H, Hkv, Dk, Dv, N, pos0, S;
  float scale;
  bool q_as_q8;  // K is q8_0 with whole-block heads: the query is scored as Q8_0
  float* part;   // [T][H][S][2 + Dv]: m, l, acc
  float* out;    // [T][H][Dv]
};

int64_t n_splits(const AttentionArgs& a) {
  // The largest visible range: the last token sees min(N, pos0 + T) positions.
  int64_t vis = a.pos0 + a.n_tok;
  if (vis > a.n_kv) vis = a.n_kv;
  const int64_t s = (vis + kAttnChunk - 1) / kAttnChunk;
  return s < 1 ? 1 : s;
}

__global__ void attn_split_kernel(AttnParams p) {
  extern __shared__ float smem[];  // q[Dk] | per-warp m, l | per-warp acc[Dv]
  float* qs = smem;
  float* wm = qs + p.Dk;
  float* wl = wm + kWarps;
  float* wacc = wl + kWarps;
  const int64_t s = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t hk = h / (p.H / p.Hkv);
  int64_t n_vis = p.pos0 + t + 1;
  if (n_vis > p.N) n_vis = p.N;
  const int64_t p_begin = s * kAttnChunk;
  const int64_t p_end = p_begin + kAttnChunk < n_vis ? p_begin + kAttnChunk : n_vis;

  for (int64_t d = threadIdx.x; d < p.Dk; d += blockDim.x) qs[d] = p.q[(t * p.H + h) * p.Dk + d];
  __syncthreads();
  if (p.q_as_q8) {  // the query as its Q8_0 quantization decodes (the ref backend's q8_0 K scores)
    for (int64_t b = threadIdx.x; b < p.Dk / 32; b += blockDim.x) {
      int8_t qi[32];
      const float d = h2f(q8_0_encode(qs + b * 32, qi));
      for (int j = 0; j < 32; ++j) qs[b * 32 + j] = __fmul_rn(static_cast<float>(qi[j]), d);
    }
    __syncthreads();
  }

  float m = -FLT_MAX, l = 0.0f;
  float acc[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) acc[j] = 0.0f;
  bool any = false;
  for (int64_t pos = p_begin + warp; pos < p_end; pos += kWarps) {
    const uint8_t* kr = p.k + pos * p.k_row_bytes;
    float dot = 0.0f;
    for (int64_t d = lane; d < p.Dk; d += 32) dot += qs[d] * load_kv(p.k_type, kr, hk * p.Dk + d);
    const float sc = warp_sum(dot) * p.scale;
    const float m_new = fmaxf(m, sc);
    const float corr = any ? expf(m - m_new) : 0.0f;
    const float e = expf(sc - m_new);
    l = l * corr + e;
    const uint8_t* vr = p.v + pos * p.v_row_bytes;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < p.Dv) acc[j] = acc[j] * corr + e * load_kv(p.v_type, vr, hk * p.Dv + d);
    }
    m = m_new;
    any = true;
  }
  // Merge the warps of this block.
  if (lane == 0) {
    wm[warp] = any ? m : -FLT_MAX;
    wl[warp] = any ? l : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < p.Dv) wacc[warp * p.Dv + d] = any ? acc[j] : 0.0f;
  }
  __syncthreads();
  float M = -FLT_MAX;
  bool block_any = false;
  for (int w = 0; w < kWarps; ++w) {
    if (wl[w] > 0.0f) {
      M = fmaxf(M, wm[w]);
      block_any = true;
    }
  }
  float* out = p.part + ((t * p.H + h) * p.S + s) * (2 + p.Dv);
  float L = 0.0f;
  float f[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    f[w] = wl[w] > 0.0f ? expf(wm[w] - M) : 0.0f;
    L += wl[w] * f[w];
  }
  if (threadIdx.x == 0) {
    out[0] = block_any ? M : -FLT_MAX;
    out[1] = L;
  }
  for (int64_t d = threadIdx.x; d < p.Dv; d += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < kWarps; ++w) a += wacc[w * p.Dv + d] * f[w];
    out[2 + d] = a;
  }
}

__global__ void attn_merge_kernel(AttnParams p) {
  const int64_t h = blockIdx.x, t = blockIdx.y;
  const float* part = p.part + (t * p.H + h) * p.S * (2 + p.Dv);
  float M = -FLT_MAX;
  for (int64_t s = 0; s < p.S; ++s)
    if (part[s * (2 + p.Dv) + 1] > 0.0f) M = fmaxf(M, part[s * (2 + p.Dv)]);
  float L = 0.0f;
  for (int64_t s = 0; s < p.S; ++s) {
    const float* ps = part + s * (2 + p.Dv);
    if (ps[1] > 0.0f) L += ps[1] * expf(ps[0] - M);
  }
  float* out = p.out + (t * p.H + h) * p.Dv;
  for (int64_t d = threadIdx.x; d < p.Dv; d += blockDim.x) {
    float a = 0.0f;
    for (int64_t s = 0; s < p.S; ++s) {
      const float* ps = part + s * (2 + p.Dv);
      if (ps[1] > 0.0f) a += ps[2 + d] * expf(ps[0] - M);
    }
    out[d] = L > 0.0f ? a / L : 0.0f;  // no visible position (pos0 + t < 0): zeros, as ref
  }
}

}  // namespace

bool kv_type_supported(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 || t == DType::Q4_0;
}

size_t attention_scratch_floats(const AttentionArgs& a) {
  return static_cast<size_t>(a.n_tok * a.n_head * n_splits(a) * (2 + a.head_dim_v));
}

void attention(const AttentionArgs& a, float* scratch, cudaStream_t s) {
  if (a.n_tok <= 0 || a.n_head <= 0) return;
  AttnParams p{};
  p.q = a.q;
  p.k = static_cast<const uint8_t*>(a.k);
  p.v = static_cast<const uint8_t*>(a.v);
  p.k_type = a.k_type;
  p.v_type = a.v_type;
  p.k_row_bytes = a.k_row_bytes;
  p.v_row_bytes = a.v_row_bytes;
  p.T = a.n_tok;
  p.H = a.n_head;
  p.Hkv = a.n_head_kv;
  p.Dk = a.head_dim_k;
  p.Dv = a.head_dim_v;
  p.N = a.n_kv;
  p.pos0 = a.pos0;
  p.S = n_splits(a);
  p.scale = a.scale;
  p.q_as_q8 = a.k_type == DType::Q8_0 && a.head_dim_k % 32 == 0;
  p.part = scratch;
  p.out = a.out;
  const size_t smem = static_cast<size_t>(p.Dk + 2 * kWarps + kWarps * p.Dv) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.S), static_cast<unsigned>(p.H), static_cast<unsigned>(p.T));
  attn_split_kernel<<<grid, 32 * kWarps, smem, s>>>(p);
  attn_merge_kernel<<<dim3(static_cast<unsigned>(p.H), static_cast<unsigned>(p.T)), 128, 0, s>>>(p);
}

}  // namespace sluice::cuda
