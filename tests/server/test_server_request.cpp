// tests/server/test_server_request: the request checks of server/request.h one by one — what
// each accepted field becomes, and that each bad one is a 400 naming it.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/request.h"

namespace sluice::server {
namespace {

CompletionRequest parse_chat(const std::string& body) { return parse_completion_request(body, true, 1000); }
CompletionRequest parse_text(const std::string& body) { return parse_completion_request(body, false, 1000); }

// The field a rejected body names (empty: accepted).
std::string rejected(const std::string& body, bool is_chat = false) {
  try {
    parse_completion_request(body, is_chat, 1000);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    return e.param().empty() ? "(none)" : e.param();
  }
  return {};
}

TEST(ServerRequest, FieldsBecomeGenerateParams) {
  const auto r = parse_text(R"({"prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 5,
    "min_p": 0.1, "seed": 42, "stop": "END", "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "stream": true, "stream_options": {"include_usage": true}, "logprobs": 2})");
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.gen.sampler.temp, 0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampler.top_p, 0.9f);
  EXPECT_EQ(r.gen.sampler.top_k, 5);
  EXPECT_FLOAT_EQ(r.gen.sampler.min_p, 0.1f);
  EXPECT_EQ(r.gen.sampler.seed, 42u);
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"END"});
  EXPECT_FLOAT_EQ(r.gen.sampler.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampler.frequency_penalty, -0.5f);
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.gen.n_logprobs, 2);
  EXPECT_EQ(parse_text(R"({"prompt": [[1, 2, 3]]})").prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_text(R"({"prompt": ["only"]})").prompt, "only");
  EXPECT_EQ(parse_text(R"({"prompt": "x", "max_tokens": 3.0})").max_tokens, 3);  // JSON has one number type
  // max_completion_tokens is the newer name and wins.
  EXPECT_EQ(parse_chat(R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": 3,
    "max_completion_tokens": 9})")
                .max_tokens,
            9);
  const auto c = parse_chat(R"({"messages": [{"role": "developer", "content": [{"type": "text", "text": "a"},
    {"type": "text", "text": "b"}]}, {"role": "user", "content": "q"}], "logprobs": true, "top_logprobs": 3,
    "stop": ["x", "y"], "tools": [{"type": "function", "function": {"name": "f"}}], "user": "ignored"})");
  EXPECT_EQ(c.messages[0]["role"], "system");
  EXPECT_EQ(c.messages[0]["content"], "a\nb");
  EXPECT_EQ(c.gen.n_logprobs, 3);
  EXPECT_EQ(c.gen.stop.size(), 2u);
  EXPECT_TRUE(c.tools.is_array());
  EXPECT_TRUE(parse_chat(R"({"messages": [{"role": "user", "content": "q"}], "tool_choice": "none",
    "tools": [{"type": "function", "function": {"name": "f"}}]})")
                  .tools.is_null());
  EXPECT_EQ(parse_chat(R"({"messages": [{"role": "user", "content": "q"}]})").gen.n_logprobs, -1);
}

