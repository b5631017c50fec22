// tests/fuzz/gguf_fuzz_driver: standalone mutation fuzzer for the GGUF reader, no libFuzzer
// needed. Each iteration mutates the seed file (gguf_mutate.h), writes it to a temp file,
// opens it with GgufFile (the real mmap path), touches every tensor byte and metadata value,
// and requires that any failure is a sluice::Error. Anything else is a bug: the input is
// saved next to the temp file and the program exits 1. A crash leaves the input in the temp
// file for replay. Deterministic for a given (seed file, rng seed).
//
//   gguf_fuzz_driver SEED.gguf [ITERATIONS=10000] [RNG_SEED=1] [TMP_DIR=/tmp]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/error.h"
#include "format/gguf.h"
#include "gguf_mutate.h"  // same directory: the CMake fuzz targets only add src/ to the include path

namespace {

bool write_file(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return out.good();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SEED.gguf [ITERATIONS=10000] [RNG_SEED=1] [TMP_DIR=/tmp]\n", argv[0]);
    return 2;
  }
  std::string seed_path = argv[1];
  long iters = argc > 2 ? std::atol(argv[2]) : 10000;
  uint64_t rng_seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
  std::string tmp_dir = argc > 4 ? argv[4] : "/tmp";

  std::vector<uint8_t> seed;
  size_t hot = 0;
  try {
    sluice::GgufFile f(seed_path);  // the seed must be valid; its header is where mutations focus
    hot = f.data_offset();
    const auto* p = f.base();
    seed.assign(p, p + f.file_size());
  } catch (const sluice::Error& e) {
    std::fprintf(stderr, "seed file is not valid GGUF: %s\n", e.what());
    return 2;
  }

  std::string tmp = tmp_dir + "/gguf_fuzz_" + std::to_string(::getpid()) + ".gguf";
  sluice::fuzz::GgufMutator mut(rng_seed);
  long parsed = 0, rejected = 0;
  for (long i = 0; i < iters; ++i) {
    auto m = mut.mutate(seed, hot);
    if (!write_file(tmp, m)) {
      std::fprintf(stderr, "cannot write %s\n", tmp.c_str());
      return 2;
    }
    try {
      sluice::GgufFile f(tmp);
      sluice::fuzz::gguf_touch_all(f);
      ++parsed;
    } catch (const sluice::Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      std::string keep = tmp_dir + "/gguf_fuzz_crash_" + std::to_string(i) + ".gguf";
      write_file(keep, m);
      std::fprintf(stderr, "BUG: iteration %ld (rng seed %llu): non-sluice exception: %s\ninput saved to %s\n", i,
                   static_cast<unsigned long long>(rng_seed), e.what(), keep.c_str());
      return 1;
    }
  }
  ::unlink(tmp.c_str());
  std::printf("gguf fuzz: %ld iterations, %ld parsed, %ld rejected with sluice::Error, 0 bugs\n", iters, parsed,
              rejected);
  return 0;
}
