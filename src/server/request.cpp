// server/request: field by field checks of OpenAI's chat and completion request bodies.
#include "server/request.h"

#include <cmath>
#include <limits>
#include <random>

#include "server/api_error.h"

namespace sluice::server {
namespace {

using json = nlohmann::ordered_json;

const char* type_name(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

// A field that is absent or null reads as "not given".
const json* field(const json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& body, const char* key, bool dflt) {
  const json* v = field(body, key);
  if (!v) return dflt;
  if (!v->is_boolean()) bad_field(key, std::string("must be a boolean, got ") + type_name(*v));
  return v->get<bool>();
}

double get_number(const json& body, const char* key, double dflt, double lo, double hi) {
  const json* v = field(body, key);
  if (!v) return dflt;
  if (!v->is_number()) bad_field(key, std::string("must be a number, got ") + type_name(*v));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    bad_field(key, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + v->dump());
  return x;
}

// An integer in [lo, hi]; 2.0 counts as an integer (JSON has one number type), 2.5 does not.
int64_t get_int(const json& body, const char* key, int64_t dflt, int64_t lo, int64_t hi) {
  const json* v = field(body, key);
  if (!v) return dflt;
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (v->is_number_integer()) {
    // A value beyond int64 parses as unsigned or float; both land in the range check below.
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
      bad_field(key, "must be an integer in " + range + ", got " + v->dump());
    const auto x = v->get<int64_t>();
    if (x < lo || x > hi) bad_field(key, "must be an integer in " + range + ", got " + v->dump());
    return x;
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    // |d| < 2^63 first: (double)INT64_MAX rounds up to 2^63, whose cast back is undefined.
    if (std::floor(d) == d && std::fabs(d) < 0x1p63 && d >= static_cast<double>(lo) && d <= static_cast<double>(hi))
      return static_cast<int64_t>(d);
  }
  bad_field(key, "must be an integer in " + range + ", got " + (v->is_number() ? v->dump() : type_name(*v)));
}

std::string get_string(const json& body, const char* key) {
  const json* v = field(body, key);
  if (!v) return {};
  if (!v->is_string()) bad_field(key, std::string("must be a string, got ") + type_name(*v));
  return v->get<std::string>();
}

std::vector<std::string> get_stop(const json& body) {
  const json* v = field(body, "stop");
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) bad_field("stop", std::string("must be a string or an array of strings, got ") + type_name(*v));
  if (v->size() > 16) bad_field("stop", "may hold at most 16 strings");
  std::vector<std::string> out;
  for (const auto& s : *v) {
    if (!s.is_string()) bad_field("stop", "must be a string or an array of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

// One message's content as the template sees it: a string (text parts joined by newlines, as
// llama-server does), or null (an assistant turn holding only tool calls).
json message_content(const json& c, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  if (c.is_null() || c.is_string()) return c;
  if (!c.is_array())
    bad_field(where, std::string("must be a string, an array of text parts or null, got ") + type_name(c));
  std::string text;
  for (size_t k = 0; k < c.size(); ++k) {
    const json& part = c[k];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad_field(where, "parts must be objects with a 'type'");
    if (part["type"] != "text")
      throw ApiError(400,
                     "'" + where + "': content parts of type '" + part["type"].get<std::string>() +
                         "' are not supported (text only)",
                     where);
    if (!part.contains("text") || !part["text"].is_string()) bad_field(where, "text parts need a string 'text'");
    if (k) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

json parse_messages(const json& body) {
  const json* v = field(body, "messages");
  if (!v) throw ApiError(400, "'messages' is required", "messages");
  if (!v->is_array() || v->empty()) bad_field("messages", "must be a non-empty array");
  json out = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad_field(where, std::string("must be an object, got ") + type_name(m));
    if (!m.contains("role") || !m["role"].is_string()) bad_field(where + ".role", "must be a string");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
      bad_field(where + ".role", "must be one of system, developer, user, assistant, tool; got '" + role + "'");
    json mm = m;
    // Templates know "system"; OpenAI's newer name for it is "developer".
    if (role == "developer") mm["role"] = "system";
    mm["content"] = message_content(m.contains("content") ? m["content"] : json(), i);
    if (mm["content"].is_null() && !m.contains("tool_calls")) bad_field(where + ".content", "is required");
    if (m.contains("tool_calls") && !m["tool_calls"].is_array()) bad_field(where + ".tool_calls", "must be an array");
    out.push_back(std::move(mm));
  }
  return out;
}

// The JSON Schema the matcher compiles, with its errors as a 400 naming `where`.
std::shared_ptr<const JsonSchema> compile_schema(const json& schema, const std::string& where) {
  try {
    return std::make_shared<const JsonSchema>(JsonSchema::compile(schema));
  } catch (const UnsupportedSchema& e) {
    throw ApiError(400, "'" + where + "' cannot be enforced: " + e.what(), where);
  } catch (const std::exception& e) {
    throw ApiError(400, "'" + where + "' is not a valid schema: " + e.what(), where);
  }
}

// tools and tool_choice. "none" (or no tools) renders no tools; "auto" renders them and parses
// calls out of the reply; "required" and a named function also force the reply to be a call,
// whose arguments must fit the function's parameters schema (a schema the matcher cannot
// enforce is a 400 naming it: never fail-open).
void parse_tools(const json& body, CompletionRequest& r) {
  const json* v = field(body, "tools");
  std::string choice = "auto", named;
  if (const json* c = field(body, "tool_choice")) {
    if (c->is_string()) {
      choice = c->get<std::string>();
    } else if (c->is_object()) {
      choice = "function";
      const auto f = c->find("function");
      if (c->value("type", json("function")) != "function" || f == c->end() || !f->is_object() ||
          !f->contains("name") || !(*f)["name"].is_string())
        bad_field("tool_choice", "must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      named = (*f)["name"].get<std::string>();
    } else {
      bad_field("tool_choice", std::string("must be a string or an object, got ") + type_name(*c));
    }
    if (choice != "none" && choice != "auto" && choice != "required" && choice != "function")
      bad_field("tool_choice", "must be none, auto, required or a function; got '" + choice + "'");
  }
  const bool forced = choice == "required" || choice == "function";
  if (!v) {
    if (forced) bad_field("tool_choice", "'" + choice + "' needs 'tools'");
    return;
  }
  if (!v->is_array()) bad_field("tools", std::string("must be an array, got ") + type_name(*v));
  for (size_t i = 0; i < v->size(); ++i) {
    const json& t = (*v)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object() || !t["function"].contains("name") ||
        !t["function"]["name"].is_string())
      bad_field(where, "must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if (forced && v->empty()) bad_field("tool_choice", "'" + choice + "' needs a non-empty 'tools'");
  if (choice == "none" || v->empty()) return;
  r.tools = *v;
  if (!forced) return;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& f = (*v)[i]["function"];
    const std::string name = f["name"].get<std::string>();
    if (choice == "function" && name != named) continue;
    for (const auto& t : r.forced_tools)
      if (t.name == name) bad_field("tools[" + std::to_string(i) + "].function.name", "'" + name + "' is named twice");
    const std::string where = "tools[" + std::to_string(i) + "].function.parameters";
    // No parameters: a function without arguments, called with {} (any object allowed).
    const json* params = field(f, "parameters");
    if (params && !params->is_object()) bad_field(where, "must be a JSON Schema object");
    auto schema = params ? compile_schema(*params, where)
                         : std::make_shared<const JsonSchema>(JsonSchema::any_object());
    r.forced_tools.push_back({name, std::move(schema)});
  }
  if (r.forced_tools.empty()) bad_field("tool_choice", "names the function '" + named + "', which is not in 'tools'");
  bool parallel = true;
  if (const json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) bad_field("parallel_tool_calls", std::string("must be a boolean, got ") + type_name(*p));
    parallel = p->get<bool>();
  }
  r.forced_parallel = choice == "required" && parallel;
}

void parse_prompt(const json& body, CompletionRequest& r, int32_t n_vocab) {
  const json* v = field(body, "prompt");
  if (!v) throw ApiError(400, "'prompt' is required", "prompt");
  json p = *v;
  // One prompt in an array ("prompt": ["text"] or [[1, 2, 3]]) is the prompt itself.
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = json(p[0]);
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
    return;
  }
  if (p.is_array() && !p.empty()) {
    for (const auto& t : p) {
      if (t.is_string()) throw ApiError(400, "'prompt': several prompts in one request are not supported", "prompt");
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
        bad_field("prompt", "token ids must be integers in [0, " + std::to_string(n_vocab) + ")");
      r.prompt_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    r.prompt_is_ids = true;
    return;
  }
  bad_field("prompt", "must be a string, an array of token ids, or an array holding one of them");
}

// response_format: text (free), json_object (any object) or json_schema (its "schema"),
// enforced by constrained sampling (sampling/json_schema.h); a schema it cannot enforce is a 400.
std::shared_ptr<const JsonSchema> parse_response_format(const json& body) {
  const json* rf = field(body, "response_format");
  if (!rf) return nullptr;
  if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
    bad_field("response_format", "must be an object with a string 'type'");
  const std::string t = (*rf)["type"].get<std::string>();
  if (t == "text") return nullptr;
  if (t == "json_object") return std::make_shared<const JsonSchema>(JsonSchema::any_object());
  if (t != "json_schema")
    bad_field("response_format", "type must be text, json_object or json_schema; got '" + t + "'");
  const auto js = rf->find("json_schema");
  if (js == rf->end() || !js->is_object()) bad_field("response_format.json_schema", "must be an object");
  const auto sc = js->find("schema");
  // No schema: any JSON value would do; an object is what clients expect of json_schema.
  if (sc == js->end() || sc->is_null()) return std::make_shared<const JsonSchema>(JsonSchema::any_object());
  if (!sc->is_object() && !sc->is_boolean())
    bad_field("response_format.json_schema.schema", "must be a JSON Schema object");
  return compile_schema(*sc, "response_format.json_schema.schema");
}

void refuse_unsupported(const json& body, bool chat) {
  if (get_int(body, "n", 1, 1, 128) != 1) throw ApiError(400, "'n': only n = 1 is supported", "n");
  if (const json* lb = field(body, "logit_bias"); lb && !(lb->is_object() && lb->empty()))
    throw ApiError(400, "'logit_bias' is not supported yet", "logit_bias");
  if (!chat) {
    if (get_bool(body, "echo", false)) throw ApiError(400, "'echo' is not supported yet", "echo");
    if (get_int(body, "best_of", 1, 1, 128) != 1) throw ApiError(400, "'best_of': only 1 is supported", "best_of");
    if (!get_string(body, "suffix").empty()) throw ApiError(400, "'suffix' is not supported yet", "suffix");
  }
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& body_text, bool chat, int32_t n_vocab) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {
    // parse_error for bad syntax (and ill-formed UTF-8 inside strings), out_of_range for a
    // number too large for a double: both are the client's bad body.
    throw ApiError(400, std::string("the body is not valid JSON: ") + e.what());
  }
  if (!body.is_object()) throw ApiError(400, std::string("the body must be a JSON object, got ") + type_name(body));
  refuse_unsupported(body, chat);

  CompletionRequest r;
  r.chat = chat;
  r.model = get_string(body, "model");
  if (chat) {
    r.messages = parse_messages(body);
    parse_tools(body, r);
  } else {
    parse_prompt(body, r, n_vocab);
  }
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  // max_completion_tokens is the newer name; when both are given it wins, as in OpenAI's API.
  r.max_tokens = get_int(body, "max_tokens", -1, 1, kIntMax);
  r.max_tokens = get_int(body, "max_completion_tokens", r.max_tokens, 1, kIntMax);
  r.stream = get_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_field("stream_options", std::string("must be an object, got ") + type_name(*so));
    r.include_usage = get_bool(*so, "include_usage", false);
  }

  SamplerParams& sp = r.gen.sampler;  // defaults: llama.cpp's (sampling/sampler.h)
  sp.temp = static_cast<float>(get_number(body, "temperature", sp.temp, 0, 2));
  sp.top_p = static_cast<float>(get_number(body, "top_p", sp.top_p, 0, 1));
  sp.top_k = static_cast<int>(get_int(body, "top_k", sp.top_k, 0, kIntMax));
  sp.min_p = static_cast<float>(get_number(body, "min_p", sp.min_p, 0, 1));
  sp.presence_penalty = static_cast<float>(get_number(body, "presence_penalty", 0, -2, 2));
  sp.frequency_penalty = static_cast<float>(get_number(body, "frequency_penalty", 0, -2, 2));
  sp.repeat_penalty = static_cast<float>(get_number(body, "repeat_penalty", 1, 1e-6, 100));
  // Without a seed every request samples differently, as OpenAI's does.
  if (field(body, "seed"))
    sp.seed = static_cast<uint64_t>(
        get_int(body, "seed", 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  else
    sp.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  r.gen.stop = get_stop(body);
  r.gen.ignore_eos = get_bool(body, "ignore_eos", false);
  r.schema = parse_response_format(body);
  // Both would constrain the same reply two ways; a forced call already is JSON of a schema.
  if (r.schema && !r.forced_tools.empty())
    throw ApiError(400, "'response_format' cannot be combined with a forced 'tool_choice'", "response_format");
  if (const json* rf = field(body, "reasoning_format")) {
    const std::string f = rf->is_string() ? rf->get<std::string>() : "";
    if (f != "none" && f != "deepseek" && f != "auto")
      bad_field("reasoning_format", "must be none, deepseek or auto, got " + rf->dump());
    r.split_reasoning = f != "none";
  }

  // Chat: logprobs is a boolean and top_logprobs (0..20) the alternatives; completions: the
  // legacy logprobs integer (0..5) is the number of alternatives.
  if (chat) {
    r.logprobs = get_bool(body, "logprobs", false);
    const int64_t top = get_int(body, "top_logprobs", 0, 0, 20);
    if (field(body, "top_logprobs") && !r.logprobs)
      throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (r.logprobs) r.gen.n_logprobs = static_cast<int>(top);
  } else if (field(body, "logprobs")) {
    r.logprobs = true;
    r.gen.n_logprobs = static_cast<int>(get_int(body, "logprobs", 0, 0, 5));
  }
  return r;
}

}  // namespace sluice::server
