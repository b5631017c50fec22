// backends/cuda/norm_rope: the small ops — RMSNorm, RoPE (normal and neox pair layouts, as
// ref), softmax, SwiGLU, GELU (tanh approximation, as ggml_gelu), add — plus the device greedy
// argmax and the copy kernel that measures device bandwidth (the speed of light decode is
// reported against).
//
// Precision: reductions are float32 with full-precision expf/tanhf/sqrtf (no fast-math
// intrinsics), as the cpu backend. RoPE evaluates the angle and its cos/sin in double, with
// exactly ref's expression, so large positions (1e5 x base^-2i/n) lose nothing to float32.
// Legend: T = tokens, H = heads, D = head dim.
#include <cfloat>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n, int per_block = kThreads) {
  const int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);  // grid-stride loops cover the rest
}

// Sum over a block of kThreads threads; every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float part[kThreads / 32];
  __shared__ float total;
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : 0.0f;
    s = warp_sum(s);
    if (threadIdx.x == 0) total = s;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();  // part/total may be reused by a following call
  return r;
}

__device__ float block_max(float v) {
  __shared__ float part[kThreads / 32];
  __shared__ float total;
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : -FLT_MAX;
    s = warp_max(s);
    if (threadIdx.x == 0) total = s;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();
  return r;
}

__global__ void rms_norm_kernel(const float* x, const float* w, float* y, int64_t n, float eps) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) ss += xr[i] * xr[i];
  ss = block_sum(ss);
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) yr[i] = xr[i] * scale * (w ? w[i] : 1.0f);
}

// One thread per rotated pair (t, h, i).
// Rope::angle (backends/backend.h), operation for operation.
__global__ void rope_kernel(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, Rope r,
                            int neox) {
  const int64_t n_rot = r.n_rot, half = n_rot / 2, total = n_tok * n_head * half;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = k % half, th = k / half, t = th / n_head;
    float* v = x + th * head_dim;
    const double extrap = pos[t] *
                          pow(static_cast<double>(r.base), -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    double theta = r.freq_scale * extrap;
    if (r.ext_factor != 0.0f) {
      const double y = (static_cast<double>(i) - r.corr_lo) / fmax(0.001, static_cast<double>(r.corr_hi) - r.corr_lo);
      const double ramp = (1.0 - fmin(fmax(y, 0.0), 1.0)) * r.ext_factor;
      theta = r.freq_scale * extrap * (1.0 - ramp) + extrap * ramp;
    }
    double s, c;
    sincos(theta, &s, &c);
    s *= r.mscale;
    c *= r.mscale;
    const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const double a = v[i0], b = v[i1];
    v[i0] = static_cast<float>(a * c - b * s);
    v[i1] = static_cast<float>(a * s + b * c);
  }
}

__global__ void softmax_kernel(float* x, int64_t n) {
  float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float m = -FLT_MAX;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) m = fmaxf(m, xr[i]);
  m = block_max(m);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float e = expf(xr[i] - m);
    xr[i] = e;
    sum += e;
  }
  sum = block_sum(sum);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) xr[i] = xr[i] / sum;
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n, float limit) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    float s = g / (1.0f + expf(-g)), u = up[i];  // g -> -inf: g / inf = -0, never NaN
    if (limit > 0.0f) s = fminf(s, limit), u = fminf(fmaxf(u, -limit), limit);
    out[i] = s * u;
  }
}

__global__ void gelu_kernel(const float* x, float* out, int64_t n) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    out[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
  }
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __fadd_rn(a[i], b[i]);
}

// One block of 1024 threads: each keeps its best (value, index), then a tree reduction that
// prefers the lower index on ties. NaN never wins (comparisons with NaN are false), as on the host.
__global__ void argmax_kernel(const float* x, int64_t n, int32_t* out) {
  __shared__ float bv[1024];
  __shared__ int64_t bi[1024];
  float best = -INFINITY;
  int64_t idx = -1;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (idx < 0 || x[i] > best) {
      best = x[i];
      idx = i;
    }
  }
  bv[threadIdx.x] = best;
  bi[threadIdx.x] = idx;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = bv[threadIdx.x + s];
      const int64_t oi = bi[threadIdx.x + s];
      const int64_t mi = bi[threadIdx.x];
      if (oi >= 0 && (mi < 0 || ov > bv[threadIdx.x] || (ov == bv[threadIdx.x] && oi < mi))) {
        bv[threadIdx.x] = ov;
        bi[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = static_cast<int32_t>(bi[0] < 0 ? 0 : bi[0]);
}

__global__ void copy_kernel(const float4* __restrict__ src, float4* __restrict__ dst, int64_t n4) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps, cudaStream_t s) {
  if (n_rows > 0) rms_norm_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, s>>>(x, w, y, n, eps);
}

void rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, const Rope& r,
          cudaStream_t s) {
  const int64_t total = n_tok * n_head * (r.n_rot / 2);
  if (total > 0)
    rope_kernel<<<grid_for(total), kThreads, 0, s>>>(x, pos, n_tok, n_head, head_dim, r, r.mode == RopeMode::neox);
}

void softmax(float* x, int64_t n_rows, int64_t n, cudaStream_t s) {
  if (n_rows > 0) softmax_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, s>>>(x, n);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n, float limit, cudaStream_t s) {
  if (n > 0) swiglu_kernel<<<grid_for(n), kThreads, 0, s>>>(gate, up, out, n, limit);
}

void gelu(const float* x, float* out, int64_t n, cudaStream_t s) {
  if (n > 0) gelu_kernel<<<grid_for(n), kThreads, 0, s>>>(x, out, n);
}

void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t s) {
  if (n > 0) add_kernel<<<grid_for(n), kThreads, 0, s>>>(a, b, out, n);
}

void argmax(const float* x, int64_t n, int32_t* out, cudaStream_t s) { argmax_kernel<<<1, 1024, 0, s>>>(x, n, out); }

void copy_f32(const float* src, float* dst, int64_t n, cudaStream_t s) {
  const int64_t n4 = n / 4;
  if (n4 > 0)
    copy_kernel<<<grid_for(n4), kThreads, 0, s>>>(reinterpret_cast<const float4*>(src), reinterpret_cast<float4*>(dst),
                                                  n4);
}

}  // namespace sluice::cuda
