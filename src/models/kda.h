// models/kda: the parts of a Kimi Delta Attention (KDA) layer that kimi-linear and bailingmoe3
// share: the q/k/v projections with their short causal convs and l2 norms, the per-channel
// delta-rule recurrence over each run, and the layer's recurrent memory. The decay gate and
// the output gate differ between the two (low-rank softplus vs full-rank "safe" sigmoid gate)
// and stay in each module.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "format/gguf.h"
#include "memory/batch.h"
#include "memory/memory.h"
#include "models/model.h"

namespace sluice {

// H heads of dim D (key dim = value dim), short convs of K taps; I = H * D.
struct KdaShape {
  int64_t n_head = 0, head_dim = 0, conv_kernel = 0;
  int64_t inner() const { return n_head * head_dim; }
};

// Shapes in ggml order.
struct KdaQkvWeights {
  const TensorView* wq = nullptr;      // [n_embd, I]
  const TensorView* wk = nullptr;      // [n_embd, I]
  const TensorView* wv = nullptr;      // [n_embd, I]
  const TensorView* conv_q = nullptr;  // [K, 1, I(, 1)] (f32): per channel K taps, oldest first
  const TensorView* conv_k = nullptr;  // [K, 1, I(, 1)]
  const TensorView* conv_v = nullptr;  // [K, 1, I(, 1)]
};

// A tensor the converter writes with trailing 1-dims that quantization may drop: either shape;
// must be f32.
const TensorView* kda_bind_f32(const GgufFile& f, const std::string& name, std::initializer_list<int64_t> full,
                               std::initializer_list<int64_t> trimmed);
// Prefix p ("blk.<l>."): attn_{q,k,v}.weight and ssm_conv1d_{q,k,v}.weight; refuses a fused attn_qkv.
KdaQkvWeights kda_bind_qkv(const GgufFile& f, const std::string& arch, const std::string& p, int64_t n_embd,
                           const KdaShape& s);

// A KDA layer's memory: the q, k and v conv windows (the last K-1 inputs each, states 0..2),
// then the state per head [D][D] (state 3).
LayerMemorySpec kda_memory_spec(const KdaShape& s);
// The memory of a KDA + MLA hybrid (kimi-linear, bailingmoe3): recurrent state for the layers
// where kda[l], the MLA latent KV rows for the others.
MemoryLayout kda_mla_memory_layout(const Hparams& hp, const std::vector<bool>& kda, const KdaShape& s);

using KdaReport = std::function<void(std::string_view name, const float* data, int64_t rows, int64_t cols)>;

// q, k, v [T][I] of normed input h [T][n_embd]: projection, then each its own short conv (with
// silu) along each run's tokens; q and k l2-normed per head (eps). proj is a [T][I] scratch.
void kda_qkv(Backend& be, Memory& mem, const std::vector<BatchRun>& runs, int64_t l, const KdaShape& s,
             const KdaQkvWeights& w, const float* h, int64_t n_tok, float eps, float* proj, float* q, float* k,
             float* v, const KdaReport& report);

// out [T][I] = the delta rule over each run (backend.h DeltaRuleArgs, scale 1/√D) with the
// log-decay g ([T][I] per channel, or [T][H] per head when !per_channel) and beta [T][H].
void kda_recur(Backend& be, Memory& mem, const std::vector<BatchRun>& runs, int64_t l, const KdaShape& s,
               const float* q, const float* k, const float* v, const float* g, bool per_channel, const float* beta,
               float* out);

}  // namespace sluice
