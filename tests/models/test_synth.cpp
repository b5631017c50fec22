// tests/models/test_synth: `sluice synth` — every architecture's tiny preset, F16 and quantized,
// loads and runs (ref vs cpu parity on every intermediate), gives non-degenerate logits, is
// deterministic in the seed and not in the thread count, quantized stays near F16, the padded
// vocabulary works, q4_k_m picks llama.cpp's types, routing locality raises expert reuse, the
// files pass the independent gguf-py check of llama.cpp's rules, the qwen35moe and qwen3next
// hybrids and the KDA hybrids kimi-linear and bailingmoe3 have their goldens' exact layout, the
// full-size presets have the real models' shapes, and the CLI works end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "backends/backend.h"
#include "core/error.h"
#include "format/gguf.h"
#include "models/model.h"
#include "runtime/parity.h"
#include "runtime/session.h"
#include "synth/plan.h"
#include "synth/synth.h"
#include "test_util.h"

namespace sluice::test_synth {
namespace {

namespace fs = std::filesystem;

// BOS + the goldens' shared prompt ids (stories260K vocabulary).
const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 400, 428};

std::string tokenizer_path() { return test::shared_dir() + "/models/stories260K.gguf"; }

const fs::path& tmp_dir() { return test::scratch_dir(); }

struct Tiny {
  std::string arch, preset;
};
std::string tiny_name(const Tiny& t) { return t.arch + (t.preset == "tiny" ? "" : "_" + t.preset); }
void PrintTo(const Tiny& t, std::ostream* os) { *os << tiny_name(t); }  // readable ctest names

const std::vector<Tiny> kTinies = {{"llama", "tiny"},        {"mixtral", "tiny"},    {"qwen3", "tiny"},
                                   {"qwen3moe", "tiny"},     {"olmoe", "tiny"},      {"deepseek2", "tiny"},
                                   {"deepseek2", "tiny-v3"}, {"qwen35moe", "tiny"},  {"qwen3next", "tiny"},
                                   {"kimi-linear", "tiny"},  {"bailingmoe3", "tiny"}};

std::string write_synth(const Tiny& t, const std::string& type, uint64_t seed = 1, int threads = 2,
                        float locality = 0.0f, int64_t vocab = 0, const std::string& tag = "", bool fast = false) {
  SynthOptions o;
  o.fast = fast;
  o.arch = t.arch;
  o.preset = t.preset;
  o.type = type;
  o.seed = seed;
  o.threads = threads;
  o.routing_locality = locality;
  o.vocab = vocab;
  o.tokenizer = tokenizer_path();
  const std::string path = (tmp_dir() / (tiny_name(t) + "-" + type + "-s" + std::to_string(seed) + "-t" +
                                         std::to_string(threads) + tag + ".gguf"))
                               .string();
  synth_write(o, path);
  return path;
}

std::vector<float> prompt_logits(const Model& m, const std::vector<int32_t>& tokens) {
  auto cpu = make_backend("cpu-exact", 2);
  Session s(m, *cpu, KvCacheOptions{.n_ctx = 64});
  auto l = s.eval(tokens, /*all_logits=*/true);
  return {l.begin(), l.end()};
}

std::vector<int32_t> greedy(const Model& m, const std::vector<int32_t>& prompt, int n) {
  auto cpu = make_backend("cpu-exact", 2);
  Session s(m, *cpu, KvCacheOptions{.n_ctx = 64});
  int32_t next = argmax(s.eval(prompt));
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(next);
    std::vector<int32_t> one{next};
    next = argmax(s.eval(one));
  }
  return out;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::string s = test::read_text_file(path);
  return {s.begin(), s.end()};
}

class SynthTiny : public ::testing::TestWithParam<Tiny> {};

