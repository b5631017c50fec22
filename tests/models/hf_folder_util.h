// tests/models/hf_folder_util: what the Hugging Face folder tests share: the test folders and
// their MLX-LM goldens (tests/data/hf), logits and greedy runs against a golden, and copies of
// a folder with one file edited (config.json, a safetensors header).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_hf {

namespace fs = std::filesystem;

inline std::string folder(const std::string& arch) { return std::string(SLUICE_SOURCE_DIR) + "/tests/data/hf/" + arch; }

inline nlohmann::json golden(const std::string& arch) {
  std::ifstream in(folder(arch) + "/golden.json");
  return nlohmann::json::parse(in);
}

// chunks: the prompt in pieces of 7, 6, then the rest (prefill through the cache).
inline double max_logit_diff(const Model& m, Backend& be, const nlohmann::json& g, bool chunks = false) {
  KvCacheOptions kv;
  kv.n_ctx = 128;
  Session s(m, be, kv);
  const std::vector<int32_t> ids = g["ids"].get<std::vector<int32_t>>();
  std::vector<float> logits;
  if (chunks) {
    for (size_t at = 0, piece = 7; at < ids.size(); at += piece, piece = piece == 7 ? 6 : ids.size()) {
      const auto part = s.eval(std::span(ids).subspan(at, std::min(piece, ids.size() - at)), true);
      logits.insert(logits.end(), part.begin(), part.end());
    }
  } else {
    const auto all = s.eval(ids, true);
    logits.assign(all.begin(), all.end());
  }
  const int64_t V = m.hparams().n_vocab;
  double worst = 0;
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t v = 0; v < V; ++v)
      worst = std::max(worst, std::abs(double(logits[t * V + v]) - g["logits"][t][v].get<double>()));
  return worst;
}

inline std::vector<int32_t> greedy(const Model& m, Backend& be, const std::vector<int32_t>& ids, int n) {
  KvCacheOptions kv;
  kv.n_ctx = 128;
  Session s(m, be, kv);
  auto l = s.eval(ids);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(l));
    const int32_t one[1] = {out.back()};
    l = s.eval(one);
  }
  return out;
}

// m's logits within 2e-3 of the golden's and its 16 greedy tokens the same, on each backend.
inline void expect_golden(const Model& m, const nlohmann::json& g, std::initializer_list<const char*> backends) {
  for (const char* backend : backends) {
    auto be = make_backend(backend, 2);
    EXPECT_LT(max_logit_diff(m, *be, g), 2e-3) << backend;
    EXPECT_EQ(greedy(m, *be, g["ids"].get<std::vector<int32_t>>(), 16), g["greedy"].get<std::vector<int32_t>>())
        << backend;
  }
}

// A copy of a folder with one file changed: each breakage is refused by name.
inline std::string broken_folder(const std::string& name, const std::function<void(const fs::path&)>& edit,
                                 const std::string& from = "llama") {
  const fs::path dir = fs::path(::testing::TempDir()) / ("sluice_hf_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(folder(from))) fs::copy(e.path(), dir / e.path().filename());
  edit(dir);
  return dir.string();
}

// Each (message, edit) case: the folder `from` with the edit applied must be refused by an
// Error whose text holds the message.
using FolderEdit = std::pair<std::string, std::function<void(const fs::path&)>>;
template <size_t N>
inline void expect_refused(const FolderEdit (&cases)[N], const std::string& tag, const std::string& from = "llama") {
  for (const auto& [want, edit] : cases) {
    const std::string dir = broken_folder(tag + std::to_string(&want - &cases[0].first), edit, from);
    try {
      Model::load(dir);
      ADD_FAILURE() << "accepted a folder that should fail with: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

inline void edit_json(const fs::path& p, const std::function<void(nlohmann::json&)>& f) {
  nlohmann::json j;
  {
    std::ifstream in(p);
    j = nlohmann::json::parse(in);
  }
  f(j);
  std::ofstream(p) << j.dump();
}

// Rewrites a safetensors file's header (the data bytes kept).
inline void edit_st_header(const fs::path& p, const std::function<void(nlohmann::json&)>& f) {
  const std::string bytes = test::read_text_file(p.string());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
  f(h);
  const std::string hs = h.dump();
  const uint64_t m = hs.size();
  std::ofstream(p, std::ios::binary) << std::string(reinterpret_cast<const char*>(&m), 8) << hs << bytes.substr(8 + n);
}

// qwen3moe in Hugging Face's layout: each stacked switch_mlp.X [E, out, in] becomes E tensors
// mlp.experts.e.X [out, in] over the same bytes (renamed, as transformers writes them).
// order(e) is the stored expert at index e: the identity, or a permutation for the negative
// control.
// mixtral: as Mixtral's checkpoints name them, block_sparse_moe.experts.E.w1/w3/w2.
inline void unstack_experts(nlohmann::json& h, const std::function<int64_t(int64_t)>& order, bool mixtral = false) {
  const std::string stacked = mixtral ? "block_sparse_moe.switch_mlp." : "mlp.switch_mlp.";
  nlohmann::json out = nlohmann::json::object();
  for (auto& [name, v] : h.items()) {
    const size_t at = name.find(stacked);
    if (at == std::string::npos) {
      out[name] = v;
      continue;
    }
    const std::vector<int64_t> shape = v["shape"];
    const int64_t begin = v["data_offsets"][0], size = (int64_t(v["data_offsets"][1]) - begin) / shape[0];
    std::string proj = name.substr(at + stacked.size());
    if (mixtral) proj = proj.starts_with("gate") ? "w1.weight" : proj.starts_with("up") ? "w3.weight" : "w2.weight";
    for (int64_t e = 0; e < shape[0]; ++e) {
      const std::string n = name.substr(0, at) + (mixtral ? "block_sparse_moe.experts." : "mlp.experts.") +
                            std::to_string(e) + "." + proj;
      out[n] = {{"dtype", v["dtype"]},
                {"shape", {shape[1], shape[2]}},
                {"data_offsets", {begin + order(e) * size, begin + (order(e) + 1) * size}}};
    }
  }
  h = out;
}


}  // namespace sluice::test_hf