TEST(ServerRequest, BadFieldsAreNamed) {
  EXPECT_EQ(rejected("{"), "(none)");
  EXPECT_EQ(rejected("[]"), "(none)");
  EXPECT_EQ(rejected("\"a\xff\""), "(none)");
  EXPECT_EQ(rejected(R"({"prompt": "x", "temperature": 1e99999})"), "(none)");  // past double: not JSON
  EXPECT_EQ(rejected(R"({})"), "prompt");
  EXPECT_EQ(rejected(R"({"prompt": 5})"), "prompt");
  EXPECT_EQ(rejected(R"({"prompt": ["a", "b"]})"), "prompt");
  EXPECT_EQ(rejected(R"({"prompt": [1, 1000]})"), "prompt");
  EXPECT_EQ(rejected(R"({"prompt": [1, -1]})"), "prompt");
  EXPECT_EQ(rejected(R"({"prompt": "x", "max_tokens": -1})"), "max_tokens");
  EXPECT_EQ(rejected(R"({"prompt": "x", "max_tokens": 2.5})"), "max_tokens");
  EXPECT_EQ(rejected(R"({"prompt": "x", "max_tokens": 99999999999999999999})"), "max_tokens");
  EXPECT_EQ(rejected(R"({"prompt": "x", "temperature": "hot"})"), "temperature");
  EXPECT_EQ(rejected(R"({"prompt": "x", "temperature": -0.1})"), "temperature");
  EXPECT_EQ(rejected(R"({"prompt": "x", "top_p": 1.5})"), "top_p");
  EXPECT_EQ(rejected(R"({"prompt": "x", "top_k": -2})"), "top_k");
  EXPECT_EQ(rejected(R"({"prompt": "x", "min_p": 2})"), "min_p");
  EXPECT_EQ(rejected(R"({"prompt": "x", "presence_penalty": 3})"), "presence_penalty");
  EXPECT_EQ(rejected(R"({"prompt": "x", "frequency_penalty": true})"), "frequency_penalty");
  EXPECT_EQ(rejected(R"({"prompt": "x", "seed": "s"})"), "seed");
  EXPECT_EQ(rejected(R"({"prompt": "x", "seed": 9223372036854775808.0})"), "seed");  // 2^63: no int64
  EXPECT_EQ(rejected(R"({"prompt": "x", "seed": 1e300})"), "seed");
  EXPECT_EQ(rejected(R"({"prompt": "x", "stop": 3})"), "stop");
  EXPECT_EQ(rejected(R"({"prompt": "x", "stream": "yes"})"), "stream");
  EXPECT_EQ(rejected(R"({"prompt": "x", "stream_options": 1})"), "stream_options");
  EXPECT_EQ(rejected(R"({"prompt": "x", "n": 3})"), "n");
  EXPECT_EQ(rejected(R"({"prompt": "x", "logprobs": 9})"), "logprobs");
  EXPECT_EQ(rejected(R"({"prompt": "x", "echo": true})"), "echo");
  EXPECT_EQ(rejected(R"({"prompt": "x", "best_of": 2})"), "best_of");
  EXPECT_EQ(rejected(R"({"prompt": "x", "logit_bias": {"5": 10}})"), "logit_bias");
  EXPECT_EQ(rejected(R"({"prompt": "x", "model": 7})"), "model");
  const bool is_chat = true;
  EXPECT_EQ(rejected(R"({"messages": []})", is_chat), "messages");
  EXPECT_EQ(rejected(R"({"messages": "hi"})", is_chat), "messages");
  EXPECT_EQ(rejected(R"({"messages": [5]})", is_chat), "messages[0]");
  EXPECT_EQ(rejected(R"({"messages": [{"content": "x"}]})", is_chat), "messages[0].role");
  EXPECT_EQ(rejected(R"({"messages": [{"role": "user"}]})", is_chat), "messages[0].content");
  EXPECT_EQ(rejected(R"({"messages": [{"role": "user", "content": 1}]})", is_chat), "messages[0].content");
  EXPECT_EQ(rejected(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", is_chat),
            "messages[0].content");
  const std::string ok = R"({"messages": [{"role": "user", "content": "q"}], )";
  EXPECT_EQ(rejected(ok + R"("logprobs": 1})", is_chat), "logprobs");
  EXPECT_EQ(rejected(ok + R"("top_logprobs": 2})", is_chat), "top_logprobs");
  EXPECT_EQ(rejected(ok + R"("logprobs": true, "top_logprobs": 21})", is_chat), "top_logprobs");
  EXPECT_EQ(rejected(ok + R"("response_format": {"type": "json_object"}})", is_chat), "");
  EXPECT_EQ(
      rejected(ok + R"("response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}})",
               is_chat),
      "");
  EXPECT_EQ(rejected(ok + R"("response_format": {"type": "json_schema", "json_schema": {"schema":
    {"type": "string", "format": "email"}}}})",
                     is_chat),
            "response_format.json_schema.schema");
  EXPECT_EQ(rejected(ok + R"("response_format": {"type": "json_schema"}})", is_chat), "response_format.json_schema");
  EXPECT_EQ(rejected(ok + R"("response_format": {"type": "yaml"}})", is_chat), "response_format");
  EXPECT_EQ(rejected(ok + R"("response_format": {"type": "text"}})", is_chat), "");
  EXPECT_EQ(rejected(ok + R"("tools": {"a": 1}})", is_chat), "tools");
  EXPECT_EQ(rejected(ok + R"("tools": [{"type": "function"}]})", is_chat), "tools[0]");
  EXPECT_EQ(rejected(ok + R"("tool_choice": "required", "tools": [{"function": {"name": "f"}}]})", is_chat), "");
  EXPECT_EQ(rejected(ok + R"("tool_choice": 3})", is_chat), "tool_choice");
  // A forced call: its tools must be there, the named one among them, and every parameters
  // schema it may have to write enforceable (the 400 names which one).
  EXPECT_EQ(rejected(ok + R"("tool_choice": "required"})", is_chat), "tool_choice");
  EXPECT_EQ(rejected(ok + R"("tool_choice": "required", "parallel_tool_calls": 1,
                             "tools": [{"function": {"name": "f"}}]})",
                     is_chat),
            "parallel_tool_calls");
  EXPECT_EQ(rejected(ok + R"("tool_choice": "required", "tools": [{"function": {"name": "f"}},
                             {"function": {"name": "f"}}]})",
                     is_chat),
            "tools[1].function.name");
  EXPECT_EQ(rejected(ok + R"("tool_choice": "required", "tools": []})", is_chat), "tool_choice");
  EXPECT_EQ(rejected(ok + R"("tool_choice": {"type": "function", "function": {"name": "g"}},
    "tools": [{"function": {"name": "f"}}]})",
                     is_chat),
            "tool_choice");
  EXPECT_EQ(rejected(ok + R"("tool_choice": {"type": "function"}, "tools": [{"function": {"name": "f"}}]})", is_chat),
            "tool_choice");
  const std::string bad_params = R"("tools": [{"function": {"name": "f"}}, {"function": {"name": "g",
    "parameters": {"type": "object", "properties": {"when": {"type": "string", "format": "date"}}}}}])";
  EXPECT_EQ(rejected(ok + R"("tool_choice": "required", )" + bad_params + "}", is_chat),
            "tools[1].function.parameters");
  EXPECT_EQ(rejected(ok + R"("tool_choice": {"type": "function", "function": {"name": "f"}}, )" + bad_params + "}",
                     is_chat),
            "")
      << "only the named function's schema is compiled";
  EXPECT_EQ(rejected(ok + R"("tool_choice": "auto", )" + bad_params + "}", is_chat), "") << "auto constrains nothing";
  EXPECT_EQ(rejected(ok + R"("tool_choice": "required", "response_format": {"type": "json_object"},
    "tools": [{"function": {"name": "f"}}]})",
                     is_chat),
            "response_format");
  EXPECT_EQ(rejected(ok + R"("reasoning_format": "yes"})", is_chat), "reasoning_format");
  EXPECT_EQ(rejected(ok + R"("reasoning_format": "none"})", is_chat), "");
}

