// runtime/tool_calls: the per-format scanners. Each takes the text after the reasoning and
// returns the calls it found and the text around them; a call that fails any check leaves its
// text in the content (never an exception: the JSON parser runs with exceptions off and every
// dump replaces invalid UTF-8).
#include "runtime/tool_calls.h"

#include <algorithm>
#include <optional>
#include <random>

#include "core/ascii.h"

namespace sluice {
namespace {

using ojson = nlohmann::ordered_json;
constexpr size_t npos = std::string_view::npos;

// DeepSeek's markers (full-width bars U+FF5C and U+2581 "▁" between words, as its vocab spells them).
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
// The spellings R1's distills are seen to emit for the opening marker (llama.cpp accepts the same).
constexpr std::string_view kDsCallsBeginVariants[] = {kDsCallsBegin, "<｜tool_calls_begin｜>", "<｜tool calls begin｜>",
                                                      "<｜tool\\_calls\\_begin｜>", "<｜tool▁calls｜>"};

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_ascii_space(s[i])) ++i;
  return i;
}

bool starts_at(std::string_view s, size_t i, std::string_view what) { return s.substr(i, what.size()) == what; }

// A function name as the templates write it: no markup, no whitespace.
bool is_name(std::string_view s) {
  if (s.empty() || s.size() > 256) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || static_cast<unsigned char>(c) >= 0x80;
  });
}

// End of the JSON value starting at s[i] (npos when it does not close). Only brackets and
// strings are tracked; whether the value is valid JSON is the parser's job. Nesting deeper than
// kMaxDepth is refused, so a hostile "[[[[..." cannot make any later step recurse deeply.
constexpr int kMaxDepth = 256;
size_t json_value_end(std::string_view s, size_t i) {
  if (i >= s.size()) return npos;
  if (s[i] == '"') {
    for (size_t k = i + 1; k < s.size(); ++k) {
      if (s[k] == '\\')
        ++k;
      else if (s[k] == '"')
        return k + 1;
    }
    return npos;
  }
  if (s[i] != '{' && s[i] != '[') {
    size_t k = i;
    while (k < s.size() && std::string_view(",}]; \t\r\n)").find(s[k]) == npos) ++k;
    return k > i ? k : npos;
  }
  int depth = 0;
  bool in_string = false;
  for (size_t k = i; k < s.size(); ++k) {
    const char c = s[k];
    if (in_string) {
      if (c == '\\')
        ++k;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) return npos;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return k + 1;
    }
  }
  return npos;
}