// (a) parity, (c) non-degenerate logits, (d) quantized near F16, for every architecture.
TEST_P(SynthTiny, LoadsRunsAndIsNonDegenerate) {
  SLUICE_REQUIRE_SHARED();
  const Tiny t = GetParam();
  const std::string f16 = write_synth(t, "f16"), q = write_synth(t, "q4_k_m"), q8 = write_synth(t, "q8_0");
  auto m16 = Model::load(f16), mq = Model::load(q), m8 = Model::load(q8);
  EXPECT_EQ(m16->hparams().n_vocab, 512);

  // (a) ref vs cpu on every named intermediate, prompt batch + decode steps, each weight type.
  auto ref = make_backend("ref", 1), cpu = make_backend("cpu-exact", 2);
  for (const Model* m : {m16.get(), mq.get(), m8.get()}) {
    ParityReport rep = run_parity(*m, *ref, *m, *cpu, kPrompt, /*n_decode=*/3, KvCacheOptions{.n_ctx = 32});
    ASSERT_GT(rep.entries.size(), 10u);
    const ParityEntry* bad = rep.first_divergence();
    EXPECT_EQ(bad, nullptr) << m->file().path() << ": first divergence " << bad->name << " layer " << bad->layer
                            << " nmse " << bad->nmse;
  }

  // (c) Logits: finite, with a spread like the goldens' (std ~4: LM head gain 4 on a unit-RMS
  // hidden state); the distribution is not one-hot at every position, and greedy decoding
  // does not collapse to one repeated token.
  const std::vector<float> l16 = prompt_logits(*m16, kPrompt);
  const int64_t V = m16->hparams().n_vocab, T = static_cast<int64_t>(kPrompt.size());
  double sum = 0, sum2 = 0, top1_prob = 0;
  for (int64_t r = 0; r < T; ++r) {
    const float* row = l16.data() + r * V;
    float mx = row[0];
    for (int64_t i = 0; i < V; ++i) {
      ASSERT_TRUE(std::isfinite(row[i]));
      sum += row[i], sum2 += double(row[i]) * row[i], mx = std::max(mx, row[i]);
    }
    double z = 0;
    for (int64_t i = 0; i < V; ++i) z += std::exp(double(row[i]) - mx);
    top1_prob += 1.0 / z / T;
  }
  const double n = double(T * V), mean = sum / n, stddev = std::sqrt(sum2 / n - mean * mean);
  EXPECT_GT(stddev, 0.5);
  EXPECT_LT(stddev, 20.0);
  EXPECT_LT(top1_prob, 0.9) << "mean top-1 probability: the logits are nearly one-hot";
  const std::vector<int32_t> g = greedy(*m16, kPrompt, 16);
  EXPECT_GT(std::set<int32_t>(g.begin(), g.end()).size(), 2u) << "greedy continuation collapsed";

  // (d) Quantized vs F16 logits, NMSE = Σ(Δ²)/Σ(ref²) over all prompt positions. Observed on
  // every tiny preset over seeds 1-6: q8_0 0.7-1.3e-4, q4_k_m 2.4e-3 to 1.4e-2 (Q4_K/Q5_0 weights
  // carry ~1% RMS error per matrix, compounded over 2-3 layers and the gain-4 head); deepseek2
  // tiny-v3 at q8_0 reached 2.1e-3 once (seed 5), because its sigmoid + group-limited routing
  // has near-ties that weight noise flips, and a flipped expert moves logits more than the noise
  // itself. The limits are 2.5-4x the worst observation and far below the NMSE ~2 of unrelated
  // weights, so they catch a wrong encoding while tolerating routing flips.
  struct Case {
    const char* type;
    const Model* m;
    double limit;
  };
  for (const Case c : {Case{"q8_0", m8.get(), 5e-3}, Case{"q4_k_m", mq.get(), 6e-2}}) {
    const std::vector<float> lq = prompt_logits(*c.m, kPrompt);
    double num = 0, den = 0;
    for (size_t i = 0; i < l16.size(); ++i)
      num += double(lq[i] - l16[i]) * (lq[i] - l16[i]), den += double(l16[i]) * l16[i];
    std::printf("[ %s ] logit std %.2f, mean top-1 p %.2f; %s vs f16 logits: nmse %.2e\n", tiny_name(t).c_str(), stddev,
                top1_prob, c.type, num / den);
    EXPECT_LT(num / den, c.limit) << c.type;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, SynthTiny, ::testing::ValuesIn(kTinies),
                         [](const auto& info) { return test::test_name_part(tiny_name(info.param)); });

// (b) Same seed -> byte-identical file, whatever the thread count; another seed -> different
// weights (same size and header layout).
TEST(Synth, DeterministicInSeedNotThreads) {
  SLUICE_REQUIRE_SHARED();
  const Tiny t{"llama", "tiny"};  // n_embd 256: Q4_K and Q6_K rows, split across threads
  const auto a = file_bytes(write_synth(t, "q4_k_m", 7, 1));
  const auto b = file_bytes(write_synth(t, "q4_k_m", 7, 2));
  const auto b2 = file_bytes(write_synth(t, "q4_k_m", 7, 3));
  const auto c = file_bytes(write_synth(t, "q4_k_m", 8, 2));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "1 vs 2 threads differ";
  EXPECT_TRUE(a == b2) << "1 vs 3 threads differ";
  ASSERT_EQ(a.size(), c.size());
  EXPECT_FALSE(a == c) << "seed 7 and seed 8 wrote the same file";
  // Different seeds differ in (nearly) every tensor, not in a stray byte of the description.
  auto ma = Model::load(write_synth(t, "f16", 7, 2)), mc = Model::load(write_synth(t, "f16", 8, 2));
  int same = 0;
  for (const auto& ta : ma->file().tensors()) {
    const TensorView& tc = mc->file().tensor(ta.name);
    same += std::memcmp(ta.data, tc.data, ta.nbytes) == 0;
  }
  EXPECT_EQ(same, 0);
}

// --fast (benchmark models): same tensors, types and file size; the first 64 rows of a pooled
// matrix are the real rows, every other block is the block at the same column position of
// one of those rows; small tensors are untouched; the model still runs with sane logits.
TEST(Synth, FastPooledBlocks) {
  SLUICE_REQUIRE_SHARED();
  const Tiny t{"qwen3moe", "tiny"};  // expert matrices: 2048 rows of 256 or 128 columns
  for (float locality : {0.0f, 1.0f}) {
    SCOPED_TRACE(locality);
    const std::string tag = locality > 0 ? "-loc" : "";
    auto slow = Model::load(write_synth(t, "q4_k", 3, 2, locality, 0, tag));
    auto fast = Model::load(write_synth(t, "q4_k", 3, 2, locality, 0, tag + "-fast", true));
    EXPECT_EQ(fast->file().tensors().size(), slow->file().tensors().size());
    int pooled = 0;
    for (const auto& tf : fast->file().tensors()) {
      const TensorView& ts = slow->file().tensor(tf.name);
      ASSERT_EQ(tf.type, ts.type) << tf.name;
      ASSERT_EQ(tf.nbytes, ts.nbytes) << tf.name;
      if (std::memcmp(tf.data, ts.data, tf.nbytes) == 0) continue;
      ++pooled;
      const auto& tr = dtype_traits(tf.type);
      ASSERT_GT(tr.block_size, 1) << tf.name << ": a float tensor was pooled";
      const size_t rb = tf.row_bytes();
      ASSERT_EQ(std::memcmp(tf.data, ts.data, 64 * rb), 0) << tf.name << ": pool rows are not the real rows";
      const int64_t nb = tf.ne[0] / tr.block_size;
      for (int64_t r = 64; r < tf.n_rows(); r += 37) {
        // Pool rows: [0, 64), and with routing locality also [ctx_begin, ctx_begin + 64) of the
        // first slab (ctx_begin = n_embd - n_embd/4) for tensors whose rows are scaled there.
        const int64_t ctx_begin = 256 - 256 / 4;
        for (int64_t j = 0; j < nb; ++j) {
          bool found = false;
          for (int64_t p = 0; p < 64 + (locality > 0 ? 64 : 0) && !found; ++p) {
            const int64_t pr = p < 64 ? p : ctx_begin + p - 64;
            found = std::memcmp(tf.row(r) + j * tr.block_bytes, tf.row(pr) + j * tr.block_bytes, tr.block_bytes) == 0;
          }
          ASSERT_TRUE(found) << tf.name << " row " << r << " block " << j;
        }
      }
    }
    EXPECT_GT(pooled, 0) << "no tensor used the pool";
    const auto lf = prompt_logits(*fast, kPrompt);
    double ss = 0;
    for (float v : lf) {
      ASSERT_TRUE(std::isfinite(v));
      ss += double(v) * v;
    }
    EXPECT_GT(ss / lf.size(), 1e-3) << "degenerate logits";
  }
}

// (e) A vocabulary larger than the tokenizer: padded with UNUSED tokens, embedding and head
// keep the requested shape, tokenization is unchanged.
TEST(Synth, PaddedVocabulary) {
  SLUICE_REQUIRE_SHARED();
  auto m = Model::load(write_synth({"qwen3moe", "tiny"}, "q4_k_m", 1, 2, 0.0f, 1000));
  auto plain = Model::load(write_synth({"qwen3moe", "tiny"}, "f16"));
  const Tokenizer& tok = m->tokenizer();
  EXPECT_EQ(m->hparams().n_vocab, 1000);
  EXPECT_EQ(tok.n_vocab(), 1000);
  EXPECT_EQ(m->tok_embd().ne[1], 1000);
  EXPECT_EQ(m->output().ne[1], 1000);
  EXPECT_EQ(tok.vocab().tokens[700], "<unused_700>");
  EXPECT_EQ(tok.vocab().token_types[700], TOKEN_TYPE_UNUSED);
  EXPECT_EQ(tok.vocab().scores[700], 0.0f);
  EXPECT_EQ(tok.attr(700) & TOKEN_ATTR_UNUSED, TOKEN_ATTR_UNUSED);
  EXPECT_EQ(tok.token_to_piece(700), "");
  EXPECT_EQ(tok.vocab().tokens[511], plain->tokenizer().vocab().tokens[511]);
  const std::string text = "Once upon a time, there was a little dog named Max.";
  EXPECT_EQ(tok.encode(text, true), plain->tokenizer().encode(text, true));
  const std::vector<float> l = prompt_logits(*m, kPrompt);
  EXPECT_EQ(l.size(), kPrompt.size() * 1000);
  for (float x : l) ASSERT_TRUE(std::isfinite(x));
  // Padding ids have all-zero LM-head rows (logit exactly 0), so decoding yields real tokens.
  for (size_t t = 0; t < kPrompt.size(); ++t)
    for (int id = 512; id < 1000; ++id) ASSERT_EQ(l[t * 1000 + id], 0.0f) << id;
  for (int32_t id : greedy(*m, kPrompt, 16)) EXPECT_LT(id, 512);
  EXPECT_EQ(m->file().get_u32("qwen3moe.vocab_size"), 1000u);
}

// q4_k_m chooses the tensor types llama-quantize Q4_K_M chose for the goldens (manifest's
// tensor_type_by_name, read here from the quantized golden files themselves).
TEST(Synth, Q4KMTypesMatchLlamaQuantize) {
  SLUICE_REQUIRE_SHARED();
  for (const char* g : {"llama_dense-Q4_K_M", "qwen3moe-Q4_K_M"}) {
    GgufFile f(test::shared_dir() + "/golden/" + g + "/model.gguf");
    const std::string a = f.get_string("general.architecture") + ".";
    const int64_t n_layer = f.get_u32(a + "block_count"), n_expert = f.get_u32_or(a + "expert_count", 0);
    for (const auto& t : f.tensors()) {
      std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
      EXPECT_EQ(dtype_name(synth_tensor_type("q4_k_m", t.name, ne, n_layer, n_expert)), dtype_name(t.type))
          << g << ": " << t.name;
    }
  }
  // The use_more_bits layers of a 48-layer model: the first and last 6, and every third between.
  const std::vector<int64_t> ne{768, 2048, 128};
  std::vector<int> q6;
  for (int l = 0; l < 48; ++l)
    if (synth_tensor_type("q4_k_m", "blk." + std::to_string(l) + ".ffn_down_exps.weight", ne, 48, 128) == DType::Q6_K)
      q6.push_back(l);
  EXPECT_EQ(q6, (std::vector<int>{0,  1,  2,  3,  4,  5,  8,  11, 14, 17, 20, 23,
                                  26, 29, 32, 35, 38, 41, 42, 43, 44, 45, 46, 47}));
  // Fallbacks: rows that 256 does not divide.
  EXPECT_EQ(synth_tensor_type("q4_k", "blk.0.attn_q.weight", {128, 128}, 2, 0), DType::Q5_0);
  EXPECT_EQ(synth_tensor_type("q6_k", "blk.0.attn_q.weight", {128, 128}, 2, 0), DType::Q8_0);
  EXPECT_EQ(synth_tensor_type("q3_k", "blk.0.attn_q.weight", {128, 128}, 2, 0), DType::Q4_0);
  EXPECT_EQ(synth_tensor_type("q2_k", "blk.0.attn_q.weight", {256, 128}, 2, 0), DType::Q2_K);
  EXPECT_EQ(synth_tensor_type("iq4_xs", "blk.0.attn_q.weight", {128, 128}, 2, 0), DType::IQ4_NL);
  EXPECT_EQ(synth_tensor_type("iq4_xs", "blk.0.attn_q.weight", {256, 128}, 2, 0), DType::IQ4_XS);
  EXPECT_EQ(synth_tensor_type("iq4_nl", "blk.0.attn_q.weight", {48, 128}, 2, 0), DType::F16);
  EXPECT_EQ(synth_tensor_type("q4_k_m", "output.weight", {128, 512}, 2, 0), DType::Q8_0);
  EXPECT_EQ(synth_tensor_type("q8_0", "blk.0.attn_q.weight", {48, 128}, 2, 0), DType::F16);
  EXPECT_EQ(synth_tensor_type("q4_k_m", "blk.0.ffn_gate_inp.weight", {256, 8}, 2, 8), DType::F32);
  EXPECT_EQ(synth_tensor_type("q4_k_m", "blk.0.attn_norm.weight", {256}, 2, 8), DType::F32);
}

// The tiny qwen35moe preset is the golden qwen35moe's config (manifest.json models.qwen35moe),
// and the golden was written for llama.cpp (its logits are llama.cpp's): same metadata keys in
// the same order with the same value types and values (but name and description), and the same
// tensors in the same order with the same shapes and types (F16 file: norms, biases, ssm_a,
// ssm_conv1d and routers F32, every other matrix F16).
// Metadata keys (order, types, values but name and description) and tensors (order, names,
// shapes, types) of `synth` equal `golden`'s.
void expect_same_layout(const GgufFile& golden, const GgufFile& synth) {
  std::vector<std::string> gk, sk;
  for (const auto& [k, v] : golden.metadata()) gk.push_back(k);
  for (const auto& [k, v] : synth.metadata()) sk.push_back(k);
  EXPECT_EQ(sk, gk);
  for (const auto& [k, v] : golden.metadata()) {
    if (k == "general.name" || k == "general.description" || !synth.has(k)) continue;
    const GgufValue& mine = *synth.find(k);
    EXPECT_EQ(gguf_type_name(mine.type), gguf_type_name(v.type)) << k;
    EXPECT_EQ(mine.to_string(1 << 20), v.to_string(1 << 20)) << k;
  }
  ASSERT_EQ(synth.tensors().size(), golden.tensors().size());
  for (size_t i = 0; i < golden.tensors().size(); ++i) {
    const TensorView &g = golden.tensors()[i], &t = synth.tensors()[i];
    EXPECT_EQ(t.name, g.name) << "tensor " << i;
    EXPECT_EQ(std::vector<int64_t>(t.ne, t.ne + t.n_dims), std::vector<int64_t>(g.ne, g.ne + g.n_dims)) << g.name;
    EXPECT_EQ(dtype_name(t.type), dtype_name(g.type)) << g.name;
  }
}

TEST(Synth, Qwen35MoeTinyMatchesGoldenLayout) {
  SLUICE_REQUIRE_SHARED();
  const GgufFile golden(test::shared_dir() + "/golden/qwen35moe/model.gguf");
  const GgufFile synth(write_synth({"qwen35moe", "tiny"}, "f16"));
  expect_same_layout(golden, synth);
  // Value ranges that keep the recurrence sane: decays −exp(A_log) in [−16, −1], a small dt bias,
  // conv taps N(0, 1/K).
  const TensorView& a = synth.tensor("blk.0.ssm_a");
  for (int64_t i = 0; i < a.ne[0]; ++i) {
    const float v = static_cast<const float*>(a.data)[i];
    EXPECT_TRUE(v >= -16.0f && v <= -1.0f) << v;
  }
  const TensorView& dt = synth.tensor("blk.0.ssm_dt.bias");
  for (int64_t i = 0; i < dt.ne[0]; ++i) EXPECT_LT(std::fabs(static_cast<const float*>(dt.data)[i]), 0.6f);
  const TensorView& conv = synth.tensor("blk.1.ssm_conv1d.weight");
  double ss = 0;
  for (int64_t i = 0; i < conv.ne[0] * conv.ne[1]; ++i)
    ss += double(static_cast<const float*>(conv.data)[i]) * static_cast<const float*>(conv.data)[i];
  EXPECT_NEAR(ss / double(conv.ne[0] * conv.ne[1]), 1.0 / 4, 0.05) << "conv taps: variance 1/K";
}

// --layers on the hybrid keeps the attention layer every full_attention_interval layers
// (12 layers: 3, 7, 11), and the 40-layer preset's q4_k_m types follow llama.cpp's counters:
// attn_v's use_more_bits index is the attention-layer index (0-9) over n_layer 40, attn_qkv
// Q5_K, ssm_conv1d F32.
TEST(Synth, Qwen35MoeLayersAndQ4KMTypes) {
  SLUICE_REQUIRE_SHARED();
  SynthOptions o;
  o.arch = "qwen35moe", o.preset = "tiny", o.type = "q4_k_m", o.layers = 12, o.threads = 2;
  o.tokenizer = tokenizer_path();
  const std::string path = (tmp_dir() / "qwen35moe-tiny-12l.gguf").string();
  const SynthResult r = synth_write(o, path);
  EXPECT_EQ(r.shape.n_layer, 12);
  auto m = Model::load(path);
  EXPECT_EQ(m->hparams().n_layer, 12);
  EXPECT_EQ(m->file().get_u32("qwen35moe.block_count"), 12u);
  std::vector<int> attn, linear;
  for (int l = 0; l < 12; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (m->file().find_tensor(p + "attn_q.weight")) attn.push_back(l);
    if (m->file().find_tensor(p + "attn_qkv.weight")) linear.push_back(l);
  }
  EXPECT_EQ(attn, (std::vector<int>{3, 7, 11}));
  EXPECT_EQ(linear, (std::vector<int>{0, 1, 2, 4, 5, 6, 8, 9, 10}));
  EXPECT_EQ(m->file().tensor("blk.1.ssm_conv1d.weight").type, DType::F32);
  const std::vector<float> l = prompt_logits(*m, kPrompt);
  for (float x : l) ASSERT_TRUE(std::isfinite(x));

  std::vector<int> q6;
  for (int l = 3; l < 40; l += 4)
    if (synth_tensor_type("q4_k_m", "blk." + std::to_string(l) + ".attn_v.weight", {2048, 512}, 40, 256, 4) ==
        DType::Q6_K)
      q6.push_back(l);
  EXPECT_EQ(q6, (std::vector<int>{3, 7, 11, 15, 19, 31}));  // attention-layer indices 0-4 and 7
  EXPECT_EQ(synth_tensor_type("q4_k_m", "blk.0.attn_qkv.weight", {2048, 8192}, 40, 256, 4), DType::Q5_K);
  EXPECT_EQ(synth_tensor_type("q4_k_m", "blk.0.ssm_conv1d.weight", {4, 8192}, 40, 256, 4), DType::F32);
  EXPECT_EQ(synth_tensor_type("f16", "blk.0.ssm_conv1d.weight", {4, 8192}, 40, 256, 4), DType::F32);
  EXPECT_EQ(synth_tensor_type("q4_k_m", "blk.0.ssm_alpha.weight", {2048, 32}, 40, 256, 4), DType::Q4_K);
  EXPECT_EQ(synth_tensor_type("q4_k_m", "blk.0.ssm_out.weight", {4096, 2048}, 40, 256, 4), DType::Q4_K);
  EXPECT_EQ(synth_tensor_type("q4_k_m", "blk.0.ffn_down_shexp.weight", {512, 2048}, 40, 256, 4), DType::Q6_K);
  // The full-size shape as written.
  SynthOptions big;
  big.preset = "qwen3.5-35b-a3b";
  const SynthShape s = synth_resolve_shape(big, 512);
  EXPECT_EQ(s.arch, "qwen35moe");
  EXPECT_EQ(s.n_layer, 40);
  EXPECT_EQ(s.ssm_conv_dim(), 2 * 16 * 128 + 4096);
  EXPECT_EQ(s.ssm_d_inner, s.ssm_dt_rank * 128);
}

// The tiny qwen3next preset has the layout of the repo's qwen3next golden (tests/data/golden,
// made with llama.cpp; scripts/golden/derive_hybrid_models.py derives it from the qwen35moe
// golden): the qwen35moe layout without rope.dimension_sections and with ssm_ba [n_embd, 2·H_v]
// where ssm_beta and ssm_alpha were.
TEST(Synth, Qwen3NextTinyMatchesGoldenLayout) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = std::string(SLUICE_SOURCE_DIR) + "/tests/data/golden/qwen3next/model.gguf";
  if (!fs::exists(path))
    GTEST_SKIP() << "\n*** " << path << " not found (*.gguf is git-ignored; remake it with "
                 << "scripts/golden/derive_hybrid_models.py): qwen3next layout check SKIPPED ***\n";
  const GgufFile golden(path);
  const GgufFile synth(write_synth({"qwen3next", "tiny"}, "f16"));
  expect_same_layout(golden, synth);
  EXPECT_FALSE(synth.has("qwen3next.rope.dimension_sections"));
  EXPECT_EQ(synth.find_tensor("blk.0.ssm_beta.weight"), nullptr);
  const TensorView& ba = synth.tensor("blk.0.ssm_ba.weight");
  EXPECT_EQ(ba.ne[1], 2 * 4);  // 2·H_v
}

