// tests/models/test_speculative: speculative decoding by prompt lookup (runtime/speculative.h).
// The drafter finds the latest earlier occurrence of the last n-gram; on the real SmolLM2 a
// task that repeats its input gives the same tokens as plain greedy decoding (and the same
// sampled tokens with the same seed) in far fewer forward steps; on a hybrid model (recurrent
// state, rollback through checkpoints and replay) greedy tokens equal plain ones too.
// Negative control: KV rows of rejected drafts left in the cache change the continuation, so
// the token comparison does see a missing rollback.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "test_util.h"

namespace sluice::test_speculative {
namespace {

TEST(Speculative, NgramDraftTakesTheLatestLongestMatch) {
  SpeculativeParams p;
  p.ngram_max = 3, p.ngram_min = 1;
  const std::vector<int32_t> h = {5, 1, 2, 3, 9, 1, 2, 4, 7, 1, 2};
  // Suffix [4? no] -> n=3 [7,1,2]: absent; n=2 [1,2]: latest earlier at index 5 -> 4 7 1 2.
  EXPECT_EQ(ngram_draft(h, p, 8), (std::vector<int32_t>{4, 7, 1, 2}));
  EXPECT_EQ(ngram_draft(h, p, 2), (std::vector<int32_t>{4, 7}));
  p.ngram_min = 3;
  EXPECT_TRUE(ngram_draft(h, p, 8).empty());
  const std::vector<int32_t> h2 = {8, 8, 8};
  p.ngram_min = 1;
  EXPECT_EQ(ngram_draft(h2, p, 4), (std::vector<int32_t>{8}));  // n=2 [8,8] at 0 -> [8]
  EXPECT_TRUE(ngram_draft(h2, p, 0).empty());
}

const char* kParagraph =
    "The old lighthouse stood at the edge of the cliff for more than a hundred years. Every night its keeper "
    "climbed the narrow stairs, lit the great lamp, and watched the ships pass safely through the dark water "
    "below. The villagers said the light had never failed, not even during the worst storms of winter.";

std::string rewrite_prompt() {
  return std::string("<|im_start|>user\nRewrite this paragraph, changing only the word \"old\" to \"ancient\":\n\n") +
         kParagraph + "<|im_end|>\n<|im_start|>assistant\n";
}

struct Outcome {
  GenerationStats st;
  SpeculativeStats spec;
};

Outcome plain(Session& s, const std::string& prompt, const GenerateParams& gp) {
  return {Generator(s).run(prompt, gp), {}};
}
Outcome lookup(Session& s, const std::string& prompt, const GenerateParams& gp) {
  Outcome r;
  NgramDrafter d{SpeculativeParams{}};
  r.st = run_speculative(s, prompt, gp, d, SpeculativeParams{}.draft_max, {}, &r.spec);
  return r;
}

// The real model, its cpu backend and a 512-position cache, for the tests on SmolLM2.
class SpeculativeSmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    path = test::find_smollm2_gguf();
    ASSERT_FALSE(path.empty()) << test::kSmolGgufRel << " not found: run scripts/setup";
    model = Model::load(path);
    be = make_backend("cpu", 2);
    kv.n_ctx = 512;
  }
  std::string path;
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> be;
  KvCacheOptions kv;
};

TEST_F(SpeculativeSmolLM2, SameTokensAsPlainDecoding) {
  Session s(*model, *be, kv);
  GenerateParams gp;
  gp.n_predict = 100;
  gp.sampler.temp = 0;
  const Outcome a = plain(s, rewrite_prompt(), gp), b = lookup(s, rewrite_prompt(), gp);
  EXPECT_EQ(a.st.tokens, b.st.tokens);
  EXPECT_EQ(a.st.stop, b.st.stop);
  EXPECT_GT(b.st.n_generated, 40);
  EXPECT_GT(b.spec.acceptance(), 0.5) << b.spec.accepted << " of " << b.spec.drafted;
  EXPECT_LT(b.spec.steps * 2, b.st.n_generated) << "prompt lookup should need under half the steps here";
  // Sampling: the same seed draws the same tokens (one RNG draw per position in both loops).
  gp.sampler.temp = 0.7f;
  gp.sampler.seed = 42;
  gp.n_predict = 60;
  const Outcome c = plain(s, rewrite_prompt(), gp), d = lookup(s, rewrite_prompt(), gp);
  EXPECT_EQ(c.st.tokens, d.st.tokens);
  // With max tokens inside a draft run, and a stop string, the two loops end alike.
  gp.sampler.temp = 0;
  gp.n_predict = 17;
  gp.stop = {"hundred"};
  const Outcome e = plain(s, rewrite_prompt(), gp), f = lookup(s, rewrite_prompt(), gp);
  EXPECT_EQ(e.st.tokens, f.st.tokens);
  EXPECT_EQ(e.st.stop, f.st.stop);
}

