// tests/server/test_server_http: `sluice serve`'s routes in-process on stories260K — models,
// health, metrics, completions and chat (whole and streamed: the same text), logprobs, stop
// strings; reasoning_content (whole, streamed, inline with "none"); tool_choice forcing a call
// (named, required, with "auto" as the control); every error in OpenAI's shape with its status (400 naming the field, 401, 404, 413,
// 503); a client that leaves mid-stream frees its slot; a graceful stop finishes or cancels.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>

#include "runtime/generator.h"
#include "runtime/session.h"
#include "server_test_util.h"

namespace sluice::test_server_http {
namespace {

using nlohmann::json;
using test::HttpReply;

class ServerHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_SHARED();
    m_ = Model::load(test::shared_dir() + "/models/stories260K.gguf");
    be_ = make_backend("cpu", 1);
  }
  std::unique_ptr<test::TestServer> start(int parallel = 2, int64_t n_ctx = 256, int queue = 8, std::string key = {}) {
    auto o = test::server_options(parallel, n_ctx, queue);
    o.api_key = std::move(key);
    o.max_body_bytes = 64 * 1024;
    return std::make_unique<test::TestServer>(*m_, *be_, o);
  }
  // The greedy text the Generator gives alone (the oracle for the server's answers).
  std::string alone(const std::string& prompt, int n) {
    auto be = make_backend("cpu", 1);  // the server's engine thread owns be_
    Session s(*m_, *be, KvCacheOptions{.n_ctx = 256});
    GenerateParams p;
    p.sampler.temp = 0;
    p.n_predict = n;
    std::string t;
    Generator(s).run(prompt, p, [&](std::string_view x) {
      t += x;
      return true;
    });
    return t;
  }
  std::unique_ptr<Model> m_;
  std::unique_ptr<Backend> be_;
};

