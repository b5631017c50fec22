// tests/models/test_cli: the `sluice` binary end to end — run prints a story, eval prints the
// golden's JSON and logits, inspect lists tensors, bad input gives a clear error and exit 1.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace sluice::test_cli {
namespace {

const std::string kCli = ::sluice::test::cli_path();

TEST(Cli, RunPrintsAStory) {
  SLUICE_REQUIRE_SHARED();
  int rc = 0;
  std::string out = test::run_command(kCli + " run -m " + test::shared_dir() +
                                          "/models/stories260K.gguf -p 'Once upon a time' -n 64 --temp 0 2>/dev/null",
                                      &rc);
  ASSERT_EQ(rc, 0);
  // Greedy from this prompt is llama.cpp's continuation in golden/stories260K/prompt1.
  EXPECT_EQ(out.rfind("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
                      0),
            0u)
      << out;
}

// --stop (repeatable): the text ends right before the first stop string reached, the stop
// reason is on stderr, and the other stop strings do not interfere.
TEST(Cli, RunStopsAtStopString) {
  SLUICE_REQUIRE_SHARED();
  int rc = 0;
  const std::string err = ::testing::TempDir() + "sluice_cli_stop.err";
  std::string out = test::run_command(kCli + " run -m " + test::shared_dir() +
                                          "/models/stories260K.gguf -p 'Once upon a time' -n 64 --temp 0 --stop 'zebra'"
                                          " --stop ' She lo' 2>" +
                                          err,
                                      &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(out, "Once upon a time, there was a little girl named Lily.\n");
  EXPECT_NE(test::read_text_file(err).find("stop: stop_string"), std::string::npos) << test::read_text_file(err);
  out = test::run_command(kCli + " run -m " + test::shared_dir() +
                              "/models/stories260K.gguf -p 'Once upon a time' -n 5 --temp 0 2>" + err,
                          &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(out, "Once upon a time, there was a little\n");
  EXPECT_NE(test::read_text_file(err).find("stop: max_tokens"), std::string::npos) << test::read_text_file(err);
}

TEST(Cli, RunWithSamplingIsReproducible) {
  SLUICE_REQUIRE_SHARED();
  int rc1 = 0, rc2 = 0, rc3 = 0;
  const std::string base = kCli + " run -m " + test::shared_dir() +
                           "/models/stories260K.gguf -p 'Lily' -n 48 --temp 0.9 --top-k 40 --top-p 0.9";
  std::string a = test::run_command(base + " --seed 7 2>/dev/null", &rc1);
  std::string b = test::run_command(base + " --seed 7 2>/dev/null", &rc2);
  std::string c = test::run_command(base + " --seed 8 2>/dev/null", &rc3);
  ASSERT_EQ(rc1, 0);
  EXPECT_EQ(a, b) << "same seed, different text";
  EXPECT_NE(a, c) << "different seeds gave the same 48 tokens";
}

TEST(Cli, EvalMatchesGoldenGreedyAndLogits) {
  SLUICE_REQUIRE_SHARED();
  const std::string g = test::shared_dir() + "/golden/llama_dense";
  auto input = nlohmann::json::parse(test::read_text_file(g + "/input.json"));
  auto greedy = nlohmann::json::parse(test::read_text_file(g + "/greedy32.json"));
  std::string ids;
  for (int t : input["tokens"]) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const std::string logits = test::scratch_dir() / "sluice_cli_eval_logits.bin";
  int rc = 0;
  std::string out = test::run_command(kCli + " eval -m " + g + "/model.gguf --tokens " + ids +
                                          " --greedy 32 --logits " + logits,
                                      &rc);
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["prompt_tokens"], input["tokens"]);
  EXPECT_EQ(j["generated"], greedy["generated"]);
  EXPECT_EQ(j["text_hex"], greedy["text_hex"]);
  auto got = test::read_f32_file(logits), want = test::read_f32_file(g + "/logits.f32.bin");
  ASSERT_EQ(got.size(), want.size());
  double mx = 0;
  for (size_t i = 0; i < got.size(); ++i) mx = std::max(mx, std::fabs(static_cast<double>(got[i]) - want[i]));
  EXPECT_LE(mx, 0.03);  // README tolerance for F16 synthetic models
  std::filesystem::remove(logits);
}

TEST(Cli, InspectListsTensorsAndHparams) {
  SLUICE_REQUIRE_SHARED();
  int rc = 0;
  std::string out = test::run_command(kCli + " inspect " + test::shared_dir() + "/golden/qwen3_dense/model.gguf", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_NE(out.find("blk.0.attn_q_norm.weight"), std::string::npos);
  EXPECT_NE(out.find("qwen3"), std::string::npos);
  EXPECT_NE(out.find("n_head_kv 2"), std::string::npos);
  EXPECT_NE(out.find("total: 36 tensors"), std::string::npos);
}

TEST(Cli, BadFileGivesClearError) {
  const std::string bad = test::scratch_dir() / "sluice_cli_bad.gguf";
  {
    std::ofstream f(bad, std::ios::binary);
    f << "GGUF\x03";  // truncated header
  }
  int rc = 0;
  std::string out = test::run_command(kCli + " run -m " + bad + " -n 4 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("sluice: error:"), std::string::npos) << out;
  EXPECT_NE(out.find(bad), std::string::npos) << "the error should name the file: " << out;
  std::filesystem::remove(bad);
}

TEST(Cli, UnknownBackendIsRejected) {
  SLUICE_REQUIRE_SHARED();
  int rc = 0;
  std::string out = test::run_command(kCli + " run -m " + test::shared_dir() +
                                          "/models/stories260K.gguf --backend gpu9 -n 1 2>&1",
                                      &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("gpu9"), std::string::npos) << out;
}

// Out-of-range options fail before the model loads, naming the option and the range.
TEST(Cli, BadOptionValuesAreRejectedBeforeWork) {
  SLUICE_REQUIRE_SHARED();
  const std::string base = kCli + " run -m " + test::shared_dir() + "/models/stories260K.gguf ";
  const std::pair<const char*, const char*> cases[] = {
      {"--top-p 2", "--top-p: '2' is out of range (want 0..1)"},
      {"--temp -1", "--temp: '-1' is out of range (want >= 0)"},
      {"-n -5", "--n-predict: '-5' is out of range (want >= 1)"},
      {"--threads -3", "--threads: '-3' is out of range"},
      {"--min-p 1.5", "--min-p: '1.5' is out of range"},
      {"--ctx -1", "--ctx: '-1' is out of range"},
      {"-n 3x", "--n-predict: '3x' is not a number"},
  };
  for (const auto& [args, want] : cases) {
    int rc = 0;
    const std::string out = test::run_command(base + args + " 2>&1", &rc);
    EXPECT_NE(rc, 0) << args;
    EXPECT_NE(out.find(want), std::string::npos) << args << ": " << out;
    EXPECT_EQ(out.find("loaded"), std::string::npos) << args << ": the model was loaded before the check";
  }
  // Negative control: in-range values of the same options run.
  int rc = 0;
  test::run_command(base + "--top-p 1 --temp 0 -n 1 --threads 1 --min-p 0 2>&1", &rc);
  EXPECT_EQ(rc, 0);
}

TEST(Cli, UnknownCommandIsNamed) {
  int rc = 0;
  const std::string out = test::run_command(kCli + " rnu -m x 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("unknown command 'rnu'"), std::string::npos) << out;
  EXPECT_NE(out.find("run"), std::string::npos) << out;
}

// A prompt longer than the model's training context (stories260K: 2048) fails with a pointer
// to --ctx instead of silently growing the cache; with --ctx it runs, with a warning.
TEST(Cli, PromptBeyondTrainingContextNeedsCtx) {
  SLUICE_REQUIRE_SHARED();
  std::string prompt;
  for (int i = 0; i < 800; ++i) prompt += "the cat ";
  const std::string base = kCli + " run -m " + test::shared_dir() + "/models/stories260K.gguf -n 2 --temp 0 -p '" +
                           prompt + "'";
  int rc = 0;
  std::string out = test::run_command(base + " 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("more than the model's training context of 2048 (--ctx N allows"), std::string::npos) << out;
  out = test::run_command(base + " --ctx 3000 2>&1", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("warning: --ctx 3000 is beyond the model's training context of 2048"), std::string::npos) << out;
}

// The generated text ends its line before the stats line, also when stdout and stderr go to
// one pipe (stdout is then not flushed at each newline).
TEST(Cli, StatsLineStartsOnItsOwnLine) {
  SLUICE_REQUIRE_SHARED();
  int rc = 0;
  const std::string out = test::run_command(kCli + " run -m " + test::shared_dir() +
                                                "/models/stories260K.gguf -p 'Once upon a time' -n 5 --temp 0 2>&1",
                                            &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_NE(out.find("Once upon a time, there was a little\nprompt: "), std::string::npos) << out;
}

// run parses special tokens in the prompt (llama.cpp's default): SmolLM2 given its ChatML
// prompt answers as `eval` of the same token ids does, and stops at <|im_end|> (an
// end-of-generation token). --no-special tokenizes the markers as text: a different answer.
TEST(Cli, RunParsesSpecialTokensAndStopsAtEog) {
  const std::string model = test::find_smollm2_gguf();
  ASSERT_FALSE(model.empty()) << test::kSmolGgufRel << " not found: run scripts/setup";
  const std::string prompt = "'<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n'";
  const std::string base = kCli + " run -m " + model + " -n 30 --temp 0 -p \"$(printf " + prompt + ")\"";
  int rc = 0;
  std::string out = test::run_command(base + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("<|im_start|>assistant\nThe capital of France is Paris.\nprompt: "), std::string::npos) << out;
  EXPECT_NE(out.find("stop: eos"), std::string::npos) << out;
  out = test::run_command(base + " --no-special 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("The capital of France is Paris."), std::string::npos) << out;
}

}  // namespace
}  // namespace sluice::test_cli
