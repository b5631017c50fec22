// tests/unit/test_public_api: the installed header alone is enough to load a model and generate.
#include <gtest/gtest.h>

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
  std::string text = e->generate("Once upon a time", g, [&](std::string_view p) { streamed += p; return true; }, &st);
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
  const std::string cli = sluice::test::run_command(
      std::string(SLUICE_CLI_PATH) + " run -m " + model + " -p 'Lily and Ben' -n 80 --temp 0 2>/dev/null", &rc);
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
  const std::string text = e->generate("Once upon a time", g, [&](std::string_view p) { streamed += p; return true; }, &st);
  EXPECT_EQ(text, ", there was a little girl");
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(st.stop_reason, sluice::StopReason::stop_string);
  // The callback asking to stop is a reason of its own.
  g.stop.clear();
  int calls = 0;
  e->generate("Once upon a time", g, [&](std::string_view) { return ++calls < 2; }, &st);
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

}  // namespace
