// tokenizer/tokenizer: the vocabulary read from GGUF (tokenizer.ggml.*) and the two tokenizers
// llama.cpp calls SPM and BPE, written to give the same ids as its src/llama-vocab.cpp:
//  - SentencePiece ("llama", SPM; llm_tokenizer_spm): escape spaces to U+2581, optional leading
//    '▁', greedy bigram merges by score, byte fallback (tokenizer.cpp);
//  - byte-level BPE ("gpt2"; llm_tokenizer_bpe): split by the regexes tokenizer.ggml.pre selects
//    (pretokenize.cpp), map each byte to its GPT-2 code point, merge by rank (bpe.cpp).
// Special tokens found in the text are split out first for both, as llama.cpp's
// tokenizer_st_partition does.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice {

class GgufFile;

// tokenizer.ggml.token_type values, as llama.cpp's llama_token_type stores them.
enum TokenType : int32_t {
  TOKEN_TYPE_UNDEFINED = 0,
  TOKEN_TYPE_NORMAL = 1,
  TOKEN_TYPE_UNKNOWN = 2,
  TOKEN_TYPE_CONTROL = 3,
  TOKEN_TYPE_USER_DEFINED = 4,
  TOKEN_TYPE_UNUSED = 5,
  TOKEN_TYPE_BYTE = 6,
};

// Token attribute bits (llama.cpp's llama_token_attr). Derived from TokenType plus the per-model
// fix-ups llama.cpp applies at load; LSTRIP/RSTRIP make special-token splitting eat the
// whitespace before/after the token.
enum TokenAttr : uint32_t {
  TOKEN_ATTR_UNDEFINED = 0,
  TOKEN_ATTR_UNKNOWN = 1u << 0,
  TOKEN_ATTR_UNUSED = 1u << 1,
  TOKEN_ATTR_NORMAL = 1u << 2,
  TOKEN_ATTR_CONTROL = 1u << 3,
  TOKEN_ATTR_USER_DEFINED = 1u << 4,
  TOKEN_ATTR_BYTE = 1u << 5,
  TOKEN_ATTR_LSTRIP = 1u << 7,
  TOKEN_ATTR_RSTRIP = 1u << 8,
};

// The tokenizer as stored in the file, before any derived tables. Ids are -1 when absent.
struct Vocab {
  std::string model;                 // tokenizer.ggml.model: "llama" (SPM) or "gpt2" (byte-level BPE)
  std::string pre;                   // tokenizer.ggml.pre: BPE pre-tokenizer name; "" (absent) = "default"
  std::string name;                  // general.name; llama.cpp keys its phi-3 strip rule on it
  std::vector<std::string> tokens;   // (n_vocab) token text; SPM writes spaces as U+2581 '▁'
  std::vector<float> scores;         // (n_vocab) SPM merge priority, higher merges first; 0 if absent
  std::vector<int32_t> token_types;  // (n_vocab) TokenType; NORMAL if the key is absent
  std::vector<std::string> merges;   // BPE merges "left right" (split at the first ' ' after byte 0), rank = index
  int32_t bos_id = 1;                // tokenizer.ggml.bos_token_id (SPM default 1)
  int32_t eos_id = 2;                // tokenizer.ggml.eos_token_id (SPM default 2)
  int32_t unk_id = 0;                // tokenizer.ggml.unknown_token_id (SPM default 0)
  int32_t pad_id = -1;               // tokenizer.ggml.padding_token_id
  int32_t sep_id = -1;               // tokenizer.ggml.seperator_token_id (sic, as in GGUF)
  int32_t eot_id = -1;               // tokenizer.ggml.eot_token_id (end of turn), else found by text
  int32_t eom_id = -1;               // tokenizer.ggml.eom_token_id (end of message), else by text
  bool add_bos = true;               // tokenizer.ggml.add_bos_token: encode(add_special) prepends BOS.
                                     // Default: SPM true; BPE per pre type (true for llama3, tekken, chameleon)
  bool add_eos = false;              // tokenizer.ggml.add_eos_token: encode(add_special) appends EOS
  bool add_space_prefix = true;      // tokenizer.ggml.add_space_prefix: SPM prepends ' ' to the text
  // sluice.tokenizer.metaspace ("always" or "first": a tokenizer.json Metaspace pre-tokenizer):
  // the space prefix only on text that does not start with a space, and with "first" only on
  // text that starts the input. Empty: llama.cpp's SPM rule (every fragment after a special token).
  std::string metaspace;
  // sluice.tokenizer.tiktoken (a folder's tiktoken.model, Kimi's): merges are every split of each
  // token into two tokens, and a pair is ranked by the token it makes, so BPE merges the pair of
  // lowest token id first and takes a word that is a token whole, as tiktoken does.
  bool tiktoken = false;
  bool nfc = false;  // sluice.tokenizer.nfc (a tokenizer.json NFC normalizer): BPE text between special tokens is
                     // NFC-normalized first, as Hugging Face tokenizers does
};

