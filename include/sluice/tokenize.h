// sluice/tokenize.h: a model's tokenizer alone (`sluice tokenize`): a GGUF file's vocabulary or
// a model folder's tokenizer.json, read without the weights.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

class ModelTokenizer {
 public:
  // Throws Error naming the file and what is wrong.
  explicit ModelTokenizer(const std::string& path);
  ~ModelTokenizer();
  ModelTokenizer(const ModelTokenizer&) = delete;
  ModelTokenizer& operator=(const ModelTokenizer&) = delete;

  // add_special: BOS/EOS as the model adds them; parse_special: special-token text becomes
  // those tokens (Hugging Face tokenizers' default), else it is tokenized as text.
  std::vector<int32_t> tokenize(std::string_view text, bool add_special = false, bool parse_special = true) const;
  std::string detokenize(const std::vector<int32_t>& ids) const;
  std::string token_text(int32_t id) const;  // one token's text, as detokenize renders it
  int64_t n_vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
