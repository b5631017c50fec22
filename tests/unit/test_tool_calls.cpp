// tests/unit/test_tool_calls: runtime/tool_calls — each format by hand, round trips through the
// real templates (render an assistant message with tool_calls, cut off the part the model
// would have generated, parse it back to the same calls), and near misses that must stay content.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/tool_calls.h"
#include "template/chat_template.h"
#include "test_util.h"

namespace sluice {
namespace {

using ojson = nlohmann::ordered_json;
using F = ToolCallFormat;

ToolCallParseOptions seeded() {
  ToolCallParseOptions o;
  o.id_seed = 42;
  return o;
}

ParsedOutput parse(std::string_view text, F f, ToolCallParseOptions o = seeded()) {
  return parse_model_output(text, f, o);
}

// A near miss: no call, and the content is the text exactly as generated.
void expect_content_only(std::string_view text, F f) {
  const ParsedOutput r = parse(text, f);
  EXPECT_TRUE(r.tool_calls.empty()) << text;
  EXPECT_EQ(r.content, text);
}

ojson args_of(const ToolCall& c) { return ojson::parse(c.arguments); }

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
   "parameters": {"type": "object", "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
                  "required": ["location"]}}},
  {"type": "function", "function": {"name": "get_time", "description": "Local time",
   "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}])");

TEST(ToolCalls, Hermes) {
  auto r = parse("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
                 F::hermes);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"location":"Paris"})");
  EXPECT_EQ(r.tool_calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(r.tool_calls[0].id.size(), 29u);
  EXPECT_EQ(r.content, "");

  r = parse(
      "<think>\nThe user wants weather.\n</think>\n\nI'll check both.\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"location\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
      "\"arguments\": {\"tz\": \"CET\"}}\n</tool_call>",
      F::hermes);
  EXPECT_EQ(r.reasoning_content, "The user wants weather.");
  EXPECT_EQ(r.content, "I'll check both.");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[1].name, "get_time");
  EXPECT_NE(r.tool_calls[0].id, r.tool_calls[1].id);

  // Stopped right after the JSON (no closing tag): still a call.
  r = parse("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}", F::hermes);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{}");
}

TEST(ToolCalls, HermesXmlBodyUsesParameterTypes) {
  const std::string text =
      "<tool_call>\n<function=get_weather>\n<parameter=location>\n123 Main St\n</parameter>\n<parameter=days>\n3\n"
      "</parameter>\n</function>\n</tool_call>";
  ToolCallParseOptions o = seeded();
  o.tools = kTools;
  auto r = parse(text, F::hermes, o);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(args_of(r.tool_calls[0]), ojson::parse(R"({"location": "123 Main St", "days": 3})"));
  // A string-typed parameter that looks like JSON stays a string; untyped ones are read as JSON.
  const std::string digits =
      "<tool_call>\n<function=get_weather>\n<parameter=location>\n75001\n</parameter>\n</function>\n</tool_call>";
  EXPECT_EQ(args_of(parse(digits, F::hermes, o).tool_calls.at(0)), ojson::parse(R"({"location": "75001"})"));
  EXPECT_EQ(args_of(parse(digits, F::hermes).tool_calls.at(0)), ojson::parse(R"({"location": 75001})"));
}

TEST(ToolCalls, HermesNearMissesStayContent) {
  expect_content_only("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}</tool_call>", F::hermes);  // bad JSON
  expect_content_only("<tool-call>{\"name\": \"f\", \"arguments\": {}}</tool-call>", F::hermes);
  expect_content_only("<tool_call>{\"arguments\": {}}</tool_call>", F::hermes);                  // no name
  expect_content_only("<tool_call>{\"name\": \"f\", \"arguments\": 5}</tool_call>", F::hermes);  // not an object
  expect_content_only("<tool_call>{\"name\": \"f\", \"arguments\": {}, \"x\": 1}</tool_call>", F::hermes);
  expect_content_only("<tool_call>{\"name\": \"f\"} {\"name\": \"g\"}</tool_call>", F::hermes);  // two values
  expect_content_only("<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>", F::hermes);
  // One good call beside a bad one: the good one is parsed, the bad one stays in the content.
  auto r = parse("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> <tool_call>{oops}</tool_call>",
                 F::hermes);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.content, "<tool_call>{oops}</tool_call>");
  // The right syntax under the wrong format (or none) is content.
  const std::string good = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  expect_content_only(good, F::none);
  expect_content_only(good, F::mistral);
  expect_content_only(good, F::deepseek);
  ToolCallParseOptions off = seeded();
  off.parse_tool_calls = false;
  EXPECT_EQ(parse(good, F::hermes, off).content, good);
}

