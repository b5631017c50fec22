// runtime/chat_session: a conversation over one Session — the messages (OpenAI's shape), the
// model's chat template applied to them, one turn's generation, and the prompt cache that
// keeps a turn from re-processing the conversation before it.
//
// The prompt cache: the Session's KV rows (and recurrent states) stay between turns, and
// cached() lists the tokens they hold. Each turn renders and tokenizes the whole conversation,
// keeps the longest common prefix with cached(), rewinds the Session to it (a hybrid model
// lands on its latest checkpoint at or before it: one is taken at the end of every turn's
// prompt and reply) and evaluates only the rest. Rendering the whole conversation each time,
// rather than appending to what was evaluated, is what keeps the prompt exactly what the
// template gives: a template may re-render earlier turns (drop their reasoning, add separators),
// and the tokens that differ are simply evaluated again.
//
// `sluice chat` (apps/cli/cmd_chat.cpp) is a terminal around this class; the tests drive it
// directly.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat_format.h"
#include "runtime/generator.h"
#include "runtime/reasoning.h"
#include "runtime/session.h"
#include "runtime/tool_calls.h"

namespace sluice {

struct ChatTurn {
  std::string text;     // everything generated (reasoning and markup included), as streamed
  ParsedOutput parsed;  // its content, reasoning and tool calls (what the history keeps)
  GenerationStats stats;
  int64_t n_prompt = 0;     // tokens of the rendered conversation
  int64_t n_reused = 0;     // of them, kept in the cache from earlier turns
  int64_t n_evaluated = 0;  // of them, evaluated this turn (n_prompt - n_reused)
};

class ChatSession {
 public:
  // The session must outlive this; it is reset here (the cache starts empty).
  ChatSession(Session& s, const ChatFormat& fmt, GenerateParams p);

  // The system prompt, kept as the conversation's first message (empty: none).
  void set_system(const std::string& text);
  const std::string& system() const { return system_; }
  // Forgets the conversation (the system prompt stays). The cache is kept: the next turn
  // reuses whatever prefix still matches (the system prompt's tokens, at least).
  void reset();
  // The conversation, the system message first when there is one.
  const nlohmann::ordered_json& messages() const { return messages_; }
  // Replaces the conversation (/load): an array of objects with a string "role" and a string
  // (or null) "content"; a leading system message sets system(). Throws sluice::Error naming
  // the first message that is not one, and then changes nothing.
  void set_messages(const nlohmann::ordered_json& messages);
  // The tools the template is given (OpenAI's array; null: none) and whose calls are parsed.
  void set_tools(nlohmann::ordered_json tools) { tools_ = std::move(tools); }
  // false: every turn evaluates the whole conversation from position 0 (the reference the
  // cache is tested against).
  void set_prompt_cache(bool on) { reuse_ = on; }

  // The reply as it streams, split into reasoning (a leading <think> block, or the rest of the
  // one the template's generation prompt opened) and answer; returning false stops the reply.
  using TextFn = std::function<bool(std::string_view text, bool reasoning)>;
  using CancelFn = std::function<bool()>;  // checked before each token; true stops the reply
  // Adds the user's message, generates the assistant's reply (streamed to on_text) and adds it
  // to the conversation: its content, with reasoning as reasoning_content and tool calls as
  // tool_calls, never the raw reasoning as content. A reply stopped early (cancel, context
  // full) is kept as far as it went. Throws sluice::Error (the message dropped again) when the
  // conversation no longer fits the context, and tmpl::TemplateError when the template refuses it.
  ChatTurn send(const std::string& user_text, const TextFn& on_text = {}, const CancelFn& cancelled = {});
  // The same for the conversation as it stands (its last message a user's or a tool's).
  ChatTurn respond(const TextFn& on_text = {}, const CancelFn& cancelled = {});

  // The tokens whose KV the session holds, in order (positions 0..cached().size()-1).
  const std::vector<int32_t>& cached() const { return cached_; }
  ToolCallFormat tool_format() const { return tool_format_; }

 private:
  // Rewinds to the longest usable prefix of `ids` and evaluates the rest; returns the count reused.
  int64_t evaluate_prompt(const std::vector<int32_t>& ids, std::span<const float>& logits);

  Session& s_;
  const ChatFormat& fmt_;
  GenerateParams p_;
  std::string system_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools_;
  ToolCallFormat tool_format_;
  ReasoningMarkers markers_;  // the template's reasoning markers
  bool reuse_ = true;
  std::vector<int32_t> cached_;
};

}  // namespace sluice
