// tests/fuzz/gguf_libfuzzer: libFuzzer entry point for the GGUF reader. Built by the fuzz preset
// (clang, -fsanitize=fuzzer,address,undefined; CMake picks up every tests/fuzz/*_libfuzzer.cpp) and
// run by scripts/fuzz SECONDS, with the seeds gguf_seeds.cpp writes; by hand:
//   cmake --preset fuzz && cmake --build --preset fuzz
//   build/fuzz/gguf_libfuzzer -max_len=65536 CORPUS_DIR/ SEED_DIR/
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
