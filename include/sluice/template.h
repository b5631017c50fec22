// sluice/template.h: a chat template (the Jinja2 subset real templates use) rendered over
// messages, byte for byte as transformers' apply_chat_template (`sluice template`).
#pragma once
#include <memory>
#include <optional>
#include <string>

namespace sluice {

struct PromptTemplateInput {
  std::string messages_json = "[]";  // a JSON array of messages ({"role", "content", ...})
  std::string tools_json{};          // a JSON array of tool definitions; empty: none (None)
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token{}, eos_token{};  // undefined in the template when absent
};

class PromptTemplate {
 public:
  // Parses `source`; throws Error "NAME:LINE: message".
  PromptTemplate(const std::string& source, const std::string& name);
  ~PromptTemplate();
  // Throws Error naming the template's line (or bad JSON in the input).
  std::string apply(const PromptTemplateInput& in) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