json completion(const std::string& prompt, int max_tokens, bool stream = false) {
  return {
      {"model", "test-model"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", stream}};
}

void expect_error(const HttpReply& r, int status, const std::string& param = {}) {
  EXPECT_EQ(r.status, status) << r.body;
  const json j = r.json();
  ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  if (!param.empty()) {
    EXPECT_EQ(j["error"]["param"], param) << r.body;
  }
}

TEST_F(ServerHttpTest, ModelsHealthAndMetrics) {
  auto s = start();
  HttpReply r = test::http(s->port(), "GET", "/v1/models");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["data"][0]["id"], "test-model");
  EXPECT_EQ(test::http(s->port(), "GET", "/v1/models/test-model").status, 200);
  expect_error(test::http(s->port(), "GET", "/v1/models/other"), 404);
  r = test::http(s->port(), "GET", "/health");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["status"], "ok");
  r = test::http(s->port(), "GET", "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(test::metric(r.body, "sluice_slots_total"), 2);
  EXPECT_EQ(test::metric(r.body, "sluice_slots_busy"), 0);
  EXPECT_EQ(test::metric(r.body, "sluice_queue_length"), 0);
}

TEST_F(ServerHttpTest, CompletionWholeAndStreamedGiveTheGeneratorsText) {
  auto s = start();
  const std::string want = alone("Once upon a time", 24);
  HttpReply r = test::post(s->port(), "/v1/completions", completion("Once upon a time", 24));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.json();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], want);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);

  json req = completion("Once upon a time", 24, true);
  req["stream_options"] = {{"include_usage", true}};
  r = test::post(s->port(), "/v1/completions", req);
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.head.find("text/event-stream"), std::string::npos);
  EXPECT_EQ(test::sse_text(r.body), want);
  const auto ev = test::sse_data(r.body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "[DONE]");
  const json usage = json::parse(ev[ev.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 24);
  EXPECT_EQ(json::parse(ev[ev.size() - 3])["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerHttpTest, ChatWholeAndStreamedAgree) {
  auto s = start();
  const json msgs = json::array({{{"role", "system"}, {"content", "Tell a story."}},
                                 {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "Lily"}}})}}});
  json req = {{"messages", msgs}, {"max_tokens", 16}, {"temperature", 0}};
  HttpReply r = test::post(s->port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const std::string text = j["choices"][0]["message"]["content"];
  EXPECT_FALSE(text.empty());
  req["stream"] = true;
  r = test::post(s->port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(test::sse_text(r.body), text);
  const json first = json::parse(test::sse_data(r.body).at(0));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
}

TEST_F(ServerHttpTest, LogprobsAndStopStrings) {
  auto s = start();
  json req = completion("Once upon a time", 8);
  req["logprobs"] = 3;
  HttpReply r = test::post(s->port(), "/v1/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const json lp = r.json()["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 8u);
  std::string joined;
  for (size_t i = 0; i < 8; ++i) {
    joined += lp["tokens"][i].get<std::string>();
    ASSERT_EQ(lp["top_logprobs"][i].size(), 3u);
    // Greedy: the chosen token is the most likely one, so its logprob is the top one's.
    double best = -1e30;
    for (auto& [tok, l] : lp["top_logprobs"][i].items()) best = std::max(best, l.get<double>());
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), best, 1e-6);
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
  }
  EXPECT_EQ(joined, r.json()["choices"][0]["text"]);

  json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
               {"max_tokens", 4},
               {"temperature", 0},
               {"logprobs", true},
               {"top_logprobs", 2}};
  r = test::post(s->port(), "/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  const json content = r.json()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_TRUE(content[0]["bytes"].is_array());

  const std::string full = alone("Once upon a time", 24);
  const std::string stop = full.substr(10, 4);
  req = completion("Once upon a time", 24);
  req["stop"] = json::array({stop, "zzzz"});
  r = test::post(s->port(), "/v1/completions", req);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerHttpTest, BadRequestsAreOpenAiErrorsNamingTheField) {
  auto s = start(2, 64);
  const int p = s->port();
  expect_error(test::http(p, "POST", "/v1/completions", "{\"prompt\": "), 400);
  expect_error(test::http(p, "POST", "/v1/completions", "[1, 2]"), 400);
  expect_error(test::http(p, "POST", "/v1/completions", "{\"prompt\": \"a\xff\"}"), 400);  // not UTF-8
  expect_error(test::http(p, "POST", "/v1/chat/completions",
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}"),
               400);
  json req = completion("x", 4);
  req["max_tokens"] = "four";
  expect_error(test::post(p, "/v1/completions", req), 400, "max_tokens");
  req["max_tokens"] = 1e15;
  expect_error(test::post(p, "/v1/completions", req), 400, "max_tokens");
  req["max_tokens"] = 0;
  expect_error(test::post(p, "/v1/completions", req), 400, "max_tokens");
  req = completion("x", 4);
  req["temperature"] = 7;
  expect_error(test::post(p, "/v1/completions", req), 400, "temperature");
  req = completion("x", 4);
  req["top_p"] = "high";
  expect_error(test::post(p, "/v1/completions", req), 400, "top_p");
  req = completion("x", 4);
  req["n"] = 2;
  expect_error(test::post(p, "/v1/completions", req), 400, "n");
  req = completion("x", 4);
  req["stop"] = json::array({1, 2});
  expect_error(test::post(p, "/v1/completions", req), 400, "stop");
  req = completion("x", 4);
  req["prompt"] = json::array({1, 2, 99999});
  expect_error(test::post(p, "/v1/completions", req), 400, "prompt");
  req = completion(std::string(2000, 'a') + " b c d", 4);  // beyond the context of 64
  HttpReply r = test::post(p, "/v1/completions", req);
  expect_error(r, 400, "prompt");
  EXPECT_EQ(r.json()["error"]["code"], "context_length_exceeded");
  expect_error(test::post(p, "/v1/chat/completions", json{{"max_tokens", 3}}), 400, "messages");
  expect_error(test::post(p, "/v1/chat/completions", json{{"messages", json::array({{{"role", "bot"}}})}}), 400,
               "messages[0].role");
  json chat = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  // A schema keyword the constrained sampler cannot enforce is refused, never ignored.
  chat["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"pattern", "^a+$"}}}}}};
  r = test::post(p, "/v1/chat/completions", chat);
  expect_error(r, 400, "response_format.json_schema.schema");
  chat["response_format"] = {{"type", "xml"}};
  expect_error(test::post(p, "/v1/chat/completions", chat), 400, "response_format");
  chat["response_format"] = {{"type", "text"}};
  chat["max_tokens"] = 2;
  EXPECT_EQ(test::post(p, "/v1/chat/completions", chat).status, 200);
  chat["model"] = "gpt-4";
  r = test::post(p, "/v1/chat/completions", chat);
  expect_error(r, 404, "model");
  EXPECT_EQ(r.json()["error"]["code"], "model_not_found");
  expect_error(test::http(p, "GET", "/v2/anything"), 404);
  expect_error(test::http(p, "POST", "/v1/completions", std::string(100 * 1024, 'a')), 413);
  // The server is still there and answers.
  EXPECT_EQ(test::post(p, "/v1/completions", completion("Once", 2)).status, 200);
  EXPECT_TRUE(s->wait_idle());
}

TEST_F(ServerHttpTest, ResponseFormatJsonSchemaIsEnforced) {
  auto s = start(2, 1024);
  const json schema = {{"type", "object"},
                       {"properties", {{"color", {{"enum", {"red", "blue"}}}}, {"n", {{"type", "integer"}}}}},
                       {"required", {"color", "n"}},
                       {"additionalProperties", false}};
  json req = {{"messages", json::array({{{"role", "user"}, {"content", "Lily"}}})},
              {"max_tokens", 700},  // greedy stories260K pads with whitespace runs before each token
              {"temperature", 0},
              {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "t"}, {"schema", schema}}}}}};
  for (bool stream : {false, true}) {
    req["stream"] = stream;
    const auto r = test::post(s->port(), "/v1/chat/completions", req);
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string text = stream ? test::sse_text(r.body)
                                    : r.json()["choices"][0]["message"]["content"].get<std::string>();
    const json doc = json::parse(text, nullptr, false);
    ASSERT_TRUE(doc.is_object()) << text;  // stories260K knows no JSON: only the constraint makes this hold
    EXPECT_TRUE(doc["color"] == "red" || doc["color"] == "blue") << text;
    EXPECT_TRUE(doc["n"].is_number_integer()) << text;
    EXPECT_EQ(doc.size(), 2u) << text;
  }
  req.erase("response_format");
  req["stream"] = false;
  const auto free_text = test::post(s->port(), "/v1/chat/completions", req);
  EXPECT_FALSE(
      json::parse(free_text.json()["choices"][0]["message"]["content"].get<std::string>(), nullptr, false).is_object())
      << "negative control: without the constraint the model writes no JSON";
  req["response_format"] = {{"type", "json_object"}};
  const auto obj = test::post(s->port(), "/v1/chat/completions", req);
  ASSERT_EQ(obj.status, 200) << obj.body;
  const std::string t = obj.json()["choices"][0]["message"]["content"];
  // Any object; if max_tokens cut it, at least what there is starts one.
  if (obj.json()["choices"][0]["finish_reason"] == "stop") {
    EXPECT_TRUE(json::parse(t, nullptr, false).is_object()) << t;
  } else {
    ASSERT_NE(t.find_first_not_of(" \n\t"), std::string::npos) << t;
    EXPECT_EQ(t[t.find_first_not_of(" \n\t")], '{') << t;
  }
}

