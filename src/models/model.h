// models/model: a loaded model — hyperparameters from GGUF metadata, weights bound by name
// (views into the mmap), the tokenizer — and the architecture registry that picks the forward.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "core/tensor.h"
#include "format/gguf.h"
#include "memory/expert_store.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

class Memory;
struct Batch;
struct BatchRun;
struct MemoryLayout;
class Predictor;

// MoeGating and MoeOptions (how an MoE layer routes) are in backends/backend.h: routing is a backend op.

// What an architecture module (models/arch.h) adds to the shared hyperparameters and to each
// layer's weights: its own struct derived from these, owned by the module's file.
struct ArchHparams {
  virtual ~ArchHparams() = default;
};
struct ArchLayerWeights {
  virtual ~ArchLayerWeights() = default;
};

struct Arch;

// Shared core of every architecture's hyperparameters (llama.cpp metadata names in comments,
// `{arch}` = general.architecture). Per-architecture extensions live in their own structs.
struct Hparams {
  std::string arch;                       // general.architecture
  int64_t n_vocab = 0;                    // rows of token_embd
  int64_t n_ctx_train = 0;                // {arch}.context_length
  int64_t n_embd = 0;                     // {arch}.embedding_length: width of the residual stream
  int64_t n_layer = 0;                    // {arch}.block_count less the NextN blocks: the layers run
  int64_t n_layer_nextn = 0;              // {arch}.nextn_predict_layers: trailing MTP blocks, not run
  int64_t n_head = 0;                     // {arch}.attention.head_count: query heads
  int64_t n_head_kv = 0;                  // {arch}.attention.head_count_kv (can be < n_head: grouped-query attention)
  std::vector<int64_t> n_head_kv_layer;   // the same per layer; 0: a layer without attention (linear attention)
  int64_t head_dim_k = 0;                 // {arch}.attention.key_length (default n_embd / n_head; qwen3 may differ)
  int64_t head_dim_v = 0;                 // {arch}.attention.value_length (default head_dim_k)
  std::vector<int64_t> n_ff;              // {arch}.feed_forward_length per layer: hidden width of the dense FFN
  float rms_eps = 1e-5f;                  // {arch}.attention.layer_norm_rms_epsilon
  float rope_base = 10000.0f;             // {arch}.rope.freq_base
  int64_t n_rot = 0;                      // {arch}.rope.dimension_count: leading dims of each head that RoPE rotates
  RopeMode rope_mode = RopeMode::normal;  // pair layout, fixed by the architecture (llama: normal, qwen3: neox)
  // {arch}.rope.scaling.*, linear or YaRN, as llama.cpp derives them (Rope in backends/backend.h).
  float rope_freq_scale = 1.0f, rope_ext_factor = 0.0f, rope_corr_lo = 0.0f, rope_corr_hi = 0.0f, rope_mscale = 1.0f;
  float kq_scale_mul = 1.0f;  // times 1/sqrt(d_k): YaRN's mscale² where the MLA models ask for it
  Rope rope() const {
    return {n_rot, rope_base, rope_mode, rope_freq_scale, rope_ext_factor, rope_corr_lo, rope_corr_hi, rope_mscale};
  }
  bool qk_norm_per_head = false;   // qwen3: RMSNorm each q/k head (weights of length head_dim) before RoPE
  bool qk_norm_full = false;       // olmoe: RMSNorm the whole projected q and k (weights of n_head*head_dim)
  MoeOptions moe;                  // experts (moe.n_expert == 0 for dense models)
  int64_t n_ff_exp = 0;            // {arch}.expert_feed_forward_length: hidden width of one expert
  int64_t n_expert_shared = 0;     // {arch}.expert_shared_count: always-on experts (*_shexp), width n_ff_exp each
  int64_t n_ff_shexp = 0;          // {arch}.expert_shared_feed_forward_length: their total width (0: n_ff_exp each)
  int64_t n_layer_dense_lead = 0;  // {arch}.leading_dense_block_count: first layers with a dense FFN
  // SwiGLU clamps per layer (Backend::swiglu's limit; empty or 0: none): {arch}.swiglu_clamp_exp
  // for the routed experts, {arch}.swiglu_clamp_shexp for the shared experts and dense FFNs.
  std::vector<float> swiglu_limit_exp, swiglu_limit_shexp;
  // A per-layer metadata array (one value per block_count block) cut to the layers run.
  template <class T>
  std::vector<T> per_layer(std::vector<T> v) const {
    if (static_cast<int64_t>(v.size()) > n_layer) v.resize(static_cast<size_t>(n_layer));
    return v;
  }
  float swiglu_limit(const std::vector<float>& per_layer, int64_t l) const {
    return l < static_cast<int64_t>(per_layer.size()) ? per_layer[static_cast<size_t>(l)] : 0.0f;
  }
  const Arch* module = nullptr;            // the architecture module that runs this model
  std::shared_ptr<const ArchHparams> ext;  // the module's own hyperparameters (null: none)
  // The module's hyperparameters as its own type T (the module knows which it stored).
  template <class T>
  const T& ext_as() const {
    return static_cast<const T&>(*ext);
  }
};

