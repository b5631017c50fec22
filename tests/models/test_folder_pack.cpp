// tests/models/test_folder_pack: `sluice pack DIR` — a model folder (MLX-LM's own quantized
// folders in tests/data/hf) rewritten as a packed GGUF, its experts converted as they are
// written (format/hf_folder.h FolderForRewrite), then streamed: every tensor byte-identical to
// the folder loaded as usual, and the streamed logits bit-identical to the folder's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "format/gguf.h"
#include "format/hf_folder.h"
#include "hf_folder_util.h"
#include "memory/expert_store.h"
#include "memory/pack.h"
#include "models/model.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_folder_pack {
namespace {

namespace fs = std::filesystem;
using test_hf::folder;

// Prefill of the golden prompt, then 3 greedy steps; every logit.
std::vector<float> run_logits(const std::string& path, const ModelOptions& mo, const std::vector<int32_t>& prompt) {
  auto m = Model::load(path, mo);
  auto be = make_backend("cpu", 2);
  KvCacheOptions kv;
  kv.n_ctx = static_cast<int64_t>(prompt.size()) + 4;
  Session s(*m, *be, kv);
  auto l = s.eval(prompt, /*all_logits=*/true);
  std::vector<float> out(l.begin(), l.end());
  const int64_t nv = m->hparams().n_vocab;
  for (int i = 0; i < 3; ++i) {
    const auto last = std::span<const float>(out).subspan(out.size() - static_cast<size_t>(nv));
    const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    const std::vector<int32_t> one{next};
    l = s.eval(one);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

std::vector<float> run_logits(const std::string& path, const ExpertStoreOptions& eo,
                              const std::vector<int32_t>& prompt) {
  ModelOptions mo;
  mo.experts = eo;
  return run_logits(path, mo, prompt);
}

bool same_bytes(const TensorView& a, const TensorView& b) {
  return a.type == b.type && a.nbytes == b.nbytes && std::memcmp(a.data, b.data, a.nbytes) == 0;
}

class FolderPack : public ::testing::TestWithParam<std::string> {};

// Deferred experts hold nothing until filled, then exactly what the usual load converts.
TEST_P(FolderPack, DeferredExpertsFillToTheUsualBytes) {
  const std::string dir = folder(GetParam());
  const auto eager = open_model_folder(dir);
  FolderForRewrite rw = open_model_folder_for_rewrite(dir);
  ASSERT_EQ(rw.file->tensors().size(), eager->tensors().size());
  int deferred = 0, converted_experts = 0;
  for (const TensorView& t : eager->tensors()) {
    // MLX groups that became blocks (these folders' scales are all fp16 values); float experts
    // (modules mlx-lm left unquantized) stay mapped in place.
    if (t.name.ends_with("_exps.weight") && t.type != DType::F32 && t.type != DType::F16 && t.type != DType::BF16)
      ++converted_experts;
    const TensorView* d = rw.file->find_tensor(t.name);
    ASSERT_NE(d, nullptr) << t.name;
    ASSERT_EQ(d->type, t.type) << t.name;
    ASSERT_EQ(d->nbytes, t.nbytes) << t.name;
    for (int k = 0; k < 4; ++k) EXPECT_EQ(d->ne[k], t.ne[k]) << t.name;
    if (!same_bytes(*d, t)) {
      // Only the stacked experts wait; filled one expert at a time, as pack writes them.
      EXPECT_TRUE(t.name.ends_with("_exps.weight")) << t.name << " differs before any fill";
      ++deferred;
      for (int64_t e = 0; e < t.ne[2]; ++e) {
        const TensorView s = d->slice2d(e);
        rw.fill(s.data, s.nbytes);
      }
    }
    EXPECT_TRUE(same_bytes(*d, t)) << t.name;
  }
  // Every stacked MLX expert matrix was converted on demand, none at open.
  EXPECT_GT(deferred, 0);
  EXPECT_EQ(deferred, converted_experts);
}

// pack DIR -> stream the packed GGUF: the folder's logits, bit for bit; unpack gives back every
// tensor of the folder as the usual load converts it.
TEST_P(FolderPack, PackedFolderStreamsAsTheFolderRuns) {
  const std::string dir = folder(GetParam());
  const std::string tmp = fs::temp_directory_path() / ("sluice_fpack_" + GetParam() + "_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  const std::string packed = tmp + "/packed.gguf", unpacked = tmp + "/unpacked.gguf";
  const PackResult pr = pack_experts(dir, packed);
  EXPECT_GT(pr.experts, 0);
  EXPECT_GT(pr.bytes_in, 0u);
  {
    GgufFile f(packed);
    EXPECT_TRUE(gguf_has_bundled_experts(f));
  }
  const std::vector<int32_t> prompt = test_hf::golden(GetParam())["ids"].get<std::vector<int32_t>>();
  const std::vector<float> ref = run_logits(dir, ExpertStoreOptions{}, prompt);
  ExpertStoreOptions s;
  s.policy = ExpertPolicy::stream;
  s.cache_bytes = size_t{1} << 20;  // a few experts of these tiny models: most uses miss
  const std::vector<float> st = run_logits(packed, s, prompt);
  ASSERT_EQ(st.size(), ref.size());
  EXPECT_EQ(std::memcmp(st.data(), ref.data(), ref.size() * sizeof(float)), 0);

  unpack_experts(packed, unpacked);
  const auto eager = open_model_folder(dir);
  GgufFile u(unpacked);
  ASSERT_EQ(u.tensors().size(), eager->tensors().size());
  for (const TensorView& t : eager->tensors()) {
    const TensorView* x = u.find_tensor(t.name);
    ASSERT_NE(x, nullptr) << t.name;
    EXPECT_TRUE(same_bytes(*x, t)) << t.name;
  }
  for (const auto& [k, v] : eager->metadata()) EXPECT_TRUE(u.has(k)) << k;
  fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(MlxLmFolders, FolderPack,
                         ::testing::Values("qwen3moe-q4", "mixtral-q4", "deepseek2-q4", "qwen35moe-q4", "qwen3next-q4",
                                           "kimi-linear-q4", "bailingmoe3-q4"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// A float folder has nothing to convert: it packs through the same path, experts mapped in place.
TEST(FolderPackFloat, FloatFolderPacks) {
  const std::string dir = folder("qwen3moe");
  const std::string tmp = fs::temp_directory_path() / ("sluice_fpackf_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  const std::string packed = tmp + "/packed.gguf";
  pack_experts(dir, packed);
  const std::vector<int32_t> prompt = test_hf::golden("qwen3moe")["ids"].get<std::vector<int32_t>>();
  ExpertStoreOptions s;
  s.policy = ExpertPolicy::stream;
  s.cache_bytes = size_t{4} << 20;
  const std::vector<float> st = run_logits(packed, s, prompt), ref = run_logits(dir, ExpertStoreOptions{}, prompt);
  ASSERT_EQ(st.size(), ref.size());
  EXPECT_EQ(std::memcmp(st.data(), ref.data(), ref.size() * sizeof(float)), 0);
  // A dense folder has no experts to pack: refused by name.
  EXPECT_THROW(pack_experts(folder("llama-q4"), tmp + "/dense.gguf"), Error);
  fs::remove_all(tmp);
}

// The .gguf files in dir, and whether a temporary (.part-) one was left there.
std::vector<std::string> packed_copies(const std::string& dir, bool* partial = nullptr) {
  std::vector<std::string> out;
  if (partial) *partial = false;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.ends_with(".gguf")) out.push_back(n);
    if (partial && n.find(".part-") != std::string::npos) *partial = true;
  }
  return out;
}

// --experts stream on a model folder: the experts packed once into the pack directory, read from
// there by later runs (the folder's logits, bit for bit), packed again when the folder changes;
// a dense folder loads as it is; a failed pack leaves nothing; an unusable directory is named.
TEST(FolderPackCopy, StreamsFromOnePackedCopyPerVersionOfTheFolder) {
  const std::string tmp = fs::temp_directory_path() / ("sluice_fpcopy_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  const std::string src = tmp + "/qwen3moe-q4", packs = tmp + "/packs";
  fs::create_directories(src);
  fs::copy(folder("qwen3moe-q4"), src, fs::copy_options::recursive);
  const std::vector<int32_t> prompt = test_hf::golden("qwen3moe-q4")["ids"].get<std::vector<int32_t>>();
  const std::vector<float> ref = run_logits(src, ExpertStoreOptions{}, prompt);

  std::vector<std::string> notes;
  ModelOptions mo;
  mo.experts.policy = ExpertPolicy::stream;
  mo.experts.cache_bytes = size_t{1} << 20;  // a few experts: most uses miss
  mo.pack_dir = packs;
  mo.on_note = [&](const std::string& line) { notes.push_back(line); };
  auto noted = [&](const std::string& what) {
    return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return n.find(what) != n.npos; });
  };
  std::vector<float> st = run_logits(src, mo, prompt);
  ASSERT_EQ(st.size(), ref.size());
  EXPECT_EQ(std::memcmp(st.data(), ref.data(), ref.size() * sizeof(float)), 0);
  EXPECT_TRUE(noted("packing the experts of " + src)) << ::testing::PrintToString(notes);
  bool partial = true;
  const std::vector<std::string> first = packed_copies(packs, &partial);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_FALSE(partial);
  EXPECT_TRUE(first[0].starts_with("qwen3moe-q4-")) << first[0];
  EXPECT_EQ(mo.pack_dir + "/" + first[0], folder_pack_path(src, packs));
  const auto written = fs::last_write_time(packs + "/" + first[0]);

  notes.clear();  // again: read from the copy, not packed again
  st = run_logits(src, mo, prompt);
  EXPECT_EQ(std::memcmp(st.data(), ref.data(), ref.size() * sizeof(float)), 0);
  EXPECT_TRUE(noted("written by an earlier run")) << ::testing::PrintToString(notes);
  EXPECT_FALSE(noted("packing"));
  EXPECT_EQ(packed_copies(packs).size(), 1u);
  EXPECT_EQ(fs::last_write_time(packs + "/" + first[0]), written);

  // The folder changes (a file's time): a new copy, the old one left where it was.
  fs::last_write_time(src + "/config.json", fs::last_write_time(src + "/config.json") + std::chrono::hours(1));
  notes.clear();
  st = run_logits(src, mo, prompt);
  EXPECT_EQ(std::memcmp(st.data(), ref.data(), ref.size() * sizeof(float)), 0);
  EXPECT_TRUE(noted("packing the experts of"));
  EXPECT_EQ(packed_copies(packs).size(), 2u);

  // A dense folder has no experts: loaded as it is, nothing written.
  const std::vector<int32_t> dense_prompt = test_hf::golden("llama-q4")["ids"].get<std::vector<int32_t>>();
  const std::vector<float> dense = run_logits(folder("llama-q4"), mo, dense_prompt),
                           dense_ref = run_logits(folder("llama-q4"), ExpertStoreOptions{}, dense_prompt);
  EXPECT_EQ(dense, dense_ref);
  EXPECT_EQ(packed_copies(packs).size(), 2u);

  // A pack that fails (no experts to pack) leaves neither the copy nor its temporary file.
  EXPECT_THROW(write_folder_pack(folder("llama-q4"), open_model_folder_for_rewrite(folder("llama-q4")),
                                 packs + "/dense.gguf"),
               Error);
  EXPECT_EQ(packed_copies(packs, &partial).size(), 2u);
  EXPECT_FALSE(partial);

  // A pack directory that cannot be made: the error names it.
  std::ofstream(tmp + "/a-file") << "x";
  mo.pack_dir = tmp + "/a-file/packs";
  fs::last_write_time(src + "/config.json", fs::last_write_time(src + "/config.json") + std::chrono::hours(1));
  try {
    Model::load(src, mo);
    ADD_FAILURE() << "no error for an unusable pack directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create " + tmp + "/a-file/packs"), std::string::npos) << e.what();
  }
  fs::remove_all(tmp);
}

// The CLI: `sluice pack DIR -o F.gguf`, then `eval -m F.gguf --experts stream` greedy as the folder.
TEST(FolderPackCli, PackThenStream) {
  const std::string cli = ::sluice::test::cli_path(), dir = folder("qwen3moe-q4");
  const std::string tmp = fs::temp_directory_path() / ("sluice_fpackc_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  int rc = 0;
  std::string out = test::run_command(cli + " pack " + dir + " -o " + tmp + "/p.gguf 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("packed"), std::string::npos) << out;
  const std::string ids = "299,337,374,261,346,14,323,301";
  const std::string a = test::run_command(cli + " eval -m " + dir + " --tokens " + ids + " --greedy 8 2>/dev/null",
                                          &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_NE(a.find("\"generated\":["), std::string::npos) << a;
  const std::string b = test::run_command(cli + " eval -m " + tmp +
                                              "/p.gguf --experts stream --expert-cache 300K --tokens " + ids +
                                              " --greedy 8 2>&1",
                                          &rc);
  ASSERT_EQ(rc, 0) << b;
  EXPECT_NE(b.find(a), std::string::npos) << a << "\n---\n" << b;
  // Or the folder itself with --experts stream: packed into --pack-dir on the way.
  const std::string c = test::run_command(cli + " eval -m " + dir +
                                              " --experts stream --expert-cache 300K --pack-dir " + tmp +
                                              "/packs --tokens " + ids + " --greedy 8 2>&1",
                                          &rc);
  ASSERT_EQ(rc, 0) << c;
  EXPECT_NE(c.find("packing the experts of " + dir), std::string::npos) << c;
  EXPECT_NE(c.find(a), std::string::npos) << a << "\n---\n" << c;
  EXPECT_EQ(packed_copies(tmp + "/packs").size(), 1u);
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace sluice::test_folder_pack
