// tests/unit/test_public_api: the installed header alone is enough to load a model and generate.
#include <gtest/gtest.h>

#include <algorithm>

#include "sluice/sluice.h"
#include "test_util.h"

namespace {

TEST(PublicApi, GreedyStoryMatchesLlamaCppContinuation) {
  SLUICE_REQUIRE_SHARED();
  auto e = sluice::Engine::open(sluice::test::shared_dir() + "/models/stories260K.gguf");
  EXPECT_EQ(e->architecture(), "llama");
  EXPECT_EQ(e->n_vocab(), 512);
  EXPECT_EQ(e->tokenize("Once upon a time"), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  sluice::GenerateOptions g;
  g.temp = 0;
  g.n_predict = 16;
  std::string streamed;
  sluice::GenerateStats st;
  std::string text = e->generate(
      "Once upon a time", g,
      [&](std::string_view p) {
        streamed += p;
        return true;
      },
      &st);
  EXPECT_EQ(text, streamed);
  EXPECT_EQ(st.n_generated, 16);
  // golden/stories260K/prompt1/greedy64.json (llama.cpp) starts with this text.
  EXPECT_EQ(text.rfind(", there was a little girl named Lily.", 0), 0u) << text;
}

// One loop behind both: `sluice run --temp 0` prints the prompt, then exactly generate()'s text.
TEST(PublicApi, GreedyGenerateEqualsCliRun) {
  SLUICE_REQUIRE_SHARED();
  const std::string model = sluice::test::shared_dir() + "/models/stories260K.gguf";
  int rc = 0;
  const std::string cli = sluice::test::run_command(std::string(::sluice::test::cli_path()) + " run -m " + model +
                                                        " -p 'Lily and Ben' -n 80 --temp 0 2>/dev/null",
                                                    &rc);
  ASSERT_EQ(rc, 0);
  auto e = sluice::Engine::open(model);
  sluice::GenerateOptions g;
  g.temp = 0;
  g.n_predict = 80;
  sluice::GenerateStats st;
  const std::string text = e->generate("Lily and Ben", g, {}, &st);
  EXPECT_EQ(cli, "Lily and Ben" + text + "\n");
  EXPECT_EQ(st.stop_reason, sluice::StopReason::max_tokens);
  EXPECT_STREQ(sluice::stop_reason_name(st.stop_reason), "max_tokens");
}

TEST(PublicApi, StopStringsAndStopReason) {
  SLUICE_REQUIRE_SHARED();
  auto e = sluice::Engine::open(sluice::test::shared_dir() + "/models/stories260K.gguf");
  sluice::GenerateOptions g;
  g.temp = 0;
  g.n_predict = 64;
  g.stop = {" named", "park"};
  sluice::GenerateStats st;
  std::string streamed;
  const std::string text = e->generate(
      "Once upon a time", g,
      [&](std::string_view p) {
        streamed += p;
        return true;
      },
      &st);
  EXPECT_EQ(text, ", there was a little girl");
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(st.stop_reason, sluice::StopReason::stop_string);
  // The callback asking to stop is a reason of its own.
  g.stop.clear();
  int calls = 0;
  e->generate(
      "Once upon a time", g, [&](std::string_view) { return ++calls < 2; }, &st);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(st.stop_reason, sluice::StopReason::callback);
}

// The penalties cmd_run has are reachable through GenerateOptions: greedy text repeats itself
// ("Lily was sad and didn't know what to do" twice in 64 tokens), a frequency penalty changes that.
TEST(PublicApi, PenaltiesReachTheSampler) {
  SLUICE_REQUIRE_SHARED();
  auto e = sluice::Engine::open(sluice::test::shared_dir() + "/models/stories260K.gguf");
  sluice::GenerateOptions g;
  g.temp = 0;
  g.n_predict = 64;
  const std::string plain = e->generate("Once upon a time", g);
  g.frequency_penalty = 1.0f;
  const std::string freq = e->generate("Once upon a time", g);
  g.frequency_penalty = 0;
  g.presence_penalty = 1.0f;
  g.penalty_last_n = 0;  // window off: no penalty at all
  EXPECT_NE(freq, plain);
  EXPECT_EQ(e->generate("Once upon a time", g), plain);
}

TEST(PublicApi, MissingFileThrowsWithPath) {
  try {
    sluice::Engine::open("/nonexistent/model.gguf");
    FAIL() << "no exception";
  } catch (const std::exception& ex) {
    EXPECT_NE(std::string(ex.what()).find("/nonexistent/model.gguf"), std::string::npos) << ex.what();
  }
}

// The options the CLI passes: a bad cache type or size fails naming it; speculative decoding by
// prompt lookup gives plain greedy's text; eval's last row is where greedy starts.
TEST(PublicApi, OptionsSpeculativeAndEval) {
  SLUICE_REQUIRE_SHARED();
  const std::string model = sluice::test::shared_dir() + "/models/stories260K.gguf";
  EXPECT_EQ(sluice::parse_byte_size("--x", "1.5K"), 1536u);
  EXPECT_THROW(sluice::parse_byte_size("--x", "4Q"), sluice::Error);
  sluice::KvOptions bad;
  bad.type_v = "q9";
  try {
    sluice::check_kv_options(bad);
    FAIL() << "no exception";
  } catch (const sluice::Error& ex) {
    EXPECT_NE(std::string(ex.what()).find("cache type 'q9' is not supported"), std::string::npos) << ex.what();
  }
  sluice::EngineOptions eo;
  eo.experts.cache = "lots";
  EXPECT_THROW(sluice::Engine::open(model, eo), sluice::Error);

  auto e = sluice::Engine::open(model, {.backend = "cpu", .n_threads = 1});
  EXPECT_EQ(e->info().n_layer, 5);
  EXPECT_EQ(e->expert_policy(), "resident");
  sluice::GenerateOptions g;
  g.temp = 0;
  g.n_predict = 48;
  const std::string plain = e->generate("Once upon a time, there was a little girl named Lily", g);
  g.speculative.mode = sluice::SpeculativeMode::lookup;
  sluice::GenerateStats st;
  EXPECT_EQ(e->generate("Once upon a time, there was a little girl named Lily", g, {}, &st), plain);
  EXPECT_GT(st.spec_steps, 0);
  EXPECT_LE(st.spec_accepted, st.spec_drafted);
  g.speculative.mode = sluice::SpeculativeMode::draft_model;  // no draft model loaded
  EXPECT_THROW(e->generate("Once", g), sluice::Error);

  e->set_context(64);
  EXPECT_EQ(e->context_size(), 64);
  const std::vector<int32_t> ids = e->tokenize("Once upon a time");
  const std::vector<float> all = e->eval(ids, /*all_logits=*/true);
  ASSERT_EQ(all.size(), ids.size() * static_cast<size_t>(e->n_vocab()));
  const int32_t first = sluice::greedy_token(all.data() + all.size() - e->n_vocab(), e->n_vocab());
  g.speculative.mode = sluice::SpeculativeMode::off;
  g.n_predict = 1;
  EXPECT_EQ(e->generate("Once upon a time", g), e->token_to_piece(first));
}

}  // namespace

// Context: three sequences stepped together (one prompt joins while two decode) give each
// the greedy text Engine::generate gives it alone; a fork continues from the shared prefix; a
// rewind re-decodes; bad entries are refused before anything is evaluated.
namespace ctx {

int32_t greedy(const std::vector<float>& l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

TEST(PublicApiContext, SequencesSteppedTogetherMatchGenerateAlone) {
  SLUICE_REQUIRE_SHARED();
  auto e = sluice::Engine::open(sluice::test::shared_dir() + "/models/stories260K.gguf", {.backend = "ref"});
  const std::vector<std::string> prompts{"Once upon a time", "Lily and Ben went to the park", "The dog"};
  const int n_gen = 12;
  auto c = sluice::Context::create(*e, {.n_ctx = 128});
  std::vector<int32_t> seq;
  std::vector<std::vector<int32_t>> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) seq.push_back(c->new_sequence());
  for (int step = 0; step < n_gen + 2; ++step) {
    std::vector<sluice::Context::Input> in;
    std::vector<size_t> who;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const int start = i == 2 ? 2 : 0;  // the third prompt joins at step 2
      if (step < start || static_cast<int>(out[i].size()) >= n_gen) continue;
      in.push_back({seq[i], step == start ? e->tokenize(prompts[i]) : std::vector<int32_t>{out[i].back()}, true});
      who.push_back(i);
    }
    if (in.empty()) break;
    const auto logits = c->decode(in);
    ASSERT_EQ(logits.size(), in.size());
    for (size_t k = 0; k < who.size(); ++k) out[who[k]].push_back(greedy(logits[k]));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    sluice::GenerateOptions g;
    g.temp = 0;
    g.n_predict = n_gen;
    g.ignore_eos = true;
    // (Whole-sequence detokenization: SentencePiece drops the first piece's leading space.)
    auto ids = e->tokenize(prompts[i]);
    const std::string prefix = e->detokenize(ids);
    ids.insert(ids.end(), out[i].begin(), out[i].end());
    EXPECT_EQ(e->detokenize(ids), prefix + e->generate(prompts[i], g)) << prompts[i];
  }
  EXPECT_GT(c->memory_used(), 0u);
}

TEST(PublicApiContext, ForkRewindAndErrors) {
  SLUICE_REQUIRE_SHARED();
  auto e = sluice::Engine::open(sluice::test::shared_dir() + "/models/stories260K.gguf", {.backend = "ref"});
  auto c = sluice::Context::create(*e, {.n_ctx = 32});
  const int32_t a = c->new_sequence();
  const auto prompt = e->tokenize("Once upon a time");
  const auto after_prompt = c->decode({{a, prompt, true}});
  ASSERT_EQ(after_prompt.size(), 1u);
  const int32_t b = c->fork(a);
  EXPECT_EQ(c->length(b), static_cast<int64_t>(prompt.size()));
  // The fork and the original, fed the same token, give the same logits; a fresh sequence
  // fed prompt + token in one entry gives them too.
  const int32_t tok = greedy(after_prompt[0]);
  const auto two = c->decode({{a, {tok}, true}, {b, {tok}, true}});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0], two[1]);
  const int32_t fresh = c->new_sequence();
  auto whole = prompt;
  whole.push_back(tok);
  EXPECT_EQ(c->decode({{fresh, whole, true}})[0], two[0]);
  // Rewind b to the prompt: the same token again gives the same logits.
  EXPECT_EQ(c->rewind(b, static_cast<int64_t>(prompt.size())), static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(c->decode({{b, {tok}, true}})[0], two[0]);
  // Errors, before anything runs: the lengths stay.
  const int64_t len_a = c->length(a);
  EXPECT_THROW(c->decode({{a, {1}, true}, {b + 100, {1}, true}}), std::runtime_error);
  EXPECT_THROW(c->decode({{a, {static_cast<int32_t>(e->n_vocab())}, true}}), std::runtime_error);
  EXPECT_THROW(c->decode({{a, std::vector<int32_t>(40, 1), true}}), std::runtime_error);  // context of 32
  EXPECT_THROW(c->decode({{a, {}, true}}), std::runtime_error);
  EXPECT_EQ(c->length(a), len_a);
  c->free(a);
  EXPECT_THROW(c->length(a), std::runtime_error);
}