// qwen3next --layers 12 at q4_k_m: attention at 3, 7, 11, the file loads and runs; ssm_ba gets
// llama-quantize's default (Q4_K; Q5_0 on the tiny n_embd 128, which 256 does not divide), and
// the 48-layer preset's attn_v Q6_K layers follow the attention-layer counter (indices 0-5, 8, 11
// of 12 over n_layer 48).
TEST(Synth, Qwen3NextLayersAndQ4KMTypes) {
  SLUICE_REQUIRE_SHARED();
  SynthOptions o;
  o.arch = "qwen3next", o.preset = "tiny", o.type = "q4_k_m", o.layers = 12, o.threads = 2;
  o.tokenizer = tokenizer_path();
  const std::string path = (tmp_dir() / "qwen3next-tiny-12l.gguf").string();
  const SynthResult r = synth_write(o, path);
  EXPECT_EQ(r.shape.n_layer, 12);
  auto m = Model::load(path);
  EXPECT_EQ(m->hparams().arch, "qwen3next");
  EXPECT_EQ(m->hparams().n_layer, 12);
  EXPECT_EQ(m->file().get_u32("qwen3next.block_count"), 12u);
  std::vector<int> attn, linear;
  for (int l = 0; l < 12; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (m->file().find_tensor(p + "attn_q.weight")) attn.push_back(l);
    if (m->file().find_tensor(p + "ssm_ba.weight")) linear.push_back(l);
    EXPECT_EQ(m->file().find_tensor(p + "ssm_alpha.weight"), nullptr) << l;
  }
  EXPECT_EQ(attn, (std::vector<int>{3, 7, 11}));
  EXPECT_EQ(linear, (std::vector<int>{0, 1, 2, 4, 5, 6, 8, 9, 10}));
  EXPECT_EQ(m->file().tensor("blk.1.ssm_ba.weight").type, DType::Q5_0);
  EXPECT_EQ(m->file().tensor("blk.1.ssm_conv1d.weight").type, DType::F32);
  EXPECT_EQ(m->file().tensor("blk.1.attn_qkv.weight").type, DType::Q5_1);  // Q5_K, 128 not a multiple of 256
  const std::vector<float> l = prompt_logits(*m, kPrompt);
  for (float x : l) ASSERT_TRUE(std::isfinite(x));

  std::vector<int> q6;
  for (int l = 3; l < 48; l += 4)
    if (synth_tensor_type("q4_k_m", "blk." + std::to_string(l) + ".attn_v.weight", {2048, 512}, 48, 512, 4) ==
        DType::Q6_K)
      q6.push_back(l);
  EXPECT_EQ(q6, (std::vector<int>{3, 7, 11, 15, 19, 23, 35, 47}));
  EXPECT_EQ(synth_tensor_type("q4_k_m", "blk.0.ssm_ba.weight", {2048, 64}, 48, 512, 4), DType::Q4_K);
  EXPECT_EQ(synth_tensor_type("q4_k_m", "blk.0.attn_qkv.weight", {2048, 8192}, 48, 512, 4), DType::Q5_K);
  EXPECT_EQ(synth_tensor_type("q4_k_m", "blk.3.attn_k.weight", {2048, 512}, 48, 512, 4), DType::Q4_K);
  // The full-size shape as written.
  SynthOptions big;
  big.preset = "qwen3-next-80b-a3b";
  const SynthShape s = synth_resolve_shape(big, 512);
  EXPECT_EQ(s.arch, "qwen3next");
  EXPECT_EQ(s.gguf_arch, "qwen3next");
  EXPECT_TRUE(s.rope_sections.empty());
  EXPECT_EQ(s.n_layer, 48);
  EXPECT_EQ(s.n_expert, 512);
  EXPECT_EQ(s.n_expert_used, 10);
  EXPECT_EQ(s.n_rot, 64);
  EXPECT_EQ(s.ssm_conv_dim(), 2 * 16 * 128 + 4096);
  EXPECT_EQ(s.ssm_d_inner, s.ssm_dt_rank * s.ssm_d_state);  // llama.cpp's qwen3next: D_v = ssm.state_size
  big.layers = 12;
  EXPECT_EQ(synth_resolve_shape(big, 512).n_layer, 12);
}

