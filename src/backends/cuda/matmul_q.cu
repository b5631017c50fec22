// backends/cuda/matmul_q: y = W·x over every weight type with the dequantization fused, and
// get_rows (embedding lookup) with the same decoders.
//
// Decode (T <= kMatvecMaxTok): one warp per output row. The 32 lanes cover consecutive groups
// of 8 elements of the row, so a warp reads contiguous bytes of W (one K-quant block per
// iteration, or 8 consecutive 32-element blocks); each decoded weight is used for all T
// tokens, so W is read once per call whatever T is. x stays in global memory (L1/L2-resident:
// it is tiny next to W).
//
// Prefill (T > kMatvecMaxTok): a plain tiled SGEMM, 64 rows x 64 tokens per block, K in
// steps of 32; the W tile is decoded into shared memory as float32. Correctness first: float32
// keeps the result within the same tolerance as the cpu backend (half/TF32 tensor-core tiles
// would add ~1e-3 relative error per product). A wmma/mma version over fp16 tiles is the next
// step once a GPU is at hand to measure it.
//
// MoE decode (moe_ffn_token): the same warp-per-row dot product over an array of jobs, one
// launch for every gate/up matrix of a token's experts (grid.y = job), and the downs with the
// routing-weighted sum fused (a warp computes one output row across all experts, in order).
//
// Legend: T = tokens, K = n_in (elements per row), O = n_out (rows), QK/BB = block elements/bytes.
#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// The 8 elements at column `col` (a multiple of 8) of a row of type T; plain types are
// bounds-checked element by element (their K need not be a multiple of 8), zero past K.
template <DType T>
__device__ __forceinline__ void load8(const uint8_t* row, int64_t col, int64_t n_in, float* v) {
  if constexpr (T == DType::F32 || T == DType::F16 || T == DType::BF16) {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = col + k < n_in ? load_plain<T>(row, col + k) : 0.0f;
  } else {
    constexpr int QK = QBlock<T>::QK, BB = QBlock<T>::BB;
    dequant8<T>(row + (col / QK) * BB, static_cast<int>((col % QK) / 8), v);
  }
}

// One warp's partial dot products of row wr with the first n_tok tokens of x (n_in apart):
// acc[t] gets this lane's share; warp_sum finishes it. Shared by matmul's matvec and the MoE
// batch kernels, so one token's product is summed the same way in both (bitwise equal).
template <DType T>
__device__ __forceinline__ void row_dot_lane(const uint8_t* __restrict__ wr, int64_t n_in, const float* __restrict__ x,
                                             int n_tok, int lane, float* acc) {
#pragma unroll
  for (int t = 0; t < kMatvecMaxTok; ++t) acc[t] = 0.0f;
  if constexpr (T == DType::F32 || T == DType::F16 || T == DType::BF16) {
    for (int64_t i = lane; i < n_in; i += 32) {
      const float wi = load_plain<T>(wr, i);
#pragma unroll
      for (int t = 0; t < kMatvecMaxTok; ++t)
        if (t < n_tok) acc[t] += wi * x[t * n_in + i];
    }
  } else {
    // Lane -> (block offset, group of 8): for QK = 256 the warp walks one block per step, for
    // QK = 32 eight blocks per step.
    constexpr int QK = QBlock<T>::QK, BB = QBlock<T>::BB, parts = QK / 8, blocks_per_step = 32 / parts;
    const int sub = lane / parts, j8 = lane % parts;
    const int64_t nb = n_in / QK;
    for (int64_t b = sub; b < nb; b += blocks_per_step) {
      float v[8];
      dequant8<T>(wr + b * BB, j8, v);
      const int64_t col = b * QK + 8 * j8;
#pragma unroll
      for (int t = 0; t < kMatvecMaxTok; ++t) {
        if (t < n_tok) {
          const float4* xp = reinterpret_cast<const float4*>(x + t * n_in + col);  // 32-byte aligned: K % 32 == 0
          const float4 a = xp[0], c = xp[1];
          acc[t] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * c.x + v[5] * c.y + v[6] * c.z +
                    v[7] * c.w;
        }
      }
    }
  }
}

template <DType T>
__global__ void matvec_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                              const float* __restrict__ x, float* __restrict__ y, int n_tok) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n_out) return;
  float acc[kMatvecMaxTok];
  row_dot_lane<T>(w + row * row_bytes, n_in, x, n_tok, lane, acc);
#pragma unroll
  for (int t = 0; t < kMatvecMaxTok; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0 && t < n_tok) y[t * n_out + row] = s;
  }
}

