// tests/test_util: paths to ../shared and small file helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sluice::test {

inline std::string shared_dir() { return SLUICE_SHARED_DIR; }
inline bool have_shared() { return std::filesystem::exists(shared_dir() + "/models/stories260K.gguf"); }

// Skips the test, loudly, when ../shared is not beside the checkout.
#define SLUICE_REQUIRE_SHARED()                                                       \
  do {                                                                                \
    if (!::sluice::test::have_shared())                                               \
      GTEST_SKIP() << "\n*** ../shared not found at " << ::sluice::test::shared_dir() \
                   << ": golden/model tests SKIPPED ***\n";                           \
  } while (0)

inline std::vector<float> read_f32_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const auto n = static_cast<size_t>(in.tellg());
  std::vector<float> v(n / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs a shell command, returns its stdout and sets *status to the exit code.
inline std::string run_command(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

}  // namespace sluice::test