// The tiny KDA hybrids are their goldens' shapes (tests/data/golden/{kimi-linear,bailingmoe3},
// written by scripts/golden/make_kimi_linear.py / make_bailingmoe3.py in the layout of llama.cpp's
// converters, and run by llama.cpp for their logits): the same {arch}.* keys in the same order
// with the same types and values, and the same tensors in the same order with the same shapes
// and types. (The goldens' python writer adds no general.file_type etc., so only the
// architecture's keys are compared.) Then the value ranges that keep the recurrence sane.
void expect_same_arch_layout(const GgufFile& golden, const GgufFile& synth, const std::string& arch) {
  std::vector<std::string> gk, sk;
  for (const auto& [k, v] : golden.metadata())
    if (k.rfind(arch + ".", 0) == 0) gk.push_back(k);
  for (const auto& [k, v] : synth.metadata())
    if (k.rfind(arch + ".", 0) == 0) sk.push_back(k);
  EXPECT_EQ(sk, gk);
  for (const auto& k : gk) {
    if (!synth.has(k)) continue;
    const GgufValue &mine = *synth.find(k), &v = *golden.find(k);
    EXPECT_EQ(gguf_type_name(mine.type), gguf_type_name(v.type)) << k;
    EXPECT_EQ(mine.to_string(1 << 20), v.to_string(1 << 20)) << k;
  }
  ASSERT_EQ(synth.tensors().size(), golden.tensors().size());
  for (size_t i = 0; i < golden.tensors().size(); ++i) {
    const TensorView &g = golden.tensors()[i], &t = synth.tensors()[i];
    EXPECT_EQ(t.name, g.name) << "tensor " << i;
    EXPECT_EQ(std::vector<int64_t>(t.ne, t.ne + t.n_dims), std::vector<int64_t>(g.ne, g.ne + g.n_dims)) << g.name;
    EXPECT_EQ(dtype_name(t.type), dtype_name(g.type)) << g.name;
  }
}

