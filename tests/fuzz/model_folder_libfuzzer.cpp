// tests/fuzz/model_folder_libfuzzer: libFuzzer entry point for model folders
// (src/format/hf_folder: config.json with MLX quantization, model.safetensors with quantized
// weights, their scales and biases, and tokenizer.json), through open_model_folder. Built by the
// fuzz preset and run by scripts/fuzz SECONDS model_folder.
// Input: u32 config length, u32 tokenizer length (little-endian), config.json, tokenizer.json,
// then model.safetensors (the rest); written into one folder of this process each run.
// Contract: a folder is opened or refused with sluice::Error; an opened one has every tensor's
// bytes readable (they are all read here, so ASan sees any escape from what was mapped or owned).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "format/gguf.h"
#include "format/hf_folder.h"

namespace {

// The folder of this process, removed at exit (the string is never destroyed, so the exit
// handler, registered while it is built, can still read it).
const std::string& folder() {
  static const std::string* dir = [] {
    auto* d = new std::string(
        (std::filesystem::temp_directory_path() / ("sluice-fuzz-folder-" + std::to_string(getpid()))).string());
    std::filesystem::create_directories(*d);
    std::atexit([] { std::filesystem::remove_all(folder()); });
    return d;
  }();
  return *dir;
}

void write(const std::string& name, const uint8_t* p, size_t n) {
  std::ofstream o(folder() + "/" + name, std::ios::binary | std::ios::trunc);
  o.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
}

uint32_t u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const size_t nc = u32(data), nt = u32(data + 4);
  if (nc > size - 8 || nt > size - 8 - nc) return 0;
  const uint8_t* p = data + 8;
  write("config.json", p, nc);
  write("tokenizer.json", p + nc, nt);
  write("model.safetensors", p + nc + nt, size - 8 - nc - nt);
  try {
    auto f = sluice::open_model_folder(folder());
    unsigned sum = 0;
    for (const auto& t : f->tensors()) {
      const auto* b = static_cast<const uint8_t*>(t.data);
      for (size_t i = 0; i < t.nbytes; ++i) sum += b[i];
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const sluice::Error&) {
  }
  return 0;
}
