// core/gpt2_bytes: GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py), the map byte-level BPE
// vocabularies write their tokens in: printable Latin-1 bytes stand for themselves, the other
// 68 bytes for U+0100.. in byte order. The tokenizer encodes with it (tokenizer/bpe.cpp) and
// the folder reader writes tiktoken vocabularies in it (format/hf_tokenizer.cpp).
#pragma once
#include <cstdint>
#include <string>

namespace sluice {

// The code point that stands for byte b.
inline uint32_t gpt2_byte_to_code_point(int b) {
  const auto printable = [](int x) {
    return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
  };
  if (printable(b)) return static_cast<uint32_t>(b);
  uint32_t next = 256;
  for (int x = 0; x < b; ++x) next += printable(x) ? 0 : 1;
  return next;
}

// That code point as UTF-8 (all of them are below U+0800).
inline std::string gpt2_byte_text(int b) {
  const uint32_t cp = gpt2_byte_to_code_point(b);
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

}  // namespace sluice