TEST(ToolCalls, Llama3) {
  auto r = parse("{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}", F::llama3);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"location":"Paris"})");
  r = parse("{\"type\": \"function\", \"name\": \"get_time\", \"parameters\": {}}", F::llama3);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  r = parse(
      "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}; "
      "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}",
      F::llama3);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[1].name, "get_time");
  r = parse("<|python_tag|>brave_search.call(query=\"weather in Paris\", count=3)", F::llama3);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "brave_search");
  EXPECT_EQ(args_of(r.tool_calls[0]), ojson::parse(R"({"query": "weather in Paris", "count": 3})"));
  r = parse("Let me compute.<|python_tag|>print(6 * 7)", F::llama3);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "python");
  EXPECT_EQ(args_of(r.tool_calls[0]), ojson::parse(R"j({"code": "print(6 * 7)"})j"));
  EXPECT_EQ(r.content, "Let me compute.");
}

TEST(ToolCalls, Llama3NearMissesStayContent) {
  expect_content_only("{\"name\": \"Bob\", \"age\": 3}", F::llama3);                    // a JSON answer, not a call
  expect_content_only("The call is {\"name\": \"f\", \"parameters\": {}}", F::llama3);  // not at the start
  expect_content_only("{\"name\": \"f\", \"parameters\": {}", F::llama3);               // unclosed
  expect_content_only("{\"name\": \"f\", \"parameters\": {}} and more", F::llama3);     // trailing prose
  expect_content_only("<|python_tag|>{\"name\": \"f\", \"parameters\": [1]}", F::llama3);
  expect_content_only("{\"name\": \"f\", \"parameters\": {}}", F::hermes);
}

TEST(ToolCalls, Mistral) {
  auto r = parse(
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}, \"id\": "
      "\"abc123def\"}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]",
      F::mistral);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].id, "abc123def");  // the model's own id is kept
  EXPECT_EQ(r.tool_calls[1].id.size(), 9u);    // Mistral's templates require 9 alphanumerics
  r = parse("[TOOL_CALLS]get_weather[CALL_ID]abc123def[ARGS]{\"location\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}",
            F::mistral);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].id, "abc123def");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"location":"Paris"})");
  EXPECT_EQ(r.tool_calls[1].name, "get_time");
  EXPECT_EQ(r.content, "");
  // Arguments written as a JSON string holding the object (a template's tojson of a string).
  r = parse("Sure.[TOOL_CALLS]get_time[ARGS]\"{\\\"tz\\\": \\\"CET\\\"}\"", F::mistral);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"tz":"CET"})");
  EXPECT_EQ(r.content, "Sure.");
}

TEST(ToolCalls, MistralNearMissesStayContent) {
  expect_content_only("[TOOL_CALL][{\"name\": \"f\", \"arguments\": {}}]", F::mistral);
  expect_content_only("[TOOL_CALLS]{\"name\": \"f\", \"arguments\": {}}", F::mistral);  // object, not array
  expect_content_only("[TOOL_CALLS]get weather[ARGS]{}", F::mistral);                   // not a name
  expect_content_only("[TOOL_CALLS]f[ARGS]{\"a\": }", F::mistral);
  expect_content_only("[TOOL_CALLS][]", F::mistral);
  expect_content_only("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"arguments\": {}}]", F::mistral);
}

TEST(ToolCalls, DeepSeek) {
  auto r = parse(
      "<think>\nNeed weather.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_weather\n```json\n{\"location\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
      "<｜tool▁sep｜>get_time\n```json\n{\"tz\": \"CET\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      F::deepseek);
  EXPECT_EQ(r.reasoning_content, "Need weather.");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"location":"Paris"})");
  EXPECT_EQ(r.tool_calls[1].name, "get_time");
  // V3.1: no type, no code fence.
  r = parse(
      "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Paris\"}"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      F::deepseek);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.content, "Checking.");
}

