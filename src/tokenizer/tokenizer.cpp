// tokenizer/tokenizer.cpp: the Tokenizer tables, special-token splitting, the SPM encoder, the
// encode() driver for both models and piece rendering / detokenization (the BPE encoder itself is
// in bpe.cpp). Reference read (not copied): llama.cpp src/llama-vocab.cpp,
// llm_tokenizer_spm_session, llama_vocab::impl::{load, tokenizer_st_partition, tokenize,
// token_to_piece, detokenize}.
#include "tokenizer/tokenizer.h"

#include <utf8proc.h>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <queue>

#include "core/error.h"

namespace sluice {

namespace {

constexpr std::string_view kSpaceEscape = "\xe2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK '▁'

// Byte length of a UTF-8 sequence from its lead byte. A stray continuation byte or invalid lead
// counts as one byte, so malformed text still splits into symbols (as llama.cpp's
// unicode_len_utf8 does); those bytes then go out through byte fallback.
size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Unicode NFC of UTF-8 text (utf8proc); text that is not valid UTF-8 is left as it is (the
// byte-level BPE encodes its bytes either way).
std::string nfc(std::string_view s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return std::string(s);
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

// "<0xAB>" -> 0xAB; -1 if `s` is not of that form.
int parse_byte_token(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = s[i];
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return -1;
    v = v * 16 + d;
  }
  return v;
}

// GPT-2 byte-level BPE stores every byte as a printable code point (bytes_to_unicode in
// openai/gpt-2 encoder.py): the printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order. Returns code point -> byte, -1 for code points outside the map.
int gpt2_unicode_to_byte(uint32_t cp) {
  static const std::vector<int> table = [] {
    std::vector<int> t(512, -1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[printable ? b : next++] = b;
    }
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

// Decodes one code point at s[i], advancing i; malformed input yields the lone byte's value
// (never reads past the end).
uint32_t next_code_point(std::string_view s, size_t& i) {
  const uint8_t lead = static_cast<uint8_t>(s[i]);
  const size_t n = utf8_len(lead);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return lead;
  }
  uint32_t cp = lead & (0xFFu >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3Fu);
  i += n;
  return cp;
}

uint32_t attr_from_type(int32_t type) {
  switch (type) {
    case TOKEN_TYPE_NORMAL: return TOKEN_ATTR_NORMAL;
    case TOKEN_TYPE_UNKNOWN: return TOKEN_ATTR_UNKNOWN;
    case TOKEN_TYPE_CONTROL: return TOKEN_ATTR_CONTROL;
    case TOKEN_TYPE_USER_DEFINED: return TOKEN_ATTR_USER_DEFINED;
    case TOKEN_TYPE_UNUSED: return TOKEN_ATTR_UNUSED;
    case TOKEN_TYPE_BYTE: return TOKEN_ATTR_BYTE;
    default: return TOKEN_ATTR_UNDEFINED;
  }
}

// llama.cpp's clean_spaces passes in llama_vocab::impl::detokenize (HF's
// clean_up_tokenization_spaces, which llama.cpp applies to BPE output). Three passes over bytes;
// the first character is never the one a pass looks back from.
void clean_up_tokenization_spaces(std::string& text) {
  if (text.empty()) return;
  // 1: " ?", " !", " .", " ," lose the space.
  std::string out(1, text[0]);
  for (size_t i = 1; i < text.size(); ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) out.pop_back();
    out.push_back(x);
  }
  // 2: " ' " -> "'". The space after the quote is consumed, so it cannot also serve as the
  // space before a following quote (llama.cpp overwrites it with NUL before looking back).
  text.swap(out);
  out.assign(1, text[0]);
  for (size_t i = 1; i < text.size(); ++i) {
    const char x = text[i];
    if (x == '\'' && i + 1 < text.size() && text[i - 1] == ' ' && text[i + 1] == ' ') {
      out.pop_back();
      out.push_back(x);
      ++i;  // drop the space after the quote; the next look-back sees no space there
      if (i + 1 < text.size()) {
        // The character after the dropped space looks back at it: not a space any more.
        const char y = text[i + 1];
        out.push_back(y);
        ++i;
      }
      continue;
    }
    out.push_back(x);
  }
  // 3: " 's", " 'm", " 're", " 've" lose the space; " 't", " 'd", " 'll" keep it (llama.cpp has
  // those removals commented out).
  text.swap(out);
  out.assign(1, text[0]);
  for (size_t i = 1; i < text.size(); ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < text.size()) {
      const char x1 = text[i + 1];
      const char x2 = i + 2 < text.size() ? text[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' || (i + 2 < text.size() && ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')))) {
        out.pop_back();
      }
    }
    out.push_back(x);
  }
  text.swap(out);
}