// Reads tokenizer.ggml.* (and general.name) from `f`. Defaults follow llama.cpp's
// llama_vocab::impl::load for the model type and, for BPE, the pre-tokenizer. Throws sluice::Error naming the key that is
// missing or has the wrong type or length. An out-of-range special-token id is ignored (the
// default stays), as llama.cpp does, because real files carry e.g. pad_id = n_vocab.
Vocab vocab_from_gguf(const GgufFile& f);

// Immutable after construction: every const method may be called from several threads at once.
class Tokenizer {
 public:
  // Validates `v` (sizes agree, ids in range) and builds the lookup tables; for BPE also the merge
  // table and the pre-tokenizer regexes (an unknown tokenizer.ggml.pre throws, naming it).
  explicit Tokenizer(Vocab v);

  // Text -> ids, as llama.cpp's llama_tokenize(text, add_special, parse_special).
  // add_special: prepend BOS if vocab().add_bos, append EOS if vocab().add_eos.
  // parse_special: text that spells a CONTROL/UNKNOWN token (e.g. "<s>") becomes that token;
  // USER_DEFINED tokens are always split out, as in llama.cpp and HF tokenizers.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const;

  // One token's text as llama_token_to_piece(special = true) renders it: NORMAL tokens with
  // '▁' -> ' ' (SPM) or each GPT-2 code point -> its byte (BPE), BYTE tokens <0xAB> -> the raw
  // byte 0xAB, CONTROL/UNKNOWN/USER_DEFINED tokens as their text, UNUSED/UNDEFINED tokens as "".
  // No clean-up here: that is decode()'s. Throws on an id outside [0, n_vocab).
  const std::string& token_to_piece(int32_t id) const;

  // Ids -> text, as llama.cpp's llama_detokenize(ids, remove_special, unparse_special):
  //  - CONTROL/UNKNOWN tokens render as "" unless unparse_special;
  //  - remove_special drops a leading BOS (if add_bos) and a trailing EOS (if add_eos);
  //  - SPM (add_space_prefix): the first token loses one leading space, because encode() added it.
  //    A leading BOS, even one that renders as "", takes that first place, so a BOS-prefixed
  //    sequence keeps its space, and so does one whose BOS was removed by remove_special.
  //  - BPE whose pre type keeps llama.cpp's clean_spaces (gpt-2, llama3, falcon, starcoder, ...;
  //    not deepseek, qwen2, command-r): the text gets clean_up_tokenization_spaces afterwards:
  //    " ?" " !" " ." " ," lose the space, " ' " becomes "'", " 's" " 'm" " 're" " 've" lose the
  //    space (" 't" " 'd" " 'll" keep it), exactly llama.cpp's three passes.
  // So decode(encode(s, false)) == s for SPM and for BPE without clean-up (valid UTF-8 input),
  // and decode({bos} + generated) equals the concatenated pieces that llama-cli streams (the
  // stories260K golden .txt).
  std::string decode(const std::vector<int32_t>& ids, bool remove_special = false, bool unparse_special = false) const;

  int32_t bos() const { return v_.bos_id; }
  int32_t eos() const { return v_.eos_id; }
  int32_t n_vocab() const { return static_cast<int32_t>(v_.tokens.size()); }
  // End of generation: EOS, EOT, EOM and the tokens llama.cpp recognises by text
  // ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "<end_of_turn>", ...).
  bool is_eog(int32_t id) const;
  uint32_t attr(int32_t id) const;  // TokenAttr bits
  // The id of a token with exactly this text, or -1.
  int32_t text_to_token(std::string_view text) const;
  const Vocab& vocab() const { return v_; }
  // BPE: whether decode() applies clean_up_tokenization_spaces (see decode). False for SPM.
  bool clean_spaces() const { return clean_spaces_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Fragment {
    int32_t token;  // >= 0: an already-resolved special token; -1: raw text [off, off + len)
    size_t off, len;
  };
  std::vector<Fragment> partition_special(std::string_view text, bool parse_special) const;
  void spm_tokenize(std::string_view escaped, std::vector<int32_t>& out) const;
  struct BpeModel;  // bpe.cpp: pre-tokenizer, merge table, GPT-2 byte map
  void bpe_init();  // bpe.cpp; needs token_to_id_
  void bpe_tokenize(std::string_view text, std::vector<int32_t>& out) const;  // one raw fragment
  std::string render_piece(int32_t id) const;

  Vocab v_;
  bool is_spm_ = true;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id_;
  std::vector<uint32_t> attrs_;          // (n_vocab) TokenAttr bits
  std::vector<std::string> pieces_;      // (n_vocab) token_to_piece cache
  std::vector<int32_t> special_order_;   // CONTROL/USER_DEFINED/UNKNOWN ids, longest text first
  std::vector<bool> eog_;                // (n_vocab)
  int32_t byte_to_id_[256];              // SPM byte-fallback token per byte value, -1 if none
  std::shared_ptr<const BpeModel> bpe_;  // BPE only; immutable, so copies of the Tokenizer share it
  bool clean_spaces_ = false;            // BPE: decode() applies clean_up_tokenization_spaces
};

}  // namespace sluice
