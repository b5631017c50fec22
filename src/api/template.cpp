// api/template: sluice/template.h over template/chat_template.
#include "sluice/template.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "template/chat_template.h"

namespace sluice {

struct PromptTemplate::Impl {
  ChatTemplate t;
};

PromptTemplate::PromptTemplate(const std::string& source, const std::string& name)
    : impl_(std::make_unique<Impl>(Impl{ChatTemplate(source, name)})) {}
PromptTemplate::~PromptTemplate() = default;

std::string PromptTemplate::apply(const PromptTemplateInput& in) const {
  ChatTemplateInput x;
  try {
    x.messages = nlohmann::ordered_json::parse(in.messages_json);
    if (!in.tools_json.empty()) x.tools = nlohmann::ordered_json::parse(in.tools_json);
  } catch (const nlohmann::json::exception& e) {
    fail("template input is not valid JSON: ", e.what());
  }
  x.add_generation_prompt = in.add_generation_prompt;
  if (in.bos_token) x.extra["bos_token"] = *in.bos_token;
  if (in.eos_token) x.extra["eos_token"] = *in.eos_token;
  return impl_->t.apply(x);
}

}  // namespace sluice
