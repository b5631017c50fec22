// runtime/generator: the one decode loop of the library — tokenize, evaluate the prompt, sample,
// turn tokens into text that never splits a UTF-8 character, stop, and time it. `sluice run`
// (apps/cli) and Engine::generate (api/) both call Generator::run, so they print the same text.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
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
  std::vector<std::string> stop;  // stop strings; empty ones are ignored
};

struct GenerationStats {
  int n_prompt = 0;
  int n_generated = 0;  // tokens sampled and kept; an end-of-generation token that stopped the run is not counted
  double prompt_seconds = 0, generate_seconds = 0;
  StopReason stop = StopReason::none;
  std::vector<int32_t> tokens;  // the n_generated ids, in order
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
  // prompt is tokenized with the vocab's BOS/EOS rule (add_special), as llama.cpp does.
  GenerationStats run(std::string_view prompt, const GenerateParams& p, const TextFn& on_text = {},
                      const StepFn& on_step = {});

 private:
  Session& s_;
};

}  // namespace sluice
