// tests/unit/test_kvcodec_perplexity: the perplexity/KLD harness (runtime/perplexity) on
// stories260K — PPL against a direct float64 computation from the session's logits, the base
// file round trip (a configuration against itself has KLD ~0), and a compressed cache against
// f16 giving a positive KLD — plus model-level parity of compressed caches (ref vs cpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backends/backend.h"
#include "kvcodec/kvcodec.h"
#include "models/model.h"
#include "runtime/parity.h"
#include "runtime/perplexity.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice {
namespace {

using test::shared_dir;

std::vector<int32_t> corpus_tokens(const Model& m) {
  const std::string text = test::read_text_file(shared_dir() + "/corpus/stories-sampled.txt");
  return m.tokenizer().encode(text, true);
}

// llama-perplexity's method written out directly: float64 log-softmax of each scored row.
TEST(Perplexity, MatchesDirectFloat64Computation) {
  SLUICE_REQUIRE_SHARED();
  auto model = Model::load(shared_dir() + "/models/stories260K.gguf");
  auto be = make_backend("cpu", 2);
  const auto tokens = corpus_tokens(*model);
  PerplexityOptions o;
  o.n_ctx = 64;
  o.n_chunks = 3;
  const PerplexityResult r = perplexity_run(*model, *be, tokens, o, nullptr);
  ASSERT_EQ(r.n_chunks, 3);
  EXPECT_EQ(r.count, 3 * (64 - 1 - 32));

  const int64_t V = model->hparams().n_vocab;
  Session s(*model, *be, KvCacheOptions{.n_ctx = 64});
  double nll = 0;
  int64_t n = 0;
  for (int c = 0; c < 3; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * 64, tokens.begin() + (c + 1) * 64);
    const std::vector<int32_t> orig = chunk;
    chunk[0] = model->tokenizer().vocab().bos_id;  // stories260K adds BOS
    s.reset();
    const auto logits = s.eval(chunk, true);
    for (int j = 32; j < 63; ++j) {
      const float* row = logits.data() + j * V;
      double m = row[0];
      for (int64_t i = 1; i < V; ++i) m = std::max(m, double(row[i]));
      double z = 0;
      for (int64_t i = 0; i < V; ++i) z += std::exp(double(row[i]) - m);
      nll += m + std::log(z) - row[orig[j + 1]];
      ++n;
    }
  }
  const double ppl = std::exp(nll / n);
  EXPECT_NEAR(r.ppl, ppl, 1e-9 * ppl);
  // Sane for a 260K-parameter story model on story text: well below the vocabulary size.
  EXPECT_GT(r.ppl, 1.5);
  EXPECT_LT(r.ppl, 30.0);
  EXPECT_GT(r.ppl_err, 0.0);
}

