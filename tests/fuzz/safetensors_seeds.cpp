// tests/fuzz/safetensors_seeds: writes safetensors_libfuzzer's seed corpus into the folder it is
// given: the MLX-written test file (tests/data/mlx/affine.safetensors) and a small valid one.
#include <cstdio>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: safetensors_seeds OUT_DIR [SHARED_DIR]\n");
    return 2;
  }
  const std::string out = argv[1];
  {
    std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/tests/data/mlx/affine.safetensors", std::ios::binary);
    std::ofstream o(out + "/mlx_affine.safetensors", std::ios::binary);
    o << in.rdbuf();
  }
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}})";
  std::ofstream o(out + "/small.safetensors", std::ios::binary);
  const unsigned long long n = header.size();
  for (int i = 0; i < 8; ++i) o.put(static_cast<char>(n >> (8 * i)));
  o << header << std::string(8, '\0');
  return 0;
}