TEST(ToolCalls, DeepSeekNearMissesStayContent) {
  expect_content_only(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather{\"a\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      F::deepseek);  // no separator
  expect_content_only(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>",
      F::deepseek);  // the fence is not closed
  expect_content_only("<｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜>", F::deepseek);  // no calls-begin
  expect_content_only("<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>", F::deepseek);
  expect_content_only("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜>trailing",
                      F::deepseek);
}

TEST(ToolCalls, Reasoning) {
  ToolCallParseOptions open = seeded();
  open.reasoning_open = true;
  auto r = parse("Thinking hard.\n</think>\n\nParis.", F::none, open);
  EXPECT_EQ(r.reasoning_content, "Thinking hard.");
  EXPECT_EQ(r.content, "Paris.");
  r = parse("<think>\nStill thinking", F::none);  // ended inside the block (max tokens)
  EXPECT_EQ(r.reasoning_content, "Still thinking");
  EXPECT_EQ(r.content, "");
  // Not leading, or turned off: content as generated.
  expect_content_only("Answer. <think>aside</think> more", F::none);
  expect_content_only("Answer.</think> more", F::hermes);
  ToolCallParseOptions off = seeded();
  off.parse_reasoning = false;
  EXPECT_EQ(parse("<think>x</think>y", F::none, off).content, "<think>x</think>y");

  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
}

TEST(ToolCalls, ToMessageIsOpenAiShaped) {
  auto r = parse("<think>why</think><tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}</tool_call>",
                 F::hermes);
  const ojson m = r.to_message();
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["reasoning_content"], "why");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"tz":"CET"})");
  EXPECT_EQ(m["tool_calls"][0]["id"], r.tool_calls[0].id);
  const ojson plain = parse("Hello.", F::hermes).to_message();
  EXPECT_EQ(plain, ojson::parse(R"({"role": "assistant", "content": "Hello."})"));
}

// Every prefix of every example, under every format, with a stray byte, never throws.
TEST(ToolCalls, TruncatedAndCorruptOutputNeverThrows) {
  const std::vector<std::string> samples = {
      "<think>a</think><tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"\\u00e9\"}]}}</tool_call>",
      "<|python_tag|>f.call(a=\"x\", b=[1,2])",
      "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}, \"id\": \"abc123def\"}][TOOL_CALLS]g[CALL_ID]x[ARGS]{}",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      std::string(2000, '[') + std::string(2000, ']')};
  for (const auto& s : samples)
    for (size_t n = 0; n <= s.size(); n += 1 + n / 64)
      for (F f : {F::none, F::hermes, F::llama3, F::mistral, F::deepseek}) {
        std::string t = s.substr(0, n);
        EXPECT_NO_THROW(parse(t, f).to_message().dump(-1, ' ', false, ojson::error_handler_t::replace));
        t.insert(t.size() / 2, "\xff");
        EXPECT_NO_THROW(parse(t, f).to_message().dump(-1, ' ', false, ojson::error_handler_t::replace));
        EXPECT_LE(tool_call_start(t, f), t.size());
      }
}

TEST(ToolCalls, StreamingHoldsBackFromTheMarker) {
  EXPECT_EQ(tool_call_start("Hello <tool_call>{", F::hermes), 6u);
  EXPECT_EQ(tool_call_start("Hello <tool", F::hermes), 6u);  // a marker's prefix at the end
  EXPECT_EQ(tool_call_start("Hello <b>", F::hermes), 9u);
  EXPECT_EQ(tool_call_start(" {\"na", F::llama3), 0u);
  EXPECT_EQ(tool_call_start("Hi [TOOL_", F::mistral), 3u);
  EXPECT_EQ(tool_call_start("x<｜tool▁ca", F::deepseek), 1u);
  EXPECT_EQ(tool_call_start("<tool_call>", F::none), 11u);
}

// --- round trips through the real templates --------------------------------------------------

struct RoundTrip {
  const char* file;
  F format;
  const char* bos;
  const char* eos;
  bool keeps_content = true;  // the template writes an assistant's content beside its tool calls
  bool one_call = false;      // it allows a single call per message (Llama 3.x)
  bool null_content = false;  // it renders the calls only when content is empty (the R1 templates)
  // It concatenates the arguments as a string (OpenAI's shape; the others expect the object
  // transformers' callers pass).
  bool string_args = false;
  // llama.cpp's R1 template pipes map() into tojson, which jinja2 itself refuses: no tools.
  bool no_tools = false;
};

