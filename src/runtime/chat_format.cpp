// runtime/chat_format: the model's chat template, or ChatML when it has none.
#include "runtime/chat_format.h"

namespace sluice {
namespace {

// ChatML, the format llama.cpp falls back to for a model without a template.
constexpr const char* kChatMl =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

std::string pick_source(const Model& m, const std::string& override_source, bool& fallback) {
  if (!override_source.empty()) return override_source;
  const std::string own = m.file().get_string_or("tokenizer.chat_template", "");
  fallback = own.empty();
  return fallback ? kChatMl : own;
}

std::string token_text(const Tokenizer& tok, int32_t id) {
  return id >= 0 && id < tok.n_vocab() ? tok.vocab().tokens[static_cast<size_t>(id)] : std::string();
}

}  // namespace

ChatFormat::ChatFormat(const Model& m, const std::string& override_source)
    : model_(m),
      source_(pick_source(m, override_source, fallback_)),
      bos_(token_text(m.tokenizer(), m.tokenizer().bos())),
      eos_(token_text(m.tokenizer(), m.tokenizer().eos())),
      tmpl_(source_, override_source.empty() ? (fallback_ ? "chatml" : "tokenizer.chat_template") : "--chat-template") {
}

std::string ChatFormat::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                               bool add_generation_prompt) const {
  ChatTemplateInput in;
  in.messages = messages;
  in.tools = tools;
  in.add_generation_prompt = add_generation_prompt;
  in.extra["bos_token"] = bos_;
  in.extra["eos_token"] = eos_;
  return tmpl_.apply(in);
}

std::vector<int32_t> ChatFormat::tokenize(const std::string& rendered) const {
  const Tokenizer& tok = model_.tokenizer();
  // A template that writes BOS itself (llama 3, mistral) must not get a second one.
  const bool has_bos = !bos_.empty() && rendered.compare(0, bos_.size(), bos_) == 0;
  return tok.encode(rendered, /*add_special=*/!has_bos, /*parse_special=*/true);
}

}  // namespace sluice
