// tests/models/test_streaming: expert policies change where experts live, never what the model
// computes. On every MoE golden and both stories260K MoE variants, mmap and stream (with a
// budget of ~2.5 experts, so evictions happen on every layer; prefetch on and off; io_uring and
// pread; O_DIRECT and buffered) give logits bit-identical to resident — prompt batch and greedy
// decode steps. Also: packed files (sluice pack) give the same bits and unpack to the original
// bytes; pins chosen from a calibration run's routing counts; the CLI options and stats line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backends/backend.h"
#include "core/error.h"
#include "format/gguf.h"
#include "memory/pack.h"
#include "models/model.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_streaming {
namespace {

namespace fs = std::filesystem;
const std::string kCli = ::sluice::test::cli_path();

struct RunResult {
  std::vector<float> logits;  // prompt logits (all rows), then each decode step's row
  std::vector<int32_t> generated;
  ExpertStats stats;
};

RunResult run_model(const std::string& path, const ExpertStoreOptions& eo, const std::vector<int32_t>& prompt,
                    int n_decode) {
  ModelOptions mo;
  mo.experts = eo;
  auto m = Model::load(path, mo);
  auto be = make_backend("cpu", 2);
  KvCacheOptions kv;
  kv.n_ctx = static_cast<int64_t>(prompt.size()) + n_decode + 1;
  Session s(*m, *be, kv);
  RunResult r;
  auto l = s.eval(prompt, /*all_logits=*/true);
  r.logits.assign(l.begin(), l.end());
  const int64_t nv = m->hparams().n_vocab;
  int32_t next = argmax(l.subspan(l.size() - nv));
  for (int i = 0; i < n_decode; ++i) {
    r.generated.push_back(next);
    std::vector<int32_t> one{next};
    l = s.eval(one);
    r.logits.insert(r.logits.end(), l.begin(), l.end());
    next = argmax(l);
  }
  r.stats = m->experts().stats();
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The largest buffer one expert needs under the stream policy (aligned read plan).
size_t max_bundle_bytes(const std::string& path) {
  ExpertStoreOptions eo;
  eo.policy = ExpertPolicy::stream;
  eo.cache_bytes = size_t{1} << 30;
  ModelOptions mo;
  mo.experts = eo;
  return Model::load(path, mo)->experts().stats().max_bundle_bytes;
}

struct Case {
  std::string name;
  std::string model;  // relative to ../shared
};
// gtest prints a parameter without a PrintTo as its raw bytes (pointers included), in ctest's list too.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name << " (" << c.model << ")"; }

std::vector<Case> moe_cases() {
  return {{"qwen3moe", "golden/qwen3moe/model.gguf"},
          {"qwen3moe_Q8_0", "golden/qwen3moe-Q8_0/model.gguf"},
          {"qwen3moe_Q4_K_M", "golden/qwen3moe-Q4_K_M/model.gguf"},
          {"mixtral", "golden/mixtral/model.gguf"},
          {"olmoe", "golden/olmoe/model.gguf"},
          {"deepseek2", "golden/deepseek2/model.gguf"},
          {"stories260K_moe4_split", "models/stories260K-moe4-split.gguf"},
          {"stories260K_moe8top4_dup", "models/stories260K-moe8top4-dup.gguf"}};
}

std::vector<int32_t> prompt_for(const std::string& path) {
  ModelOptions mo;
  auto m = Model::load(path, mo);
  auto ids = m->tokenizer().encode("Once upon a time, there was a little girl named Lily. She loved to play", true);
  return ids;
}

class Streaming : public ::testing::TestWithParam<Case> {};

TEST_P(Streaming, EveryPolicyGivesBitIdenticalLogits) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/" + GetParam().model;
  const auto prompt = prompt_for(path);
  const int n_decode = 6;
  ExpertStoreOptions resident;
  const RunResult ref = run_model(path, resident, prompt, n_decode);

  const size_t bundle = max_bundle_bytes(path);
  ASSERT_GT(bundle, 0u);
  struct Variant {
    std::string what;
    ExpertStoreOptions opt;
  };
  std::vector<Variant> variants;
  {
    ExpertStoreOptions o;
    o.policy = ExpertPolicy::mmap;
    variants.push_back({"mmap", o});
  }
  ExpertStoreOptions s;
  s.policy = ExpertPolicy::stream;
  s.cache_bytes = bundle * 5 / 2;  // two and a half experts: evictions on every layer
  variants.push_back({"stream, prefetch", s});
  s.prefetch = false;
  variants.push_back({"stream, no prefetch", s});
  s.prefetch = true;
  s.io = "pread";
  variants.push_back({"stream, pread threads", s});
  s.io = "auto";
  s.direct_io = false;
  variants.push_back({"stream, buffered", s});
  s.direct_io = true;
  s.cache_bytes = bundle * 6;  // room for the prefetch gate to read ahead (it takes no recent expert)
  variants.push_back({"stream, prefetch, six-expert budget", s});
  s.prefetch_gate = false;
  variants.push_back({"stream, ungated prefetch, six-expert budget", s});
  s.prefetch_gate = true;
  s.cache_bytes = bundle;  // exactly one expert: strictly one at a time
  variants.push_back({"stream, one-expert budget", s});

  for (const Variant& v : variants) {
    SCOPED_TRACE(v.what);
    const RunResult r = run_model(path, v.opt, prompt, n_decode);
    EXPECT_TRUE(same_bits(r.logits, ref.logits)) << "logits differ from resident";
    EXPECT_EQ(r.generated, ref.generated);
    EXPECT_EQ(r.stats.requests, ref.stats.requests);
    if (v.opt.policy == ExpertPolicy::stream) {
      EXPECT_LE(r.stats.cache_peak_bytes, v.opt.cache_bytes);
      EXPECT_GT(r.stats.evictions, 0u);
      EXPECT_GT(r.stats.reads, 0u);
      EXPECT_GE(r.stats.bytes_read, r.stats.reads);
      EXPECT_EQ(r.stats.tokens, prompt.size() + n_decode);
    }
    if (v.opt.prefetch) {
      EXPECT_GT(r.stats.predicted, 0u);
    } else {
      EXPECT_EQ(r.stats.predicted, 0u);
    }
  }
}

TEST_P(Streaming, PackedFileGivesTheSameBitsAndUnpacksToTheOriginal) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/" + GetParam().model;
  const std::string dir = fs::temp_directory_path() / ("sluice_pack_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string packed = dir + "/packed.gguf", unpacked = dir + "/unpacked.gguf";
  PackResult pr = pack_experts(path, packed);
  EXPECT_GT(pr.experts, 0);
  {
    GgufFile f(packed);
    EXPECT_TRUE(gguf_has_bundled_experts(f));
    EXPECT_EQ(f.alignment(), 4096u);
    // One read per bundle: gate, up and down of an expert are adjacent and 4 KiB-aligned.
    const TensorView* g = f.find_tensor(
        "blk." + std::to_string(f.get_u32_or(f.get_string("general.architecture") + ".leading_dense_block_count", 0)) +
        ".ffn_gate.1.weight");
    ASSERT_NE(g, nullptr);
    EXPECT_EQ((static_cast<const uint8_t*>(g->data) - f.base()) % 4096, 0);
  }
  const auto prompt = prompt_for(path);
  ExpertStoreOptions resident;
  const RunResult ref = run_model(path, resident, prompt, 4);
  EXPECT_TRUE(same_bits(run_model(packed, resident, prompt, 4).logits, ref.logits)) << "packed, resident";
  ExpertStoreOptions s;
  s.policy = ExpertPolicy::stream;
  s.cache_bytes = max_bundle_bytes(packed) * 5 / 2;
  const RunResult st = run_model(packed, s, prompt, 4);
  EXPECT_TRUE(same_bits(st.logits, ref.logits)) << "packed, stream";

  unpack_experts(packed, unpacked);
  GgufFile a(path), b(unpacked);
  EXPECT_FALSE(gguf_has_bundled_experts(b));
  EXPECT_EQ(b.alignment(), a.alignment());
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const TensorView& t : a.tensors()) {
    const TensorView* u = b.find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->type, t.type) << t.name;
    EXPECT_EQ(u->n_dims, t.n_dims) << t.name;
    for (int d = 0; d < 4; ++d) EXPECT_EQ(u->ne[d], t.ne[d]) << t.name;
    ASSERT_EQ(u->nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(u->data, t.data, t.nbytes), 0) << t.name;
  }
  for (const auto& [k, v] : a.metadata()) EXPECT_TRUE(b.has(k)) << k;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Moe, Streaming, ::testing::ValuesIn(moe_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

TEST(StreamingPack, ReadsEachMissOnce) {
  SLUICE_REQUIRE_SHARED();
  // Stacked file: three reads per miss (gate, up, down live in three tensors). Packed: one.
  const std::string path = test::shared_dir() + "/golden/qwen3moe/model.gguf";
  const std::string dir = fs::temp_directory_path() / ("sluice_pack1_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string packed = dir + "/packed.gguf";
  pack_experts(path, packed);
  const auto prompt = prompt_for(path);
  ExpertStoreOptions s;
  s.policy = ExpertPolicy::stream;
  s.prefetch = false;  // every read is then a demand miss
  s.cache_bytes = max_bundle_bytes(path) * 3;
  const RunResult stacked = run_model(path, s, prompt, 3);
  EXPECT_EQ(stacked.stats.reads, 3 * (stacked.stats.requests - stacked.stats.hits));
  s.cache_bytes = max_bundle_bytes(packed) * 3;
  const RunResult bundled = run_model(packed, s, prompt, 3);
  EXPECT_EQ(bundled.stats.reads, bundled.stats.requests - bundled.stats.hits);
  EXPECT_TRUE(same_bits(stacked.logits, bundled.logits));
  EXPECT_THROW(pack_experts(packed, dir + "/twice.gguf"), Error);
  EXPECT_THROW(pack_experts(test::shared_dir() + "/models/stories260K.gguf", dir + "/dense.gguf"), Error);
  fs::remove_all(dir);
}

TEST(StreamingPins, CalibrationCountsChooseThePinnedSet) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/golden/qwen3moe/model.gguf";
  const std::string counts = fs::temp_directory_path() / ("sluice_counts_" + std::to_string(::getpid()) + ".json");
  fs::remove(counts);
  const auto prompt = prompt_for(path);
  {
    ModelOptions mo;
    auto m = Model::load(path, mo);
    auto be = make_backend("cpu", 2);
    Session s(*m, *be, KvCacheOptions{});
    s.eval(prompt);
    m->experts().save_routing_counts(counts);
    const auto c = m->experts().routing_counts();
    uint64_t total = 0;
    for (const auto& l : c)
      for (uint64_t x : l) total += x;
    EXPECT_EQ(total, prompt.size() * m->hparams().n_layer * m->hparams().moe.n_expert_used);
    // Saving again adds up: a second calibration run accumulates.
    m->experts().save_routing_counts(counts);
    auto twice = read_routing_counts(counts, c.size());
    EXPECT_EQ(twice[0][0], 2 * c[0][0]);
  }
  ExpertStoreOptions resident;
  const RunResult ref = run_model(path, resident, prompt, 4);
  ExpertStoreOptions s;
  s.policy = ExpertPolicy::stream;
  s.cache_bytes = max_bundle_bytes(path) * 6;
  s.pin_per_layer = 2;
  s.routing_counts_path = counts;
  const RunResult r = run_model(path, s, prompt, 4);
  EXPECT_EQ(r.stats.pinned, 4);  // 2 layers x 2
  EXPECT_TRUE(same_bits(r.logits, ref.logits));
  EXPECT_GT(r.stats.hits, 0u);
  EXPECT_LE(r.stats.cache_peak_bytes, s.cache_bytes);
  // Pins without counts: a clear error, not a silent no-op.
  s.routing_counts_path.clear();
  EXPECT_THROW(run_model(path, s, prompt, 1), Error);
  fs::remove(counts);
}

// --routing-trace-out: one line per acquire, "layer e1 e2 ...", in the order the store saw them.
// Checked against the routing counts the same run books: the prefill line of each layer holds
// exactly the experts with a count, and each decode line's experts are the counts it added.
TEST(StreamingTrace, TraceIsTheStoresRequestSequence) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/golden/qwen3moe/model.gguf";
  const std::string trace = fs::temp_directory_path() / ("sluice_trace_" + std::to_string(::getpid()) + ".txt");
  ModelOptions mo;
  mo.experts.policy = ExpertPolicy::stream;
  mo.experts.cache_bytes = max_bundle_bytes(path) * 3;
  auto m = Model::load(path, mo);
  m->experts().record_routing_trace();
  auto be = make_backend("cpu", 2);
  Session s(*m, *be, KvCacheOptions{});
  const auto prompt = prompt_for(path);
  s.eval(prompt);
  const auto after_prefill = m->experts().routing_counts();
  const int32_t decode[3] = {prompt[1], prompt[2], prompt[1]};
  for (int32_t t : decode) s.eval(std::span<const int32_t>(&t, 1));
  const auto after_decode = m->experts().routing_counts();
  m->experts().save_routing_trace(trace);

  const int64_t L = m->hparams().n_layer, k = m->hparams().moe.n_expert_used;
  std::ifstream in(trace);
  std::vector<std::vector<int32_t>> lines;
  std::vector<int32_t> layer_of;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    int32_t layer = -1, e = 0;
    ls >> layer;
    layer_of.push_back(layer);
    lines.emplace_back();
    while (ls >> e) lines.back().push_back(e);
  }
  ASSERT_EQ(lines.size(), static_cast<size_t>(4 * L));  // a prefill and three decode steps
  std::vector<std::vector<uint64_t>> added(L, std::vector<uint64_t>(after_decode[0].size(), 0));
  for (size_t i = 0; i < lines.size(); ++i) {
    const int32_t l = layer_of[i];
    ASSERT_EQ(l, static_cast<int32_t>(i % L)) << "line " << i;
    if (i < static_cast<size_t>(L)) {
      std::vector<int32_t> want;
      for (size_t e = 0; e < after_prefill[l].size(); ++e)
        if (after_prefill[l][e] > 0) want.push_back(static_cast<int32_t>(e));
      std::vector<int32_t> got = lines[i];
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, want) << "prefill, layer " << l;
    } else {
      EXPECT_EQ(lines[i].size(), static_cast<size_t>(k)) << "line " << i;
      for (int32_t e : lines[i]) added[l].at(e) += 1;
    }
  }
  for (int64_t l = 0; l < L; ++l)
    for (size_t e = 0; e < added[l].size(); ++e)
      EXPECT_EQ(added[l][e], after_decode[l][e] - after_prefill[l][e]) << "layer " << l << " expert " << e;
  fs::remove(trace);
}

