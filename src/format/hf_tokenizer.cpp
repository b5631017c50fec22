// format/hf_tokenizer: a folder's tokenizer.json (byte-level BPE: vocab, merges, added tokens,
// the pre-tokenizer llama.cpp names) or Kimi's tiktoken.model, tokenizer_config.json,
// generation_config.json and chat template as the tokenizer.ggml.* metadata llama.cpp's
// converter writes.
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/gpt2_bytes.h"
#include "format/hf_common.h"

namespace sluice::hf {
namespace {

// The pre-tokenizers of the byte-level BPE models llama.cpp knows, by their tokenizer.json form.
std::string pre_tokenizer_name(const json& pre, const fs::path& file) {
  // The Split regexes of Llama 3 and Qwen 2/3 tokenizer.json files.
  const std::string llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::string qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::string qwen35 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  auto is_byte_level = [](const json& p, bool use_regex) {
    return p.is_object() && p.value("type", "") == "ByteLevel" && p.value("use_regex", true) == use_regex &&
           !p.value("add_prefix_space", false);
  };
  if (is_byte_level(pre, true)) return "gpt-2";
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].size() == 2) {
    const json &a = pre["pretokenizers"][0], &b = pre["pretokenizers"][1];
    if (a.value("type", "") == "Digits" && a.value("individual_digits", false) && is_byte_level(b, true))
      return "smollm";
    if (a.value("type", "") == "Split" && a.contains("pattern") && a["pattern"].contains("Regex") &&
        is_byte_level(b, false)) {
      const std::string re = a["pattern"]["Regex"].get<std::string>();
      if (re == llama3) return "llama-bpe";
      if (re == qwen2) return "qwen2";
      if (re == qwen35) return "qwen35";
    }
  }
  fail(file.string(), ": pre_tokenizer ", pre.dump(), " is not one supported yet (byte-level BPE as GPT-2, SmolLM, ",
       "Llama 3, Qwen 2/3 or Qwen 3.5 write it)");
}

// SentencePiece-style BPE (Llama 2, Mistral, Mixtral: byte_fallback, "▁" for spaces, no
// splitting): the normalizer that prepends "▁" and replaces spaces (legacy), or a Metaspace
// pre-tokenizer that does the same to every segment between special tokens (prepend_scheme
// "always", split false; not on a segment that starts with a space) or only to a segment that
// starts the input ("first"). Returns "" for the legacy normalizer (llama.cpp's SPM rule), else
// the Metaspace scheme.
std::string sentencepiece_metaspace(const json& t, const fs::path& file) {
  const json& norm = t.contains("normalizer") ? t["normalizer"] : json();
  const json& pre = t.contains("pre_tokenizer") ? t["pre_tokenizer"] : json();
  const auto is = [](const json& j, const char* type) { return j.is_object() && j.value("type", "") == type; };
  if (is(norm, "Sequence") && pre.is_null() && norm.contains("normalizers") && norm["normalizers"].size() == 2) {
    const json &p = norm["normalizers"][0], &r = norm["normalizers"][1];
    if (is(p, "Prepend") && p.value("prepend", "") == "\u2581" && is(r, "Replace") && r.contains("pattern") &&
        r["pattern"].value("String", "") == " " && r.value("content", "") == "\u2581")
      return "";
  }
  const std::string scheme = is(pre, "Metaspace") ? pre.value("prepend_scheme", "always") : "";
  if (norm.is_null() && pre.value("replacement", "") == "\u2581" && (scheme == "always" || scheme == "first") &&
      !pre.value("split", true))
    return scheme;
  fail(file.string(), ": a byte_fallback BPE (SentencePiece-style) with normalizer ", norm.dump(),
       " and pre_tokenizer ", pre.dump(), " is not supported (the legacy Prepend + Replace normalizer, or ",
       "Metaspace with prepend_scheme \"always\" or \"first\" and split false)");
}

