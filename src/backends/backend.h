// backends/backend: the op interface every backend (ref, cpu, later cuda) implements.
// Backends implement ops, never models: the forward of each architecture is written once in
// models/ against this interface. `ref` is the oracle (scalar, float64 accumulation); `cpu`
// must agree with it within per-dtype tolerances (tests/kernels).
//
// Legend: T = tokens in the batch, H = query heads, Hkv = key/value heads, D = head dim,
// N = number of cached positions visible to attention. Activations are float32, contiguous,
// row-major with the token index outermost. Weights are TensorViews (row-contiguous, any
// dtype quant/ supports).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace sluice {

enum class RopeMode {
  normal,  // rotate adjacent pairs (2i, 2i+1): llama, deepseek2
  neox,    // rotate pairs (i, i + n_rot/2): qwen3, qwen3moe, olmoe
};

// Rotary embedding of the first n_rot dims of a head: pair i at position p turns by
//   θ = p·base^(-2i/n_rot)·(freq_scale·(1 − r_i) + r_i),  r_i = ext_factor·ramp(i),
// ramp(i) = 1 − clamp((i − corr_lo) / max(0.001, corr_hi − corr_lo), 0, 1),
// and cos θ, sin θ are scaled by mscale: llama.cpp's rope_yarn. Plain RoPE is freq_scale 1,
// ext_factor 0, mscale 1; linear scaling only sets freq_scale = 1/factor; YaRN sets ext_factor 1
// (the fast-turning pairs below corr_lo keep their angle, those past corr_hi are interpolated)
// and mscale (models/model.cpp reads them).
struct Rope {
  int64_t n_rot = 0;
  float base = 10000.0f;
  RopeMode mode = RopeMode::normal;
  float freq_scale = 1.0f, ext_factor = 0.0f, corr_lo = 0.0f, corr_hi = 0.0f, mscale = 1.0f;
  // θ of pair i at position p, in double (a float θ·p loses ~p·2^-24 radians).
  double angle(int32_t p, int64_t i) const {
    const double extrap = p * std::pow(static_cast<double>(base),
                                       -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    if (ext_factor == 0.0f) return freq_scale * extrap;
    const double y = (static_cast<double>(i) - corr_lo) / std::max(0.001, static_cast<double>(corr_hi) - corr_lo);
    const double r = (1.0 - std::clamp(y, 0.0, 1.0)) * ext_factor;
    return freq_scale * extrap * (1.0 - r) + extrap * r;
  }
  bool scaled() const { return freq_scale != 1.0f || ext_factor != 0.0f || mscale != 1.0f; }
};

class TqCodec;      // kvcodec/kvcodec.h
struct KvRotation;  // kvcodec/kvcodec.h

struct AttentionArgs {
  const float* q = nullptr;  // [T][H][Dk]
  // Cache rows are indexed by position; row p holds [Hkv][Dk] (K) or [Hkv][Dv] (V) elements
  // of k_type / v_type (a KV type of kvcodec/kvcodec.h), `*_row_bytes` apart. A rotated-
  // codebook type (tq*) also needs its codec in k_tq / v_tq (rotation signs, codebook).
  const void* k = nullptr;
  DType k_type = DType::F16;
  size_t k_row_bytes = 0;
  const void* v = nullptr;
  DType v_type = DType::F16;
  size_t v_row_bytes = 0;
  float* out = nullptr;  // [T][H][Dv]
  int64_t n_tok = 0, n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0;
  int64_t n_kv = 0;               // positions 0..n_kv-1 are in the cache
  int64_t pos0 = 0;               // position of token 0; token t attends to positions <= pos0 + t (causal)
  float scale = 1.0f;             // applied to q·k before softmax
  const TqCodec* k_tq = nullptr;  // set iff k_type is a tq type
  const TqCodec* v_tq = nullptr;  // set iff v_type is a tq type
  // Attention sinks (memory/kv_cache.h): positions 0..n_sink_k-1 of K are read from k_sink
  // instead of k, f16 rows of [Hkv][Dk] (Hkv·Dk halves apart) in K's storage space: for a tq
  // type the codec's rotated space (R·k, what decode_head_rotated gives before its scale),
  // else the vector the row encodes; likewise V (n_sink_v, v_sink). 0: none.
  const uint16_t* k_sink = nullptr;
  const uint16_t* v_sink = nullptr;
  int64_t n_sink_k = 0, n_sink_v = 0;
};

enum class MoeGating {
  softmax,  // probs = softmax(router logits) over all experts (mixtral, qwen3moe, olmoe)
  sigmoid,  // probs = sigmoid(router logits) (deepseek2, expert_gating_func = 2)
};

// How an MoE layer routes tokens to experts. Field names follow llama.cpp's metadata keys.
struct MoeOptions {
  int64_t n_expert = 0;                   // {arch}.expert_count (0: the model is dense)
  int64_t n_expert_used = 0;              // {arch}.expert_used_count: k experts per token
  MoeGating gating = MoeGating::softmax;  // {arch}.expert_gating_func (1 softmax, 2 sigmoid)
  bool norm_weights = false;              // renormalise the k chosen weights to sum 1 (sum clamped >= 6.1035e-5)
  float weights_scale = 1.0f;             // {arch}.expert_weights_scale, applied when neither 0 nor 1
  int64_t n_group = 1;                    // {arch}.expert_group_count: group-limited routing (deepseek2)
  int64_t n_group_used = 1;               // {arch}.expert_group_used_count: groups kept per token
};

// One routed expert of a single token's MoE FFN: its SwiGLU matrices and its routing weight.
struct FfnExpert {
  const TensorView* gate = nullptr;  // ne = [n_embd, F]
  const TensorView* up = nullptr;    // ne = [n_embd, F]
  const TensorView* down = nullptr;  // ne = [F, n_embd]
  float weight = 1.0f;
  // Which expert this is (-1: not a routed expert, e.g. a test's matrices): a backend with an
  // expert cache of its own (cuda's VRAM tier) keys it by (layer, expert), never by address,
  // because a streamed expert's host buffer is reused for other experts.
  int32_t layer = -1, expert = -1;
  float limit = 0.0f;  // the SwiGLU clamp (Backend::swiglu); 0: none
};

// One routed expert of a batch's MoE FFN (Backend::moe_ffn_batch): its matrices and the
// batch tokens sent to it with their routing weights.
struct FfnExpertRows {
  const TensorView* gate = nullptr;  // ne = [n_embd, F]
  const TensorView* up = nullptr;    // ne = [n_embd, F]
  const TensorView* down = nullptr;  // ne = [F, n_embd]
  const int64_t* tokens = nullptr;   // batch indices routed here (each at most once)
  const float* weights = nullptr;    // their routing weights
  int64_t n = 0;                     // >= 1
  int32_t layer = -1, expert = -1;   // as FfnExpert
  float limit = 0.0f;                // the SwiGLU clamp (Backend::swiglu); 0: none
};

// The gated delta rule over one sequence's run of T tokens (Gated DeltaNet, arXiv:2412.06464;
// with a per-channel decay, Kimi Delta Attention, arXiv:2510.26692). Per value head h, with
// key head kh = h % Hk (heads tiled, as Qwen3.5/Qwen3-Next GGUFs are laid out; h / (Hv/Hk)
// with grouped_heads) and the state S [Dv][Dk] carried between calls:
//   S ← S · diag(exp(g_t))              (g_t: one log-decay per head, or one per key channel)
//   u = β_t · (v_t − S·k_t)              (the delta: what the state gets wrong about v_t)
//   S ← S + u·k_tᵀ
//   o_t = S · (scale · q_t)
// q, k: [T] rows of `qk_stride` floats, head kh at kh*Dk; v: [T] rows of v_stride, head h at
// h*Dv; g: [T][Hv] (or [T][Hv][Dk] with per_channel_decay); beta: [T][Hv]; out: [T][Hv][Dv];
// state: [Hv][Dv][Dk], updated in place. A backend may evaluate a long run in chunks (the
// WY/UT form); it must equal the recurrence within float rounding (tests/kernels).
struct DeltaRuleArgs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t qk_stride = 0, v_stride = 0;
  const float* g = nullptr;
  const float* beta = nullptr;
  float* state = nullptr;
  float* out = nullptr;
  int64_t n_tok = 0, n_head_k = 0, n_head_v = 0, dim_k = 0, dim_v = 0;
  bool per_channel_decay = false;
  bool grouped_heads = false;
  float scale = 1.0f;
  int64_t key_head(int64_t h) const { return grouped_heads ? h / (n_head_v / n_head_k) : h % n_head_k; }
};

