// sluice/chat.h: a conversation over an Engine's context with the model's chat template
// (`sluice chat`): each turn renders every message and evaluates only what the context does not
// hold yet (the prompt cache); replies stream split into reasoning and answer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/sluice.h"

namespace sluice {

struct ChatReply {
  std::string text;  // everything generated, as streamed
  GenerateStats stats;
  int64_t n_prompt = 0;     // tokens of the rendered conversation
  int64_t n_reused = 0;     // of them, kept in the context from earlier turns
  int64_t n_evaluated = 0;  // of them, evaluated this turn
};

class Chat {
 public:
  // The template: `template_source` (a Jinja2 text) or, when empty, the model's own (ChatML
  // when it has none). Throws Error for a template that does not parse.
  static std::unique_ptr<Chat> create(Engine& engine, const std::string& template_source = {});
  ~Chat();
  bool template_is_fallback() const;  // the model has no template: ChatML

  // Starts the conversation on the Engine's context as it is now (Engine::set_context first),
  // which it resets; the Engine must outlive this.
  void start(const GenerateOptions& opt, bool prompt_cache = true);

  void set_system(const std::string& text);  // kept as the first message (empty: none)
  const std::string& system() const;
  void reset();  // forgets the conversation (the system prompt stays)
  size_t n_messages() const;
  // The conversation as OpenAI's message array (invalid UTF-8 replaced by U+FFFD).
  std::string messages_json(int indent) const;
  // Replaces the conversation: a JSON array of {"role", "content"}; throws Error naming what
  // is wrong.
  void set_messages_json(const std::string& json);

  // The reply's text as it streams; reasoning: part of a leading <think> block.
  using TextFn = std::function<bool(std::string_view text, bool reasoning)>;
  using CancelFn = std::function<bool()>;  // checked before each token; true stops the reply
  // Adds the user's message and generates the reply (kept in the conversation). Throws Error
  // (the message dropped again) when the conversation does not fit the context.
  ChatReply send(const std::string& user_text, const TextFn& on_text = {}, const CancelFn& cancelled = {});

 private:
  Chat();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