std::string to_lower_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Token texts that llama.cpp (llama_vocab::impl::load) treats as end-of-generation whatever
// their stored type, and forces to CONTROL. "</s>" is left out on purpose: newer llama.cpp added
// it for one model, and forcing it to CONTROL would change how phi-3 (where "</s>" is
// USER_DEFINED) splits text compared with the build that produced the test vectors (b4747).
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",   "<|endoftext|>",
    "<|eom_id|>", "<EOT>",      "_<EOT>",  "<|end_of_text|>", "<end_of_utterance>",
};
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",      "<|im_end|>", "<|end|>", "<end_of_turn>",      "<|endoftext|>",
    "<|end_of_text|>", "<EOT>",      "_<EOT>",  "<end_of_utterance>",
};

}  // namespace

Tokenizer::Tokenizer(Vocab v) : v_(std::move(v)) {
  const size_t n = v_.tokens.size();
  if (n == 0) fail("tokenizer: empty vocabulary (tokenizer.ggml.tokens has no entries)");
  if (n > static_cast<size_t>(INT32_MAX)) fail("tokenizer: vocabulary of ", n, " tokens is too large");
  if (v_.model == "llama") {
    is_spm_ = true;
  } else if (v_.model == "gpt2") {
    is_spm_ = false;
  } else {
    fail("tokenizer: unsupported tokenizer.ggml.model '", v_.model, "' (supported: llama, gpt2)");
  }
  if (v_.scores.empty()) v_.scores.assign(n, 0.0f);
  if (v_.token_types.empty()) v_.token_types.assign(n, TOKEN_TYPE_NORMAL);
  if (v_.scores.size() != n) fail("tokenizer: ", v_.scores.size(), " scores for ", n, " tokens");
  if (v_.token_types.size() != n) fail("tokenizer: ", v_.token_types.size(), " token types for ", n, " tokens");
  for (int32_t* id : {&v_.bos_id, &v_.eos_id, &v_.unk_id, &v_.pad_id, &v_.sep_id, &v_.eot_id, &v_.eom_id}) {
    if (*id < -1 || *id >= static_cast<int64_t>(n)) fail("tokenizer: special token id ", *id, " outside vocab of ", n);
  }
  if (v_.add_bos && v_.bos_id < 0) fail("tokenizer: add_bos_token is true but there is no bos_token_id");
  if (v_.add_eos && v_.eos_id < 0) fail("tokenizer: add_eos_token is true but there is no eos_token_id");

  token_to_id_.reserve(n);
  attrs_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    // First id wins on duplicate text (llama.cpp rejects such files; we only need a stable rule).
    if (!v_.tokens[i].empty()) token_to_id_.emplace(v_.tokens[i], static_cast<int32_t>(i));
    attrs_[i] = attr_from_type(v_.token_types[i]);
  }

  // End-of-generation set and EOT/EOM detection by text, as llama.cpp does at load: the files
  // rarely carry eot/eom ids, and a chat model that never stops is the failure this prevents.
  eog_.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = v_.tokens[i];
    const int32_t id = static_cast<int32_t>(i);
    if (v_.eot_id < 0 && std::find(std::begin(kEotTexts), std::end(kEotTexts), t) != std::end(kEotTexts)) {
      v_.eot_id = id;
      attrs_[i] |= TOKEN_ATTR_CONTROL;
    }
    if (v_.eom_id < 0 && t == "<|eom_id|>") {
      v_.eom_id = id;
      attrs_[i] |= TOKEN_ATTR_CONTROL;
    }
    if (std::find(std::begin(kEogTexts), std::end(kEogTexts), t) != std::end(kEogTexts)) {
      eog_[i] = true;
      attrs_[i] |= TOKEN_ATTR_CONTROL;
    }
  }
  for (int32_t id : {v_.eos_id, v_.eot_id, v_.eom_id}) {
    if (id >= 0) eog_[id] = true;
  }

  // Tokens split out of raw text before tokenization: longest text first, so "<|endoftext|>"
  // is matched before any shorter token inside it (ties by id, for a deterministic order).
  for (size_t i = 0; i < n; ++i) {
    if ((attrs_[i] & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_USER_DEFINED | TOKEN_ATTR_UNKNOWN)) && !v_.tokens[i].empty()) {
      special_order_.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(special_order_.begin(), special_order_.end(),
                   [&](int32_t a, int32_t b) { return v_.tokens[a].size() > v_.tokens[b].size(); });

  // llama.cpp's phi-3 rule (keyed on general.name): whitespace after any special token is
  // dropped when splitting, except after <unk>, <s> and <|endoftext|>; </s> strips too.
  const std::string lname = to_lower_ascii(v_.name);
  if (lname.find("phi-3") != std::string::npos || lname.find("phi3") != std::string::npos) {
    for (int32_t id : special_order_) attrs_[id] |= TOKEN_ATTR_RSTRIP;
    for (std::string_view t : {"</s>"}) {
      if (int32_t id = text_to_token(t); id >= 0) attrs_[id] |= TOKEN_ATTR_RSTRIP;
    }
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (int32_t id = text_to_token(t); id >= 0) attrs_[id] &= ~static_cast<uint32_t>(TOKEN_ATTR_RSTRIP);
    }
  }

  std::fill(std::begin(byte_to_id_), std::end(byte_to_id_), -1);
  if (is_spm_) {
    // Byte fallback looks up "<0xAB>" by text (upper-case hex, as the converters write it), and
    // failing that the one-byte string itself, as llama.cpp's byte_to_token does.
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      int32_t id = text_to_token(std::string_view(name, 6));
      const char raw = static_cast<char>(b);
      if (id < 0) id = text_to_token(std::string_view(&raw, 1));
      byte_to_id_[b] = id;
    }
  }

  if (!is_spm_) bpe_init();

  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) pieces_[i] = render_piece(static_cast<int32_t>(i));
}