// A special-token field of tokenizer_config.json: a string or {"content": ...}.
std::string token_field(const json& tc, const char* key) {
  if (!tc.contains(key)) return {};
  const json& v = tc[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return {};
}

// Standard base64 (tiktoken.model's token field) -> bytes; false if `s` is not base64.
bool base64_decode(std::string_view s, std::string& out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out.clear();
  if (s.empty() || s.size() % 4 != 0) return false;
  for (size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    const int pad = last ? (s[i + 3] == '=') + (s[i + 2] == '=') : 0;
    uint32_t w = 0;
    for (int k = 0; k < 4; ++k) {
      const int v = k >= 4 - pad ? 0 : val(s[i + k]);
      if (v < 0) return false;
      w = w << 6 | static_cast<uint32_t>(v);
    }
    out.push_back(static_cast<char>(w >> 16));
    if (pad < 2) out.push_back(static_cast<char>(w >> 8 & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(w & 0xFF));
  }
  return true;
}

// Kimi's tokenizer (tokenization_kimi.py's TikTokenTokenizer): tiktoken.model, one "base64 rank"
// line per token, ranks 0..N-1, which are the ids; ids N..N+255 are special tokens, named by
// tokenizer_config.json's added_tokens_decoder, "<|reserved_token_ID|>" where it names none. As
// byte-level BPE: each token's bytes in GPT-2's map, every split of a token into two tokens a
// merge, ranked by the token it makes (sluice.tokenizer.tiktoken), Kimi's split pattern.
void add_tiktoken_vocab(const fs::path& dir, const json& tc, Kv& kv, std::map<std::string, int32_t>& ids) {
  const fs::path tm = dir / "tiktoken.model";
  if (!tc.is_object() || tc.value("tokenizer_class", "") != "TikTokenTokenizer")
    fail(tm.string(),
         ": a tiktoken vocabulary without tokenizer_config.json's tokenizer_class TikTokenTokenizer "
         "(Kimi's): its split pattern is not known");
  std::ifstream in(tm, std::ios::binary);
  if (!in) fail(tm.string(), ": cannot be read");
  std::vector<std::string> bytes;  // by rank
  std::unordered_map<std::string, int32_t> rank_of;
  std::string line, b;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    int64_t rank = -1;
    try {
      size_t used = 0;
      if (sp != std::string::npos) rank = std::stoll(line.substr(sp + 1), &used);
      if (sp != std::string::npos && used != line.size() - sp - 1) rank = -1;
    } catch (const std::exception&) {
      rank = -1;
    }
    if (sp == std::string::npos || rank < 0 || !base64_decode(std::string_view(line).substr(0, sp), b))
      fail(tm.string(), ": line ", n, " is not 'base64 rank'");
    if (rank != static_cast<int64_t>(bytes.size()))
      fail(tm.string(), ": line ", n, " has rank ", rank, ", expected ", bytes.size(), " (ranks run 0, 1, 2, ...)");
    if (!rank_of.emplace(b, static_cast<int32_t>(rank)).second)
      fail(tm.string(), ": line ", n, ": the token of rank ", rank, " repeats an earlier one");
    bytes.push_back(b);
  }
  if (bytes.size() < 256) fail(tm.string(), ": ", bytes.size(), " tokens, fewer than the 256 single bytes");
  for (int c = 0; c < 256; ++c)
    if (!rank_of.count(std::string(1, static_cast<char>(c)))) fail(tm.string(), ": byte ", c, " has no token");
  std::string gpt2[256];
  for (int c = 0; c < 256; ++c) gpt2[c] = gpt2_byte_text(c);
  auto mapped = [&](std::string_view raw) {
    std::string t;
    for (unsigned char c : raw) t += gpt2[c];
    return t;
  };
  std::vector<std::string> tokens, merges;
  std::vector<int32_t> types;
  for (const std::string& raw : bytes) {
    tokens.push_back(mapped(raw));
    types.push_back(1);  // NORMAL
    for (size_t k = 1; k < raw.size(); ++k)
      if (rank_of.count(raw.substr(0, k)) && rank_of.count(raw.substr(k)))
        merges.push_back(mapped(raw.substr(0, k)) + " " + mapped(raw.substr(k)));
  }
  std::map<int64_t, std::string> named;
  if (tc.contains("added_tokens_decoder") && tc["added_tokens_decoder"].is_object())
    for (const auto& [id, a] : tc["added_tokens_decoder"].items()) {
      int64_t i = -1;
      try {
        i = std::stoll(id);
      } catch (const std::exception&) {
      }
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || i < 0)
        fail((dir / "tokenizer_config.json").string(), ": added_tokens_decoder['", id, "'] is not {\"content\": ...}");
      named[i] = a["content"].get<std::string>();
    }
  const int64_t n_base = static_cast<int64_t>(bytes.size());
  for (const auto& [i, text] : named)
    if (i < n_base || i >= n_base + 256)
      fail((dir / "tokenizer_config.json").string(), ": added token ", i, " ('", text, "') is outside ", n_base, "..",
           n_base + 255, ", the special ids after tiktoken.model's ", n_base, " tokens");
  for (int64_t i = n_base; i < n_base + 256; ++i) {
    const auto it = named.find(i);
    tokens.push_back(it != named.end() ? it->second : "<|reserved_token_" + std::to_string(i) + "|>");
    types.push_back(3);  // CONTROL
  }
  for (size_t i = 0; i < tokens.size(); ++i) ids.emplace(tokens[i], static_cast<int32_t>(i));
  kv.emplace_back("tokenizer.ggml.model", str("gpt2"));
  kv.emplace_back("tokenizer.ggml.pre", str("kimi-k2"));
  kv.emplace_back("tokenizer.ggml.tokens", str_array(tokens));
  kv.emplace_back("tokenizer.ggml.token_type", i32_array(types));
  kv.emplace_back("tokenizer.ggml.merges", str_array(merges));
  kv.emplace_back("sluice.tokenizer.tiktoken", boolean(true));
}

