// sluice/sluice.h: the public API of libsluice — open a model (Engine: backend, threads, KV
// cache codecs, where experts live), tokenize, evaluate, generate (sampler parameters, stop
// strings, speculative decoding, stats); evaluate several sequences together (Context).
// The tools beside it: sluice/{inspect,parity,perplexity,bench,synth,pack,template,chat,serve}.h.
// Everything else (backends, formats, models) is internal and may change. Errors are
// sluice::Error (sluice/error.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/error.h"

namespace sluice {

// "4G", "512M", "1.5GiB", "65536": bytes (K/M/G/T are powers of 1024). Throws Error
// "<what>: '<text>' is not a size (e.g. 4G, 512M, 65536)".
size_t parse_byte_size(const std::string& what, const std::string& text);

// The KV cache type names, for help texts: "f16, f32, bf16, q8_0, ...".
std::string cache_type_names();

// The KV cache of every sequence: a codec per side and how rows are stored (README: KV cache
// codecs). A type name outside cache_type_names() fails when a context is made, naming it.
struct KvOptions {
  std::string type_k = "f16", type_v = "f16";
  bool auto_asymmetric = true;  // K raised to q8_0 when GQA >= 6 and K is below 8 bits
  bool rotation = true;         // q8_0/q4_0 sides stored Hadamard-rotated
  bool k_mean = true;           // tq K rows stored minus a per-head mean of the first positions
  int64_t sinks_k = 0;          // positions 0..N-1 of a quantized K side also kept in f16 (attention sinks)
  int64_t sinks_v = 0;          // the same for V
};
// Throws Error "cache type 'X' is not supported (...)" for an unknown K, then V, type.
void check_kv_options(const KvOptions& kv);

// Where a model's routed experts live and how they are read (README: --experts).
struct ExpertOptions {
  std::string policy = "resident";    // resident | mmap (page cache) | stream (bounded cache)
  std::string cache = "4G";           // stream: the cache budget (a size, or "auto": what the memory limit leaves)
  int pin_per_layer = 0;              // stream: the N most-routed experts of each layer stay cached
  std::string routing_counts{};       // routing counts (a run's save_routing_counts) choosing the pins
  bool prefetch = true;               // mmap/stream: predict the next layer's experts and read them early
  int prefetch_extra = -1;            // the predictor stages the top k+M experts (-1: M = max(1, k/4))
  bool prefetch_gate = true;          // stream: read a guess only when it is expected to pay
  std::string io = "auto";            // stream: auto | uring | pread
  bool direct_io = true;              // stream: O_DIRECT reads
  bool progress = false;              // stream: progress lines on stderr while pins load and the cache warms
  bool record_routing_trace = false;  // keep every expert request for Engine::save_routing_trace
  // stream on a model folder: where its packed copy is written once and read from then on
  // (empty: $SLUICE_PACK_DIR, else $XDG_CACHE_HOME/sluice/packed, else ~/.cache/sluice/packed)
  std::string pack_dir{};
};

struct EngineOptions {
  std::string backend = "cpu";     // ref | cpu | cpu-exact | cuda (when built)
  int n_threads = 0;               // 0: all cores
  int64_t n_ctx = 0;               // generate()'s context until set_context: 0 = min(training context, 4096)
  std::string gpu_expert_cache{};  // cuda: VRAM budget for routed experts (e.g. "8G"; empty: no separate budget)
  KvOptions kv{};
  ExpertOptions experts{};
  bool read_weights = true;  // resident: read the file into memory (false: map it)
  // LoRA adapters, PATH or PATH:SCALE (a llama.cpp LoRA GGUF or an MLX-LM adapter folder):
  // applied at run time, or merged into the weights at load with lora_merge.
  std::vector<std::string> lora{};
  bool lora_merge = false;
  // Interleaved copies of the Q4_0, Q4_1, Q4_K, Q5_K and Q6_K matrices for the cpu backend's
  // int8 kernels (README: --repack). Unset: on where they are read and cost no memory
  // (repack_by_default).
  std::optional<bool> repack{};
  // A quantized MLX folder's groups read in place instead of converted at load (README:
  // --mlx-in-place; ModelOptions::mlx_in_place).
  bool mlx_in_place = false;
  std::function<void(size_t done, size_t total)> load_progress{};    // bytes of weights read so far
  std::function<void(size_t done, size_t total)> repack_progress{};  // bytes interleaved so far
  std::function<void(size_t done, size_t total)> pack_progress{};    // a folder's packed copy: tensors written
  // A line about what the load did (a quantized folder repacked, a LoRA merged, a folder's experts
  // packed for streaming), as it happens.
  std::function<void(const std::string& line)> on_load_note{};
};

// A model's shape (Engine::info, sluice/inspect.h model_info).
struct ModelInfo {
  std::string arch;  // general.architecture
  int64_t n_vocab = 0, n_ctx_train = 0, n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0;
  int64_t head_dim_k = 0, head_dim_v = 0;
  int64_t n_ff = 0;  // the first layer's dense FFN width
  int64_t n_rot = 0;
  float rms_eps = 0, rope_base = 0;
  bool rope_neox = false;
  size_t weight_bytes = 0;
};

// Speculative decoding: each step drafts up to draft_max tokens and verifies them in one batch;
// the tokens are those of plain decoding.
enum class SpeculativeMode {
  off,
  lookup,       // prompt lookup: the tokens that followed the last n-gram's earlier occurrence
  draft_model,  // the greedy continuation of the Engine's draft model (Engine::load_draft)
};
struct SpeculativeOptions {
  SpeculativeMode mode = SpeculativeMode::off;
  int draft_max = 8;  // drafts per step
  int ngram_max = 4;  // lookup: the longest n-gram looked up first ...
  int ngram_min = 2;  // ... down to this one
};

struct GenerateOptions {
  int n_predict = 64;
  float temp = 0.8f;  // <= 0: greedy
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;   // logit -= presence, once for a token seen in the window
  float frequency_penalty = 0.0f;  // logit -= count * frequency over the window
  int penalty_last_n = 64;         // tokens (prompt included) the penalties look back over; 0 off, < 0 all
  uint64_t seed = 0x736c75696365ull;
  bool ignore_eos = false;    // keep generating past end-of-generation tokens (EOS, EOT, ...)
  bool parse_special = true;  // prompt text spelling a special token (e.g. <|im_start|>) becomes that token
  // Generation stops when the text reaches one of these (they may span tokens). The text up to
  // it is returned and streamed; the stop string itself and anything after it are not.
  std::vector<std::string> stop{};
  SpeculativeOptions speculative{};
  // Called before each token is sampled, with the count generated so far (not called with
  // speculative decoding).
  std::function<void(int n_generated)> on_token{};
};

enum class StopReason {
  none,          // not generated yet
  eos,           // an end-of-generation token (not part of the text or n_generated)
  stop_string,   // one of GenerateOptions::stop
  max_tokens,    // n_predict tokens
  context_full,  // the context (EngineOptions::n_ctx) has no room for another token
  callback,      // on_piece returned false
};
const char* stop_reason_name(StopReason r);  // "eos", "stop_string", ...

struct GenerateStats {
  int n_prompt = 0, n_generated = 0;
  double prompt_seconds = 0, generate_seconds = 0;
  StopReason stop_reason = StopReason::none;
  // Speculative decoding: verify steps after the prompt, drafts evaluated and kept, tokens
  // evaluated again after a rollback to a checkpoint (recurrent models).
  int64_t spec_steps = 0, spec_drafted = 0, spec_accepted = 0, spec_replayed = 0;
  double spec_acceptance() const {
    return spec_drafted ? static_cast<double>(spec_accepted) / static_cast<double>(spec_drafted) : 0.0;
  }
};

// The id of the largest of n logits (ties: the lowest id): greedy decoding.
int32_t greedy_token(const float* logits, size_t n);

// A loaded model on a backend plus one sequence (the context of generate and eval). Not
// thread-safe; one generation at a time.
class Engine {
 public:
  // Loads the model, then makes the backend. Throws sluice::Error naming the file, option or
  // what is wrong.
  static std::unique_ptr<Engine> open(const std::string& model_path, const EngineOptions& opt = {});
  ~Engine();