constexpr const char* kDsBos = "<｜begin▁of▁sentence｜>";
constexpr const char* kDsEos = "<｜end▁of▁sentence｜>";
const RoundTrip kRoundTrips[] = {
    {.file = "Qwen-Qwen2.5-7B-Instruct", .format = F::hermes, .bos = "", .eos = "<|im_end|>"},
    {.file = "Qwen-Qwen3-0.6B", .format = F::hermes, .bos = "", .eos = "<|im_end|>"},
    {.file = "Qwen-QwQ-32B", .format = F::hermes, .bos = "", .eos = "<|im_end|>"},
    {.file = "Qwen3.5-4B", .format = F::hermes, .bos = "", .eos = "<|im_end|>"},
    {.file = "Qwen3-Coder", .format = F::hermes, .bos = "", .eos = "<|im_end|>"},
    {.file = "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
     .format = F::hermes,
     .bos = "<|begin_of_text|>",
     .eos = "<|im_end|>",
     .keeps_content = false},
    {.file = "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
     .format = F::hermes,
     .bos = "<|begin_of_text|>",
     .eos = "<|im_end|>",
     .keeps_content = false},
    {.file = "meta-llama-Llama-3.1-8B-Instruct",
     .format = F::llama3,
     .bos = "<|begin_of_text|>",
     .eos = "<|eot_id|>",
     .keeps_content = false,
     .one_call = true},
    {.file = "meta-llama-Llama-3.2-3B-Instruct",
     .format = F::llama3,
     .bos = "<|begin_of_text|>",
     .eos = "<|eot_id|>",
     .keeps_content = false,
     .one_call = true},
    {.file = "meta-llama-Llama-3.3-70B-Instruct",
     .format = F::llama3,
     .bos = "<|begin_of_text|>",
     .eos = "<|eot_id|>",
     .keeps_content = false,
     .one_call = true},
    {.file = "mistralai-Mistral-Nemo-Instruct-2407",
     .format = F::mistral,
     .bos = "<s>",
     .eos = "</s>",
     .keeps_content = false},
    {.file = "Mistral-Small-3.2-24B-Instruct-2506",
     .format = F::mistral,
     .bos = "<s>",
     .eos = "</s>",
     .keeps_content = false},
    {.file = "unsloth-mistral-Devstral-Small-2507", .format = F::mistral, .bos = "<s>", .eos = "</s>"},
    // The official R1 template writes content after the calls' end-of-sentence (llama.cpp calls
    // it broken): a model stops before it, so no content comes back.
    {.file = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
     .format = F::deepseek,
     .bos = kDsBos,
     .eos = kDsEos,
     .keeps_content = false},
    {.file = "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
     .format = F::deepseek,
     .bos = kDsBos,
     .eos = kDsEos,
     .keeps_content = false,
     .null_content = true,
     .string_args = true},
    {.file = "llama-cpp-deepseek-r1",
     .format = F::deepseek,
     .bos = kDsBos,
     .eos = kDsEos,
     .keeps_content = false,
     .null_content = true,
     .no_tools = true},
    {.file = "deepseek-ai-DeepSeek-V3.1", .format = F::deepseek, .bos = kDsBos, .eos = kDsEos},
};

std::string template_path(const char* name) { return test::shared_dir() + "/chat-templates/" + name + ".jinja"; }

TEST(ToolCalls, DetectsTheFormatOfRealTemplates) {
  SLUICE_REQUIRE_SHARED();
  for (const auto& rt : kRoundTrips)
    EXPECT_EQ(tool_call_format_name(detect_tool_call_format(test::read_text_file(template_path(rt.file)))),
              std::string(tool_call_format_name(rt.format)))
        << rt.file;
  // Templates without one of these syntaxes (functionary shares Llama 3's header tokens).
  for (const char* none :
       {"google-gemma-2-2b-it", "microsoft-Phi-3.5-mini-instruct", "meetkai-functionary-medium-v3.1"})
    EXPECT_EQ(detect_tool_call_format(test::read_text_file(template_path(none))), F::none) << none;
}

