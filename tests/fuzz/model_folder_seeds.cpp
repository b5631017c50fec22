// tests/fuzz/model_folder_seeds: writes model_folder_libfuzzer's seed corpus into the folder it
// is given: the MLX-quantized test folders (tests/data/hf: 4-bit llama and qwen3, 4-bit
// qwen3-moe with stacked experts, 4-bit qwen3.5-moe and qwen3-next with Gated DeltaNet layers, mixed 4/8-bit
// llama), each as the target's input layout.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put_u32(std::ofstream& o, uint32_t v) {
  for (int i = 0; i < 4; ++i) o.put(static_cast<char>(v >> (8 * i)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: model_folder_seeds OUT_DIR [SHARED_DIR]\n");
    return 2;
  }
  const std::string out = argv[1];
  for (const char* name : {"llama-q4", "qwen3-q4", "qwen3moe-q4", "qwen35moe-q4", "qwen3next-q4", "kimi-linear-q4",
                           "bailingmoe3-q4", "llama-mixed"}) {
    const std::string dir = std::string(SLUICE_SOURCE_DIR) + "/tests/data/hf/" + name;
    const std::string cfg = slurp(dir + "/config.json"), tok = slurp(dir + "/tokenizer.json");
    const std::string st = slurp(dir + "/model.safetensors");
    if (cfg.empty() || tok.empty() || st.empty()) {
      std::fprintf(stderr, "model_folder_seeds: %s is incomplete\n", dir.c_str());
      return 1;
    }
    std::ofstream o(out + "/" + name + ".bin", std::ios::binary);
    put_u32(o, static_cast<uint32_t>(cfg.size()));
    put_u32(o, static_cast<uint32_t>(tok.size()));
    o << cfg << tok << st;
  }
  return 0;
}