  // parse_special: text spelling a special token (<|im_start|>) becomes that token.
  std::vector<int32_t> tokenize(std::string_view text, bool add_bos = true, bool parse_special = false) const;
  std::string detokenize(const std::vector<int32_t>& ids) const;
  std::string token_to_piece(int32_t id) const;
  std::string architecture() const;
  int64_t n_vocab() const;
  ModelInfo info() const;
  std::string backend_name() const;
  int n_threads() const;
  // The backend's end-of-run figures (cuda: its expert tier); empty for the others.
  std::string backend_stats_line() const;

  // The expert store: its policy name, its figures as one line, and the figures between
  // mark_expert_stats() and now for n_tokens tokens (a run's steady state).
  std::string expert_policy() const;
  std::string expert_stats_line() const;
  void mark_expert_stats();
  std::string expert_stats_since_mark(int64_t n_tokens) const;
  // Adds this run's per-layer routing counts to `path` (ExpertOptions::routing_counts reads it).
  void save_routing_counts(const std::string& path) const;
  // Every expert request, one layer's per line (needs ExpertOptions::record_routing_trace).
  void save_routing_trace(const std::string& path) const;

  // Makes the context of generate() and eval() anew: n_ctx positions in EngineOptions::kv's
  // codecs (throws for an unknown cache type). Without a call, the first use makes one of
  // EngineOptions::n_ctx.
  void set_context(int64_t n_ctx);
  int64_t context_size() const;
  // Evaluates `tokens` after what the context holds; returns every token's logits
  // ([n][n_vocab]) when all_logits, else the last token's.
  std::vector<float> eval(const std::vector<int32_t>& tokens, bool all_logits = false);

