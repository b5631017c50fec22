// tokenizer/pretokenize.cpp: the table of BPE pre-tokenizers (tokenizer.ggml.pre -> regexes and
// defaults) and the PCRE2 splitter. Reference read (not copied): llama.cpp src/llama-vocab.cpp
// (llm_tokenizer_bpe, llama_vocab::impl::load) and src/unicode.cpp (unicode_regex_split).
//
// llama.cpp does not run these regexes with a Unicode regex engine, and the ids it produces are
// the spec (tests/unit/test_tokenizer_bpe.cpp checks its vectors). What it does instead, and how
// this file gets the same splits out of PCRE2 (UTF + UCP):
//  - Text is decoded to code points first; every byte that does not start a well-formed sequence
//    becomes U+FFFD (unicode_cpts_from_utf8), and the words are re-encoded from those code points.
//  - The GPT-2 and llama3 patterns run as hand-written matchers, the others through std::regex on
//    a "collapsed" text (one byte per code point, standing for its Unicode category) or through
//    std::wregex. In all three, whitespace is exactly the Unicode White_Space set: non-ASCII
//    whitespace is turned into U+000B before matching, and \s means [\t-\r ] (std::regex, C
//    locale). So the subject PCRE2 sees has non-ASCII White_Space replaced by U+000B as well, and
//    \s / \S in the patterns are rewritten to [\t-\r ] / [^\t-\r ]: PCRE2's own \s would also
//    take U+180E. One visible consequence: a literal range that covers U+3000 (deepseek-llm's
//    CJK punctuation class) never matches U+3000, because llama.cpp has turned it into U+000B.
//  - Each pattern splits each piece left by the previous pattern on its own: the piece is the
//    whole subject, so $ and (?!\S) see the piece's end. Text between matches becomes a piece too.
//  - $ matches only at the very end (ECMAScript), hence PCRE2_DOLLAR_ENDONLY.
//  - Case-insensitive groups are written as explicit classes ('[sS]), as llama.cpp adapted them;
//    PCRE2's (?i) would also fold U+017F (long s) to 's'.
//  - The collapsed text maps '~' to neither \p{P} nor \p{S}. No pattern below uses \p{S}, so this
//    never shows; pre types whose patterns do (deepseek-v3, ...) are not offered.
#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/error.h"

namespace sluice {

namespace {

// GPT-2's pattern (openai/gpt-2 encoder.py). llama.cpp's string lacks the final \s+, but its
// hand-written matcher for it (unicode_regex_split_custom_gpt2) behaves as if it were there; the
// only text it changes is a lone whitespace before a non-space, which becomes a piece either way.
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3's pattern; (?i:'s|...) spelled out as classes (see the file comment).
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2's: llama3's with single digits.
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen3.5's: Qwen2's with combining marks (\p{M}) kept inside words, from its tokenizer.json.
constexpr const char* kQwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Kimi's (tokenization_kimi.py's pat_str, run by tiktoken), with its class intersections
// [...&&[^\p{Han}]] (which PCRE2 lacks) written as a lookahead before the class, and its
// case-insensitive contractions kept as (?i:...) as tiktoken's regex folds them.
constexpr const char* kKimi =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek LLM's letter class, from its tokenizer.json: the cased letters (Lu/Ll/Lt) of an older
// Unicode table, written as escapes because several of them (U+1F7D, U+1FBE, U+2126, U+212A, ...)
// are NFC singletons that an editor may silently replace.
constexpr const char* kDeepseekLetters =
    R"(A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59})"
    R"(\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC})"
    R"(\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B})"
    R"(\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A})"
    R"(\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2})"
    R"(\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943})";

// CJK ideographs (U+4E00..U+9FA5), U+0800..U+4E00 and Hangul syllables/Jamo (U+AC00..U+D7FF).
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// Poro / BLOOM: anything but whitespace and a few sentence marks (the '(' '|' ')' in the class are
// literal, a quirk of the original pattern). Marks: … 。 ， 、 । ۔ ،
constexpr const char* kPoro = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)";

// Tekken / GPT-4o split letters into camel-case runs with lookaheads instead of \p{Lu}/\p{Ll}.
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreEntry {
  std::vector<std::string> names;  // tokenizer.ggml.pre values
  PreTokenizerSpec spec;
};