// tokenizer.json's vocabulary, merges, pre-tokenizer and normalizer.
void add_tokenizer_json_vocab(const fs::path& dir, Kv& kv, std::map<std::string, int32_t>& ids) {
  const fs::path tj = dir / "tokenizer.json";
  const json t = read_json(tj, true);
  const json& model = t.value("model", json::object());
  if (model.value("type", "") != "BPE")
    fail(tj.string(), ": model type '", model.value("type", "?"), "' is not supported yet (byte-level BPE only)");
  // SentencePiece-style (byte_fallback) runs as llama.cpp's SPM tokenizer; else byte-level BPE.
  const bool spm = model.value("byte_fallback", false);
  const std::string metaspace = spm ? sentencepiece_metaspace(t, tj) : "";
  const json& norm = spm || !t.contains("normalizer") ? json() : t["normalizer"];
  // NFC (Qwen's): applied as tokenizers applies it, to the text between added tokens (llama.cpp
  // skips it, which differs on text that is not already NFC).
  if (!norm.is_null() && norm.value("type", "") != "NFC")
    fail(tj.string(), ": normalizer ", norm.dump(), " is not supported yet");
  const std::string pre = spm ? "default" : pre_tokenizer_name(t.value("pre_tokenizer", json()), tj);

  std::map<int64_t, std::pair<std::string, int32_t>> by_id;  // id -> (text, GGUF token type)
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail(tj.string(), ": model.vocab missing");
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) fail(tj.string(), ": vocab['", text, "'] is not an id");
    by_id[id.get<int64_t>()] = {text, 1};  // NORMAL
  }
  for (const auto& a : t.value("added_tokens", json::array())) {
    if (!a.contains("id") || !a.contains("content")) fail(tj.string(), ": an added_tokens entry lacks id or content");
    by_id[a["id"].get<int64_t>()] = {a["content"].get<std::string>(), a.value("special", false) ? 3 : 4};
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (const auto& [id, tt] : by_id) {
    if (id != static_cast<int64_t>(tokens.size())) fail(tj.string(), ": token id ", tokens.size(), " is missing");
    ids[tt.first] = static_cast<int32_t>(id);
    tokens.push_back(tt.first);
    types.push_back(tt.second);
  }
  std::vector<std::string> merges;
  for (const auto& m : model.value("merges", json::array())) {
    if (m.is_string())
      merges.push_back(m.get<std::string>());
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    else
      fail(tj.string(), ": merge ", m.dump(), " is neither \"a b\" nor [\"a\", \"b\"]");
  }
  if (spm) {
    // llama.cpp's SPM merges the adjacent pair whose joined text is the best-scored token: the
    // score of a token is minus the rank of the first merge that makes it, which orders pairs as
    // tokenizers' BPE does; a token no merge makes gets -inf, which the SPM tokenizer never
    // forms (tokenizers' BPE cannot either). "<0xAB>" tokens are the byte fallback.
    std::vector<float> scores(tokens.size(), -std::numeric_limits<float>::infinity());
    for (size_t r = merges.size(); r-- > 0;) {
      const size_t sp = merges[r].find(' ', 1);
      if (sp == std::string::npos) fail(tj.string(), ": merge '", merges[r], "' has no space");
      const auto it = ids.find(merges[r].substr(0, sp) + merges[r].substr(sp + 1));
      if (it != ids.end()) scores[static_cast<size_t>(it->second)] = -static_cast<float>(r);
    }
    const std::string unk = model.contains("unk_token") && model["unk_token"].is_string()
                                ? model["unk_token"].get<std::string>()
                                : std::string();
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (types[i] != 1) continue;
      const std::string& x = tokens[i];
      if (x == unk)
        types[i] = 2;  // UNKNOWN
      else if (x.size() == 6 && x.rfind("<0x", 0) == 0 && x[5] == '>')
        types[i] = 6;  // BYTE
    }
    kv.emplace_back("tokenizer.ggml.model", str("llama"));
    kv.emplace_back("tokenizer.ggml.pre", str(pre));
    kv.emplace_back("tokenizer.ggml.tokens", str_array(tokens));
    kv.emplace_back("tokenizer.ggml.scores", f32_array(scores));
    kv.emplace_back("tokenizer.ggml.token_type", i32_array(types));
    kv.emplace_back("tokenizer.ggml.add_space_prefix", boolean(true));
    if (!metaspace.empty()) kv.emplace_back("sluice.tokenizer.metaspace", str(metaspace));
    if (ids.count(unk)) kv.emplace_back("tokenizer.ggml.unknown_token_id", u32(static_cast<uint64_t>(ids[unk])));
  } else {
    kv.emplace_back("tokenizer.ggml.model", str("gpt2"));
    kv.emplace_back("tokenizer.ggml.pre", str(pre));
    kv.emplace_back("tokenizer.ggml.tokens", str_array(tokens));
    kv.emplace_back("tokenizer.ggml.token_type", i32_array(types));
    kv.emplace_back("tokenizer.ggml.merges", str_array(merges));
  }
  if (!norm.is_null()) kv.emplace_back("sluice.tokenizer.nfc", boolean(true));
}

}  // namespace