TEST(ServerRequest, ForcedToolChoiceAndReasoningFormat) {
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}},
    {"type": "function", "function": {"name": "g", "parameters": {"type": "object",
     "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}])";
  const std::string head = R"({"messages": [{"role": "user", "content": "q"}], )";
  auto r = parse_chat(head + R"("tool_choice": "required", )" + tools + "}");
  ASSERT_EQ(r.forced_tools.size(), 2u);
  EXPECT_EQ(r.forced_tools[0].name, "f");
  EXPECT_EQ(r.forced_tools[1].name, "g");
  r = parse_chat(head + R"("tool_choice": {"type": "function", "function": {"name": "g"}}, )" + tools + "}");
  ASSERT_EQ(r.forced_tools.size(), 1u);
  EXPECT_EQ(r.forced_tools[0].name, "g");
  EXPECT_TRUE(parse_chat(head + R"("tool_choice": "auto", )" + tools + "}").forced_tools.empty());
  EXPECT_TRUE(parse_chat(head + R"("tool_choice": "none", )" + tools + "}").tools.is_null());
  EXPECT_FALSE(parse_chat(head + R"("stream": false})").split_reasoning.has_value());
  EXPECT_EQ(parse_chat(head + R"("reasoning_format": "none"})").split_reasoning, false);
  EXPECT_EQ(parse_chat(head + R"("reasoning_format": "deepseek"})").split_reasoning, true);
}

}  // namespace
}  // namespace sluice::server
