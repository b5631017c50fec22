// template/chat_template: the public face of the interpreter: parse once, render per request.
#include "template/chat_template.h"

#include "template/interp.h"

namespace sluice {

using tmpl::TemplateError;
using tmpl::Value;

struct ChatTemplate::Impl {
  std::string name;
  ChatTemplateOptions opt;
  std::unique_ptr<tmpl::Program> prog;
};

ChatTemplate::ChatTemplate(const std::string& source, std::string name, ChatTemplateOptions opt)
    : impl_(std::make_unique<Impl>()) {
  impl_->name = std::move(name);
  impl_->opt = std::move(opt);
  try {
    tmpl::LexOptions lo;
    lo.trim_blocks = impl_->opt.trim_blocks;
    lo.lstrip_blocks = impl_->opt.lstrip_blocks;
    impl_->prog = tmpl::parse(tmpl::lex(source, lo));
  } catch (const TemplateError& e) {
    throw TemplateError(e.kind, e.line, e.detail, impl_->name);
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

Value json_to_value(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      tmpl::List l;
      for (const auto& x : j) l.push_back(json_to_value(x));
      return Value::list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      tmpl::Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.emplace_back(it.key(), json_to_value(it.value()));
      return Value::dict(std::move(d));
    }
    default: return Value::none();
  }
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  tmpl::Dict vars;
  if (!variables.is_object()) fail(impl_->name, ": the template variables must be a JSON object");
  for (auto it = variables.begin(); it != variables.end(); ++it) vars.emplace_back(it.key(), json_to_value(it.value()));
  tmpl::Limits lim;
  lim.max_output = impl_->opt.max_output;
  lim.max_iterations = impl_->opt.max_iterations;
  lim.max_call_depth = impl_->opt.max_call_depth;
  auto clock = impl_->opt.clock ? impl_->opt.clock : [] {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    return tm;
  };
  tmpl::Interp in(lim, clock);
  try {
    return in.render(*impl_->prog, vars);
  } catch (const TemplateError& e) {
    throw TemplateError(e.kind, e.line, e.detail, impl_->name);
  } catch (const tmpl::ValueError& e) {
    throw TemplateError(e.kind, 0, e.msg, impl_->name);
  }
}

std::string ChatTemplate::apply(const ChatTemplateInput& in) const {
  nlohmann::ordered_json v = nlohmann::ordered_json::object();
  v["messages"] = in.messages;
  v["tools"] = in.tools;
  v["documents"] = nullptr;
  v["add_generation_prompt"] = in.add_generation_prompt;
  if (in.extra.is_object())
    for (auto it = in.extra.begin(); it != in.extra.end(); ++it) v[it.key()] = it.value();
  return render(v);
}

}  // namespace sluice