std::optional<ojson> parse_json(std::string_view s) {
  ojson j = ojson::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// The JSON value at s[i] (after whitespace); on success `i` moves past it.
std::optional<ojson> parse_json_at(std::string_view s, size_t& i) {
  const size_t b = skip_space(s, i), e = json_value_end(s, b);
  if (e == npos) return std::nullopt;
  auto j = parse_json(s.substr(b, e - b));
  if (j) i = e;
  return j;
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// Arguments as a model writes them: an object, or (some templates tojson a string) a string
// holding one. Anything else is not a call.
std::optional<std::string> arguments_text(const ojson& a) {
  if (a.is_object()) return dump(a);
  if (a.is_string()) {
    auto inner = parse_json(a.get<std::string>());
    if (inner && inner->is_object()) return dump(*inner);
  }
  return std::nullopt;
}

struct Scan {
  std::vector<std::string> content;  // pieces of text around the calls, in order
  std::vector<ToolCall> calls;
};

// {"name": N, <args_key>: {...}} with args under any of `keys` (absent: {}); extra keys other
// than "id" and "type": "function" make it not a call (a JSON reply that merely has a name).
std::optional<ToolCall> call_from_object(const ojson& o, std::initializer_list<const char*> keys) {
  if (!o.is_object() || !o.contains("name") || !o["name"].is_string() || !is_name(o["name"].get<std::string>()))
    return std::nullopt;
  ToolCall c;
  c.name = o["name"].get<std::string>();
  c.arguments = "{}";
  size_t used = 1;
  for (const char* k : keys)
    if (o.contains(k)) {
      auto a = arguments_text(o[k]);
      if (!a) return std::nullopt;
      c.arguments = *a;
      ++used;
      break;
    }
  if (o.contains("id")) {
    if (!o["id"].is_string()) return std::nullopt;
    c.id = o["id"].get<std::string>();
    ++used;
  }
  if (o.contains("type")) {
    if (o["type"] != "function") return std::nullopt;
    ++used;
  }
  if (used != o.size()) return std::nullopt;
  return c;
}

// --- hermes ---------------------------------------------------------------------------------

const ojson* tool_parameter_schema(const ojson& tools, const std::string& fn, const std::string& param) {
  if (!tools.is_array()) return nullptr;
  for (const auto& t : tools) {
    const ojson& f = t.is_object() && t.contains("function") ? t["function"] : t;
    if (!f.is_object() || !f.contains("name") || f["name"] != fn) continue;
    if (!f.contains("parameters") || !f["parameters"].is_object() || !f["parameters"].contains("properties"))
      return nullptr;
    const ojson& props = f["parameters"]["properties"];
    return props.is_object() && props.contains(param) ? &props[param] : nullptr;
  }
  return nullptr;
}

// A parameter's text: kept as a string when its schema says string, else read as JSON when it
// parses (the template wrote numbers, booleans and objects through tojson or |string).
ojson xml_parameter_value(const std::string& raw, const ojson* schema) {
  bool string_typed = false;
  if (schema && schema->is_object() && schema->contains("type")) {
    const ojson& t = (*schema)["type"];
    string_typed = t == "string" || (t.is_array() && t.size() == 1 && t[0] == "string");
  }
  if (!string_typed)
    if (auto j = parse_json(raw)) return *j;
  return raw;
}

// <function=N>\n<parameter=P>\nVALUE\n</parameter>\n...</function> (Qwen3-Coder, Qwen3.5).
std::optional<ToolCall> hermes_xml_body(std::string_view body, const ojson& tools) {
  constexpr std::string_view kFn = "<function=", kParam = "<parameter=", kParamEnd = "</parameter>",
                             kFnEnd = "</function>";
  if (!starts_at(body, 0, kFn)) return std::nullopt;
  size_t i = kFn.size(), gt = body.find('>', i);
  if (gt == npos || !is_name(body.substr(i, gt - i))) return std::nullopt;
  ToolCall c;
  c.name = std::string(body.substr(i, gt - i));
  ojson args = ojson::object();
  i = gt + 1;
  for (;;) {
    i = skip_space(body, i);
    if (!starts_at(body, i, kParam)) break;
    i += kParam.size();
    gt = body.find('>', i);
    if (gt == npos || gt == i) return std::nullopt;
    const std::string pname(body.substr(i, gt - i));
    const size_t vend = body.find(kParamEnd, gt + 1);
    if (vend == npos) return std::nullopt;
    std::string_view v = body.substr(gt + 1, vend - gt - 1);
    // The template writes one newline on each side of the value; the value itself is verbatim.
    if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
    if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
    args[pname] = xml_parameter_value(std::string(v), tool_parameter_schema(tools, c.name, pname));
    i = vend + kParamEnd.size();
  }
  if (!starts_at(body, i, kFnEnd) || skip_space(body, i + kFnEnd.size()) != body.size()) return std::nullopt;
  c.arguments = dump(args);
  return c;
}

void scan_hermes(std::string_view s, const ojson& tools, Scan& out) {
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t open = s.find(kOpen, pos);
    if (open == npos) break;
    out.content.emplace_back(s.substr(pos, open - pos));
    const size_t body_begin = open + kOpen.size(), close = s.find(kClose, body_begin);
    // A generation that stopped right after the JSON (no closing tag) still counts.
    const size_t body_end = close == npos ? s.size() : close, next = close == npos ? s.size() : close + kClose.size();
    const std::string_view body = trim(s.substr(body_begin, body_end - body_begin));
    std::optional<ToolCall> c;
    if (!body.empty() && body.front() == '{') {
      if (json_value_end(body, 0) == body.size())
        if (auto j = parse_json(body)) c = call_from_object(*j, {"arguments", "parameters"});
    } else {
      c = hermes_xml_body(body, tools);
    }
    if (c) {
      c->id.clear();  // Hermes ids are not the model's to choose
      out.calls.push_back(std::move(*c));
    } else {
      out.content.emplace_back(s.substr(open, next - open));
    }
    pos = next;
  }
  if (pos < s.size()) out.content.emplace_back(s.substr(pos));
}

// --- llama 3 --------------------------------------------------------------------------------

// One or more {"name", "parameters"} objects from s[i], separated by ';' or whitespace, to the
// end of the text. All or nothing: false leaves `out` untouched.
bool llama3_json_calls(std::string_view s, size_t i, Scan& out) {
  std::vector<ToolCall> calls;
  for (;;) {
    i = skip_space(s, i);
    if (i == s.size() && !calls.empty()) break;
    auto j = parse_json_at(s, i);
    if (!j) return false;
    auto c = call_from_object(*j, {"parameters", "arguments"});
    if (!c) return false;
    c->id.clear();
    calls.push_back(std::move(*c));
    i = skip_space(s, i);
    if (i < s.size() && s[i] == ';') ++i;
  }
  for (auto& c : calls) out.calls.push_back(std::move(c));
  return true;
}

// brave_search.call(query="...", count=3): Llama 3.1's built-in tool syntax (values are JSON).
bool llama3_builtin_call(std::string_view s, size_t i, Scan& out) {
  const size_t dot = s.find(".call(", i);
  if (dot == npos || !is_name(trim(s.substr(i, dot - i)))) return false;
  ToolCall c;
  c.name = std::string(trim(s.substr(i, dot - i)));
  ojson args = ojson::object();
  i = skip_space(s, dot + 6);
  while (i < s.size() && s[i] != ')') {
    const size_t eq = s.find('=', i);
    if (eq == npos) return false;
    const std::string_view key = trim(s.substr(i, eq - i));
    if (!is_name(key)) return false;
    i = eq + 1;
    auto v = parse_json_at(s, i);
    if (!v) return false;
    args[std::string(key)] = *v;
    i = skip_space(s, i);
    if (i < s.size() && s[i] == ',') i = skip_space(s, i + 1);
  }
  if (i >= s.size() || skip_space(s, i + 1) != s.size()) return false;
  c.arguments = dump(args);
  out.calls.push_back(std::move(c));
  return true;
}

void scan_llama3(std::string_view s, Scan& out) {
  constexpr std::string_view kTag = "<|python_tag|>";
  const size_t start = skip_space(s, 0);
  // A reply that is one JSON call (Llama 3.x's custom-tool format: no marker at all). Only at
  // the start: JSON inside prose is an answer, not a call.
  if (start < s.size() && s[start] == '{' && llama3_json_calls(s, start, out)) return;
  const size_t tag = s.find(kTag);
  if (tag == npos) {
    out.content.emplace_back(s);
    return;
  }
  const size_t i = skip_space(s, tag + kTag.size());
  out.content.emplace_back(s.substr(0, tag));
  if ((i < s.size() && s[i] == '{') ? llama3_json_calls(s, i, out) : llama3_builtin_call(s, i, out)) return;
  const std::string_view code = trim(s.substr(i));
  if (!code.empty() && code.front() != '{') {
    // <|python_tag|> then plain code: the code interpreter (Llama 3.1's ipython environment).
    out.calls.push_back({"", "python", dump(ojson{{"code", std::string(code)}})});
    return;
  }
  out.content.emplace_back(s.substr(tag));
}

// --- mistral --------------------------------------------------------------------------------

// N[CALL_ID]I[ARGS]{...} or N[ARGS]{...} at s[i]; on success `i` moves past it.
std::optional<ToolCall> mistral_named_call(std::string_view s, size_t& i) {
  constexpr std::string_view kArgs = "[ARGS]", kId = "[CALL_ID]";
  const size_t args = s.find(kArgs, i);
  if (args == npos) return std::nullopt;
  std::string_view head = s.substr(i, args - i), id;
  if (const size_t k = head.find(kId); k != npos) {
    id = head.substr(k + kId.size());
    head = head.substr(0, k);
    if (!is_name(id)) return std::nullopt;
  }
  if (!is_name(head)) return std::nullopt;
  size_t j = args + kArgs.size();
  auto a = parse_json_at(s, j);
  if (!a) return std::nullopt;
  auto text = arguments_text(*a);
  if (!text) return std::nullopt;
  i = j;
  return ToolCall{std::string(id), std::string(head), *text};
}

void scan_mistral(std::string_view s, Scan& out) {
  constexpr std::string_view kTag = "[TOOL_CALLS]";
  const size_t first = s.find(kTag);
  if (first == npos) {
    out.content.emplace_back(s);
    return;
  }
  out.content.emplace_back(s.substr(0, first));
  size_t pos = first;
  while (starts_at(s, pos, kTag)) {
    size_t i = skip_space(s, pos + kTag.size());
    std::vector<ToolCall> calls;
    if (i < s.size() && s[i] == '[') {
      auto arr = parse_json_at(s, i);
      if (!arr || !arr->is_array() || arr->empty()) break;
      for (const auto& o : *arr) {
        auto c = call_from_object(o, {"arguments", "parameters"});
        if (!c) break;
        calls.push_back(std::move(*c));
      }
      if (calls.size() != arr->size()) break;
    } else {
      auto c = mistral_named_call(s, i);
      if (!c) break;
      calls.push_back(std::move(*c));
    }
    for (auto& c : calls) out.calls.push_back(std::move(c));
    pos = skip_space(s, i);
  }
  if (pos < s.size()) out.content.emplace_back(s.substr(pos));
}

// --- deepseek -------------------------------------------------------------------------------

// One call at s[i] (after the optional <｜tool▁call▁begin｜>); on success `i` moves past its end marker.
std::optional<ToolCall> deepseek_call(std::string_view s, size_t& i) {
  size_t k = skip_space(s, i);
  if (starts_at(s, k, kDsCallBegin)) k += kDsCallBegin.size();
  const size_t sep = s.find(kDsSep, k);
  if (sep == npos) return std::nullopt;
  const std::string_view head = s.substr(k, sep - k);
  size_t j = sep + kDsSep.size();
  ToolCall c;
  const size_t nl = s.find('\n', j);
  constexpr std::string_view kFence = "```json";
  if (head == "function" && nl != npos && starts_at(s, nl + 1, kFence)) {
    // R1: function<｜tool▁sep｜>NAME\n```json\n{...}\n```
    c.name = std::string(s.substr(j, nl - j));
    j = nl + 1 + kFence.size();
    auto a = parse_json_at(s, j);
    if (!a || !is_name(c.name)) return std::nullopt;
    auto text = arguments_text(*a);
    j = skip_space(s, j);
    if (!text || !starts_at(s, j, "```")) return std::nullopt;
    c.arguments = *text;
    j += 3;
  } else {
    // V3.1: NAME<｜tool▁sep｜>{...}
    if (!is_name(head)) return std::nullopt;
    c.name = std::string(head);
    auto a = parse_json_at(s, j);
    if (!a) return std::nullopt;
    auto text = arguments_text(*a);
    if (!text) return std::nullopt;
    c.arguments = *text;
  }
  j = skip_space(s, j);
  if (!starts_at(s, j, kDsCallEnd)) return std::nullopt;
  i = j + kDsCallEnd.size();
  return c;
}

void scan_deepseek(std::string_view s, Scan& out) {
  size_t begin = npos, begin_len = 0;
  for (std::string_view m : kDsCallsBeginVariants)
    if (const size_t p = s.find(m); p < begin) begin = p, begin_len = m.size();
  if (begin == npos) {
    out.content.emplace_back(s);
    return;
  }
  Scan calls;
  size_t i = begin + begin_len;
  bool closed = false;
  for (;;) {
    const size_t k = skip_space(s, i);
    if (starts_at(s, k, kDsCallsEnd)) {
      i = k + kDsCallsEnd.size();
      closed = true;
      break;
    }
    if (k == s.size()) break;  // stopped before the closing marker: the calls so far count
    auto c = deepseek_call(s, i);
    if (!c) break;
    calls.calls.push_back(std::move(*c));
  }
  if (calls.calls.empty() || (!closed && skip_space(s, i) != s.size())) {
    out.content.emplace_back(s);
    return;
  }
  out.content.emplace_back(s.substr(0, begin));
  out.calls = std::move(calls.calls);
  if (i < s.size()) out.content.emplace_back(s.substr(i));
}

// Ids in OpenAI's shape ("call_" + 24 alphanumerics); Mistral's templates insist on exactly
// 9 alphanumerics (they raise otherwise), so its ids are those.
std::string make_call_id(std::mt19937_64& rng, ToolCallFormat f) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = f == ToolCallFormat::mistral ? "" : "call_";
  for (int n = f == ToolCallFormat::mistral ? 9 : 24; n > 0; --n) id += kAlnum[rng() % (sizeof kAlnum - 1)];
  return id;
}

}  // namespace

