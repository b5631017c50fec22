// template/value: the values a chat template computes with, and Python's rules for them (str(),
// repr(), truthiness, ==, <, json.dumps), since the oracle is jinja2 running on Python objects.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace sluice::tmpl {

// What jinja2 raises, by Python exception class: the tests compare this with the oracle's.
enum class ErrorKind {
  syntax,     // TemplateSyntaxError / TemplateAssertionError: the template does not parse
  raised,     // TemplateError from raise_exception()
  undefined,  // UndefinedError: an attribute or call on an undefined value
  type,       // TypeError / ValueError / ZeroDivisionError / IndexError: Python refused the operation
  security,   // SecurityError: a mutating method the immutable sandbox forbids
  limit,      // a sandbox limit (output size, loop iterations, recursion depth)
};

// An error while parsing or rendering: "SOURCE:LINE: message" (SOURCE: the template's name).
class TemplateError : public Error {
 public:
  TemplateError(ErrorKind kind, int line, const std::string& msg, const std::string& source = "template")
      : Error(line > 0 ? str_cat(source, ":", line, ": ", msg) : str_cat(source, ": ", msg)),
        kind(kind),
        line(line),
        detail(msg) {}
  ErrorKind kind;
  int line;
  std::string detail;  // the message without the source and line
};

// Thrown without a line by value operations; the evaluator adds the line of the node.
struct ValueError {
  ErrorKind kind;
  std::string msg;
};
[[noreturn]] void throw_value_error(ErrorKind kind, std::string msg);

// The largest string or list one operation may build (a sandbox limit: `~`, `+`, `*`, join,
// replace, indent and tojson check it, so doubling a value in a loop cannot exhaust memory).
constexpr size_t kMaxValueSize = 64u << 20;
inline void check_size(size_t n) {
  if (n > kMaxValueSize) throw_value_error(ErrorKind::limit, "a string or list longer than the sandbox allows");
}

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, as Python's dict
struct Args;
using Function = std::function<Value(Args&)>;

enum class Type { undefined, none, boolean, integer, floating, string, list, dict, function, ns };

struct Value {
  Type type = Type::undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // string; for undefined: the UndefinedError message
  std::shared_ptr<List> l;               // list or tuple (shared: Python lists are references)
  bool is_tuple = false;
  bool safe = false;  // string: a Markup (|safe, |escape): `+` escapes the other side
  enum class View : uint8_t {
    none,
    generator,
    keys,
    values,
    items,
    reversed
  } view = View::none;      // list: what Python has
  std::shared_ptr<Dict> d;  // dict or namespace attributes
  std::shared_ptr<Function> fn;

  Value() = default;
  static Value undef(std::string hint);
  static Value none() { return with_type(Type::none); }
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value floating(double v);
  static Value string(std::string v);
  static Value list(List v = {}, bool tuple = false);
  static Value dict(Dict v = {});
  static Value ns(Dict v = {});
  static Value function(Function f);

  bool is_undefined() const { return type == Type::undefined; }
  bool is_none() const { return type == Type::none; }
  bool is_string() const { return type == Type::string; }
  bool is_list() const { return type == Type::list; }
  bool is_dict() const { return type == Type::dict; }
  bool is_number() const { return type == Type::boolean || type == Type::integer || type == Type::floating; }
  const std::string& str() const { return *s; }

  // Dict lookup (nullptr if absent).
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);

 private:
  static Value with_type(Type t) {
    Value v;
    v.type = t;
    return v;
  }
};

// Call arguments: positional and keyword, as Python passes them.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Argument `name` at position `index` (keyword wins), or nullptr.
  const Value* get(size_t index, const char* name) const;
};

// Dict keys are strings; other keys (ints, None, ...) are stored as "\x01" + their repr, so
// {0: 1}[0] works and printing and iteration give the original key back.
std::string dict_key(const Value& k);
Value key_value(const std::string& k);

// Python's type name (TypeError messages): "str", "int", "NoneType", "list", "dict", ...
const char* type_name(const Value& v);
// jinja2's object_type_repr: "'dict object'", "'None'" (UndefinedError messages).
std::string object_repr(const Value& v);
bool truthy(const Value& v);
// Python str(v) and repr(v).
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
std::string float_repr(double d);
// Python ==, and < (TypeError where Python raises).
bool equal(const Value& a, const Value& b);
bool less(const Value& a, const Value& b);
// json.dumps(v, ensure_ascii, indent, separators, sort_keys): indent < 0 means None.
std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep, bool sort_keys,
                    bool ensure_ascii = false);

// UTF-8 helpers: Python indexes strings by code point.
std::vector<uint32_t> utf8_decode(const std::string& s);
std::string utf8_encode(const std::vector<uint32_t>& cps);
void utf8_append(std::string& out, uint32_t cp);
uint32_t unicode_lower(uint32_t c);
uint32_t unicode_upper(uint32_t c);
bool unicode_space(uint32_t c);

}  // namespace sluice::tmpl