// n elements of activation memory from Backend::alloc: what one forward step's ops read and
// write (host memory on ref and cpu; a device backend may hand out its own). Shared ownership,
// so a copy is a second handle, not a second buffer. The host touches it only through ops and
// Backend::host_view; tests/models/test_host_guard.cpp runs every architecture on a backend
// whose buffers fault on any other host access, so a device backend can keep them resident.
template <class T>
class ActBuf {
 public:
  ActBuf() = default;
  ActBuf(std::shared_ptr<void> mem, int64_t n) : mem_(std::move(mem)), n_(n) {}
  T* data() const { return static_cast<T*>(mem_.get()); }
  int64_t size() const { return n_; }

 private:
  std::shared_ptr<void> mem_;
  int64_t n_ = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int n_threads() const { return 1; }
  // One line of figures for the end of a run (cuda: its VRAM expert tier); empty: nothing to say.
  virtual std::string stats_line() const { return {}; }

  // Activation memory (ActBuf): n_bytes, zeroed. The default is host memory.
  virtual std::shared_ptr<void> alloc_bytes(size_t n_bytes);
  template <class T>
  ActBuf<T> alloc(int64_t n) {
    return ActBuf<T>(alloc_bytes(static_cast<size_t>(n) * sizeof(T)), n);
  }
  // The n_bytes at p (activation memory of this backend, or host memory) readable by the host
  // until the next op, at the address returned: p itself on a host backend (the default), a
  // copy where the buffers live elsewhere. For what the host must look at between ops: hooks,
  // a KV codec's statistics, the predictor's guess.
  virtual const void* host_read(const void* p, size_t n_bytes) { return (void)n_bytes, p; }
  template <class T>
  const T* host_view(const T* p, int64_t n) {
    return static_cast<const T*>(host_read(p, static_cast<size_t>(n) * sizeof(T)));
  }