// Weights of one transformer block. Shapes in ggml order [ne0, ne1] = [in, out].
// The module's bind_attention may bind ffn_norm itself (a family that names it otherwise) and
// reuse wo for its own output projection (a linear-attention layer's).
struct LayerWeights {
  const TensorView* attn_norm = nullptr;  // [n_embd]
  const TensorView* wq = nullptr;         // [n_embd, n_head*head_dim_k]
  const TensorView* wk = nullptr;         // [n_embd, n_head_kv*head_dim_k]
  const TensorView* wv = nullptr;         // [n_embd, n_head_kv*head_dim_v]
  const TensorView* wo = nullptr;         // [n_head*head_dim_v, n_embd]
  const TensorView* q_norm = nullptr;     // [head_dim_k] (qwen3)
  const TensorView* k_norm = nullptr;     // [head_dim_k] (qwen3)
  const TensorView* ffn_norm = nullptr;   // [n_embd]
  const TensorView* ffn_gate = nullptr;   // [n_embd, n_ff]
  const TensorView* ffn_up = nullptr;     // [n_embd, n_ff]
  const TensorView* ffn_down = nullptr;   // [n_ff, n_embd]
  // MoE layers (expert weights are reached through the ExpertSource only: the stacked tensors
  // below are null in a `sluice pack`ed file, and under --experts stream their data must never
  // be read, or the pages would count against the process's RSS):
  const TensorView* ffn_gate_inp = nullptr;        // [n_embd, n_expert] router
  const TensorView* exp_probs_b = nullptr;         // [n_expert] selection bias (deepseek2)
  const TensorView* ffn_gate_exps = nullptr;       // [n_embd, n_ff_exp, n_expert]
  const TensorView* ffn_up_exps = nullptr;         // [n_embd, n_ff_exp, n_expert]
  const TensorView* ffn_down_exps = nullptr;       // [n_ff_exp, n_embd, n_expert]
  const TensorView* ffn_gate_shexp = nullptr;      // [n_embd, n_ff_exp*n_expert_shared] shared expert
  const TensorView* ffn_up_shexp = nullptr;        // [n_embd, n_ff_exp*n_expert_shared]
  const TensorView* ffn_down_shexp = nullptr;      // [n_ff_exp*n_expert_shared, n_embd]
  const TensorView* ffn_gate_inp_shexp = nullptr;  // [n_embd]: shared output scaled by sigmoid(this·x) (qwen35moe)
  bool is_moe() const { return ffn_gate_inp != nullptr; }
  // The module's own tensors of this layer (e.g. deepseek2's MLA projections); null: none.
  std::shared_ptr<const ArchLayerWeights> ext;
  template <class T>
  const T& ext_as() const {
    return static_cast<const T&>(*ext);
  }
};

// Called after each named block of the forward with the block's output: `rows` rows of
// `cols` floats (rows = tokens, or tokens*heads for per-head tensors). Layer is -1 outside
// the blocks. Used by the parity tool and by tests to diff backends layer by layer.
using TensorHook = std::function<void(std::string_view name, int layer, const float* data, int64_t rows, int64_t cols)>;
// Calls a set hook with an activation of be, read through Backend::host_view.
inline void report_to(const TensorHook* hook, Backend& be, std::string_view name, int layer, const float* data,
                      int64_t rows, int64_t cols) {
  if (hook && *hook) (*hook)(name, layer, be.host_view(data, rows * cols), rows, cols);
}

// How Model::load places the weights. The defaults keep everything resident in the mapping.
struct ModelOptions {
  ExpertStoreOptions experts;  // expert policy, cache budget, pins, prefetch (memory/expert_store.h)
  // With the resident policy the file is read into memory (GgufFile::Load::read: huge pages,
  // no page faults while decoding); false maps it instead (CLI --mmap). The mmap and stream
  // policies always map it: they exist for models larger than memory.
  bool read_weights = true;
  GgufFile::Progress progress;  // while reading weights: bytes done, total
  // LoRA adapters (format/lora.h: PATH or PATH:SCALE, a llama.cpp LoRA GGUF or an MLX-LM
  // adapter folder), applied at run time, or merged into the weights at load with lora_merge.
  std::vector<std::string> lora;
  bool lora_merge = false;
  // Interleaved copies of the matrices whose type has a 16-row layout (quant/rows16.h: Q4_0,
  // Q4_1, Q4_K, Q5_K, Q6_K) for the cpu backend's int8 kernels (CLI --repack, on by default
  // where they are read: repack_by_default). A GGUF file's copied rows go back to the file's
  // pages (GgufFile::release_pages), so the copy costs no memory beyond the weights. Experts
  // only under the resident policy (a streamed expert's bytes move between cache slots).
  bool repack = false;
  // With repack: a folder's converted weights (no file keeps their rows) are interleaved in
  // place, so they are not held twice; their rows are gone (TensorView::rows_interleaved), so
  // only for a backend that reads the layout of every such type at every batch size, and
  // get_rows from it (a tied embedding): cpu_backend_reads_every_rows16. Without it they are
  // copied like a file's.
  bool repack_in_place = false;
  // A quantized MLX folder's affine groups read where the folder keeps them (DType::MLX_A*:
  // codes, scales and biases in place, no conversion; CLI --mlx-in-place) instead of converted
  // at load into exact Q4_1/Q5_1/Q8_A blocks. Off by default: the converted blocks decode faster
  // today (12-layer qwen3-30b-a3b MLX 4-bit, Zen 4, 2 threads: in place ~35 tok/s, the
  // Q4_K_M GGUF of the same shapes 40-53), in place loads at once and holds ~10% fewer bytes.
  bool mlx_in_place = false;
  GgufFile::Progress repack_progress;  // while packing: bytes done, total
  // --experts stream on a model folder: where its packed copy is kept (empty: default_pack_dir(),
  // memory/pack.h), the pack's progress (tensors written, total) and a line about what happens.
  std::string pack_dir;
  std::function<void(size_t done, size_t total)> pack_progress;
  std::function<void(const std::string& line)> on_note;
};