// A hybrid model (qwen35moe golden: recurrent Gated DeltaNet layers): a rewind lands on the
// latest checkpoint, and a prefix resumed from one continues exactly as it did (a prompt
// cache's reuse); without one, the sequence restarts at 0.
TEST(PublicApiContext, HybridModelResumesFromACheckpoint) {
  SLUICE_REQUIRE_SHARED();
  auto e = sluice::Engine::open(sluice::test::shared_dir() + "/golden/qwen35moe/model.gguf", {.backend = "ref"});
  auto c = sluice::Context::create(*e, {.n_ctx = 64});
  const int32_t a = c->new_sequence();
  const std::vector<int32_t> prefix = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
  c->decode({{a, prefix, false}});
  c->checkpoint(a);
  const std::vector<int32_t> rest = {400, 428, 395, 392};
  const auto first = c->decode({{a, rest, true}});
  EXPECT_EQ(c->rewind(a, static_cast<int64_t>(prefix.size()) + 2), static_cast<int64_t>(prefix.size()))
      << "a recurrent state rewinds to its checkpoint, not to any position";
  EXPECT_EQ(c->decode({{a, rest, true}}), first);
  const int32_t b = c->new_sequence();
  c->decode({{b, prefix, false}});
  EXPECT_EQ(c->rewind(b, 5), 0) << "no checkpoint: back to the zero state";
}

TEST(PublicApiContext, MemoryBudgetIsEnforced) {
  SLUICE_REQUIRE_SHARED();
  auto e = sluice::Engine::open(sluice::test::shared_dir() + "/models/stories260K.gguf", {.backend = "ref"});
  auto probe = sluice::Context::create(*e, {.n_ctx = 512});
  probe->decode({{probe->new_sequence(), {1, 403}, false}});
  const size_t one = probe->memory_used();  // one step of KV rows for one sequence
  auto c = sluice::Context::create(*e, {.n_ctx = 512, .memory_budget = one});
  EXPECT_EQ(c->memory_budget(), one);
  const int32_t a = c->new_sequence(), b = c->new_sequence();
  EXPECT_NO_THROW(c->decode({{a, {1, 403}, false}}));
  EXPECT_THROW(c->decode({{b, {1, 403}, false}}), std::runtime_error);  // a second sequence's rows do not fit
  c->free(a);
  EXPECT_NO_THROW(c->decode({{b, {1, 403}, false}}));
}

}  // namespace ctx
