// backends/cuda/kernels: the host-callable launchers of the CUDA kernels. Every pointer is a
// device pointer; every launcher only enqueues on `stream` (no synchronisation) and reports
// launch errors through cudaGetLastError, which the caller (cuda_backend.cpp) checks.
// Shapes follow backends/backend.h. Legend: T = tokens, H = query heads, Hkv = KV heads,
// D = head dim, N = cached positions.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/backend.h"
#include "core/dtype.h"

namespace sluice::cuda {

// ---- matmul_q.cu -----------------------------------------------------------------------
// True for the weight types the matmul/get_rows kernels decode on the device.
bool weight_type_supported(DType t);
// Up to this many tokens, matmul runs the decode matrix-vector kernel (weights read once for
// all tokens); above, the tiled GEMM.
constexpr int64_t kMatvecMaxTok = 8;
// y[t][o] = Σ_i W[o][i]·x[t][i]; W is n_out rows of row_bytes bytes of type t.
void matmul(DType t, const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x, float* y,
            int64_t n_tok, cudaStream_t s);
// out[r] = row ids[r] of W decoded to float (ids already range-checked by the caller).
void get_rows(DType t, const void* w, size_t row_bytes, int64_t n_embd, const int32_t* ids, int64_t n, float* out,
              cudaStream_t s);

// One matrix-vector product of a batch (moe_ffn_token): y[o] = Σ_i W[o][i]·x[i] for the
// n_out rows of W (row_bytes apart, n_in elements each). `weight` scales the product only in
// moe_down (the routing weight). All pointers are device pointers; the job array itself lives
// in device memory too (uploaded with the activations, one copy per call).
struct MatvecJob {
  const void* w = nullptr;
  size_t row_bytes = 0;
  int64_t n_in = 0, n_out = 0;
  const float* x = nullptr;
  float* y = nullptr;
  float weight = 1.0f;
};
// Every job of jobs[0, n_jobs) (all of weight type t) in one launch; max_out = the largest
// n_out. Each product is summed exactly as matmul's matvec kernel sums one token, so a job's
// y is bitwise equal to matmul(t, w, ..., n_tok = 1). n_in % block size == 0 for quant types.
void matvec_batch(DType t, const MatvecJob* jobs, int n_jobs, int64_t max_out, cudaStream_t s);
// The down projection of a token's experts with the weighted sum fused: for every row o of
// n_out, out[o] = 0, then for j = 0..n_jobs-1 in order, out[o] += jobs[j].weight · (W_j·x_j)[o]
// (float32, the product and the sum each rounded: never contracted to an FMA), with each dot
// product summed as matvec_batch sums it. All jobs of type t, all with n_out rows; y unused.
void moe_down(DType t, const MatvecJob* jobs, int n_jobs, int64_t n_out, float* out, cudaStream_t s);
// The same weighted sum over precomputed products: out[o] = Σ_j jobs[j].weight·jobs[j].y[o]
// in order, with moe_down's rounding — its tail, for experts whose down types differ (each
// group of one type runs matvec_batch first).
void moe_combine(const MatvecJob* jobs, int n_jobs, int64_t n_out, float* out, cudaStream_t s);

// ---- norm_rope.cu ----------------------------------------------------------------------
void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps, cudaStream_t s);
void rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, const Rope& r, cudaStream_t s);
void softmax(float* x, int64_t n_rows, int64_t n, cudaStream_t s);
void swiglu(const float* gate, const float* up, float* out, int64_t n, float limit, cudaStream_t s);
void gelu(const float* x, float* out, int64_t n, cudaStream_t s);
void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t s);
// *out = index of the largest x[i], ties to the lowest index (session.h argmax's rule).
void argmax(const float* x, int64_t n, int32_t* out, cudaStream_t s);
// dst[i] = src[i] for n floats (16-byte aligned, n % 4 == 0): the bandwidth probe.
void copy_f32(const float* src, float* dst, int64_t n, cudaStream_t s);

// ---- kv_store.cu -----------------------------------------------------------------------
// True for the types store_row encodes on the device (bit-exact with quant/'s encoders).
bool store_type_supported(DType t);
void store_row(const float* src, DType t, void* dst, int64_t n, cudaStream_t s);

// ---- attention.cu ----------------------------------------------------------------------
// True for the cache types attention reads on the device.
bool kv_type_supported(DType t);
// Largest V head dim the kernel holds in registers.
constexpr int64_t kAttnMaxDv = 512;
// Positions per split of the split-KV decode (one thread block per split, head and token).
constexpr int64_t kAttnChunk = 128;
// Floats of scratch attention() needs for `a` (the per-split partial results).
size_t attention_scratch_floats(const AttentionArgs& a);
// `a` with q/k/v/out pointing to device memory (k/v rows `*_row_bytes` apart, all n_kv rows).
void attention(const AttentionArgs& a, float* scratch, cudaStream_t s);

}  // namespace sluice::cuda