// ---- MoE decode: several matrices per launch ------------------------------------------
// Grid (row blocks, jobs): blockIdx.y picks the job, each warp one row of it. Every x of a job
// must be 32-byte aligned (the float4 loads above): the host places them at 256-byte offsets.
template <DType T>
__global__ void matvec_batch_kernel(const MatvecJob* __restrict__ jobs) {
  const MatvecJob jb = jobs[blockIdx.y];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= jb.n_out) return;
  float acc[kMatvecMaxTok];
  row_dot_lane<T>(static_cast<const uint8_t*>(jb.w) + row * jb.row_bytes, jb.n_in, jb.x, 1, lane, acc);
  const float s = warp_sum(acc[0]);
  if (lane == 0) jb.y[row] = s;
}

// out[row] = Σ_j weight_j · (W_j·x_j)[row], j in order; __fmul_rn/__fadd_rn keep the product
// and the sum separately rounded (as the default moe_ffn_token's `out += weight * y` without
// contraction), so moe_down equals matvec_batch + moe_combine bit for bit.
template <DType T>
__global__ void moe_down_kernel(const MatvecJob* __restrict__ jobs, int n_jobs, int64_t n_out,
                                float* __restrict__ out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n_out) return;
  float sum = 0.0f;
  for (int j = 0; j < n_jobs; ++j) {
    const MatvecJob jb = jobs[j];
    float acc[kMatvecMaxTok];
    row_dot_lane<T>(static_cast<const uint8_t*>(jb.w) + row * jb.row_bytes, jb.n_in, jb.x, 1, lane, acc);
    sum = __fadd_rn(sum, __fmul_rn(jb.weight, warp_sum(acc[0])));
  }
  if (lane == 0) out[row] = sum;
}

__global__ void moe_combine_kernel(const MatvecJob* __restrict__ jobs, int n_jobs, int64_t n_out,
                                   float* __restrict__ out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= n_out) return;
  float sum = 0.0f;
  for (int j = 0; j < n_jobs; ++j) sum = __fadd_rn(sum, __fmul_rn(jobs[j].weight, jobs[j].y[row]));
  out[row] = sum;
}

constexpr int kBM = 64, kBN = 64, kBK = 32;  // GEMM tile: rows of W, tokens, K step

template <DType T>
__global__ void __launch_bounds__(256)
    gemm_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                const float* __restrict__ x, float* __restrict__ y, int64_t n_tok) {
  __shared__ float ws[kBK][kBM + 4];
  __shared__ float xs[kBK][kBN + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kBM, t0 = static_cast<int64_t>(blockIdx.y) * kBN;
  float acc[4][4] = {};
  // Loader mapping: 64 rows x 4 groups of 8 columns = 256 threads, for W and for x alike.
  const int lr = tid / 4, lg = tid % 4;
  for (int64_t k0 = 0; k0 < n_in; k0 += kBK) {
    float v[8];
    const int64_t o = o0 + lr;
    if (o < n_out) {
      load8<T>(w + o * row_bytes, k0 + 8 * lg, n_in, v);
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) ws[8 * lg + k][lr] = v[k];
    const int64_t t = t0 + lr;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int64_t col = k0 + 8 * lg + k;
      xs[8 * lg + k][lr] = t < n_tok && col < n_in ? x[t * n_in + col] : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kBK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = ws[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = xs[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t o = o0 + ty * 4 + i, t = t0 + tx * 4 + j;
      if (o < n_out && t < n_tok) y[t * n_out + o] = acc[i][j];
    }
  }
}

template <DType T>
__global__ void get_rows_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_embd,
                                const int32_t* __restrict__ ids, float* __restrict__ out) {
  const int64_t r = blockIdx.x;
  const uint8_t* row = w + static_cast<int64_t>(ids[r]) * row_bytes;
  float* o = out + r * n_embd;
  if constexpr (T == DType::F32 || T == DType::F16 || T == DType::BF16) {
    for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x) o[i] = load_plain<T>(row, i);
  } else {
    for (int64_t g = threadIdx.x; g < n_embd / 8; g += blockDim.x) {
      float v[8];
      load8<T>(row, 8 * g, n_embd, v);
#pragma unroll
      for (int k = 0; k < 8; ++k) o[8 * g + k] = v[k];
    }
  }
}