void add_tokenizer(const fs::path& dir, const json& config, Kv& kv) {
  const json tc = read_json(dir / "tokenizer_config.json", false);
  std::map<std::string, int32_t> ids;  // token text -> id
  if (!fs::exists(dir / "tokenizer.json") && fs::exists(dir / "tiktoken.model"))
    add_tiktoken_vocab(dir, tc, kv, ids);
  else
    add_tokenizer_json_vocab(dir, kv, ids);
  const json gen = read_json(dir / "generation_config.json", false);
  auto id_of = [&](const std::string& text) -> int64_t {
    auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  };
  // An id from a config: an integer, or the first of a list.
  auto config_id = [](const json& c, const char* key) -> int64_t {
    if (!c.is_object() || !c.contains(key)) return -1;
    const json& v = c[key];
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int64_t>();
    return -1;
  };
  int64_t bos = id_of(token_field(tc, "bos_token")), eos = id_of(token_field(tc, "eos_token"));
  if (bos < 0) bos = config_id(config, "bos_token_id");
  if (eos < 0) eos = config_id(gen, "eos_token_id");
  if (eos < 0) eos = config_id(config, "eos_token_id");
  if (bos >= 0) kv.emplace_back("tokenizer.ggml.bos_token_id", u32(static_cast<uint64_t>(bos)));
  if (eos >= 0) kv.emplace_back("tokenizer.ggml.eos_token_id", u32(static_cast<uint64_t>(eos)));
  // generation_config's other end ids: the first that is not EOS ends a turn too.
  if (gen.is_object() && gen.contains("eos_token_id") && gen["eos_token_id"].is_array())
    for (const auto& v : gen["eos_token_id"])
      if (v.is_number_integer() && v.get<int64_t>() != eos && v.get<int64_t>() != bos) {
        kv.emplace_back("tokenizer.ggml.eot_token_id", u32(v.get<uint64_t>()));
        break;
      }
  kv.emplace_back("tokenizer.ggml.add_bos_token", boolean(tc.is_object() && tc.value("add_bos_token", false)));
  std::string tmpl;
  if (std::ifstream jf(dir / "chat_template.jinja"); jf) {
    std::stringstream ss;
    ss << jf.rdbuf();
    tmpl = ss.str();
  } else if (tc.is_object() && tc.contains("chat_template")) {
    const json& ct = tc["chat_template"];
    if (ct.is_string()) tmpl = ct.get<std::string>();
    if (ct.is_array())
      for (const auto& e : ct)
        if (e.value("name", "") == "default") tmpl = e.value("template", "");
  }
  if (!tmpl.empty()) kv.emplace_back("tokenizer.chat_template", str(tmpl));
}

void pad_vocab(Kv& kv, int64_t vocab_size) {
  auto array = [&](const char* key) -> GgufArray* {
    for (auto& [k, v] : kv)
      if (k == key && v.type == GgufType::ARRAY) return std::get<std::shared_ptr<GgufArray>>(v.v).get();
    return nullptr;
  };
  GgufArray* tokens = array("tokenizer.ggml.tokens");
  if (!tokens || static_cast<int64_t>(tokens->items.size()) >= vocab_size) return;
  GgufArray *types = array("tokenizer.ggml.token_type"), *scores = array("tokenizer.ggml.scores");
  for (int64_t id = static_cast<int64_t>(tokens->items.size()); id < vocab_size; ++id) {
    tokens->items.push_back(str("[PAD" + std::to_string(id) + "]"));
    if (types) types->items.push_back(GgufValue{GgufType::INT32, int32_t{5}});  // UNUSED
    if (scores) scores->items.push_back(GgufValue{GgufType::FLOAT32, 0.0f});
  }
}

}  // namespace sluice::hf