int32_t Tokenizer::text_to_token(std::string_view text) const {
  const auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? -1 : it->second;
}

uint32_t Tokenizer::attr(int32_t id) const {
  if (id < 0 || id >= n_vocab()) fail("tokenizer: token id ", id, " outside vocab of ", n_vocab());
  return attrs_[id];
}

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && eog_[id]; }

std::string Tokenizer::render_piece(int32_t id) const {
  const std::string& text = v_.tokens[id];
  const uint32_t a = attrs_[id];
  if (a & (TOKEN_ATTR_UNKNOWN | TOKEN_ATTR_CONTROL | TOKEN_ATTR_USER_DEFINED)) return text;
  if (a & TOKEN_ATTR_NORMAL) {
    if (is_spm_) return replace_all(text, kSpaceEscape, " ");
    // Byte-level BPE: each code point stands for one byte. A code point outside the map is
    // written out visibly rather than dropped, as llama.cpp's llama_decode_text does.
    std::string out;
    for (size_t i = 0; i < text.size();) {
      const size_t start = i;
      const int b = gpt2_unicode_to_byte(next_code_point(text, i));
      if (b >= 0) {
        out.push_back(static_cast<char>(b));
      } else {
        out += "[UNK_BYTE_0x";
        static constexpr char kHex[] = "0123456789abcdef";
        for (size_t k = start; k < i; ++k) {
          const uint8_t c = static_cast<uint8_t>(text[k]);
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        }
        out += text + "]";
      }
    }
    return out;
  }
  if (a & TOKEN_ATTR_BYTE) {
    const int b = parse_byte_token(text);
    // A BYTE-typed token that is not "<0xAB>" is malformed input; show its text, not garbage.
    return b >= 0 ? std::string(1, static_cast<char>(b)) : text;
  }
  return "";  // UNUSED / UNDEFINED tokens render as nothing, as in llama.cpp
}