TEST(Perplexity, KldAgainstItselfIsZeroAndCodecsArePositive) {
  SLUICE_REQUIRE_SHARED();
  auto model = Model::load(shared_dir() + "/models/stories260K.gguf");
  auto be = make_backend("cpu", 2);
  const auto tokens = corpus_tokens(*model);
  const std::string base = (test::scratch_dir() / "sluice_test_kld_base.bin").string();
  PerplexityOptions o;
  o.n_ctx = 64;
  o.n_chunks = 8;  // 8·31 = 248 scored tokens
  o.kld_base_out = base;
  const PerplexityResult b = perplexity_run(*model, *be, tokens, o, nullptr);

  // The file has llama.cpp's layout: header, tokens, then nv uint16 per scored token.
  const int64_t V = model->hparams().n_vocab, nv = 2 * ((V + 1) / 2) + 4;
  EXPECT_EQ(std::filesystem::file_size(base), size_t(8 + 12 + 4 * 64 * 8 + 2 * nv * 31 * 8));

  PerplexityOptions k;
  k.kld_in = base;
  const PerplexityResult self = perplexity_run(*model, *be, {}, k, nullptr);
  ASSERT_TRUE(self.has_kld);
  EXPECT_EQ(self.count, b.count);
  // Same logits; the base run's NLL comes from llama.cpp's float log-sum-exp (as it writes
  // the file), the KLD run's from a double one: they agree to ~1e-8 relative.
  EXPECT_NEAR(self.ppl, b.ppl, 1e-6 * b.ppl);
  // The base log-probs are stored as uint16 steps of at most 16/65535 nats: KLD against
  // itself is that rounding only (observed ~1e-9), and the top token always agrees.
  EXPECT_LT(self.kld.sum_kld / self.kld.count, 1e-6);
  EXPECT_EQ(self.kld.n_same_top, self.kld.count);
  const std::string report = format_kld_report(self.kld);
  for (const char* key :
       {"Mean PPL(Q)", "Mean PPL(base)", "Cor(ln(PPL(Q)), ln(PPL(base)))", "Mean PPL(Q)/PPL(base)", "Mean    KLD",
        "Maximum KLD", "99.9%   KLD", "Median  KLD", "Minimum KLD", "Mean    Δp", "RMS Δp", "Same top p"})
    EXPECT_NE(report.find(key), std::string::npos) << key;

  // A compressed V (tq3) moves the distribution: KLD clearly above the rounding floor, and
  // 8-bit K+V (q8_0) moves it less than 3-bit V.
  k.kv.type_v = kKvTq3;
  const PerplexityResult v3 = perplexity_run(*model, *be, {}, k, nullptr);
  k.kv.type_k = k.kv.type_v = DType::Q8_0;
  const PerplexityResult q8 = perplexity_run(*model, *be, {}, k, nullptr);
  const double kld_v3 = v3.kld.sum_kld / v3.kld.count, kld_q8 = q8.kld.sum_kld / q8.kld.count;
  EXPECT_GT(kld_v3, 1e-4);
  EXPECT_GT(kld_q8, 1e-5);
  EXPECT_LT(kld_q8, kld_v3);
  std::filesystem::remove(base);
}

// A base file llama.cpp wrote (tests/data/kld/README.md: llama-perplexity
// --kl-divergence-base on stories260K, the shared text, ctx 64, 4 chunks): its header and tokens
// are ours, read back it gives llama-perplexity's printed PPL, and our f16 cache's log-probs
// against it have a KLD of the file's rounding only (~1e-6; a compressed cache is >= 1e-4
// above). Negative control: the file with two scored rows' log-probs swapped.
TEST(Perplexity, ReadsTheBaseFileLlamaCppWrote) {
  SLUICE_REQUIRE_SHARED();
  auto model = Model::load(shared_dir() + "/models/stories260K.gguf");
  auto be = make_backend("cpu", 2);
  const std::string path = std::string(SLUICE_SOURCE_DIR) + "/tests/data/kld/stories260K-c64x4.kld";
  const std::string file = test::read_text_file(path);
  constexpr int64_t kCtx = 64, kChunks = 4, kHeader = 8 + 12 + 4 * kCtx * kChunks;
  const int64_t V = model->hparams().n_vocab, nv = 2 * ((V + 1) / 2) + 4, rows = kChunks * (kCtx - 1 - kCtx / 2);
  ASSERT_EQ(file.size(), size_t(kHeader + 2 * nv * rows));
  int32_t head[3];
  std::memcpy(head, file.data() + 8, sizeof head);
  EXPECT_EQ(head[0], kCtx);
  EXPECT_EQ(head[1], V);
  EXPECT_EQ(head[2], kChunks);
  // Its tokens are our tokenization of the same text.
  const auto ours = corpus_tokens(*model);
  ASSERT_GE(ours.size(), size_t(kCtx * kChunks));
  std::vector<int32_t> theirs(kCtx * kChunks);
  std::memcpy(theirs.data(), file.data() + 20, theirs.size() * sizeof(int32_t));
  EXPECT_TRUE(std::equal(theirs.begin(), theirs.end(), ours.begin()));

  PerplexityOptions k;
  k.kld_in = path;
  const PerplexityResult r = perplexity_run(*model, *be, {}, k, nullptr);
  ASSERT_TRUE(r.has_kld);
  EXPECT_EQ(r.count, rows);
  EXPECT_NEAR(std::exp(r.kld.sum_nll_base / r.kld.count), 4.3274, 5e-5);  // llama-perplexity: PPL = 4.3274
  EXPECT_NEAR(r.ppl, 4.3274, 1e-3);
  EXPECT_LT(r.kld.sum_kld / r.kld.count, 1e-5);
  EXPECT_EQ(r.kld.n_same_top, r.count);

  std::string swapped = file;
  const size_t row = 2 * static_cast<size_t>(nv);
  std::swap_ranges(swapped.begin() + kHeader, swapped.begin() + kHeader + row, swapped.begin() + kHeader + row);
  const std::string bad = (test::scratch_dir() / "sluice_test_kld_swapped.kld").string();
  std::ofstream(bad, std::ios::binary) << swapped;
  k.kld_in = bad;
  const PerplexityResult w = perplexity_run(*model, *be, {}, k, nullptr);
  EXPECT_GT(w.kld.sum_kld / w.kld.count, 1e-3);
  std::filesystem::remove(bad);
}