ToolCallFormat detect_tool_call_format(std::string_view src) {
  auto has = [&](std::string_view m) { return src.find(m) != npos; };
  if (has(kDsCallsBegin)) return ToolCallFormat::deepseek;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::mistral;
  if (has("<tool_call>")) return ToolCallFormat::hermes;
  // Llama 3.x writes a call as {"name": ..., "parameters": ...} and answers tools in the
  // ipython role; functionary (same header tokens) uses <function=...> instead.
  if (has("<|start_header_id|>") && !has("<function=") &&
      (has("<|python_tag|>") || has("\"parameters\": ") || has("ipython")))
    return ToolCallFormat::llama3;
  return ToolCallFormat::none;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::none: return "none";
    case ToolCallFormat::hermes: return "hermes";
    case ToolCallFormat::llama3: return "llama3";
    case ToolCallFormat::mistral: return "mistral";
    case ToolCallFormat::deepseek: return "deepseek";
  }
  return "?";
}

ParsedOutput parse_model_output(std::string_view text, ToolCallFormat f, const ToolCallParseOptions& opt) {
  ParsedOutput r;
  std::string_view rest = text;
  std::string answer;  // the reply after its reasoning block (runtime/reasoning.h: the one splitter)
  if (opt.parse_reasoning) {
    ReasoningSplit sp = split_reasoning(text, opt.reasoning_open, opt.reasoning_markers);
    if (sp.had_block) {
      r.reasoning_content = std::move(sp.reasoning);
      answer = std::move(sp.answer);
      rest = answer;
    }
  }
  Scan scan;
  if (!opt.parse_tool_calls || f == ToolCallFormat::none) {
    scan.content.emplace_back(rest);
  } else {
    switch (f) {
      case ToolCallFormat::hermes: scan_hermes(rest, opt.tools, scan); break;
      case ToolCallFormat::llama3: scan_llama3(rest, scan); break;
      case ToolCallFormat::mistral: scan_mistral(rest, scan); break;
      case ToolCallFormat::deepseek: scan_deepseek(rest, scan); break;
      case ToolCallFormat::none: break;
    }
  }
  for (const auto& piece : scan.content) r.content += piece;
  if (!scan.calls.empty()) {
    // The separators templates put around calls ("\n\n<tool_call>") are not content.
    r.content = std::string(trim(r.content));
    std::random_device rd;
    std::mt19937_64 rng(opt.id_seed ? opt.id_seed : (static_cast<uint64_t>(rd()) << 32) ^ rd());
    for (auto& c : scan.calls)
      if (c.id.empty()) c.id = make_call_id(rng, f);
  }
  r.tool_calls = std::move(scan.calls);
  return r;
}

