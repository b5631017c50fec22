// runtime/generator: the one decode loop of the library — tokenize, evaluate the prompt, sample,
// turn tokens into text that never splits a UTF-8 character, stop, and time it. `sluice run`
// (apps/cli) and Engine::generate (api/) both call Generator::run, so they print the same text;
// the per-token rules (Generation) are the Scheduler's too (runtime/scheduler.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/session.h"
#include "sampling/sampler.h"
#include "sluice/sluice.h"

namespace sluice {

// StopReason and stop_reason_name are the public API's (sluice/sluice.h): one list of reasons.

struct GenerateParams {
  SamplerParams sampler;
  int n_predict = 64;             // most tokens to generate
  bool ignore_eos = false;        // keep going past end-of-generation tokens (they are then emitted as text)
  bool parse_special = true;      // prompt text that spells a special token (<|im_start|>) becomes it, as in llama.cpp
  std::vector<std::string> stop;  // stop strings; empty ones are ignored
  // >= 0: record each kept token's log-probability and this many most likely alternatives
  // (GenerationStats::logprobs; OpenAI's logprobs + top_logprobs). -1: none (no extra work).
  int n_logprobs = -1;
  // A constraint on the generated tokens (sampling/json_schema.h: OpenAI's response_format),
  // made fresh for each generation; empty: none.
  std::function<std::unique_ptr<TokenFilter>()> make_filter;
};

// A kept token's log-probability under the model: log-softmax of the raw logits, before
// penalties, temperature and the filtering stages (what OpenAI's API reports), and the most
// likely tokens under the same distribution, highest first (ties: lower id first).
struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// Fills `out` for token `id` from logits [n_vocab] with the n_top most likely alternatives.
void token_logprob(const float* logits, int32_t n_vocab, int32_t id, int n_top, TokenLogprob& out);

struct GenerationStats {
  int n_prompt = 0;
  int n_generated = 0;  // tokens sampled and kept; an end-of-generation token that stopped the run is not counted
  double prompt_seconds = 0, generate_seconds = 0;
  StopReason stop = StopReason::none;
  std::vector<int32_t> tokens;         // the n_generated ids, in order
  std::vector<TokenLogprob> logprobs;  // one per token when GenerateParams::n_logprobs >= 0
};

// Number of bytes at the end of `s` that begin a UTF-8 sequence still missing its continuation
// bytes (0..3): those are held back until the next piece completes them. Bytes that can never
// become valid (stray continuation bytes, 0xC0/0xC1/0xF5..0xFF) are not held: waiting would not help.
size_t utf8_incomplete_tail(std::string_view s);

// Token pieces in, final text out. Text is final when it ends on a complete UTF-8 sequence and
// no stop string could still start in it; a stop string may span any number of pieces. What
// comes out is byte for byte the concatenation of the pieces, cut before the first stop string:
// invalid UTF-8 passes through as-is (no U+FFFD), so the stream equals Tokenizer's pieces.
class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop);
  // Adds a piece; returns the text that became final (often empty, never part of a stop string).
  std::string push(std::string_view piece);
  // The end of the generation: everything held back, as-is (incomplete UTF-8 included). Empty
  // once a stop string was found: what followed it is dropped.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  size_t stop_prefix_tail() const;  // longest suffix of held_ that starts some stop string

  std::vector<std::string> stop_;
  std::string held_;  // text not yet final
  bool stopped_ = false;
};

// One generation's per-token rules: the sampler (penalties primed with the prompt), end-of-
// generation tokens, the text stream and its callback, stop strings, max tokens. Whoever owns
// the evaluation (Generator: one Session; Scheduler: many sequences in one Memory) feeds it
// logits and decides what only it knows (context full, cancel).
class Generation {
 public:
  using TextFn = std::function<bool(std::string_view text)>;
  Generation(const Tokenizer& tok, const GenerateParams& p, std::span<const int32_t> prompt, TextFn on_text);
  // Samples from `logits` [n_vocab] and applies the rules. Returns the token when one was kept
  // (-1: none, the generation ended on an end-of-generation token or had nothing left to
  // make); ended() then says whether it goes on (evaluate the token, call next again).
  int32_t next(const float* logits, int32_t n_vocab);
  // Ends the generation for a reason the caller decides; emits what is held back.
  void end(StopReason why);
  bool ended() const { return st_.stop != StopReason::none; }
  GenerationStats& stats() { return st_; }  // the caller fills the timing fields
  const GenerationStats& stats() const { return st_; }
  const std::string& text() const { return text_; }  // everything passed to on_text

 private:
  void emit(const std::string& t);

  const Tokenizer& tok_;
  GenerateParams p_;
  Sampler sampler_;
  TextStream stream_;
  TextFn on_text_;
  bool keep_ = true;  // false once on_text asked to stop; it is not called again after that
  GenerationStats st_;
  std::string text_;
};

// A prompt as the decode loops take it: tokenized with the vocab's BOS/EOS rule and (unless
// p.parse_special is off) special tokens spelled in it. Throws sluice::Error when it has no
// tokens or does not fit n_ctx.
// What a caller of decode_loop adds to it: per-token measurements before each sample, a cancel
// check, and a record of each token evaluated into the session.
struct DecodeHooks {
  std::function<void(int n_generated)> before_sample;
  std::function<bool()> cancelled;
  std::function<void(int32_t id)> evaluated;
};

// The one-token decode loop of Generator::run and ChatSession::respond: samples from `logits`
// through g, evaluates each kept token in s, until g ends (max tokens, end of generation, stop
// string, callback), the context is full or hooks.cancelled() says so. A last token that ends
// the run on max tokens is still evaluated, so the session holds the whole generation (a
// caller can continue it) and the CLI's routing figures count one pass per token.
void decode_loop(Session& s, Generation& g, std::span<const float> logits, const DecodeHooks& hooks = {});

std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, std::string_view prompt, const GenerateParams& p,
                                     int64_t n_ctx);

// The loop over one Session. run() starts from an empty context (Session::reset) each time.
class Generator {
 public:
  // Receives final text (see TextStream); returning false stops the run (StopReason::callback).
  using TextFn = std::function<bool(std::string_view text)>;
  // Called before sampling each token, with the count generated so far: per-token measurements
  // (cmd_run's steady-state figures) hook in here without a second loop.
  using StepFn = std::function<void(int n_generated)>;

  explicit Generator(Session& s) : s_(s) {}
  // Throws sluice::Error when the tokenized prompt is empty or longer than the context. The
  // prompt is tokenized with the vocab's BOS/EOS rule (add_special) and, unless
  // p.parse_special is off, special tokens spelled in it, as llama.cpp does.
  GenerationStats run(std::string_view prompt, const GenerateParams& p, const TextFn& on_text = {},
                      const StepFn& on_step = {});

 private:
  Session& s_;
};

}  // namespace sluice