TEST(ToolCalls, RoundTripThroughRealTemplates) {
  SLUICE_REQUIRE_SHARED();
  const std::string content = "Let me check.";
  for (const auto& rt : kRoundTrips) {
    SCOPED_TRACE(rt.file);
    // Arguments as objects, the way transformers' callers pass them to templates.
    ojson calls = ojson::parse(R"([
      {"id": "call1abcd", "type": "function", "function": {"name": "get_weather",
       "arguments": {"location": "Paris", "days": 3}}},
      {"id": "call2efgh", "type": "function", "function": {"name": "get_time", "arguments": {"tz": "CET"}}}])");
    if (rt.one_call) calls.erase(1);
    ojson rendered_calls = calls;
    if (rt.string_args)
      for (auto& c : rendered_calls) c["function"]["arguments"] = c["function"]["arguments"].dump();
    ojson messages = ojson::array();
    messages.push_back({{"role", "user"}, {"content", "What is the weather in Paris?"}});
    const std::string source = test::read_text_file(template_path(rt.file));
    ChatTemplate tmpl(source, rt.file);
    ChatTemplateInput in;
    if (!rt.no_tools) in.tools = kTools;
    in.extra["bos_token"] = rt.bos;
    in.extra["eos_token"] = rt.eos;
    in.messages = messages;
    in.add_generation_prompt = true;
    const std::string prompt = tmpl.apply(in);
    in.messages.push_back({{"role", "assistant"},
                           {"content", rt.null_content ? ojson() : ojson(content)},
                           {"tool_calls", rendered_calls}});
    in.add_generation_prompt = false;
    const std::string full = tmpl.apply(in);
    // What the model generates: the assistant part, up to the end-of-turn token (generation
    // stops there and the token is not text). A prompt that opens the reasoning (QwQ, R1: the
    // history drops it) is followed by the reasoning and its close.
    // The prompt less a trailing think block the history does not repeat (QwQ's "<think>\n</think>").
    std::string_view head = prompt;
    for (std::string_view tag : {"</think>", "<think>"}) {
      while (!head.empty() && std::isspace(static_cast<unsigned char>(head.back()))) head.remove_suffix(1);
      if (head.ends_with(tag)) head.remove_suffix(tag.size());
    }
    const size_t common = full.compare(0, prompt.size(), prompt) == 0 ? prompt.size() : head.size();
    const bool opens = prompt_opens_reasoning(prompt);
    ASSERT_EQ(full.compare(0, common, prompt, 0, common), 0) << "prompt:\n" << prompt << "\nfull:\n" << full;
    // (Qwen3.5 renders the last message's reasoning block itself, empty: then that is the text.)
    const bool add_reasoning = opens && full.find("</think>", common) == std::string::npos;
    std::string gen = (add_reasoning ? "I should call the tools.\n</think>\n\n" : "") + full.substr(common);
    for (std::string_view end : {std::string_view(rt.eos), std::string_view("<|eom_id|>")})
      if (const size_t k = gen.find(end); k != std::string::npos) gen.resize(k);
    ToolCallParseOptions o = seeded();
    o.tools = kTools;
    o.reasoning_open = opens;
    const ParsedOutput r = parse_model_output(gen, detect_tool_call_format(source), o);
    ASSERT_EQ(r.tool_calls.size(), calls.size()) << gen;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(r.tool_calls[i].name, calls[i]["function"]["name"]) << gen;
      EXPECT_EQ(args_of(r.tool_calls[i]), calls[i]["function"]["arguments"]) << gen;
    }
    EXPECT_EQ(r.content, rt.keeps_content ? content : "") << gen;
    if (add_reasoning) {
      EXPECT_EQ(r.reasoning_content, "I should call the tools.");
    }
  }
}

// The one splitter (runtime/reasoning): a whole reply parsed, and the same reply streamed in
// pieces of every size, split the same; the template's own markers where it names them.
TEST(ToolCalls, ReasoningStreamedOrWholeSplitsTheSame) {
  const ReasoningMarkers think;
  const ReasoningMarkers seed = detect_reasoning_markers("{{ '<seed:think>' }} ... {{ '</seed:think>' }}");
  EXPECT_EQ(seed.open, "<seed:think>");
  EXPECT_EQ(seed.close, "</seed:think>");
  EXPECT_EQ(detect_reasoning_markers("<|im_start|>").open, "<think>");
  EXPECT_EQ(detect_reasoning_markers("<|START_THINKING|><|END_THINKING|>").close, "<|END_THINKING|>");
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<seed:think>\n", seed));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<seed:think>\n", think));

  struct Case {
    std::string text;
    bool open;
    ReasoningMarkers m;
    std::string reasoning, answer;
  };
  const std::vector<Case> cases = {
      {"<think>\nStep one.\n\nStep two.\n</think>\n\nParis.", false, think, "Step one.\n\nStep two.", "Paris."},
      {"  <think>a</think>b", false, think, "a", "b"},
      {"still going \n", true, think, "still going", ""},
      {"x</think>\ny", true, think, "x", "y"},
      {"No block <think>here</think>", false, think, "", "No block <think>here</think>"},
      {"<think></think>\n\nJust this.", false, think, "", "Just this."},
      {"<seed:think>plan</seed:think>done", false, seed, "plan", "done"},
      {"<think>plan</think>done", false, seed, "", "<think>plan</think>done"},
  };
  for (const Case& c : cases) {
    ToolCallParseOptions o = seeded();
    o.reasoning_open = c.open;
    o.reasoning_markers = c.m;
    const ParsedOutput whole = parse(c.text, F::none, o);
    EXPECT_EQ(whole.reasoning_content, c.reasoning) << c.text;
    EXPECT_EQ(whole.content, c.answer) << c.text;
    for (size_t step = 1; step <= 5; ++step) {
      std::string r, a;
      ReasoningSplitter sp(
          c.open, [&](bool is_r, std::string_view t) { (is_r ? r : a) += t; }, c.m);
      for (size_t i = 0; i < c.text.size(); i += step) sp.push(std::string_view(c.text).substr(i, step));
      sp.flush();
      EXPECT_EQ(r, c.reasoning) << c.text << " in pieces of " << step;
      EXPECT_EQ(a, c.answer) << c.text << " in pieces of " << step;
    }
  }
}