  // The draft model of SpeculativeMode::draft_model: loaded with default options, run on this
  // Engine's backend; returns its shape. set_draft_context gives it a context (KvOptions as
  // this Engine's) and throws when its vocabulary differs from this model's.
  ModelInfo load_draft(const std::string& path);
  void set_draft_context(int64_t n_ctx);

  // Generates after `prompt` from an empty context; calls on_piece with text as it becomes
  // final (return false to stop): pieces never split a UTF-8 character and never hold any part
  // of a stop string, so a piece may cover several tokens and a token may show up later than it
  // was sampled. Invalid UTF-8 from the model is passed on as-is. Returns the text streamed
  // (when on_piece stops the run, what was held back at that point is dropped). Throws
  // sluice::Error when the prompt is empty or longer than the context.
  std::string generate(std::string_view prompt, const GenerateOptions& opt,
                       const std::function<bool(std::string_view piece)>& on_piece = {},
                       GenerateStats* stats = nullptr);

  // What it holds (src/api/engine_impl.h): the library's files beside the API (src/api,
  // src/server) reach it through EngineAccess.
  struct Impl;

 private:
  friend class Context;
  friend struct EngineAccess;
  Engine();
  std::unique_ptr<Impl> impl_;
};

struct ContextOptions {
  int64_t n_ctx = 0;         // most positions one sequence may hold (0: the Engine's n_ctx)
  size_t memory_budget = 0;  // bytes for every sequence's KV rows and states together (0: no
                             // limit beyond n_ctx per sequence); a server: n_ctx x parallel
};

// Several sequences over an Engine's model and backend, evaluated together: each decode()
// is one forward step over a batch that holds tokens of any number of sequences, so the
// weights (and each chosen expert) are read once for all of them — a server's continuous
// batching step. Attention sees only the token's own sequence. Not thread-safe; the Engine
// must outlive it (its own generate() keeps a separate sequence).
class Context {
 public:
  // Throws sluice::Error for options the model cannot take.
  static std::unique_ptr<Context> create(Engine& engine, const ContextOptions& opt = {});
  ~Context();

  int32_t new_sequence();
  // A new sequence holding a copy of `seq` (its tokens need not be evaluated again).
  int32_t fork(int32_t seq);
  // Keeps the first n_keep positions; returns the length reached (n_keep, or less for a
  // model with recurrent state, which rewinds to its latest checkpoint at or before n_keep:
  // evaluate the tokens from there again).
  int64_t rewind(int32_t seq, int64_t n_keep);
  // Snapshots the recurrent state of `seq` at its current length, so a later rewind can land
  // there instead of at 0 (a prompt cache takes one where a shared prefix ends). A no-op for
  // a model without recurrent layers, whose every position can be rewound to. Counts against
  // the memory budget; the oldest of a sequence's checkpoints is dropped beyond 8.
  void checkpoint(int32_t seq);
  void free(int32_t seq);
  int64_t length(int32_t seq) const;
  int64_t n_vocab() const;
  size_t memory_used() const;
  size_t memory_budget() const;

  // One entry of a step: tokens appended to `seq` (after what it holds, and after earlier
  // entries of the same step for that sequence).
  struct Input {
    int32_t seq = 0;
    std::vector<int32_t> tokens;
    bool want_logits = true;  // the logits after the entry's last token
  };
  // Evaluates the entries (long ones in several forward steps); returns one [n_vocab] row per
  // entry that wants logits, in entry order. Throws sluice::Error naming the entry and the
  // sequence for an unknown sequence, a token outside the vocabulary or a full context or
  // budget, before anything is evaluated.
  std::vector<std::vector<float>> decode(const std::vector<Input>& inputs);

 private:
  Context();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