// All values of an F32 tensor lie in [lo, hi].
void expect_f32_in(const GgufFile& f, const std::string& name, float lo, float hi) {
  const TensorView& t = f.tensor(name);
  ASSERT_EQ(t.type, DType::F32) << name;
  const int64_t n = t.ne[0] * t.n_rows();
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<const float*>(t.data)[i];
    EXPECT_TRUE(v >= lo && v <= hi) << name << "[" << i << "] = " << v;
  }
}

TEST(Synth, KdaHybridTiniesMatchGoldenLayout) {
  SLUICE_REQUIRE_SHARED();
  for (const char* arch : {"kimi-linear", "bailingmoe3"}) {
    SCOPED_TRACE(arch);
    const std::string path = std::string(SLUICE_SOURCE_DIR) + "/tests/data/golden/" + arch + "/model.gguf";
    if (!fs::exists(path)) GTEST_SKIP() << path << " not found: KDA layout check SKIPPED";
    const GgufFile golden(path);
    const GgufFile synth(write_synth({arch, "tiny"}, "f16"));
    expect_same_arch_layout(golden, synth, arch);
  }
  const GgufFile kimi(write_synth({"kimi-linear", "tiny"}, "f16"));
  expect_f32_in(kimi, "blk.0.ssm_a", -4.0f, -1.0f);         // −exp(A_log), A_log in [0, log 4]
  expect_f32_in(kimi, "blk.1.ssm_dt.bias", -4.6f, -2.25f);  // softplus⁻¹(0.01..0.1)
  const GgufFile ling(write_synth({"bailingmoe3", "tiny"}, "f16"));
  expect_f32_in(ling, "blk.0.ssm_a", 1.0f, 2.0f);  // exp(A_log), A_log in [0, log 2]
  expect_f32_in(ling, "blk.4.ssm_dt.bias", -4.0f, -2.0f);
  EXPECT_EQ(ling.get_f32("bailingmoe3.kda.gate_lower_bound"), -5.0f);
  // Conv taps N(0, 1/K), F32 in every output type (llama-quantize skips "ssm_conv1d").
  const TensorView& conv = ling.tensor("blk.2.ssm_conv1d_k.weight");
  double ss = 0;
  for (int64_t i = 0; i < conv.ne[0] * conv.n_rows(); ++i)
    ss += double(static_cast<const float*>(conv.data)[i]) * static_cast<const float*>(conv.data)[i];
  EXPECT_NEAR(ss / double(conv.ne[0] * conv.n_rows()), 1.0 / 4, 0.05);
  EXPECT_EQ(synth_tensor_type("q4_k_m", "blk.0.ssm_conv1d_q.weight", {4, 1, 4096, 1}, 27, 256), DType::F32);
}

