// tests/fuzz/safetensors_libfuzzer: libFuzzer entry point for the safetensors reader
// (src/format/safetensors). Built by the fuzz preset and run by scripts/fuzz SECONDS safetensors.
// Contract: a buffer is accepted or refused with sluice::Error; an accepted one has every
// tensor's bytes inside the buffer (they are all read here, so ASan sees any escape).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = sluice::SafetensorsFile::from_memory(data, size, "fuzz.safetensors");
    unsigned sum = 0;
    for (const auto& t : f->tensors()) {
      if (t.data < data || t.data + t.nbytes > data + size) std::abort();
      for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const sluice::Error&) {
  }
  return 0;
}