TEST(Perplexity, RejectsBadBaseFile) {
  SLUICE_REQUIRE_SHARED();
  auto model = Model::load(shared_dir() + "/models/stories260K.gguf");
  auto be = make_backend("cpu", 1);
  const std::string bad = (test::scratch_dir() / "sluice_test_kld_bad.bin").string();
  std::ofstream(bad, std::ios::binary) << "_logits_\x40";
  PerplexityOptions k;
  k.kld_in = bad;
  EXPECT_ANY_THROW(perplexity_run(*model, *be, {}, k, nullptr));
  std::filesystem::remove(bad);
}

// The whole model, ref vs cpu, with compressed caches: within parity_nmse_tolerance of the
// lossier KV type (runtime/parity.cpp explains the values).
TEST(Perplexity, ModelParityWithCompressedCaches) {
  SLUICE_REQUIRE_SHARED();
  auto model = Model::load(shared_dir() + "/models/stories260K.gguf");
  auto ref = make_backend("ref"), cpu = make_backend("cpu", 2);
  const auto ids = model->tokenizer().encode("Once upon a time, there was a little girl named Lily.", true);
  for (auto [kt, vt] : {std::pair{DType::Q8_0, DType::Q8_0}, std::pair{DType::Q8_0, kKvTq4}, std::pair{kKvTq4, kKvTq3},
                        std::pair{DType::F16, kKvTq2}}) {
    KvCacheOptions kv{.n_ctx = 64, .type_k = kt, .type_v = vt};
    const ParityReport rep = run_parity(*model, *ref, *model, *cpu, ids, 4, kv);
    const ParityEntry* e = rep.first_divergence();
    double worst = 0;
    for (const auto& x : rep.entries) worst = std::max(worst, x.nmse);
    std::printf("[  NMSE    ] model parity K %s V %s: worst %.3g\n", std::string(kv_type_name(kt)).c_str(),
                std::string(kv_type_name(vt)).c_str(), worst);
    EXPECT_EQ(e, nullptr) << kv_type_name(kt) << "/" << kv_type_name(vt) << ": " << (e ? e->name : "") << " layer "
                          << (e ? e->layer : 0) << " nmse " << (e ? e->nmse : 0);
  }
}

// The CLI end to end: PPL, a base file, a KLD run with split K/V types, a bad type name.
TEST(Perplexity, CliPrintsPplAndKldBlock) {
  SLUICE_REQUIRE_SHARED();
  const std::string cli = ::sluice::test::cli_path(), m = shared_dir() + "/models/stories260K.gguf";
  const std::string base = (test::scratch_dir() / "sluice_test_cli_kld.bin").string();
  int st = 0;
  std::string out = test::run_command(cli + " perplexity -m " + m + " -f " + shared_dir() +
                                          "/corpus/stories-sampled.txt --ctx 64 --chunks 6 -t 1 --kld-base " + base +
                                          " 2>&1",
                                      &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("Final estimate: PPL = "), std::string::npos) << out;
  out = test::run_command(cli + " perplexity -m " + m + " --kld " + base +
                              " -t 1 --cache-type-k q8_0 --cache-type-v tq4 2>&1",
                          &st);
  EXPECT_EQ(st, 0) << out;
  for (const char* key : {"K q8_0, V tq4", "Mean    KLD", "99.0%   KLD", "RMS Δp", "Same top p"})
    EXPECT_NE(out.find(key), std::string::npos) << key << "\n" << out;
  out = test::run_command(cli + " perplexity -m " + m + " --kld " + base + " --cache-type tq5 2>&1", &st);
  EXPECT_NE(st, 0);
  EXPECT_NE(out.find("not supported"), std::string::npos) << out;
  std::filesystem::remove(base);
}

}  // namespace
}  // namespace sluice