template <DType T>
void launch_matmul(const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x, float* y,
                   int64_t n_tok, cudaStream_t s) {
  const auto* wb = static_cast<const uint8_t*>(w);
  if (n_tok <= kMatvecMaxTok) {
    const auto blocks = static_cast<unsigned>((n_out + kWarpsPerBlock - 1) / kWarpsPerBlock);
    matvec_kernel<T><<<blocks, 32 * kWarpsPerBlock, 0, s>>>(wb, row_bytes, n_in, n_out, x, y, static_cast<int>(n_tok));
  } else {
    const dim3 grid(static_cast<unsigned>((n_out + kBM - 1) / kBM), static_cast<unsigned>((n_tok + kBN - 1) / kBN));
    gemm_kernel<T><<<grid, 256, 0, s>>>(wb, row_bytes, n_in, n_out, x, y, n_tok);
  }
}

template <DType T>
void launch_get_rows(const void* w, size_t row_bytes, int64_t n_embd, const int32_t* ids, int64_t n, float* out,
                     cudaStream_t s) {
  get_rows_kernel<T>
      <<<static_cast<unsigned>(n), 256, 0, s>>>(static_cast<const uint8_t*>(w), row_bytes, n_embd, ids, out);
}

// Calls f.template operator()<T>() for the weight type t; false if t has no device kernel.
template <class F>
bool dispatch_weight_type(DType t, F&& f) {
  switch (t) {
    case DType::F32: f.template operator()<DType::F32>(); return true;
    case DType::F16: f.template operator()<DType::F16>(); return true;
    case DType::BF16: f.template operator()<DType::BF16>(); return true;
    case DType::Q4_0: f.template operator()<DType::Q4_0>(); return true;
    case DType::Q4_1: f.template operator()<DType::Q4_1>(); return true;
    case DType::Q5_0: f.template operator()<DType::Q5_0>(); return true;
    case DType::Q5_1: f.template operator()<DType::Q5_1>(); return true;
    case DType::Q8_0: f.template operator()<DType::Q8_0>(); return true;
    case DType::Q2_K: f.template operator()<DType::Q2_K>(); return true;
    case DType::Q3_K: f.template operator()<DType::Q3_K>(); return true;
    case DType::Q4_K: f.template operator()<DType::Q4_K>(); return true;
    case DType::Q5_K: f.template operator()<DType::Q5_K>(); return true;
    case DType::Q6_K: f.template operator()<DType::Q6_K>(); return true;
    case DType::Q8_K: f.template operator()<DType::Q8_K>(); return true;
    case DType::IQ4_NL: f.template operator()<DType::IQ4_NL>(); return true;
    case DType::IQ4_XS: f.template operator()<DType::IQ4_XS>(); return true;
    default: return false;
  }
}

struct Nothing {
  template <DType T>
  void operator()() const {}
};

unsigned row_blocks(int64_t n_out) { return static_cast<unsigned>((n_out + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

bool weight_type_supported(DType t) { return dispatch_weight_type(t, Nothing{}); }

void matmul(DType t, const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x, float* y,
            int64_t n_tok, cudaStream_t s) {
  dispatch_weight_type(t, [&]<DType T>() { launch_matmul<T>(w, row_bytes, n_in, n_out, x, y, n_tok, s); });
}

void get_rows(DType t, const void* w, size_t row_bytes, int64_t n_embd, const int32_t* ids, int64_t n, float* out,
              cudaStream_t s) {
  dispatch_weight_type(t, [&]<DType T>() { launch_get_rows<T>(w, row_bytes, n_embd, ids, n, out, s); });
}

void matvec_batch(DType t, const MatvecJob* jobs, int n_jobs, int64_t max_out, cudaStream_t s) {
  if (n_jobs <= 0 || max_out <= 0) return;
  const dim3 grid(row_blocks(max_out), static_cast<unsigned>(n_jobs));
  dispatch_weight_type(t, [&]<DType T>() { matvec_batch_kernel<T><<<grid, 32 * kWarpsPerBlock, 0, s>>>(jobs); });
}

void moe_down(DType t, const MatvecJob* jobs, int n_jobs, int64_t n_out, float* out, cudaStream_t s) {
  if (n_out <= 0) return;
  dispatch_weight_type(t, [&]<DType T>() {
    moe_down_kernel<T><<<row_blocks(n_out), 32 * kWarpsPerBlock, 0, s>>>(jobs, n_jobs, n_out, out);
  });
}

void moe_combine(const MatvecJob* jobs, int n_jobs, int64_t n_out, float* out, cudaStream_t s) {
  if (n_out <= 0) return;
  moe_combine_kernel<<<static_cast<unsigned>((n_out + 255) / 256), 256, 0, s>>>(jobs, n_jobs, n_out, out);
}

}  // namespace sluice::cuda
