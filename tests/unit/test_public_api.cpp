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

TEST(PublicApi, MissingFileThrowsWithPath) {
  try {
    sluice::Engine::open("/nonexistent/model.gguf");
    FAIL() << "no exception";
  } catch (const std::exception& ex) {
    EXPECT_NE(std::string(ex.what()).find("/nonexistent/model.gguf"), std::string::npos) << ex.what();
  }
}

}  // namespace