class Model {
 public:
  // Opens, validates and binds a GGUF model. Throws Error naming the file and what is wrong.
  static std::unique_ptr<Model> load(const std::string& path, const ModelOptions& opt = {});
  ~Model();

  const GgufFile& file() const { return *file_; }
  // What --lora did, a line per adapter ("lora: 3 tensors adapted at run time (rank 4, scale 2)");
  // empty without an adapter.
  const std::string& lora_summary() const { return lora_summary_; }
  // What --repack did ("repack: 98 tensors, 4.52 GB interleaved in 2.1 s"); empty without it.
  const std::string& repack_summary() const { return repack_summary_; }
  const Hparams& hparams() const { return hp_; }
  Hparams& mutable_hparams() { return hp_; }  // tests: negative controls perturb the config
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const TensorView& tok_embd() const { return *tok_embd_; }
  const TensorView& output_norm() const { return *output_norm_; }
  const TensorView& output() const { return *output_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  std::vector<LayerWeights>& mutable_layers() { return layers_; }  // tests: negative controls drop a tensor
  ExpertSource& experts() const { return *experts_; }
  // Guesses the next MoE layer's experts for prefetch (mmap/stream with prefetch on; null otherwise).
  void set_predictor(std::unique_ptr<Predictor> p);
  Predictor* predictor() const { return predictor_.get(); }
  // Bytes of all weights (for bandwidth figures and `inspect`).
  size_t weight_bytes() const;

  // What each layer keeps between steps (memory/memory.h): KV rows in every layer here.
  MemoryLayout memory_layout() const;

  // One forward step over a batch of tokens of one or more sequences (memory/batch.h),
  // reading and writing their rows in `mem`. logits: [batch.n_outputs()][n_vocab], the rows
  // of the tokens flagged in batch.logits, in batch order (may be null when none is flagged).
  // The batch is checked against the memory and the vocabulary before any work; on an error
  // the memory is as it was.
  void forward(Backend& be, Memory& mem, const Batch& batch, float* logits, const TensorHook* hook) const;

 public:
  // Blocks the architecture modules' forwards share (models/<family>.cpp).
  // The second half of every block: output projection of the attention heads `attn`
  // [T][n_head*head_dim_v], residual add, FFN norm, FFN, residual add (x updated in place).
  // h and o are the caller's [T][n_embd] scratch, so nothing is allocated per layer.
  void attn_output_and_ffn(Backend& be, int64_t l, const float* attn, float* x, float* h, float* o, int64_t n_tok,
                           const TensorHook* hook) const;
  // The FFN of layer l on normed input h -> out (dense, or MoE + shared experts).
  void ffn_block(Backend& be, int64_t l, const float* h, float* out, int64_t n_tok, const TensorHook* hook) const;
  // Embedding lookup, and the output head on the rows of x flagged in b.logits.
  void embed(Backend& be, const int32_t* tokens, int64_t n_tok, float* x, const TensorHook* hook) const;
  void output_head(Backend& be, const float* x, const Batch& b, float* logits, const TensorHook* hook) const;

 private:
  std::unique_ptr<GgufFile> file_;
  std::string lora_summary_;
  std::string repack_summary_;
  Hparams hp_;
  std::unique_ptr<Tokenizer> tokenizer_;
  const TensorView* tok_embd_ = nullptr;     // [n_embd, n_vocab]
  const TensorView* output_norm_ = nullptr;  // [n_embd]
  const TensorView* output_ = nullptr;       // [n_embd, n_vocab] (token_embd when tied)
  std::vector<LayerWeights> layers_;
  std::unique_ptr<ExpertSource> experts_;
  std::unique_ptr<Predictor> predictor_;
};

}  // namespace sluice
