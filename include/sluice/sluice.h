// sluice/sluice.h: the public API of libsluice — open a model, tokenize, generate; evaluate
// several sequences together (Context).
// Everything else (backends, formats, models) is internal and may change.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

struct EngineOptions {
  std::string backend = "cpu";  // "cpu" or "ref"
  int n_threads = 0;            // 0: all cores
  int64_t n_ctx = 0;            // 0: min(model's training context, 4096)
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
  std::vector<std::string> stop;
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
};

// A loaded model plus one session over it. Not thread-safe; one generation at a time.
class Engine {
 public:
  // Throws std::runtime_error (sluice::Error) naming the file and what is wrong.
  static std::unique_ptr<Engine> open(const std::string& model_path, const EngineOptions& opt = {});
  ~Engine();

  std::vector<int32_t> tokenize(std::string_view text, bool add_bos = true) const;
  std::string detokenize(const std::vector<int32_t>& ids) const;
  std::string architecture() const;
  int64_t n_vocab() const;

  // Generates after `prompt` from an empty context; calls on_piece with text as it becomes
  // final (return false to stop): pieces never split a UTF-8 character and never hold any part
  // of a stop string, so a piece may cover several tokens and a token may show up later than it
  // was sampled. Invalid UTF-8 from the model is passed on as-is. Returns the text streamed
  // (when on_piece stops the run, what was held back at that point is dropped).
  std::string generate(std::string_view prompt, const GenerateOptions& opt,
                       const std::function<bool(std::string_view piece)>& on_piece = {},
                       GenerateStats* stats = nullptr);

 private:
  friend class Context;
  Engine();
  struct Impl;
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