TEST(StreamingCli, RunStreamsAndPrintsTheNumbers) {
  SLUICE_REQUIRE_SHARED();
  const std::string model = test::shared_dir() + "/models/stories260K-moe8top4-dup.gguf";
  const std::string base = kCli + " run -m " + model + " -p 'Once upon a time' -n 24 --temp 0 -t 2";
  const std::string err = fs::temp_directory_path() / ("sluice_cli_stream_" + std::to_string(::getpid()) + ".err");
  int rc = 0;
  const std::string want = test::run_command(base + " 2>/dev/null", &rc);
  ASSERT_EQ(rc, 0);
  for (const std::string opt :
       {"--experts stream --expert-cache 200K", "--experts stream --expert-cache 0.2M --no-prefetch",
        "--experts stream --expert-cache auto", "--experts mmap"}) {
    const std::string out = test::run_command(base + " " + opt + " 2>" + err, &rc);
    ASSERT_EQ(rc, 0) << opt << "\n" << test::read_text_file(err);
    EXPECT_EQ(out, want) << opt;
    const std::string e = test::read_text_file(err);
    EXPECT_NE(e.find("experts: " + std::string(opt.find("mmap") != std::string::npos ? "mmap" : "stream")),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("hit rate"), std::string::npos) << e;
    EXPECT_NE(e.find("peak RSS"), std::string::npos) << e;
    EXPECT_NE(e.find(opt.find("mmap") != std::string::npos ? "major page faults" : "ms/token"), std::string::npos) << e;
  }
  // --routing-trace-out: a line per MoE layer and forward pass (the prompt is one pass; run
  // evaluates each of the 24 sampled tokens).
  const std::string trace = err + ".trace";
  test::run_command(base + " --experts stream --expert-cache 200K --routing-trace-out " + trace + " 2>/dev/null", &rc);
  ASSERT_EQ(rc, 0);
  const std::string t = test::read_text_file(trace);
  const int64_t n_layer = Model::load(model)->hparams().n_layer;  // every layer is MoE here
  EXPECT_EQ(std::count(t.begin(), t.end(), '\n'), 25 * n_layer) << "the prompt's pass and one per sampled token";
  fs::remove(trace);
  // A budget below one expert is refused with what to do about it.
  const std::string out = test::run_command(base + " --experts stream --expert-cache 4K 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("cannot hold one expert"), std::string::npos) << out;
  test::run_command(base + " --experts stream --expert-cache lots 2>&1", &rc);
  EXPECT_NE(rc, 0);
  fs::remove(err);
}

TEST(StreamingCli, PackThenEval) {
  SLUICE_REQUIRE_SHARED();
  const std::string g = test::shared_dir() + "/golden/mixtral";
  const std::string dir = fs::temp_directory_path() / ("sluice_cli_pack_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int rc = 0;
  std::string out = test::run_command(kCli + " pack " + g + "/model.gguf -o " + dir + "/p.gguf 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("packed"), std::string::npos) << out;
  const std::string ids = "1,403,407,261,378,432,383,286";
  const std::string a = test::run_command(kCli + " eval -m " + g + "/model.gguf --tokens " + ids +
                                              " --greedy 8 --logits " + dir + "/a.bin 2>/dev/null",
                                          &rc);
  ASSERT_EQ(rc, 0);
  const std::string b = test::run_command(kCli + " eval -m " + dir +
                                              "/p.gguf --experts stream --expert-cache 300K --tokens " + ids +
                                              " --greedy 8 --logits " + dir + "/b.bin 2>/dev/null",
                                          &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(same_bits(test::read_f32_file(dir + "/a.bin"), test::read_f32_file(dir + "/b.bin")));
  out = test::run_command(kCli + " pack --unpack " + dir + "/p.gguf -o " + dir + "/u.gguf 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice::test_streaming
