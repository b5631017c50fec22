// runtime/chat_format: a model's chat template applied to a conversation — the prompt `chat`
// and `serve` evaluate. The template is the GGUF's tokenizer.chat_template (or a file that
// overrides it); a model without one gets ChatML, as llama.cpp falls back to. The rendered
// text is tokenized with special tokens parsed (the template spells <|im_start|> and friends),
// and BOS is added by the vocab's rule unless the template already wrote it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model.h"
#include "template/chat_template.h"

namespace sluice {

class ChatFormat {
 public:
  // override_source: a template's text that replaces the model's (empty: the model's own).
  // Throws sluice::Error / tmpl::TemplateError naming the template for one that does not parse.
  explicit ChatFormat(const Model& m, const std::string& override_source = {});

  // The prompt for `messages` (OpenAI's shape: role, content, and optionally tool_calls,
  // reasoning_content, name, tool_call_id) with `tools` (an array, or null for none), ending
  // with the assistant turn's opening when add_generation_prompt. Throws tmpl::TemplateError
  // (a template's raise_exception, e.g. "roles must alternate") with its message.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools = nullptr,
                     bool add_generation_prompt = true) const;
  // The rendered text as token ids (special tokens parsed; BOS as described above).
  std::vector<int32_t> tokenize(const std::string& rendered) const;

  const std::string& source() const { return source_; }
  bool is_fallback() const { return fallback_; }  // true: the model has no template, ChatML is used
  const std::string& bos_text() const { return bos_; }
  const std::string& eos_text() const { return eos_; }

 private:
  const Model& model_;
  bool fallback_ = false;  // before source_: its initializer sets it
  std::string source_, bos_, eos_;
  ChatTemplate tmpl_;
};

}  // namespace sluice