const std::string& Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) fail("tokenizer: token id ", id, " outside vocab of ", n_vocab());
  return pieces_[id];
}

// Splits `text` into raw fragments and special tokens. For each special token in
// special_order_ (longest first), every raw fragment is cut at each occurrence of the token's
// text. Same result as llama.cpp's tokenizer_st_partition, including LSTRIP (drop whitespace
// before the token) and RSTRIP (after it).
std::vector<Tokenizer::Fragment> Tokenizer::partition_special(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  const auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  std::vector<Fragment> next;
  for (int32_t id : special_order_) {
    const uint32_t a = attrs_[id];
    // Without parse_special only USER_DEFINED tokens are split out (they are "added tokens" in
    // HF terms); CONTROL and UNKNOWN text stays literal.
    if (!parse_special && (a & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_UNKNOWN))) continue;
    const std::string& tok = v_.tokens[id];
    bool changed = false;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.off;
      const size_t end = f.off + f.len;
      while (pos < end) {
        const size_t hit = text.substr(0, end).find(tok, pos);
        if (hit == std::string_view::npos) break;
        changed = true;
        size_t left_end = hit;
        if (a & TOKEN_ATTR_LSTRIP) {
          while (left_end > pos && is_space(text[left_end - 1])) --left_end;
        }
        if (left_end > pos) next.push_back({-1, pos, left_end - pos});
        next.push_back({id, 0, 0});
        pos = hit + tok.size();
        if (a & TOKEN_ATTR_RSTRIP) {
          while (pos < end && is_space(text[pos])) ++pos;
        }
      }
      if (pos < end) next.push_back({-1, pos, end - pos});
    }
    if (changed) frags.swap(next);
  }
  return frags;
}

