// template/chat_template: a model's chat template (Jinja2) rendered as Hugging Face transformers
// renders it (apply_chat_template: jinja2's ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks, loopcontrols, raise_exception, strftime_now and a non-escaping tojson). The
// language is the subset of jinja2 that real chat templates use; see tests/unit/test_chat_template.cpp
// for the goldens rendered by jinja2 itself (scripts/render_chat_templates.py).
#pragma once
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "template/value.h"

namespace sluice {

struct ChatTemplateOptions {
  bool trim_blocks = true;  // transformers sets both; the tests turn them off as a negative control
  bool lstrip_blocks = true;
  std::function<std::tm()> clock;  // strftime_now's time; default: the local time now
  size_t max_output = 64u << 20;   // sandbox limits (bytes, loop iterations, nested macro calls)
  int64_t max_iterations = 10000000;
  int max_call_depth = 100;
};

// Messages, tools and extra variables as transformers passes them to the template.
struct ChatTemplateInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: no tools (passed as None, like transformers)
  bool add_generation_prompt = false;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // bos_token, eos_token, ...
};

class ChatTemplate {
 public:
  // Parses `source`; throws tmpl::TemplateError (kind syntax) "NAME:LINE: message".
  explicit ChatTemplate(const std::string& source, std::string name = "template", ChatTemplateOptions opt = {});
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // Renders with these variables (a JSON object); throws tmpl::TemplateError naming the line.
  std::string render(const nlohmann::ordered_json& variables) const;
  // transformers' variables: messages, tools, documents (None), add_generation_prompt, extra.
  std::string apply(const ChatTemplateInput& in) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// JSON -> template value (objects keep their key order, as Python's json does).
tmpl::Value json_to_value(const nlohmann::ordered_json& j);

}  // namespace sluice