size_t tool_call_start(std::string_view text, ToolCallFormat f) {
  std::vector<std::string_view> markers;
  switch (f) {
    case ToolCallFormat::none: return text.size();
    case ToolCallFormat::hermes: markers = {"<tool_call>"}; break;
    case ToolCallFormat::llama3: {
      // The bare-JSON call can only be the whole reply: hold everything once it starts with '{'.
      const size_t lead = skip_space(text, 0);
      if (lead < text.size() && text[lead] == '{') return 0;
      markers = {"<|python_tag|>"};
      break;
    }
    case ToolCallFormat::mistral: markers = {"[TOOL_CALLS]"}; break;
    case ToolCallFormat::deepseek: markers.assign(std::begin(kDsCallsBeginVariants), std::end(kDsCallsBeginVariants));
  }
  size_t best = text.size();
  for (std::string_view m : markers) {
    best = std::min(best, text.find(m));
    // A marker cut off at the end of the text so far: hold from where it may begin.
    for (size_t len = std::min(m.size() - 1, text.size()); len > 0; --len)
      if (text.substr(text.size() - len) == m.substr(0, len)) {
        best = std::min(best, text.size() - len);
        break;
      }
  }
  return best;
}

nlohmann::ordered_json ParsedOutput::to_message() const {
  ojson m{{"role", "assistant"}};
  m["content"] = content.empty() && !tool_calls.empty() ? ojson() : ojson(content);
  if (!reasoning_content.empty()) m["reasoning_content"] = reasoning_content;
  if (!tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const auto& c : tool_calls)
      calls.push_back(
          {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

ToolCallFrame tool_call_frame(ToolCallFormat f, std::string_view name) {
  const std::string n = dump(ojson(std::string(name)));
  switch (f) {
    case ToolCallFormat::none:
    case ToolCallFormat::hermes: {
      // As Qwen2.5/Qwen3's templates render calls: one block each, a newline apart.
      const std::string open = "<tool_call>\n{\"name\": " + n + ", \"arguments\": ";
      return {ToolCallFormat::hermes, open, "}\n</tool_call>", "\n" + open, ""};
    }
    case ToolCallFormat::llama3: return {f, "{\"name\": " + n + ", \"parameters\": ", "}", "", ""};
    case ToolCallFormat::mistral: {
      const std::string call = "{\"name\": " + n + ", \"arguments\": ";
      return {f, "[TOOL_CALLS][" + call, "}", ", " + call, "]"};
    }
    case ToolCallFormat::deepseek: {
      const std::string call = std::string(kDsCallBegin) + "function" + std::string(kDsSep) + std::string(name) +
                               "\n```json\n";
      return {f, std::string(kDsCallsBegin) + call, "\n```" + std::string(kDsCallEnd), call, std::string(kDsCallsEnd)};
    }
  }
  return {ToolCallFormat::hermes, "", "", "", ""};
}

ojson with_tools_system_prompt(const ojson& messages, const ojson& tools) {
  std::string text =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
      "function signatures within <tools></tools> XML tags:\n<tools>";
  for (const auto& t : tools) text += "\n" + dump(t);
  text +=
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call>";
  ojson out = messages;
  if (!out.empty() && out[0].value("role", "") == "system" && out[0].contains("content") &&
      out[0]["content"].is_string()) {
    out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + text;
  } else {
    out.insert(out.begin(), ojson{{"role", "system"}, {"content", text}});
  }
  return out;
}

}  // namespace sluice
