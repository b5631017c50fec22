// tokenizer/bpe.cpp: the byte-level BPE encoder ("gpt2" vocabularies): GPT-2 byte mapping, the
// merge table keyed by symbol-id pairs, and rank-ordered merging within each pre-tokenized word.
// Reference read (not copied): llama.cpp src/llama-vocab.cpp, llm_tokenizer_bpe_session.
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "core/gpt2_bytes.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

// Symbols are identified by an id instead of their text, so the merge loop never builds strings:
// a vocab token's id, or n_vocab + k for the k-th text that occurs in the merges but is not a
// token. Equal text <=> equal id, so "this pair is still the one that was queued" is an id check,
// and llama.cpp's string-keyed bpe_ranks lookup becomes one hash probe on two ints.
struct Tokenizer::BpeModel {
  explicit BpeModel(std::string_view pre) : pre(pre) {}
  struct Merge {
    int32_t rank;    // index in tokenizer.ggml.merges; lower merges first
    int32_t result;  // symbol id of left + right
  };
  PreTokenizer pre;
  std::unordered_map<uint64_t, Merge> merges;  // pair_key(left id, right id) -> merge
  std::string byte_text[256];                  // GPT-2 code point of each byte, as UTF-8
  int32_t byte_symbol[256];                    // symbol id of byte_text[b]; -1: in no token and no merge
  int32_t raw_byte_token[256];                 // token whose text is the single byte b, -1 if none
  int32_t n_vocab = 0;
};

void Tokenizer::bpe_init() {
  auto m = std::make_shared<BpeModel>(v_.pre);
  m->n_vocab = n_vocab();
  clean_spaces_ = m->pre.spec().clean_spaces;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> extra;
  const auto find_symbol = [&](std::string_view s) -> int32_t {
    if (const int32_t id = text_to_token(s); id >= 0) return id;
    const auto it = extra.find(s);
    return it == extra.end() ? -1 : it->second;
  };
  const auto intern = [&](std::string_view s) -> int32_t {
    if (const int32_t id = find_symbol(s); id >= 0) return id;
    const int32_t id = m->n_vocab + static_cast<int32_t>(extra.size());
    extra.emplace(std::string(s), id);
    return id;
  };

  if (v_.merges.size() > static_cast<size_t>(INT32_MAX))
    fail("tokenizer: too many BPE merges (", v_.merges.size(), ")");
  m->merges.reserve(v_.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < v_.merges.size(); ++rank) {
    const std::string& line = v_.merges[rank];
    // llama.cpp splits at the first space after byte 0 (so a merge may start with a space in
    // vocabularies that are not byte-encoded). Without one it stores an empty pair, which no two
    // symbols can match, so skipping the line is the same.
    const size_t sp = line.find(' ', 1);
    if (sp == std::string::npos) continue;
    const std::string_view left(line.data(), sp);
    const std::string_view right = std::string_view(line).substr(sp + 1);
    const int32_t l = intern(left), r = intern(right);
    joined.assign(left).append(right);
    // emplace keeps the first rank of a pair that is listed twice, as llama.cpp's does. A
    // tiktoken vocabulary ranks a pair by the token it makes (its id), every split of it alike.
    const int32_t result = intern(joined);
    m->merges.emplace(pair_key(l, r), BpeModel::Merge{v_.tiktoken ? result : static_cast<int32_t>(rank), result});
  }
  for (int b = 0; b < 256; ++b) {
    m->byte_text[b] = gpt2_byte_text(b);
    m->byte_symbol[b] = find_symbol(m->byte_text[b]);
    const char c = static_cast<char>(b);
    m->raw_byte_token[b] = text_to_token(std::string_view(&c, 1));
  }
  bpe_ = std::move(m);
}

// llm_tokenizer_bpe_session::tokenize for one raw fragment: pre-tokenize; per word, start from one
// symbol per byte (its GPT-2 character) and repeatedly merge the adjacent pair with the lowest
// rank, ties to the leftmost; emit each final symbol's token.
void Tokenizer::bpe_tokenize(std::string_view text, std::vector<int32_t>& out) const {
  const BpeModel& m = *bpe_;
  struct Symbol {
    int32_t id;          // symbol id (see BpeModel), -1 if the text is in no token and no merge
    int32_t prev, next;  // live neighbours, -1 at the ends
    uint32_t off, len;   // bytes of `encoded`; len == 0 once merged into the left neighbour
  };
  struct Candidate {
    int32_t rank, left, right;
    int32_t left_id, right_id;  // ids when queued; a mismatch later means the pair went stale
    int32_t result;
  };
  // Heap top = lowest rank, then the leftmost pair (llama.cpp's llm_bigram_bpe::comparator).
  const auto after = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };

  std::vector<std::string> words;
  m.pre.split(text, words);
  std::string encoded;
  std::vector<Symbol> sym;
  std::vector<Candidate> heap;
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t l = sym[left].id, r = sym[right].id;
    if (l < 0 || r < 0) return;
    const auto it = m.merges.find(pair_key(l, r));
    if (it == m.merges.end()) return;
    heap.push_back({it->second.rank, left, right, l, r, it->second.result});
    std::push_heap(heap.begin(), heap.end(), after);
  };

  for (const std::string& word : words) {
    encoded.clear();
    sym.clear();
    heap.clear();
    for (size_t i = 0; i < word.size(); ++i) {
      const auto b = static_cast<uint8_t>(word[i]);
      const int32_t idx = static_cast<int32_t>(i);
      const int32_t next = i + 1 == word.size() ? -1 : idx + 1;
      sym.push_back({m.byte_symbol[b], idx - 1, next, static_cast<uint32_t>(encoded.size()),
                     static_cast<uint32_t>(m.byte_text[b].size())});
      encoded += m.byte_text[b];
    }
    // llama3-style vocabularies: a word that is a token as a whole is taken as is, even where the
    // merges would split it differently (HF's ignore_merges); tiktoken does the same.
    if (m.pre.spec().ignore_merges || v_.tiktoken) {
      if (const int32_t id = text_to_token(encoded); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), after);
      const Candidate c = heap.back();
      heap.pop_back();
      Symbol& l = sym[c.left];
      Symbol& r = sym[c.right];
      // Both alive means r is still l's right neighbour: l only loses its neighbour by absorbing it.
      if (l.len == 0 || r.len == 0 || l.id != c.left_id || r.id != c.right_id) continue;
      l.id = c.result;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = c.left;
      try_add(l.prev, c.left);
      try_add(c.left, l.next);
    }
    for (int32_t i = 0; i != -1; i = sym[i].next) {
      const Symbol& s = sym[i];
      if (s.id >= 0 && s.id < m.n_vocab) {
        out.push_back(s.id);
        continue;
      }
      // Not a token (a vocab without all 256 byte characters, or a merge whose result is not a
      // token): llama.cpp looks up each byte of the encoded text as a one-byte token and drops
      // the ones that are not. Lossy, but it is what the reference does.
      for (uint32_t k = s.off; k < s.off + s.len; ++k) {
        const int32_t id = m.raw_byte_token[static_cast<uint8_t>(encoded[k])];
        if (id >= 0) out.push_back(id);
      }
    }
  }
}

}  // namespace sluice