// What a forced call is constrained to spell parses back, in every format, as that call.
TEST(ToolCalls, ForcedCallFramesParseBackAsTheCall) {
  for (F f : {F::none, F::hermes, F::llama3, F::mistral, F::deepseek}) {
    const ToolCallFrame fr = tool_call_frame(f, "get_weather");
    EXPECT_EQ(fr.format, f == F::none ? F::hermes : f);
    const std::string text = fr.before + R"({"city": "Paris", "days": 2})" + fr.after + fr.close;
    const ParsedOutput r = parse(text, fr.format);
    ASSERT_EQ(r.tool_calls.size(), 1u) << tool_call_format_name(f) << ": " << text;
    EXPECT_EQ(r.tool_calls[0].name, "get_weather");
    EXPECT_EQ(args_of(r.tool_calls[0]), ojson::parse(R"({"city": "Paris", "days": 2})"));
    EXPECT_EQ(r.content, "") << text;
    // Parallel calls: a second call of another function after `next` (llama3 has none).
    if (fr.next.empty()) {
      EXPECT_EQ(f, F::llama3);
      continue;
    }
    const ToolCallFrame t = tool_call_frame(f, "get_time");
    const std::string two = fr.before + R"({"city": "Paris"})" + fr.after + t.next + R"({"tz": "UTC"})" + t.after +
                            t.close;
    const ParsedOutput r2 = parse(two, fr.format);
    ASSERT_EQ(r2.tool_calls.size(), 2u) << tool_call_format_name(f) << ": " << two;
    EXPECT_EQ(r2.tool_calls[0].name, "get_weather");
    EXPECT_EQ(r2.tool_calls[1].name, "get_time");
    EXPECT_EQ(args_of(r2.tool_calls[1]), ojson::parse(R"({"tz": "UTC"})"));
    EXPECT_EQ(r2.content, "") << two;
  }
}

// Tools for a template that would not show them: a system message describing them in the
// Hermes syntax, in front, or appended to a leading text system message; other messages as sent.
TEST(ToolCalls, ToolsSystemPromptForTemplatesThatIgnoreTools) {
  const ojson user = ojson::parse(R"([{"role": "user", "content": "Weather in Paris?"}])");
  const ojson a = with_tools_system_prompt(user, kTools);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0]["role"], "system");
  EXPECT_EQ(a[1], user[0]);
  const std::string text = a[0]["content"];
  for (const auto& t : kTools) EXPECT_NE(text.find(t.dump()), std::string::npos) << "every tool's JSON";
  EXPECT_NE(text.find("<tools>"), std::string::npos);
  EXPECT_NE(text.find("<tool_call>"), std::string::npos) << "the syntax replies are parsed in";
  // A leading system message with text: appended to it, no new message.
  ojson sys = ojson::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");
  const ojson b = with_tools_system_prompt(sys, kTools);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0]["content"].get<std::string>().rfind("Be brief.\n\n# Tools", 0), 0u) << b[0]["content"];
  EXPECT_EQ(b[1], sys[1]);
  // A system message whose content is parts: left as it is, the tools in a message in front.
  sys[0]["content"] = ojson::parse(R"([{"type": "text", "text": "Be brief."}])");
  const ojson c = with_tools_system_prompt(sys, kTools);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[1], sys[0]);
  EXPECT_EQ(c[0]["role"], "system");
}

}  // namespace
}  // namespace sluice