TEST_F(ServerHttpTest, ToolCallsAreParsedFromTheReply) {
  // A template in Llama 3's tool syntax (detected from its source: the header token and the
  // ipython role), and a reply forced by a schema to be a Llama 3 call: stories260K cannot
  // write one by itself, the parse is what is under test.
  auto o = test::server_options(2, 1024);
  o.chat_template = "{# <|start_header_id|> ipython #}{% for m in messages %}{{ m['content'] }} {% endfor %}";
  test::TestServer s(*m_, *be_, o);
  const json call_schema = {{"type", "object"},
                            {"properties",
                             {{"name", {{"const", "get_weather"}}},
                              {"parameters",
                               {{"type", "object"},
                                {"properties", {{"city", {{"enum", {"Paris"}}}}}},
                                {"required", {"city"}},
                                {"additionalProperties", false}}}}},
                            {"required", {"name", "parameters"}},
                            {"additionalProperties", false}};
  json req = {{"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
              {"max_tokens", 700},
              {"temperature", 0},
              {"tools", json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}}}}})},
              {"response_format",
               {{"type", "json_schema"}, {"json_schema", {{"name", "c"}, {"schema", call_schema}}}}}};
  auto r = test::post(s.port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = r.json()["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls") << r.body;
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(c["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));
  EXPECT_TRUE(c["message"]["content"].is_null()) << r.body;

  req["stream"] = true;
  r = test::post(s.port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200);
  json calls, finish;
  std::string content;
  for (const auto& d : test::sse_data(r.body)) {
    if (d == "[DONE]") continue;
    const json ch = json::parse(d)["choices"][0];
    if (ch["delta"].contains("tool_calls")) calls = ch["delta"]["tool_calls"];
    if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(finish, "tool_calls") << r.body;
  ASSERT_EQ(calls.size(), 1u) << r.body;
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(content.find("get_weather"), std::string::npos) << "the held call must not leak as content: " << content;

  // Negative control: without tools the same reply is plain content.
  req.erase("tools");
  req["stream"] = false;
  r = test::post(s.port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200);
  EXPECT_FALSE(r.json()["choices"][0]["message"].contains("tool_calls"));
  EXPECT_NE(r.json()["choices"][0]["message"]["content"].get<std::string>().find("get_weather"), std::string::npos);
}

// A template whose generation prompt opens a <think> block (as Qwen3's and R1's do): the
// reply is reasoning until </think>, which stories260K never writes, so all of it goes to
// reasoning_content; streamed, the reasoning_content deltas add up to the same text. Inline
// (reasoning_format "none", per request or for the server) it is the content, as generated.
TEST_F(ServerHttpTest, ReasoningGoesToReasoningContentStreamedOrNot) {
  auto o = test::server_options(2, 256);
  o.chat_template =
      "{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}<think>\n{% endif %}";
  test::TestServer s(*m_, *be_, o);
  json req = {{"messages", json::array({{{"role", "user"}, {"content", "Once upon a time"}}})},
              {"max_tokens", 24},
              {"temperature", 0}};
  auto r = test::post(s.port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const json msg = r.json()["choices"][0]["message"];
  ASSERT_TRUE(msg.contains("reasoning_content")) << r.body;
  const std::string reasoning = msg["reasoning_content"];
  EXPECT_FALSE(reasoning.empty());
  EXPECT_EQ(msg["content"], "") << "a reply that never closed its block is all reasoning";

  req["stream"] = true;
  r = test::post(s.port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200);
  std::string streamed_reasoning, streamed_content;
  for (const auto& d : test::sse_data(r.body)) {
    if (d == "[DONE]") continue;
    const json ch = json::parse(d);
    if (ch["choices"].empty()) continue;
    const json& delta = ch["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) streamed_reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content")) streamed_content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(streamed_reasoning, reasoning);
  EXPECT_EQ(streamed_content, "");

  // Inline: the text as generated, the reasoning inside it.
  req["stream"] = false;
  req["reasoning_format"] = "none";
  r = test::post(s.port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200);
  const json inline_msg = r.json()["choices"][0]["message"];
  EXPECT_FALSE(inline_msg.contains("reasoning_content")) << r.body;
  const std::string raw = inline_msg["content"];
  EXPECT_NE(raw.find(reasoning), std::string::npos) << raw;
  o.split_reasoning = false;  // --reasoning-format none
  test::TestServer s2(*m_, *be_, o);
  req.erase("reasoning_format");
  r = test::post(s2.port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["choices"][0]["message"]["content"], raw);
  EXPECT_FALSE(r.json()["choices"][0]["message"].contains("reasoning_content"));
}

// tool_choice "required" on a model that cannot write a call by itself: the constraint makes
// the reply one call of a listed function in the template's syntax (Llama 3's here), its
// arguments fitting the schema; the same request with "auto" gives no call (the control). The
// call's markup up to the arguments is not sampled: it goes into the prompt (more prompt
// tokens than the "auto" request's; with "required" only the part both functions share).
// A chat reply's tool_calls (an empty array if none) and finish_reason, whole or streamed.
std::pair<json, json> reply_calls(const std::string& body, bool stream) {
  json calls = json::array(), finish;
  if (!stream) {
    const json c = json::parse(body)["choices"][0];
    return {c["message"].value("tool_calls", json::array()), c["finish_reason"]};
  }
  for (const auto& d : test::sse_data(body)) {
    if (d == "[DONE]") continue;
    const json ch = json::parse(d)["choices"][0];
    if (ch["delta"].contains("tool_calls")) calls = ch["delta"]["tool_calls"];
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  return {calls, finish};
}

TEST_F(ServerHttpTest, ForcedToolChoiceMakesTheReplyACall) {
  auto o = test::server_options(2, 1024);
  o.chat_template = "{# <|start_header_id|> ipython #}{% for m in messages %}{{ m['content'] }} {% endfor %}";
  test::TestServer s(*m_, *be_, o);
  const json params = {{"type", "object"},
                       {"properties",
                        {{"unit", {{"enum", {"celsius", "fahrenheit"}}}}, {"days", {{"type", "integer"}}}}},
                       {"required", {"unit", "days"}},
                       {"additionalProperties", false}};
  json req = {{"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
              {"max_tokens", 400},
              {"temperature", 0},
              {"tools",
               json::array({{{"type", "function"},
                             {"function",
                              {{"name", "get_time"},
                               {"parameters",
                                {{"type", "object"},
                                 {"properties", {{"tz", {{"enum", {"UTC", "CET"}}}}}},
                                 {"required", {"tz"}},
                                 {"additionalProperties", false}}}}}},
                            {{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", params}}}}})},
              {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}};
  int64_t named_prompt = 0;
  for (bool stream : {false, true}) {
    req["stream"] = stream;
    auto r = test::post(s.port(), "/v1/chat/completions", req);
    ASSERT_EQ(r.status, 200) << r.body;
    if (!stream) named_prompt = r.json()["usage"]["prompt_tokens"];
    const auto [calls, finish] = reply_calls(r.body, stream);
    EXPECT_EQ(finish, "tool_calls") << r.body;
    ASSERT_EQ(calls.size(), 1u) << r.body;
    EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
    const json args = json::parse(calls[0]["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args.is_object() && args.size() == 2 && args["days"].is_number_integer() &&
                (args["unit"] == "celsius" || args["unit"] == "fahrenheit"))
        << args.dump();
  }
  // "required" with the two: a call of one of them.
  req["stream"] = false;
  req["tool_choice"] = "required";
  auto r = test::post(s.port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json()["choices"][0]["message"]["tool_calls"].size(), 1u) << r.body;
  const std::string name = r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"];
  EXPECT_TRUE(name == "get_time" || name == "get_weather") << name;
  const int64_t required_prompt = r.json()["usage"]["prompt_tokens"];
  // The control: unforced, the same request is text.
  req["tool_choice"] = "auto";
  r = test::post(s.port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200);
  EXPECT_FALSE(r.json()["choices"][0]["message"].contains("tool_calls")) << r.body;
  const int64_t auto_prompt = r.json()["usage"]["prompt_tokens"];
  EXPECT_GT(required_prompt, auto_prompt) << "'{\"name\": \"get_' is common to both calls";
  EXPECT_GT(named_prompt, required_prompt) << "the whole markup up to the arguments";
}

// Parallel calls under "required" (hermes syntax, which writes them one block each): the reply
// may hold several calls, each of a known function with arguments its schema accepts;
// parallel_tool_calls false keeps it at one (the constraint closes after the first).
TEST_F(ServerHttpTest, RequiredToolChoiceAllowsParallelCalls) {
  auto o = test::server_options(1, 2048);
  o.chat_template = "{# <tool_call> #}{% for m in messages %}{{ m['content'] }} {% endfor %}";
  test::TestServer s(*m_, *be_, o);
  const json city = {{"type", "object"},
                     {"properties", {{"city", {{"enum", {"Paris", "Rome"}}}}}},
                     {"required", {"city"}},
                     {"additionalProperties", false}};
  json req = {{"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris and Rome?"}}})},
              {"max_tokens", 600},
              {"temperature", 0},
              {"tools",
               json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", city}}}},
                            {{"type", "function"}, {"function", {{"name", "get_time"}, {"parameters", city}}}}})},
              {"tool_choice", "required"}};
  auto calls_of = [&](bool parallel, bool stream = false) {
    req["parallel_tool_calls"] = parallel;
    req["stream"] = stream;
    auto r = test::post(s.port(), "/v1/chat/completions", req);
    EXPECT_EQ(r.status, 200) << r.body;
    const auto [calls, finish] = reply_calls(r.body, stream);
    EXPECT_EQ(finish, "tool_calls") << r.body;
    for (const auto& call : calls) {
      const std::string name = call["function"]["name"];
      EXPECT_TRUE(name == "get_weather" || name == "get_time") << name;
      const json args = json::parse(call["function"]["arguments"].get<std::string>());
      EXPECT_TRUE(args.size() == 1 && (args["city"] == "Paris" || args["city"] == "Rome")) << args.dump();
    }
    std::printf("[  CALLS   ] parallel_tool_calls %s%s: %zu call(s)\n", parallel ? "true" : "false",
                stream ? ", stream" : "", calls.size());
    return calls.size();
  };
  EXPECT_EQ(calls_of(false), 1u);
  const size_t n = calls_of(true);
  EXPECT_GE(n, 1u);
  EXPECT_EQ(calls_of(true, /*stream=*/true), n) << "stream and non-stream give the same calls";
}

// A template that never shows the tools and has no tool syntax of its own: the tools go into a
// system message (with_tools_system_prompt), so the prompt grows by their JSON and the
// instructions. The control: a template that renders the tools itself grows by their JSON only.
TEST_F(ServerHttpTest, ToolsReachTheModelEvenWhenTheTemplateIgnoresThem) {
  const json tools = json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"},
          {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
  auto growth = [&](const std::string& tmpl) {
    auto o = test::server_options(1, 2048);
    o.chat_template = tmpl;
    test::TestServer s(*m_, *be_, o);
    json req = {{"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
                {"max_tokens", 1},
                {"temperature", 0}};
    auto plain = test::post(s.port(), "/v1/chat/completions", req);
    req["tools"] = tools;
    auto with = test::post(s.port(), "/v1/chat/completions", req);
    EXPECT_EQ(plain.status, 200) << plain.body;
    EXPECT_EQ(with.status, 200) << with.body;
    return with.json()["usage"]["prompt_tokens"].get<int64_t>() - plain.json()["usage"]["prompt_tokens"].get<int64_t>();
  };
  const int64_t ignored = growth("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}");
  const int64_t rendered = growth(
      "{% if tools %}{{ tools | tojson }}\n{% endif %}{% for m in messages %}{{ m['role'] }}: {{ m['content'] "
      "}}\n{% endfor %}");
  EXPECT_GT(rendered, 0) << "the control template shows the tools";
  EXPECT_GT(ignored, rendered + 20) << "the injected message: the tools plus the instructions";
}

TEST_F(ServerHttpTest, ApiKeyIsRequiredAndAWrongOneRefused) {
  auto s = start(1, 128, 4, "sekret");
  const int p = s->port();
  HttpReply r = test::post(p, "/v1/completions", completion("Once", 2));
  expect_error(r, 401);
  EXPECT_EQ(r.json()["error"]["code"], "invalid_api_key");
  // Negative control: a wrong key, a key off by one character, a key without "Bearer ".
  expect_error(test::post(p, "/v1/completions", completion("Once", 2), "Authorization: Bearer wrong\r\n"), 401);
  expect_error(test::post(p, "/v1/completions", completion("Once", 2), "Authorization: Bearer sekreT\r\n"), 401);
  expect_error(test::post(p, "/v1/completions", completion("Once", 2), "Authorization: sekret\r\n"), 401);
  expect_error(test::http(p, "GET", "/v1/models"), 401);
  EXPECT_EQ(test::post(p, "/v1/completions", completion("Once", 2), "Authorization: Bearer sekret\r\n").status, 200);
  EXPECT_EQ(test::http(p, "GET", "/v1/models", {}, "Authorization: Bearer sekret\r\n").status, 200);
  EXPECT_EQ(test::http(p, "GET", "/health").status, 200);  // probes need no key
}

// Opens a stream that would run to the end of the context and returns its socket once the
// first token's chunk arrived.
int open_long_stream(int port) {
  json req = completion("Once upon a time", 100000, true);
  req["ignore_eos"] = true;
  const int fd = test::connect_local(port);
  EXPECT_GE(fd, 0);
  EXPECT_TRUE(test::send_all(fd, test::request_text("POST", "/v1/completions", req.dump())));
  std::string got;
  char buf[4096];
  while (got.find("\"text\"") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_NE(got.find("\"text\""), std::string::npos) << got;
  return fd;
}

TEST_F(ServerHttpTest, QueueFullIs503AndAClientThatLeavesFreesItsSlot) {
  // One slot, one place in the queue: A decodes, B waits, C is refused. A's context is far
  // more than it can fill while the test runs, even on a loaded machine.
  auto s = start(1, 32768, 1);
  const int a = open_long_stream(s->port());
  std::atomic<int> b_status{0};
  std::thread b([&] { b_status = test::post(s->port(), "/v1/completions", completion("Once", 4)).status; });
  for (int i = 0; i < 1000 && s->server().engine().stats().queue_length == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(s->server().engine().stats().queue_length, 1);
  HttpReply c = test::post(s->port(), "/v1/completions", completion("Once", 4));
  expect_error(c, 503);
  EXPECT_EQ(b_status.load(), 0);  // still waiting behind A
  // A goes away: its slot frees, B gets it and is answered.
  const int64_t steps_before = s->server().engine().stats().steps;
  ::close(a);
  b.join();
  EXPECT_EQ(b_status.load(), 200);
  ASSERT_TRUE(s->wait_idle());
  const auto st = s->server().engine().stats();
  EXPECT_EQ(st.cancelled, 1);
  // The engine peeks at A's socket before every step: A leaves the batch at the first step
  // after the close, so the steps from the close on are B's own (a prompt step and 4 tokens)
  // and at most one of A's.
  std::printf("steps from the close to the end of B: %lld\n", static_cast<long long>(st.steps - steps_before));
  EXPECT_LE(st.steps - steps_before, 6) << "steps after the client closed";
  EXPECT_LT(st.generated_tokens, 1000);
  const std::string m = test::http(s->port(), "GET", "/metrics").body;
  EXPECT_EQ(test::metric(m, "sluice_slots_busy"), 0);
  EXPECT_EQ(test::metric(m, "sluice_requests_cancelled_total"), 1);
}

TEST_F(ServerHttpTest, GracefulStopFinishesOrCancelsRunningRequests) {
  auto s = start(2, 32768, 4);
  // A short request finishes within the grace period; a long one is cancelled at its end.
  std::atomic<int> short_status{0};
  std::string long_body;
  std::thread t_short([&] { short_status = test::post(s->port(), "/v1/completions", completion("Once", 64)).status; });
  std::thread t_long([&] {
    json req = completion("Once upon a time", 100000, true);
    req["ignore_eos"] = true;
    long_body = test::post(s->port(), "/v1/completions", req).body;
  });
  for (int i = 0; i < 2000 && s->server().engine().stats().busy_slots < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s->stop(std::chrono::milliseconds(300));
  t_short.join();
  t_long.join();
  EXPECT_EQ(short_status.load(), 200);
  const auto ev = test::sse_data(long_body);
  ASSERT_GE(ev.size(), 2u) << long_body;
  EXPECT_EQ(ev.back(), "[DONE]");
  EXPECT_EQ(json::parse(ev[ev.size() - 2])["choices"][0]["finish_reason"], "stop");
  // Nothing listens any more.
  EXPECT_EQ(test::http(s->port(), "GET", "/health").status, -1);
}

}  // namespace
}  // namespace sluice::test_server_http
