// tests/unit/test_tokenizer_util: helpers shared by the tokenizer tests: reading llama.cpp's
// .inp/.out vector files the way its test-tokenizer-0 does, and printing id lists.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::tok_test {

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Mirrors llama.cpp tests/test-tokenizer-0.cpp read_tests(): the .inp file is split on
// "\n__ggml_vocab_test__\n" (the file ends with one, so there is no trailing empty case), each
// .out line is whitespace-trimmed and split on ' ', and cases go into a std::map, so a repeated
// input string keeps its last expected output. `inp_base` and `out_base` are paths without the
// .inp / .out suffix (the same file for GGUF vocabularies).
inline std::map<std::string, std::vector<int32_t>> read_vectors(const std::string& inp_base,
                                                                const std::string& out_base) {
  const std::string raw = read_all(inp_base + ".inp");
  std::vector<std::string> outs;
  {
    std::ifstream f(out_base + ".out");
    for (std::string line; std::getline(f, line);) outs.push_back(line);
  }
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inps;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inps.push_back(raw.substr(pos));
      break;
    }
    inps.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  EXPECT_EQ(inps.size(), outs.size()) << inp_base;
  std::map<std::string, std::vector<int32_t>> tests;
  for (size_t i = 0; i < inps.size() && i < outs.size(); ++i) {
    std::vector<int32_t> ids;
    std::istringstream ls(outs[i]);
    for (int32_t id; ls >> id;) ids.push_back(id);
    tests[inps[i]] = ids;
  }
  return tests;
}

inline std::map<std::string, std::vector<int32_t>> read_vectors(const std::string& base) {
  return read_vectors(base, base);
}

inline std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

}  // namespace sluice::tok_test