// Negative control: the comparison above sees stale rows. Rows of wrong drafts left in
// the cache (no rollback) change the greedy continuation of the same prompt.
TEST_F(SpeculativeSmolLM2, StaleDraftRowsChangeTheContinuation) {
  const Tokenizer& tok = model->tokenizer();
  const std::vector<int32_t> ids = tok.encode(rewrite_prompt(), true, true);
  auto greedy = [&](bool stale) {
    Session s(*model, *be, kv);
    auto l = s.eval(ids);
    std::vector<int32_t> out;
    for (int i = 0; i < 12; ++i) {
      const int32_t t = argmax(l);
      out.push_back(t);
      if (stale && i == 0) {
        std::vector<int32_t> wrong = tok.encode("<|im_end|>\n<|im_start|>user\nSay only: no.<|im_end|>", false, true);
        wrong.insert(wrong.begin(), t);
        l = s.eval(wrong, true);          // evaluated as drafts ...
        l = l.subspan(0, tok.n_vocab());  // ... first row used, the rest never rolled back
        continue;
      }
      const int32_t one[1] = {t};
      l = s.eval(one);
    }
    return out;
  };
  EXPECT_NE(greedy(false), greedy(true));
}

// A draft model: SmolLM2 drafting for itself agrees with itself on every draft (a token's
// logits are the same bits in any batch), so the output is plain greedy's in a few steps; a
// draft with another vocabulary is refused. ignore_eos: drafts past an end-of-turn token count
// as drafted and not kept, so where the reply ends among the steps (which moves with the ISA's
// float rounding in the norms and activations) would move the ratio; without it every draft
// lies inside the 40 tokens.
TEST_F(SpeculativeSmolLM2, DraftModelGivesPlainTokens) {
  auto draft = Model::load(path);
  Session s(*model, *be, kv);
  GenerateParams gp;
  gp.n_predict = 40;
  gp.sampler.temp = 0;
  gp.ignore_eos = true;
  const std::string prompt = "<|im_start|>user\nWrite one sentence about the sea.<|im_end|>\n<|im_start|>assistant\n";
  const Outcome a = plain(s, prompt, gp);
  ModelDrafter d(*model, *draft, *be, kv);
  Outcome b;
  b.st = run_speculative(s, prompt, gp, d, 6, {}, &b.spec);
  EXPECT_EQ(a.st.tokens, b.st.tokens);
  std::printf("[ self-draft ] %lld of %lld drafts kept\n", static_cast<long long>(b.spec.accepted),
              static_cast<long long>(b.spec.drafted));
  EXPECT_GT(b.spec.drafted, 20);
  EXPECT_EQ(b.spec.accepted, b.spec.drafted) << "a self-draft was rejected: a token's logits moved with its batch";
  // The drafter's cache follows the target across runs (a second prompt reuses nothing wrongly).
  const Outcome c = plain(s, rewrite_prompt(), gp);
  Outcome e;
  e.st = run_speculative(s, rewrite_prompt(), gp, d, 6, {}, &e.spec);
  EXPECT_EQ(c.st.tokens, e.st.tokens);
  SLUICE_REQUIRE_SHARED();
  auto other = Model::load(test::shared_dir() + "/models/stories260K.gguf");
  try {
    ModelDrafter bad(*model, *other, *be, kv);
    ADD_FAILURE() << "a draft with another vocabulary was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("same vocabulary"), std::string::npos) << err.what();
  }
}

TEST(Speculative, RollsBackRecurrentStateOnAHybridModel) {
  auto model = Model::load(std::string(SLUICE_SOURCE_DIR) + "/tests/data/golden/qwen35/model.gguf");
  auto be = make_backend("cpu", 2);
  KvCacheOptions kv;
  kv.n_ctx = 256;
  Session s(*model, *be, kv);
  GenerateParams gp;
  gp.n_predict = 48;
  gp.sampler.temp = 0;
  gp.ignore_eos = true;
  std::string prompt;
  for (int i = 0; i < 6; ++i) prompt += "one two three four five six ";
  const Outcome a = plain(s, prompt, gp), b = lookup(s, prompt, gp);
  EXPECT_EQ(a.st.tokens, b.st.tokens);
  EXPECT_GT(b.spec.drafted, 0);
  if (b.spec.accepted < b.spec.drafted) {
    EXPECT_GT(b.spec.replayed, 0) << "a rejected draft needs a replay here";
  }
}

}  // namespace
}  // namespace sluice::test_speculative