PreTokenizerSpec make_spec(std::string type, std::vector<std::string> regexes, bool clean_spaces) {
  PreTokenizerSpec s;
  s.type = std::move(type);
  s.regexes = std::move(regexes);
  s.clean_spaces = clean_spaces;
  return s;
}

// Names and per-name flags as in llama.cpp's llama_vocab::impl::load. Checked against llama.cpp
// vectors: default is not; gpt-2, mpt, falcon, starcoder, refact, deepseek-llm, deepseek-coder by
// their GGUF; llama-bpe, qwen2, deepseek-r1-qwen through the HF tokenizer.json of Llama 3 / Qwen3.
// The other names reuse a checked pattern, or are short patterns whose only quirks are the ones
// the file comment handles.
const std::vector<PreEntry>& pre_table() {
  static const std::vector<PreEntry> table = [] {
    std::vector<PreEntry> t;
    const auto add = [&](std::vector<std::string> names, PreTokenizerSpec spec) {
      t.push_back({std::move(names), std::move(spec)});
    };
    add({"default", ""},
        make_spec("default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, true));
    {
      PreTokenizerSpec s = make_spec("llama3", {kLlama3}, true);
      s.ignore_merges = true;
      s.add_bos = true;
      add({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"}, s);
    }
    add({"dbrx"}, make_spec("dbrx", {kLlama3}, true));
    add({"smaug-bpe"}, make_spec("smaug", {kLlama3}, true));
    {
      PreTokenizerSpec s = make_spec("chatglm4", {kLlama3}, true);
      s.no_bos = true;
      add({"chatglm-bpe", "glm4"}, s);
    }
    add({"deepseek-llm"},
        make_spec("deepseek-llm",
                  {R"([\r\n])", std::string(R"(\s?[)") + kDeepseekLetters + "]+",
                   R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)", R"(\s+$)",
                   kDeepseekCjk, R"(\p{N}+)"},
                  false));
    add({"deepseek-coder"},
        make_spec("deepseek-coder", {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}, false));
    add({"falcon"}, make_spec("falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}, true));
    add({"starcoder", "refact", "codeshell", "exaone", "minerva-7b"},
        make_spec("starcoder", {R"(\p{N})", kGpt2}, true));
    add({"command-r", "smollm"}, make_spec("starcoder", {R"(\p{N})", kGpt2}, false));
    add({"gpt-2", "phi-2", "gigachat", "mpt", "olmo", "jais", "exaone4"}, make_spec("gpt2", {kGpt2}, true));
    add({"qwen2", "deepseek-r1-qwen", "grok-2"}, make_spec("qwen2", {kQwen2}, false));
    add({"stablelm2", "megrez"}, make_spec("qwen2", {kQwen2}, true));
    add({"qwen35"}, make_spec("qwen35", {kQwen35}, false));
    add({"poro-chat"}, make_spec("poro", {kPoro}, false));
    add({"bloom", "gpt3-finnish"}, make_spec("bloom", {kPoro}, true));
    add({"viking"}, make_spec("viking", {kPoro, R"(\p{N})"}, false));
    {
      PreTokenizerSpec s = make_spec("tekken", {kTekken}, false);
      s.ignore_merges = true;
      s.add_bos = true;
      add({"tekken"}, s);
    }
    {
      PreTokenizerSpec s = make_spec("chameleon",
                                     {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", R"(([\t\n]|    |  ))",
                                      R"(\p{N})", R"([\p{P}!-/:-@\[-`{-~])", kGpt2},
                                     false);
      s.add_bos = true;
      add({"chameleon"}, s);
    }
    add({"gpt-4o", "llama4"}, make_spec("gpt4o", {kGpt4o}, false));
    add({"kimi-k2"}, make_spec("kimi-k2", {kKimi}, false));
    return t;
  }();
  return table;
}

// Largest JIT stack a split() may grow to. tekken's pattern needs about 100 bytes per character
// of one word (measured: a 1 MB word of 'A' fits in 128 MiB); ordinary text never gets here.
constexpr size_t kBigJitStack = size_t{256} << 20;

// llama.cpp's whitespace (Unicode White_Space) above ASCII.
bool is_non_ascii_whitespace(uint32_t cp) {
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// One code point at s[i], advancing i, with the rules of llama.cpp's unicode_cpt_from_utf8: a lead
// byte needs its continuation bytes (10xxxxxx) but overlong forms and surrogates pass; anything
// else is one byte of U+FFFD. Deviation: a 4-byte form above U+10FFFF (lead F5..F7) is U+FFFD here;
// llama.cpp accepts it and then throws while re-encoding the word.
uint32_t decode_cp(std::string_view s, size_t& i) {
  const auto at = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const auto cont = [&](size_t k) { return k < s.size() && (at(k) & 0xC0) == 0x80; };
  const uint8_t b = at(i);
  if (b < 0x80) {
    i += 1;
    return b;
  }
  if ((b & 0xE0) == 0xC0 && cont(i + 1)) {
    const uint32_t cp = ((b & 0x1Fu) << 6) | (at(i + 1) & 0x3Fu);
    i += 2;
    return cp;
  }
  if ((b & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
    const uint32_t cp = ((b & 0x0Fu) << 12) | ((at(i + 1) & 0x3Fu) << 6) | (at(i + 2) & 0x3Fu);
    i += 3;
    return cp;
  }
  if ((b & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
    const uint32_t cp = ((b & 0x07u) << 18) | ((at(i + 1) & 0x3Fu) << 12) | ((at(i + 2) & 0x3Fu) << 6) |
                        (at(i + 3) & 0x3Fu);
    if (cp <= 0x10FFFF) {
      i += 4;
      return cp;
    }
  }
  i += 1;
  return 0xFFFD;
}

// Plain UTF-8 encoding, surrogates included (as llama.cpp's unicode_cpt_to_utf8). cp <= 0x10FFFF.
void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// \s -> [\t-\r ] and \S -> [^\t-\r ] (inside a class: \s -> \t-\r and a space), so whitespace is
// the ASCII set only; the subject has non-ASCII whitespace mapped to U+000B already.
std::string rewrite_whitespace_classes(const std::string& re) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char e = re[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? "\\t-\\r " : "[\\t-\\r ]";
      } else if (e == 'S') {
        if (in_class) fail("pre-tokenizer: \\S inside a character class is not supported: ", re);
        out += "[^\\t-\\r ]";
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal; none of the patterns has one, but stay correct.
      if (i + 1 < re.size() && re[i + 1] == '^') out.push_back(re[++i]);
      if (i + 1 < re.size() && re[i + 1] == ']') out.push_back(re[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

const PreTokenizerSpec* find_pre_tokenizer(std::string_view pre) {
  for (const PreEntry& e : pre_table()) {
    if (std::find(e.names.begin(), e.names.end(), pre) != e.names.end()) return &e.spec;
  }
  return nullptr;
}

std::string supported_pre_tokenizers() {
  std::string s;
  for (const PreEntry& e : pre_table()) {
    for (const std::string& n : e.names) {
      if (n.empty()) continue;
      if (!s.empty()) s += ", ";
      s += n;
    }
  }
  return s;
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  std::string pattern;  // as compiled (after the whitespace rewrite), for error messages
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(std::string_view pre) : spec_(find_pre_tokenizer(pre)) {
  if (!spec_) {
    fail("tokenizer: unknown BPE pre-tokenizer tokenizer.ggml.pre = '", pre,
         "' (supported: ", supported_pre_tokenizers(), ")");
  }
  for (const std::string& re : spec_->regexes) {
    auto r = std::make_unique<Regex>();
    r->pattern = rewrite_whitespace_classes(re);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(r->pattern.data()), r->pattern.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
    if (!r->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      fail("tokenizer: pre-tokenizer '", pre, "': PCRE2 rejects regex '", r->pattern, "' at offset ", err_off, ": ",
           reinterpret_cast<const char*>(msg));
    }
    // JIT is an optimisation only: without it (no JIT support in this libpcre2 build, or an
    // architecture it does not cover) pcre2_match interprets the same pattern.
    (void)pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);
    regexes_.push_back(std::move(r));
  }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string>& words) const {
  if (text.empty()) return;
  // Code points of the text, and the subject PCRE2 matches: the same code points with non-ASCII
  // whitespace as U+000B and surrogates (which PCRE2 rejects as UTF-8) as U+FFFD; both stand in
  // for characters of the same class in every pattern above.
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) cps.push_back(decode_cp(text, i));
  const size_t n = cps.size();
  std::string subject;
  subject.reserve(text.size());
  std::vector<uint32_t> cp_byte(n + 1);  // byte offset of each code point in `subject`
  for (size_t k = 0; k < n; ++k) {
    cp_byte[k] = static_cast<uint32_t>(subject.size());
    uint32_t cp = cps[k];
    if (cp >= 0x80 && is_non_ascii_whitespace(cp)) cp = 0x0B;
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
    append_utf8(subject, cp);
  }
  cp_byte[n] = static_cast<uint32_t>(subject.size());
  std::vector<uint32_t> byte_cp(subject.size() + 1, 0);  // inverse of cp_byte, at code point starts
  for (size_t k = 0; k <= n; ++k) byte_cp[cp_byte[k]] = static_cast<uint32_t>(k);

  // Pieces as their end code point index; each pattern refines them.
  std::vector<uint32_t> ends = {static_cast<uint32_t>(n)};
  std::vector<uint32_t> next;
  // Per call, so split() stays safe to run on several threads. The big JIT stack is only made
  // for a piece that overflows the JIT's default 32 KiB (megabyte-long words under patterns with
  // repeated groups, e.g. tekken); it reserves address space and commits pages as they are used.
  struct MatchState {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    pcre2_jit_stack* big_stack = nullptr;
    pcre2_match_context* big_ctx = nullptr;
    ~MatchState() {
      pcre2_match_context_free(big_ctx);
      pcre2_jit_stack_free(big_stack);
      pcre2_match_data_free(md);
    }
  } st;
  pcre2_match_data* md = st.md;
  if (!md) fail("tokenizer: out of memory for PCRE2 match data");

  for (const auto& re : regexes_) {
    next.clear();
    uint32_t a = 0;
    for (const uint32_t b : ends) {
      const size_t base = cp_byte[a];
      const auto subj = reinterpret_cast<PCRE2_SPTR>(subject.data() + base);
      const size_t len = cp_byte[b] - base;
      size_t pos = 0, prev = 0;  // byte offsets within the piece
      while (pos < len) {
        int rc = pcre2_match(re->code, subj, len, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          if (!st.big_ctx) {
            st.big_stack = pcre2_jit_stack_create(32 * 1024, kBigJitStack, nullptr);
            st.big_ctx = pcre2_match_context_create(nullptr);
            if (!st.big_stack || !st.big_ctx) fail("tokenizer: out of memory for a PCRE2 JIT stack");
            pcre2_jit_stack_assign(st.big_ctx, nullptr, st.big_stack);
          }
          rc = pcre2_match(re->code, subj, len, pos, PCRE2_NO_UTF_CHECK, md, st.big_ctx);
        }
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          // Still too deep: the interpreter keeps its backtracking state on the heap.
          rc = pcre2_match(re->code, subj, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof(msg));
          fail("tokenizer: PCRE2 failed on regex '", re->pattern, "': ", reinterpret_cast<const char*>(msg));
        }
        // rc == 0 means the ovector (one pair) is too small for the pattern's groups; pair 0,
        // the whole match, is still set.
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t s = ov[0], e = ov[1];
        if (e <= s) {
          // Empty match: none of the patterns above can produce one. Step over one code point
          // rather than loop forever.
          pos = s + 1;
          while (pos < len && (static_cast<uint8_t>(subject[base + pos]) & 0xC0) == 0x80) ++pos;
          continue;
        }
        if (s > prev) next.push_back(byte_cp[base + s]);
        next.push_back(byte_cp[base + e]);
        prev = pos = e;
      }
      if (prev < len) next.push_back(b);
      a = b;
    }
    ends.swap(next);
  }

  uint32_t a = 0;
  for (const uint32_t b : ends) {
    std::string& w = words.emplace_back();
    for (uint32_t k = a; k < b; ++k) append_utf8(w, cps[k]);
    a = b;
  }
}

}  // namespace sluice
