// tests/fuzz/gguf_mutate: the byte mutator and the "touch everything" visitor shared by the
// GgufFuzz gtest (tests/unit/test_gguf.cpp), the standalone driver and the libFuzzer target.
// Deterministic for a given rng seed so a failing iteration can be replayed.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "format/gguf.h"

namespace sluice::fuzz {

// Mutates a valid GGUF image. Most edits land in the first `hot_bytes` (the header: counts,
// lengths, types, offsets), where a parser bug would show; the rest hit anywhere.
class GgufMutator {
 public:
  explicit GgufMutator(uint64_t seed) : rng_(seed) {}

  std::vector<uint8_t> mutate(const std::vector<uint8_t>& seed, size_t hot_bytes) {
    std::vector<uint8_t> b = seed;
    int n_ops = 1 + static_cast<int>(below(4));
    for (int i = 0; i < n_ops && !b.empty(); ++i) apply_one(b, hot_bytes);
    return b;
  }

 private:
  std::mt19937_64 rng_;

  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  size_t pick_pos(const std::vector<uint8_t>& b, size_t hot_bytes) {
    size_t hot = std::min(hot_bytes, b.size());
    if (hot > 0 && below(10) < 8) return below(hot);
    return below(b.size());
  }

  // Values that sit on the edges of the parser's checks.
  uint64_t interesting(size_t file_size) {
    static const uint64_t k[] = {0,
                                 1,
                                 2,
                                 3,
                                 4,
                                 5,
                                 13,
                                 31,
                                 32,
                                 33,
                                 255,
                                 0x7f,
                                 0x80,
                                 0xffff,
                                 0x7fffffff,
                                 0x80000000,
                                 0xffffffff,
                                 0x100000000ull,
                                 0x7fffffffffffffffull,
                                 0x8000000000000000ull,
                                 0xffffffffffffffffull,
                                 0xfffffffffffffff0ull,
                                 1ull << 40,
                                 1ull << 62};
    uint64_t r = below(4);
    if (r == 0) return file_size + below(64) - 32;
    if (r == 1) return rng_();
    return k[below(sizeof k / sizeof k[0])];
  }

  void apply_one(std::vector<uint8_t>& b, size_t hot_bytes) {
    switch (below(7)) {
      case 0: {  // flip a few bits
        int flips = 1 + static_cast<int>(below(8));
        for (int i = 0; i < flips; ++i) b[pick_pos(b, hot_bytes)] ^= static_cast<uint8_t>(1u << below(8));
        break;
      }
      case 1:  // random byte
        b[pick_pos(b, hot_bytes)] = static_cast<uint8_t>(rng_());
        break;
      case 2:  // truncate
        b.resize(below(b.size() + 1));
        break;
      case 3:
      case 4: {  // overwrite a little-endian u32 / u64 with an edge value
        size_t w = below(2) ? 8 : 4;
        size_t pos = pick_pos(b, hot_bytes);
        uint64_t v = interesting(b.size());
        for (size_t i = 0; i < w && pos + i < b.size(); ++i) b[pos + i] = static_cast<uint8_t>(v >> (8 * i));
        break;
      }
      case 5: {  // insert an edge value (shifts everything after it)
        size_t w = below(2) ? 8 : 4;
        size_t pos = pick_pos(b, hot_bytes);
        uint64_t v = interesting(b.size());
        uint8_t bytes[8];
        for (size_t i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(v >> (8 * i));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), bytes, bytes + w);
        break;
      }
      case 6: {  // delete a short run
        size_t pos = pick_pos(b, hot_bytes);
        size_t n = std::min<size_t>(1 + below(16), b.size() - pos);
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(pos), b.begin() + static_cast<std::ptrdiff_t>(pos + n));
        break;
      }
    }
  }
};

// Reads every tensor byte and renders every metadata value through each getter that could
// apply, the way a model loader would. Returns a checksum so the reads are not optimised
// away. Getter type mismatches throw sluice::Error, which the caller counts as a clean reject.
inline uint64_t gguf_touch_all(const GgufFile& f) {
  uint64_t sum = 0;
  for (const TensorView& t : f.tensors()) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    for (size_t i = 0; i < t.nbytes; ++i) sum += p[i];
    sum += static_cast<uint64_t>(t.n_elements());
    if (f.find_tensor(t.name) != &t) sum += 1;  // duplicates are rejected, so this is never hit
  }
  for (const auto& kv : f.metadata()) {
    const std::string& key = kv.first;  // not a structured binding: clang 14 cannot capture those
    sum += kv.second.to_string().size();
    sum += f.has(key);
    auto swallow = [&](auto&& fn) {
      try {
        fn();
      } catch (const Error&) {
        sum += 1;
      }
    };
    swallow([&] { sum += f.get_u32(key); });
    swallow([&] { sum += static_cast<uint64_t>(f.get_i32(key)); });
    swallow([&] { sum += f.get_u64(key); });
    swallow([&] { sum += f.get_f32(key) > 0; });
    swallow([&] { sum += f.get_bool(key); });
    swallow([&] { sum += f.get_string(key).size(); });
    swallow([&] { sum += f.get_string_array(key).size(); });
    swallow([&] { sum += f.get_f32_array(key).size(); });
    swallow([&] { sum += f.get_i32_array(key).size(); });
    swallow([&] { sum += f.get_u32_per_layer(key, 3).size(); });
  }
  return sum;
}

}  // namespace sluice::fuzz
