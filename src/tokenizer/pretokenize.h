// tokenizer/pretokenize: the byte-level BPE pre-tokenizer, i.e. what tokenizer.ggml.pre selects:
// the split regexes (run with PCRE2) and the per-type defaults that llama.cpp attaches to the name
// (ignore_merges, add_bos, clean_up_tokenization_spaces). The regex lists and their semantics
// follow llama.cpp's llm_tokenizer_bpe constructor and unicode_regex_split (src/llama-vocab.cpp,
// src/unicode.cpp); see pretokenize.cpp for where a naive regex engine would differ.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// What llama.cpp derives from one tokenizer.ggml.pre value.
struct PreTokenizerSpec {
  std::string type;                  // llama.cpp's pre type this name maps to (e.g. "llama3" for "llama-bpe")
  std::vector<std::string> regexes;  // applied in order; each splits the pieces the previous one left
  bool ignore_merges = false;        // a word that is already a token is emitted whole (llama3, tekken)
  bool add_bos = false;              // default of tokenizer.ggml.add_bos_token
  bool clean_spaces = true;          // decode() applies clean_up_tokenization_spaces (" ," -> ",")
  bool no_bos = false;               // the default bos_token_id is "none" instead of 11 (chatglm)
};

// The spec for a tokenizer.ggml.pre value ("" means llama.cpp's "default"), or nullptr if the name
// is not supported here.
const PreTokenizerSpec* find_pre_tokenizer(std::string_view pre);

// The supported names, comma-separated, for error messages.
std::string supported_pre_tokenizers();

// Splits text into the words that BPE then merges one by one. Compiles its regexes once; immutable
// afterwards, so split() may run on several threads at once.
class PreTokenizer {
 public:
  // Throws sluice::Error naming `pre` if it is unknown, or a regex that PCRE2 rejects.
  explicit PreTokenizer(std::string_view pre);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  const PreTokenizerSpec& spec() const { return *spec_; }

  // Appends the words of `text` to `words`, as UTF-8 (not yet byte-encoded). Invalid UTF-8 is
  // handled as llama.cpp's unicode_cpts_from_utf8 does: each byte that does not start a valid
  // sequence becomes U+FFFD, so the words then hold EF BF BD instead of that byte.
  void split(std::string_view text, std::vector<std::string>& words) const;

 private:
  struct Regex;
  const PreTokenizerSpec* spec_;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace sluice