// llm_tokenizer_spm_session::tokenize. `escaped` already has ' ' -> '▁' (and the prefix).
// Start from one symbol per UTF-8 character; repeatedly merge the adjacent pair whose
// concatenation is a vocab token with the highest score (ties: the leftmost pair); then emit each
// final symbol as its token, or as byte tokens when it is not in the vocab.
void Tokenizer::spm_tokenize(std::string_view escaped, std::vector<int32_t>& out) const {
  struct Symbol {
    int prev, next;   // neighbours in the live chain, -1 at the ends
    size_t off, len;  // bytes of `escaped`; len == 0 once merged into its left neighbour
  };
  struct Bigram {
    int left, right;
    float score;
    size_t len;  // left.len + right.len when queued; a mismatch later means it went stale
  };
  // priority_queue pops the largest: highest score first, then the smallest left index.
  const auto lower = [](const Bigram& l, const Bigram& r) {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  };

  std::vector<Symbol> sym;
  sym.reserve(escaped.size());
  for (size_t off = 0; off < escaped.size();) {
    const size_t len = std::min(utf8_len(static_cast<uint8_t>(escaped[off])), escaped.size() - off);
    const int idx = static_cast<int>(sym.size());
    sym.push_back({idx - 1, off + len == escaped.size() ? -1 : idx + 1, off, len});
    off += len;
  }
  if (sym.empty()) return;

  std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    // Live neighbours are always contiguous in `escaped`, so the pair is one substring.
    const size_t len = sym[left].len + sym[right].len;
    const int32_t id = text_to_token(escaped.substr(sym[left].off, len));
    // -inf: a token no merge makes (a tokenizer.json BPE's, hf_tokenizer.cpp), never formed.
    if (id < 0 || v_.scores[id] == -std::numeric_limits<float>::infinity()) return;
    queue.push({left, right, v_.scores[id], len});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    // Stale entry: one side was merged away or grew since this pair was queued.
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Every merged symbol is a vocab token by construction (a pair is queued only if its text is
  // one), so only single characters can miss the vocab. llama.cpp's rev_merge re-split therefore
  // never fires for them and is left out here: they go straight to byte fallback.
  for (int i = 0; i != -1; i = sym[i].next) {
    const std::string_view piece = escaped.substr(sym[i].off, sym[i].len);
    if (const int32_t id = text_to_token(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    bool all_bytes = true;
    for (char c : piece) all_bytes = all_bytes && byte_to_id_[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes) {
      for (char c : piece) out.push_back(byte_to_id_[static_cast<uint8_t>(c)]);
    } else if (v_.unk_id >= 0) {
      // No byte tokens (a vocab without byte_fallback): one <unk> per unknown character, as
      // sentencepiece does. llama.cpp would throw here instead.
      out.push_back(v_.unk_id);
    } else {
      fail("tokenizer: character '", piece, "' is not in the vocab, which has no byte tokens and no unk token");
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  const std::vector<Fragment> frags = partition_special(text, parse_special);

  // HF/sentencepiece: encode("") with special tokens is [BOS], without is [].
  if (add_special && v_.add_bos) out.push_back(v_.bos_id);
  if (!is_spm_) {
    // BPE: no space prefix, no escaping; each raw fragment is pre-tokenized on its own.
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
      } else if (v_.nfc) {
        bpe_tokenize(nfc(text.substr(f.off, f.len)), out);
      } else {
        bpe_tokenize(text.substr(f.off, f.len), out);
      }
    }
    if (add_special && v_.add_eos) out.push_back(v_.eos_id);
    return out;
  }
  // The space prefix goes on the first raw fragment and on every raw fragment that follows a
  // special token (llama.cpp's is_prev_special), e.g. "<s>Hi" -> [<s>, ▁Hi] with parse_special.
  bool prev_special = true;
  std::string buf;
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    buf.clear();
    bool prefix = v_.add_space_prefix && prev_special;
    if (!v_.metaspace.empty())  // Hugging Face's Metaspace: not on a space, "first": at the start only
      prefix = prefix && f.len > 0 && text[f.off] != ' ' && (v_.metaspace == "always" || f.off == 0);
    if (prefix) buf.push_back(' ');
    buf.append(text.substr(f.off, f.len));
    spm_tokenize(replace_all(buf, " ", kSpaceEscape), out);
    prev_special = false;
  }
  if (add_special && v_.add_eos) out.push_back(v_.eos_id);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool remove_special, bool unparse_special) const {
  size_t begin = 0, end = ids.size();
  // Strip one leading space from the first piece: encode() put it there (add_space_prefix).
  bool strip_space = is_spm_ && v_.add_space_prefix;
  if (remove_special && v_.add_bos && end > begin && ids[begin] == v_.bos_id) {
    strip_space = false;  // llama.cpp keeps the space when it removes the BOS; mirrored as-is
    ++begin;
  }
  if (remove_special && v_.add_eos && end > begin && ids[end - 1] == v_.eos_id) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    const int32_t id = ids[i];
    const std::string& piece = token_to_piece(id);
    const bool hidden = !unparse_special && (attrs_[id] & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_UNKNOWN));
    if (!hidden) {
      const size_t skip = (strip_space && !piece.empty() && piece[0] == ' ') ? 1 : 0;
      out.append(piece, skip, std::string::npos);
    }
    strip_space = false;
  }
  if (clean_spaces_) clean_up_tokenization_spaces(out);
  return out;
}

}  // namespace sluice
