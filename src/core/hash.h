// core/hash: FNV-1a (64-bit), the one non-cryptographic hash of the tree: cache keys and content
// fingerprints, where speed and a stable value across runs matter and an attacker does not.
#pragma once
#include <cstddef>
#include <cstdint>

namespace sluice {

inline constexpr uint64_t kFnv1aOffset = 1469598103934665603ull;

// Continues hash h over [p, p + n): fnv1a64(b, nb, fnv1a64(a, na)) hashes a then b.
inline uint64_t fnv1a64(const void* p, size_t n, uint64_t h = kFnv1aOffset) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace sluice
