// runtime/tool_calls: a model's generated text back into OpenAI's assistant message — the
// content, a leading <think>...</think> block as reasoning_content, and the tool calls in the
// syntax the model's chat template taught it. Pure text in, structure out: no model, no
// tokenizer. The syntaxes are those the real templates in ../shared/chat-templates render for an
// assistant message with tool_calls (a model repeats what it was trained on); llama.cpp's
// common/chat.cpp and vLLM's tool parsers accept the same ones.
//
// Model output is untrusted and often almost right: nothing here throws on it. A call that does
// not parse completely (bad JSON, a missing closing marker, no name) is left in the content
// exactly as generated, so a client sees what the model wrote instead of a silent loss.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/reasoning.h"

namespace sluice {

enum class ToolCallFormat {
  none,  // no tool-call syntax known: everything outside the reasoning is content
  // Qwen2.5/Qwen3/QwQ, Hermes 2 Pro/3: <tool_call>{"name": N, "arguments": {...}}</tool_call>,
  // one block per call; also the XML body of Qwen3-Coder/Qwen3.5:
  // <tool_call><function=N><parameter=P>VALUE</parameter>...</function></tool_call>.
  hermes,
  // Llama 3.1-3.3: {"name": N, "parameters": {...}} as the whole reply, or after <|python_tag|>
  // (several separated by ';'); <|python_tag|>N.call(k="v", ...) for built-in tools;
  // <|python_tag|> followed by plain code calls "python" with {"code": ...}.
  llama3,
  // Mistral Nemo: [TOOL_CALLS][{"name": N, "arguments": {...}, "id": I}, ...]; Mistral Small 3.2,
  // Devstral, Magistral: [TOOL_CALLS]N[CALL_ID]I[ARGS]{...} and [TOOL_CALLS]N[ARGS]{...}, repeated.
  mistral,
  // DeepSeek R1 (and its distills): <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
  // \n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>; DeepSeek V3.1:
  // <｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜> inside the same begin/end pair.
  deepseek,
};

// The format a chat template's source renders tool calls in (none when it has no known one).
ToolCallFormat detect_tool_call_format(std::string_view template_source);
const char* tool_call_format_name(ToolCallFormat f);

struct ToolCall {
  std::string id;         // the model's own id when it wrote one (Mistral), else generated
  std::string name;       // function name
  std::string arguments;  // a JSON object as compact text: OpenAI's function.arguments
};

struct ParsedOutput {
  std::string content;            // text outside reasoning and calls (trimmed next to them)
  std::string reasoning_content;  // the <think> block's text, trimmed; empty without one
  std::vector<ToolCall> tool_calls;
  // OpenAI's assistant message: role, content (null when empty and there are tool calls),
  // reasoning_content (only when non-empty), tool_calls [{id, type: "function", function:
  // {name, arguments}}] (only when any).
  nlohmann::ordered_json to_message() const;
};

struct ToolCallParseOptions {
  bool parse_tool_calls = true;  // false: calls stay in the content (a request without tools)
  bool parse_reasoning = true;   // false: <think> blocks stay in the content
  // The prompt already opened the reasoning block (prompt_opens_reasoning: Qwen3 thinking, R1's
  // "<｜Assistant｜><think>\n"), so the text starts inside it and only </think> is generated.
  bool reasoning_open = false;
  ReasoningMarkers reasoning_markers;  // the template's (detect_reasoning_markers)
  // The request's tools (OpenAI's array; null: none). Used for the XML body's parameter types:
  // a parameter declared "string" stays text, others are read as JSON when they parse.
  nlohmann::ordered_json tools;
  uint64_t id_seed = 0;  // 0: random call ids; otherwise deterministic ones (tests)
};

ParsedOutput parse_model_output(std::string_view text, ToolCallFormat f, const ToolCallParseOptions& opt = {});

// For streaming: the offset in `text` (the generated text so far) from which it may be (the
// start of) a tool call in format f — a full marker, or a prefix of one at the very end — so a
// streamer can send text before it as content and hold the rest until the generation ends.
// text.size() when nothing needs holding back.
size_t tool_call_start(std::string_view text, ToolCallFormat f);

// A forced call (tool_choice "required" or a named function) as format f writes it: the text
// before the arguments object and the text after it, what starts a further call after it
// (parallel calls), and what closes the reply's calls, so a constrained generation
// (sampling/json_schema.h FramedJsonTokenFilter) can only spell calls parse_model_output reads
// back with those names: before + args + after [+ next + args + after ...] + close. none has
// no syntax of its own: it writes hermes' (what ChatML-style models without tool training are
// closest to, and llama.cpp's generic choice). llama3 has no `next` (one JSON call is the
// whole reply).
struct ToolCallFrame {
  ToolCallFormat format;  // the syntax written (and to parse with)
  std::string before, after;
  std::string next;   // the separator and the call's opening for a further call; empty: none
  std::string close;  // after the last call
};
ToolCallFrame tool_call_frame(ToolCallFormat f, std::string_view name);

// For a chat template that never shows the model the request's tools (SmolLM2's, most
// templates of models without tool training): the messages with the tools described in a
// system message, in the Hermes syntax of Qwen2.5's template (the function signatures in
// <tools></tools>, each call asked for as <tool_call>{"name": ..., "arguments": ...}</tool_call>),
// appended to a leading system message whose content is text, else a system message of its
// own in front. Replies are then parsed as hermes. tools: OpenAI's array (as sent).
nlohmann::ordered_json with_tools_system_prompt(const nlohmann::ordered_json& messages,
                                                const nlohmann::ordered_json& tools);

}  // namespace sluice
