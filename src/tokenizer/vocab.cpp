// tokenizer/vocab.cpp: vocab_from_gguf, the one place that reads tokenizer.ggml.* keys. Key
// names and defaults follow llama.cpp's llama_vocab::impl::load (src/llama-vocab.cpp) and
// LLM_KV names (src/llama-arch.cpp).
#include <cstdint>
#include <string>

#include "core/error.h"
#include "format/gguf.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

namespace {

// A token-id key: llama.cpp reads it as u32; some converters write i32. Returns false if absent.
// 0xFFFFFFFF (stories260K's "no separator") and every other id >= n_vocab is out of range and
// leaves the default in place, as llama.cpp does (it only warns).
bool read_token_id(const GgufFile& f, std::string_view key, size_t n_vocab, int32_t& id) {
  const GgufValue* v = f.find(key);
  if (!v) return false;
  int64_t x;
  if (v->type == GgufType::UINT32) {
    x = std::get<uint32_t>(v->v);
  } else if (v->type == GgufType::INT32) {
    x = std::get<int32_t>(v->v);
  } else {
    fail(f.path(), ": key ", key, " has type ", gguf_type_name(v->type), ", expected u32");
  }
  if (x >= 0 && x < static_cast<int64_t>(n_vocab)) id = static_cast<int32_t>(x);
  return true;
}

}  // namespace

Vocab vocab_from_gguf(const GgufFile& f) {
  Vocab v;
  v.model = f.get_string("tokenizer.ggml.model");
  v.pre = f.get_string_or("tokenizer.ggml.pre", "");
  v.name = f.get_string_or("general.name", "");

  if (v.model == "llama") {
    v.bos_id = 1;
    v.eos_id = 2;
    v.unk_id = 0;
    v.add_bos = true;
    v.add_eos = false;
    v.add_space_prefix = true;
  } else if (v.model == "gpt2") {
    // The pre-tokenizer name decides some defaults (llama3: add_bos; chatglm: no BOS), and an
    // unknown one is an error here already, as in llama.cpp, rather than at the first encode().
    const PreTokenizerSpec* pre = find_pre_tokenizer(v.pre);
    if (!pre) {
      fail(f.path(), ": unknown BPE pre-tokenizer tokenizer.ggml.pre = '", v.pre,
           "' (supported: ", supported_pre_tokenizers(), ")");
    }
    v.bos_id = pre->no_bos ? -1 : 11;
    v.eos_id = 11;
    v.unk_id = -1;
    v.add_bos = pre->add_bos;
    v.add_eos = false;
    v.add_space_prefix = false;
    v.merges = f.get_string_array("tokenizer.ggml.merges");
  } else {
    fail(f.path(), ": unsupported tokenizer.ggml.model '", v.model, "' (supported: llama, gpt2)");
  }

  v.tokens = f.get_string_array("tokenizer.ggml.tokens");
  const size_t n = v.tokens.size();
  if (n == 0) fail(f.path(), ": key tokenizer.ggml.tokens is empty");

  // Scores are optional (BPE files omit them). llama.cpp also accepts an i32 array.
  if (const GgufValue* s = f.find("tokenizer.ggml.scores")) {
    const auto* arr = s->type == GgufType::ARRAY ? std::get_if<std::shared_ptr<GgufArray>>(&s->v) : nullptr;
    if (arr && *arr && (*arr)->elem_type == GgufType::INT32) {
      for (const GgufValue& e : (*arr)->items) v.scores.push_back(static_cast<float>(std::get<int32_t>(e.v)));
    } else {
      v.scores = f.get_f32_array("tokenizer.ggml.scores");  // throws naming the key if mistyped
    }
    if (v.scores.size() < n) {
      fail(f.path(), ": key tokenizer.ggml.scores has ", v.scores.size(), " entries for ", n, " tokens");
    }
    v.scores.resize(n);
  } else {
    v.scores.assign(n, 0.0f);
  }

  if (f.has("tokenizer.ggml.token_type")) {
    v.token_types = f.get_i32_array("tokenizer.ggml.token_type");
    if (v.token_types.size() < n) {
      fail(f.path(), ": key tokenizer.ggml.token_type has ", v.token_types.size(), " entries for ", n, " tokens");
    }
    v.token_types.resize(n);
  } else {
    v.token_types.assign(n, TOKEN_TYPE_NORMAL);
  }

  // A default id past the end of a tiny vocab means "none" (llama.cpp disables it the same way).
  for (int32_t* id : {&v.bos_id, &v.eos_id, &v.unk_id}) {
    if (*id >= static_cast<int64_t>(n)) *id = -1;
  }
  read_token_id(f, "tokenizer.ggml.bos_token_id", n, v.bos_id);
  read_token_id(f, "tokenizer.ggml.eos_token_id", n, v.eos_id);
  read_token_id(f, "tokenizer.ggml.unknown_token_id", n, v.unk_id);
  read_token_id(f, "tokenizer.ggml.padding_token_id", n, v.pad_id);
  read_token_id(f, "tokenizer.ggml.seperator_token_id", n, v.sep_id);
  read_token_id(f, "tokenizer.ggml.eot_token_id", n, v.eot_id);
  read_token_id(f, "tokenizer.ggml.eom_token_id", n, v.eom_id);

  v.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", v.add_bos);
  v.nfc = f.get_bool_or("sluice.tokenizer.nfc", false);
  v.tiktoken = f.get_bool_or("sluice.tokenizer.tiktoken", false);
  v.add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", v.add_eos);
  v.add_space_prefix = f.get_bool_or("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  v.metaspace = f.get_string_or("sluice.tokenizer.metaspace", "");
  if (!v.metaspace.empty() && v.metaspace != "always" && v.metaspace != "first")
    fail(f.path(), ": sluice.tokenizer.metaspace '", v.metaspace, "' is not always or first");
  if (v.add_bos && v.bos_id < 0) {
    fail(f.path(), ": tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set");
  }
  if (v.add_eos && v.eos_id < 0) {
    fail(f.path(), ": tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is not set");
  }
  return v;
}

}  // namespace sluice
