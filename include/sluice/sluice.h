// sluice/sluice.h: the public API of libsluice — open a model, tokenize, generate.
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
  float temp = 0.8f;       // <= 0: greedy
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;   // logit -= presence, once for a token seen in the window
  float frequency_penalty = 0.0f;  // logit -= count * frequency over the window
  int penalty_last_n = 64;         // tokens (prompt included) the penalties look back over; 0 off, < 0 all
  uint64_t seed = 0x736c75696365ull;
  bool ignore_eos = false;         // keep generating past end-of-generation tokens (EOS, EOT, ...)
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
                       const std::function<bool(std::string_view piece)>& on_piece = {}, GenerateStats* stats = nullptr);

 private:
  Engine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