  // y[t][o] = Σ_i W[o][i]·x[t][i] for a 2-D weight W with ne = [in, out]; x: [T][in], y: [T][out];
  // plus each of w's LoRA adapters' scale·B·(A·x) (w.lora), through matmul_weights.
  void matmul(const TensorView& w, const float* x, float* y, int64_t n_tok);
  // The product with W alone: what a backend implements (a wrapping backend forwards it).
  virtual void matmul_weights(const TensorView& w, const float* x, float* y, int64_t n_tok) = 0;
  // out[t] = row ids[t] of `table` (ne = [n_embd, n_rows]) decoded to float.
  virtual void get_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out) = 0;
  // y[r] = x[r] / sqrt(mean(x[r]²) + eps) * w  (w may be null: no scale). y may alias x.
  virtual void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) = 0;
  // In place on x: [T][H][head_dim]; rotates the first r.n_rot dims of each head by
  // r.angle(pos[t], i) for pair i (scaled by r.mscale), with the pair layout of r.mode.
  virtual void rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, const Rope& r) = 0;
  // In place, each of n_rows rows of length n.
  virtual void softmax(float* x, int64_t n_rows, int64_t n) = 0;
  // out = silu(gate) ⊙ up, n elements. out may alias gate or up. limit > 0 is the SwiGLU clamp
  // of llama.cpp's swiglu_clamp_exp/shexp (Ling 3): out = min(silu(gate), limit) ⊙
  // clamp(up, -limit, limit); limit <= 0: none.
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n, float limit) = 0;
  // out = gelu(x) (tanh approximation, as ggml_gelu). out may alias x.
  virtual void gelu(const float* x, float* out, int64_t n) = 0;
  // out = a + b elementwise. out may alias a or b.
  virtual void add(const float* a, const float* b, float* out, int64_t n) = 0;
  // Store n floats as type t (F32/F16/BF16/any quant type) at dst: KV-cache writes.
  virtual void store_row(const float* src, DType t, void* dst, int64_t n) = 0;
  // Causal multi-head attention with GQA (query head h uses KV head h / (H/Hkv)) over the cache.
  virtual void attention(const AttentionArgs& a) = 0;
  // The KV cache's Hadamard rotation (kvcodec.h KvRotation), x [n] in place: each r.block
  // elements -> R·x, or R^T·x when inverse (memory/kv_cache: K and V rows before they are
  // stored, the queries before attention, the output after). The default is kvcodec's
  // kv_rotate_ref (double); an override agrees with it to float32 rounding, not bit for bit.
  virtual void kv_rotate(const KvRotation& r, float* x, int64_t n, bool inverse);

  // The MoE FFN of ONE token (decode): out[n_embd] = Σ_j e_j.weight · down_j(silu(gate_j·x) ⊙
  // up_j·x), summed in the order given: out starts at 0 and gets one float32 `+= weight·y_j`
  // per expert. The default does exactly that with matmul/swiglu per expert — the semantics
  // every override must reproduce (the cpu backend's fused pass is bitwise equal to its own
  // default, tests/kernels/test_moe_fused.cpp). A backend overrides it to run all experts in
  // one pass: activations quantized once, one pool wake per phase instead of three per expert.
  virtual void moe_ffn_token(std::span<const FfnExpert> experts, const float* x, float* out, int64_t n_embd);

  // The MoE FFN of a batch (several sequences decoding together, a prompt chunk, a prefill):
  // out[t] = Σ_e w_te · down_e(silu(gate_e·x_t) ⊙ up_e·x_t) over the experts given, x and out
  // [n_tok][n_embd]. The default gathers each expert's token rows, runs matmul/swiglu per
  // expert, then adds the outputs to out (zeroed first) expert by expert in the order given —
  // the semantics every override must reproduce (the cpu backend's fused pass is bitwise equal
  // to it below and past its tile size, tests/kernels/test_moe_fused.cpp).
  virtual void moe_ffn_batch(std::span<const FfnExpertRows> experts, const float* x, float* out, int64_t n_tok,
                             int64_t n_embd);

  // Data movement and routing the models would otherwise do on the host, as ops so that a
  // backend holding activations elsewhere (a device) can keep them there. The defaults are the
  // host code every backend shares (the ref twins); an override must give the same bits.
  //
  // Strided copy: dst[r*dst_stride + c] = src[r*src_stride + c], r < rows, c < cols.
  virtual void copy_2d(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                       int64_t cols);
  // dst row i = src row idx[i], rows of `width` floats.
  virtual void gather_rows(const float* src, int64_t width, const int64_t* idx, int64_t n, float* dst);
  // out row idx[i] += w[i] * y row i, for i = 0..n-1 in that order (the order fixes the sum).
  virtual void add_rows_weighted(const float* y, int64_t width, const int64_t* idx, const float* w, int64_t n,
                                 float* out);
  // x[0..n) = v.
  virtual void fill(float* x, int64_t n, float v);
  // MoE routing of n_tok tokens from router logits [n_tok][n_expert]: probabilities into
  // probs (same shape), then per token the k = n_expert_used experts with the best score
  // (probs + selection_bias, where given; group-limited when opt says so), in descending
  // score, ties to the lower id, into experts[t*k + j], and their weights (the unbiased probs,
  // renormalised and scaled as opt says) into weights[t*k + j]. llama.cpp's build_moe_ffn.
  virtual void moe_route(const MoeOptions& opt, const float* logits, float* probs, int64_t n_tok,
                         const float* selection_bias, int32_t* experts, float* weights);

  // Linear-attention ops (the defaults, backends/linear_attn_ops.cpp, are the float64 ref
  // twins; the cpu backend overrides them).
  //
  // Causal depthwise convolution of one sequence's run: with xs = state ++ x (the last K-1
  // inputs of the previous calls, oldest first, then the run's T rows),
  // out[t][c] = Σ_j w[c][j]·xs[t+j][c], then silu when `silu`; state becomes the last K-1 rows
  // of xs. x, out: [T][C]; w: [C][K] (ggml ne = [K, C]); state: [K-1][C].
  virtual void conv1d_causal(const float* x, const float* w, float* state, float* out, int64_t n_tok, int64_t n_ch,
                             int64_t kernel, bool silu);
  // y[r] = x[r] / max(‖x[r]‖₂, eps), n_rows rows of n. y may alias x.
  virtual void l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps);
  // See DeltaRuleArgs.
  virtual void delta_rule(const DeltaRuleArgs& a);
  // The Gated DeltaNet gates of n_tok tokens × n channels: g = a ⊙ softplus(alpha + bias)
  // (a = −exp(A_log): a log-decay ≤ 0) and beta = sigmoid(beta_logit); a and bias are [n].
  virtual void delta_gates(const float* alpha, const float* beta_logit, const float* bias, const float* a, float* g,
                           float* beta, int64_t n_tok, int64_t n);
  // The "safe" KDA decay gate (bailingmoe3) of n_tok tokens × n channels:
  // g = lower_bound · sigmoid(a ⊙ (x + bias)), a log-decay in (lower_bound, 0) for lower_bound
  // < 0; a and bias are [n]. g may alias x.
  virtual void kda_safe_gate(const float* x, const float* bias, const float* a, float lower_bound, float* g,
                             int64_t n_tok, int64_t n);
  // out = x ⊙ sigmoid(gate), n elements (gated attention's output gate). out may alias x.
  virtual void sigmoid_mul(const float* x, const float* gate, float* out, int64_t n);
  // out[i] = sigmoid(x[i]). out may alias x.
  virtual void sigmoid(const float* x, float* out, int64_t n);
};

struct BackendOptions {
  int n_threads = 0;            // cpu: <= 0 picks the core count
  size_t gpu_expert_cache = 0;  // cuda: VRAM bytes for routed experts, cached by (layer, expert); 0: no
                                // separate budget (experts cached like every other weight)
};

// "ref", "cpu", "cpu-exact" or "cuda" (when built). Throws Error for an unknown name, a
// backend this binary lacks, or an option the backend does not take.
std::unique_ptr<Backend> make_backend(std::string_view name, const BackendOptions& opt);
std::unique_ptr<Backend> make_backend(std::string_view name, int n_threads = 0);

}  // namespace sluice
