// api/chat: sluice/chat.h over runtime/chat_format and runtime/chat_session.
#include "sluice/chat.h"

#include <nlohmann/json.hpp>

#include "api/engine_impl.h"
#include "core/error.h"
#include "runtime/chat_format.h"
#include "runtime/chat_session.h"

namespace sluice {

struct Chat::Impl {
  Engine::Impl* engine = nullptr;
  std::unique_ptr<ChatFormat> fmt;
  std::unique_ptr<ChatSession> chat;

  ChatSession& session() {
    if (!chat) fail("chat: start() was not called");
    return *chat;
  }
};

Chat::Chat() : impl_(std::make_unique<Impl>()) {}
Chat::~Chat() = default;

std::unique_ptr<Chat> Chat::create(Engine& engine, const std::string& template_source) {
  std::unique_ptr<Chat> c(new Chat());
  c->impl_->engine = &EngineAccess::impl(engine);
  c->impl_->fmt = std::make_unique<ChatFormat>(*c->impl_->engine->model, template_source);
  return c;
}

bool Chat::template_is_fallback() const { return impl_->fmt->is_fallback(); }

void Chat::start(const GenerateOptions& opt, bool prompt_cache) {
  impl_->chat = std::make_unique<ChatSession>(impl_->engine->sess(), *impl_->fmt, generate_params(opt));
  impl_->chat->set_prompt_cache(prompt_cache);
}

void Chat::set_system(const std::string& text) { impl_->session().set_system(text); }
const std::string& Chat::system() const { return impl_->session().system(); }
void Chat::reset() { impl_->session().reset(); }
size_t Chat::n_messages() const { return impl_->session().messages().size(); }

std::string Chat::messages_json(int indent) const {
  return impl_->session().messages().dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void Chat::set_messages_json(const std::string& json) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("the messages are not JSON");
  impl_->session().set_messages(j);
}

ChatReply Chat::send(const std::string& user_text, const TextFn& on_text, const CancelFn& cancelled) {
  const ChatTurn t = impl_->session().send(user_text, on_text, cancelled);
  ChatReply r;
  r.text = t.text;
  r.stats = generate_stats(t.stats);
  r.n_prompt = t.n_prompt;
  r.n_reused = t.n_reused;
  r.n_evaluated = t.n_evaluated;
  return r;
}

}  // namespace sluice
