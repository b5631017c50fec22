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
  uint64_t seed = 0x736c75696365ull;
  bool ignore_eos = false;
};

struct GenerateStats {
  int n_prompt = 0, n_generated = 0;
  double prompt_seconds = 0, generate_seconds = 0;
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

  // Generates after `prompt` from an empty context; calls on_piece with each new token's
  // text as it is produced (return false to stop). Returns the full generated text.
  std::string generate(std::string_view prompt, const GenerateOptions& opt,
                       const std::function<bool(std::string_view piece)>& on_piece = {}, GenerateStats* stats = nullptr);

 private:
  Engine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
