// template/interp: the evaluator of a parsed template (internal to src/template). eval.cpp holds
// the statements, expressions, attribute lookup and operators; builtins.cpp the filters, tests,
// globals and the Python methods of str, dict and list.
#pragma once
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "template/ast.h"

namespace sluice::tmpl {

struct Limits {
  size_t max_output = 64u << 20;      // bytes of rendered text
  int64_t max_iterations = 10000000;  // loop iterations in one render, all loops together
  int max_call_depth = 100;           // nested macro calls (Python's recursion limit stands in jinja2)
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { normal, break_, continue_ };

class Interp {
 public:
  Interp(const Limits& limits, std::function<std::tm()> clock) : limits_(limits), clock_(std::move(clock)) {}

  std::string render(const Program& prog, const Dict& variables);

  Value eval(const Expr& e, const ScopePtr& s);
  Flow exec(const Body& b, const ScopePtr& s, std::string& out);

  // obj.name (Python attribute first, then item) and obj[key] (item first, then attribute).
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& fn, Args& args);
  Value apply_filter(const std::string& name, const Value& x, Args& args);
  bool apply_test(const std::string& name, const Value& x, Args& args);
  void count_iteration();
  // Namespaces can hold themselves and macros hold the scope they are defined in (which holds
  // them): render() empties both when it ends, so the shared_ptr cycles are freed.
  void track(const std::shared_ptr<Dict>& ns) { namespaces_.push_back(ns); }
  std::tm now() const { return clock_(); }

 private:
  Flow exec_node(const Node& n, const ScopePtr& s, std::string& out);
  Flow exec_for(const Node& n, const ScopePtr& s, std::string& out);
  void assign(const Target& t, const Value& v, const ScopePtr& s);
  Value make_macro(const Node& n, const ScopePtr& s);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  Value eval_compare(const Expr& e, const ScopePtr& s);
  Value eval_call(const Expr& e, const ScopePtr& s);
  void eval_args(const Expr& e, size_t first, const ScopePtr& s, Args& a);

  Limits limits_;
  std::function<std::tm()> clock_;
  std::vector<ScopePtr> closures_;
  std::vector<std::shared_ptr<Dict>> namespaces_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
};

// builtins.cpp
Dict builtin_globals(Interp& in);
// A Python method of a str, dict or list value, or an undefined value if it has none (an
// undefined carrying ErrorKind::security for the mutating methods the sandbox forbids).
Value builtin_method(Interp& in, const Value& obj, const std::string& name);
// Python's iteration: list items, dict keys, string characters; undefined iterates as empty;
// other values raise TypeError.
List iterate(const Value& v);
// Python's len().
int64_t py_len(const Value& v);
// Python's str % args.
std::string percent_format(const std::string& fmt, const Value& args);
// markupsafe's escape: & < > " ' as HTML entities.
std::string html_escape(const std::string& s);
// A list value that is a Python generator or view (map, select, dict.items(), ...).
Value make_view(List items, Value::View view);
// The kind an undefined value raises with when used (UndefinedError or SecurityError).
[[noreturn]] void undefined_fail(const Value& u);

}  // namespace sluice::tmpl
