// tests/models/test_chat_cli: `sluice chat` with a conversation piped in (stdin not a terminal:
// plain line reads) — SmolLM2 answers, /reset, the prompt cache's count at --verbose, /save and
// /load round trips, multi-line input, a full context, and bad commands that leave it running.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace sluice::test_chat_cli {
namespace {

using ojson = nlohmann::ordered_json;
const std::string kCli = ::sluice::test::cli_path();

// Per test (ctest runs the tests of this file in parallel processes).
std::string tmp(const std::string& name) {
  return ::testing::TempDir() + "sluice_chat_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
         name;
}

// Runs `sluice chat` over `input` (printf format); stdout returned, stderr in *err.
std::string chat(const std::string& input, const std::string& args, std::string* err, int* rc) {
  const std::string model = test::find_smollm2_gguf();
  EXPECT_FALSE(model.empty()) << test::kSmolGgufRel << " not found: run scripts/setup";
  const std::string err_file = tmp("stderr.txt");
  const std::string out = test::run_command("printf '" + input + "' | " + kCli + " chat -m " + model + " --temp 0 " +
                                                args + " 2>" + err_file,
                                            rc);
  *err = test::read_text_file(err_file);
  return out;
}

TEST(ChatCli, PipedConversationAnswersAndResets) {
  std::string err;
  int rc = 0;
  const std::string out = chat("What is the capital of France?\\n/reset\\nWhat is the capital of France?\\n",
                               "--system 'You are a helpful assistant.' -v", &err, &rc);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(out, "The capital of France is Paris.\nThe capital of France is Paris.\n") << err;
  EXPECT_NE(err.find("[conversation cleared]"), std::string::npos) << err;
  // After /reset the same question reuses all but the last prompt token (kept to give logits).
  EXPECT_NE(err.find("0 reused from the cache"), std::string::npos) << err;
  EXPECT_NE(err.find(" reused from the cache, 1 evaluated"), std::string::npos) << err;
}

TEST(ChatCli, SaveThenLoadRoundTrips) {
  std::string err;
  int rc = 0;
  const std::string f = tmp("conv.json"), g = tmp("conv2.json");
  chat("What is the capital of France?\\n/save " + f + "\\n", "--system 'You are a helpful assistant.'", &err, &rc);
  ASSERT_EQ(rc, 0) << err;
  const ojson saved = ojson::parse(test::read_text_file(f));
  ASSERT_EQ(saved.size(), 3u) << saved.dump(2);
  EXPECT_EQ(saved[0], ojson::parse(R"({"role": "system", "content": "You are a helpful assistant."})"));
  EXPECT_EQ(saved[2], ojson::parse(R"({"role": "assistant", "content": "The capital of France is Paris."})"));
  // Loaded into a new run (no --system: it comes from the file), continued, saved again.
  const std::string out = chat("/load " + f + "\\nAnd of Germany?\\n/save " + g + "\\n", "-n 16 -v", &err, &rc);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("[loaded 3 messages"), std::string::npos) << err;
  const ojson again = ojson::parse(test::read_text_file(g));
  ASSERT_EQ(again.size(), 5u) << again.dump(2);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(again[i], saved[i]);
  EXPECT_EQ(again[3], ojson::parse(R"({"role": "user", "content": "And of Germany?"})"));
  EXPECT_EQ(again[4]["content"].get<std::string>() + "\n", out);
}

TEST(ChatCli, MultiLineInput) {
  std::string err;
  int rc = 0;
  const std::string f = tmp("multi.json");
  chat("\"\"\"\\nline one\\nline two\\n\"\"\"\\nfirst\\\\\\nsecond\\n/save " + f + "\\n", "-n 2", &err, &rc);
  ASSERT_EQ(rc, 0) << err;
  const ojson saved = ojson::parse(test::read_text_file(f));
  ASSERT_EQ(saved.size(), 4u) << saved.dump(2);
  EXPECT_EQ(saved[0]["content"], "line one\nline two");
  EXPECT_EQ(saved[2]["content"], "first\nsecond");
}

TEST(ChatCli, FullContextAndBadCommandsAreReportedAndTheChatGoesOn) {
  std::string err;
  int rc = 0;
  const std::string out = chat(
      "/load /nonexistent/x.json\\n/frobnicate\\nWhat is the capital of France?\\nTell me more.\\n/quit\\nnot read\\n",
      // --ignore-eos: the first reply always runs into the 48-token context, whatever it says.
      "--ctx 48 -n 100 --ignore-eos -s 1", &err, &rc);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("error: cannot read /nonexistent/x.json"), std::string::npos) << err;
  EXPECT_NE(err.find("error: unknown command /frobnicate"), std::string::npos) << err;
  EXPECT_NE(err.find("[context full at 48 tokens: the reply was cut"), std::string::npos) << err;
  EXPECT_NE(err.find("error: context full: the conversation is"), std::string::npos) << err;
  EXPECT_NE(err.find("/reset starts over"), std::string::npos) << err;
  EXPECT_EQ(out.find("not read"), std::string::npos);
  // A template file that does not exist is refused before the model loads.
  chat("", "--chat-template /nonexistent.jinja", &err, &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("nonexistent.jinja"), std::string::npos) << err;
}

}  // namespace
}  // namespace sluice::test_chat_cli