// MLA layer indices of a shape.
std::vector<int> mla_layers(const SynthShape& s) {
  std::vector<int> v;
  for (int l = 0; l < s.n_layer; ++l)
    if (s.is_mla_layer(l)) v.push_back(l);
  return v;
}

// The full-size KDA presets: Kimi-Linear-48B-A3B and Ling 3 8B shapes as written (layer
// pattern, parameter counts: 48B / ~8B total), their q4_k_m types follow llama.cpp's counters
// (attn_v only in the KDA layers: index among them, over their count), and --layers 2 of
// ling3-8b (the full-width MLA with q_lora, 128 experts in 8 groups) writes, loads and runs.
TEST(Synth, KdaHybridFullSizePresets) {
  SLUICE_REQUIRE_SHARED();
  SynthOptions kimi;
  kimi.preset = "kimi-linear-48b-a3b";
  const SynthShape k = synth_resolve_shape(kimi, 512);
  EXPECT_EQ(k.gguf_arch, "kimi-linear");
  EXPECT_EQ(k.n_layer, 27);
  EXPECT_EQ(mla_layers(k), (std::vector<int>{3, 7, 11, 15, 19, 23, 26}));  // full_attn_layers [4, 8, ..., 24, 27]
  const int64_t kp = synth_param_count(k);
  std::printf("kimi-linear-48b-a3b: %.2fB parameters\n", kp / 1e9);
  EXPECT_GT(kp, 47'000'000'000);
  EXPECT_LT(kp, 50'000'000'000);
  SynthOptions ling;
  ling.preset = "ling3-8b";
  const SynthShape g = synth_resolve_shape(ling, 512);
  EXPECT_EQ(g.gguf_arch, "bailingmoe3");
  EXPECT_EQ(mla_layers(g), (std::vector<int>{3, 7, 11, 15, 19, 23}));
  const int64_t gp = synth_param_count(g);
  std::printf("ling3-8b: %.2fB parameters\n", gp / 1e9);
  EXPECT_GT(gp, 7'500'000'000);  // llama.cpp names this shape LLM_TYPE_7_9B_A1_3B
  EXPECT_LT(gp, 8'300'000'000);
  ling.layers = 26;  // 24 + 2: the two layers after the last group of 4 are MLA (mlx-lm _is_kda_layer)
  EXPECT_EQ(mla_layers(synth_resolve_shape(ling, 512)), (std::vector<int>{3, 7, 11, 15, 19, 23, 24, 25}));
  kimi.layers = 6;  // the last layer stays MLA
  EXPECT_EQ(mla_layers(synth_resolve_shape(kimi, 512)), (std::vector<int>{3, 5}));

  // q4_k_m over the 27-layer plan: the 20 KDA layers' attn_v get Q6_K where use_more_bits(i, 20)
  // picks (i the KDA index: i < 2, i >= 17, and (i - 2) % 3 == 2); conv taps and ssm_a F32.
  std::vector<int> q6;
  for (const auto& t : synth_plan::plan_tensors(k, "q4_k_m", 0.0f, 512)) {
    if (t.name.find("ssm_conv1d") != std::string::npos || t.name.find(".ssm_a") != std::string::npos) {
      EXPECT_EQ(t.type, DType::F32) << t.name;
    }
    if (t.name.find(".attn_v.weight") != std::string::npos && t.type == DType::Q6_K)
      q6.push_back(std::stoi(t.name.substr(4)));
  }
  // KDA layers 0-2, 4-6, ..., 24, 25; indices 0, 1, 4, 7, 10, 13, 16, 17, 18, 19 are layers:
  EXPECT_EQ(q6, (std::vector<int>{0, 1, 5, 9, 13, 17, 21, 22, 24, 25}));

  SynthOptions o;
  o.preset = "ling3-8b", o.layers = 2, o.vocab = 512, o.type = "q4_0", o.fast = true, o.threads = 2;
  o.tokenizer = tokenizer_path();
  const std::string path = (tmp_dir() / "ling3-8b-2l.gguf").string();
  synth_write(o, path);
  auto m = Model::load(path);
  EXPECT_EQ(m->hparams().arch, "bailingmoe3");
  EXPECT_EQ(m->hparams().n_embd, 1536);
  EXPECT_EQ(m->hparams().moe.n_expert, 128);
  EXPECT_NE(m->file().find_tensor("blk.1.attn_q_a.weight"), nullptr);
  const std::vector<float> l = prompt_logits(*m, {1, 403, 407});
  double ss = 0;
  for (float x : l) {
    ASSERT_TRUE(std::isfinite(x));
    ss += double(x) * x;
  }
  EXPECT_GT(ss / l.size(), 0.25) << "degenerate logits";
}

// Fraction of each token's experts that the previous token also used, over MoE layers.
double expert_reuse(const Model& m, const std::vector<int32_t>& tokens) {
  auto cpu = make_backend("cpu-exact", 2);
  Session s(m, *cpu, KvCacheOptions{.n_ctx = 128});
  double reuse = 0;
  int count = 0;
  s.set_hook([&](std::string_view name, int, const float* d, int64_t rows, int64_t k) {
    if (name != "ffn_moe_topk") return;
    for (int64_t t = 1; t < rows; ++t) {
      std::set<float> prev(d + (t - 1) * k, d + t * k);
      int shared = 0;
      for (int64_t j = 0; j < k; ++j) shared += prev.count(d[t * k + j]);
      reuse += double(shared) / k, ++count;
    }
  });
  s.eval(tokens, true);
  return reuse / count;
}

// --routing-locality: with X = 1 consecutive tokens share far more experts than with X = 0
// (where reuse is near the chance level k/n_expert), and logits stay sane.
TEST(Synth, RoutingLocalityRaisesReuse) {
  SLUICE_REQUIRE_SHARED();
  auto plain = Model::load(write_synth({"qwen3moe", "tiny"}, "f16"));
  const std::string text =
      "Once upon a time, there was a little dog named Max who loved to run in the park with his friends. One day, "
      "Max saw a big red ball under a tree. He ran to the ball and played with it all day long.";
  const std::vector<int32_t> tokens = plain->tokenizer().encode(text, true);
  ASSERT_GT(tokens.size(), 40u);
  for (const Tiny& t : {Tiny{"qwen3moe", "tiny"}, Tiny{"mixtral", "tiny"}, Tiny{"deepseek2", "tiny"}}) {
    std::map<float, double> reuse;
    for (float x : {0.0f, 0.5f, 1.0f}) {
      auto m = Model::load(write_synth(t, "f16", 1, 2, x, 0, "-loc" + std::to_string(int(x * 10))));
      reuse[x] = expert_reuse(*m, tokens);
      std::printf("[ %s ] routing locality %.1f: expert reuse %.3f (chance %.3f)\n", tiny_name(t).c_str(), x, reuse[x],
                  double(m->hparams().moe.n_expert_used) / m->hparams().moe.n_expert);
      for (float l : prompt_logits(*m, kPrompt)) ASSERT_TRUE(std::isfinite(l));
    }
    // Chance is k/n_expert = 0.25 for all three. Seed 1 here: 0.235-0.247 at X = 0,
    // 0.271-0.288 at X = 0.5, 0.699-0.820 at X = 1.
    EXPECT_LT(reuse[0.0f], 0.4) << tiny_name(t);
    EXPECT_GE(reuse[0.5f], reuse[0.0f] - 0.02) << tiny_name(t);
    EXPECT_GT(reuse[1.0f], reuse[0.0f] + 0.3) << tiny_name(t);
  }
}

// Deep models keep routing spread over the experts, as a trained, load-balanced model does. Before
// the residual writers were depth-scaled (plan.cpp, gain_of), the layers' outputs piled up into a
// component every token shares and deep routers picked the same few experts for every token
// (48 qwen3-30b-a3b layers: 64-70% of the routing on 8 of 128 experts), which made any expert
// cache look perfect. Measured here, seed 1, 32 layers, 46 tokens: the busiest expert of each of
// the last 8 layers takes 8.1-11.5% of its layer's routing (mean 9.7%; uniform 6.25%); without
// the depth scaling 14.2-24.3% (mean 20.2%).
TEST(Synth, DeepRoutingStaysSpread) {
  SLUICE_REQUIRE_SHARED();
  SynthOptions o;
  o.arch = "qwen3moe", o.preset = "tiny", o.type = "f32", o.layers = 32, o.threads = 2;
  o.tokenizer = tokenizer_path();
  const std::string path = (tmp_dir() / "qwen3moe-tiny-32l.gguf").string();
  synth_write(o, path);
  auto m = Model::load(path);
  const std::vector<int32_t> tokens = m->tokenizer().encode(
      "Once upon a time, there was a little dog named Max who loved to run in the park with his friends. One day, "
      "Max saw a big red ball under a tree. He ran to the ball and played with it all day long.",
      true);
  const int64_t n_expert = m->hparams().moe.n_expert;
  std::vector<std::vector<int>> counts(32, std::vector<int>(n_expert, 0));
  auto cpu = make_backend("cpu-exact", 2);
  Session s(*m, *cpu, KvCacheOptions{.n_ctx = 128});
  s.set_hook([&](std::string_view name, int layer, const float* d, int64_t rows, int64_t k) {
    if (name != "ffn_moe_topk") return;
    for (int64_t i = 0; i < rows * k; ++i) counts.at(layer).at(static_cast<int64_t>(d[i]))++;
  });
  s.eval(tokens, true);
  const double uses = double(tokens.size()) * m->hparams().moe.n_expert_used;
  double mean_top = 0;
  for (int l = 24; l < 32; ++l) {
    const double top = *std::max_element(counts[l].begin(), counts[l].end()) / uses;
    std::printf("layer %d: busiest expert %.3f of the routing (uniform %.4f)\n", l, top, 1.0 / n_expert);
    EXPECT_LT(top, 0.14) << "layer " << l;
    mean_top += top / 8;
  }
  EXPECT_LT(mean_top, 0.125);
}

TEST(Synth, ClearErrors) {
  SLUICE_REQUIRE_SHARED();
  SynthOptions o;
  o.tokenizer = tokenizer_path();
  const std::string out = (tmp_dir() / "err.gguf").string();
  auto expect_error = [&](SynthOptions opt, const std::string& part) {
    try {
      synth_write(opt, out);
      ADD_FAILURE() << "no error, expected one containing '" << part << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
  };
  SynthOptions a = o;
  a.arch = "gpt5";
  expect_error(a, "unknown architecture 'gpt5'");
  a = o, a.arch = "llama", a.preset = "huge";
  expect_error(a, "unknown preset 'huge'");
  a = o, a.arch = "llama", a.type = "iq2_xxs";
  expect_error(a, "unknown type 'iq2_xxs'");
  a = o, a.arch = "olmoe", a.preset = "qwen3-30b-a3b";
  expect_error(a, "is a qwen3moe model");
  a = o, a.preset = "tiny";  // tiny exists for every arch
  expect_error(a, "pass --arch");
  a = o, a.arch = "llama", a.tokenizer = "/nonexistent/tok.gguf";
  expect_error(a, "tokenizer file '/nonexistent/tok.gguf' not found");
  a = o, a.arch = "llama", a.vocab = 100;
  expect_error(a, "more than the model's vocabulary");
  a = o, a.arch = "deepseek2", a.layers = 1;
  expect_error(a, "leaves no MoE layer");
  a = o, a.arch = "qwen35moe", a.layers = 3;
  expect_error(a, "leaves no attention layer");
  a = o, a.arch = "qwen3next", a.layers = 3;
  expect_error(a, "leaves no attention layer");
  a = o, a.arch = "bailingmoe3", a.layers = 3;  // tiny: MLA only at layer 3
  expect_error(a, "leaves no attention layer");
  a = o, a.arch = "kimi-linear", a.layers = 1;
  expect_error(a, "leaves no MoE layer");
  a = o, a.arch = "mixtral", a.routing_locality = 1.5f;
  expect_error(a, "outside 0..1");
  a = o, a.arch = "llama";
  try {
    synth_write(a, a.tokenizer);
    ADD_FAILURE() << "overwrote the tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is the tokenizer file"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(test::have_shared());
}

std::string python() {
  const std::string py = std::string(SLUICE_SOURCE_DIR) + "/.venv/bin/python";
  return fs::exists(py) ? py : "";
}

// The independent check: gguf-py reads every tiny preset back, and the script re-states
// llama.cpp's key types, required keys and tensor shapes. A negative control (a count stored
// as i32) must fail it.
TEST(Synth, GgufPyCheckOfLlamaCppRules) {
  SLUICE_REQUIRE_SHARED();
  if (python().empty())
    GTEST_SKIP() << "\n*** " << SLUICE_SOURCE_DIR << "/.venv not found (python -m venv .venv && .venv/bin/pip install "
                 << "gguf numpy): gguf-py check SKIPPED ***\n";
  std::string files;
  for (const Tiny& t : kTinies)
    for (const char* type : {"f16", "q4_k_m"}) files += " " + write_synth(t, type, 1, 2, 0.0f, 0, "-py");
  files += " " + write_synth({"mixtral", "tiny"}, "q4_0", 1, 2, 1.0f, 700, "-py");  // locality + padding
  const std::string script = std::string(SLUICE_SOURCE_DIR) + "/scripts/check_gguf_llamacpp.py";
  int status = 0;
  std::string out = test::run_command(python() + " " + script + files + " 2>&1", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;

  // Negative control: same model, block_count rewritten as i32 and one tensor dropped.
  GgufFile src(write_synth({"llama", "tiny"}, "f16", 1, 2, 0.0f, 0, "-py"));
  GgufWriter w;
  for (const auto& [k, v] : src.metadata())
    if (k == "llama.block_count")
      w.set_i32(k, 2);
    else
      w.set(k, v);
  for (const auto& t : src.tensors())
    if (t.name != "blk.1.ffn_up.weight")
      w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.nbytes);
  const std::string bad = (tmp_dir() / "bad.gguf").string();
  w.write(bad);
  out = test::run_command(python() + " " + script + " " + bad + " 2>&1", &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("llama.block_count: stored as INT32"), std::string::npos) << out;
}

// (f) The CLI end to end: synth (default tokenizer, found from the binary's location) + run.
TEST(Synth, CliEndToEnd) {
  SLUICE_REQUIRE_SHARED();
  const std::string cli = ::sluice::test::cli_path(), out = (tmp_dir() / "cli.gguf").string();
  int status = 0;
  std::string log = test::run_command(cli + " synth --arch qwen3moe --preset tiny --type q4_k_m --seed 3 -o " + out +
                                          " 2>&1",
                                      &status);
  ASSERT_EQ(status, 0) << log;
  EXPECT_NE(log.find("wrote " + out), std::string::npos) << log;
  EXPECT_NE(log.find("100.0%"), std::string::npos) << "no progress output: " << log;
  log = test::run_command(cli + " run -m " + out + " -p hi -n 8 --temp 0 2>&1", &status);
  EXPECT_EQ(status, 0) << log;
  log = test::run_command(cli + " inspect " + out + " 2>&1", &status);
  EXPECT_EQ(status, 0) << log;
  EXPECT_NE(log.find("blk.1.ffn_down_exps.weight"), std::string::npos) << log;
  EXPECT_NE(log.find("hyperparameters (qwen3moe)"), std::string::npos) << log;

  log = test::run_command(cli + " synth --list-presets 2>&1", &status);
  EXPECT_EQ(status, 0) << log;
  for (const auto& s : synth_presets()) EXPECT_NE(log.find(s.preset), std::string::npos) << s.preset;
  for (const char* bad : {"--arch nope -o x.gguf", "--arch llama --preset nope -o x.gguf",
                          "--arch llama --type q9 -o x.gguf", "--arch llama -o x.gguf --tokenizer /nonexistent.gguf"}) {
    log = test::run_command(cli + " synth " + bad + " 2>&1", &status);
    EXPECT_NE(status, 0) << bad;
    EXPECT_NE(log.find("error"), std::string::npos) << bad << ": " << log;
  }
}

}  // namespace
}  // namespace sluice::test_synth
