// tests/fuzz/gguf_libfuzzer: libFuzzer entry point for the GGUF reader. Not part of the CMake
// build (its name does not end in _driver.cpp); build it with clang by hand, e.g.:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc
//     src/core/dtype.cpp src/format/gguf.cpp src/format/gguf_writer.cpp
//     tests/fuzz/gguf_libfuzzer.cpp -o gguf_libfuzzer      (one command line)
//   ./gguf_libfuzzer -max_len=65536 corpus_dir/   (seed corpus: small .gguf files)
// Contract: every input either parses or throws sluice::Error; anything else aborts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "format/gguf.h"
#include "gguf_mutate.h"  // same directory: the CMake fuzz targets only add src/ to the include path

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = sluice::GgufFile::from_memory(data, size, "libfuzzer-input");
    sluice::fuzz::gguf_touch_all(*f);
  } catch (const sluice::Error&) {
    // A clean rejection.
  } catch (...) {
    std::abort();  // any other exception is a bug
  }
  return 0;
}
