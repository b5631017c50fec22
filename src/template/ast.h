// template/ast: the parsed template: expressions and statements, each with its source line.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/lexer.h"
#include "template/value.h"

namespace sluice::tmpl {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  constant,  // value
  name,      // name
  list,      // args
  tuple,     // args
  dict,      // args: key, value, key, value, ...
  attr,      // args[0].name
  item,      // args[0][args[1]]
  slice,     // args[0][args[1]:args[2]:args[3]] (null parts absent)
  call,      // args[0](args[1:], kwargs)
  filter,    // args[0] | name(args[1:], kwargs); args[0] null inside {% filter %}
  test,      // args[0] is [not] name(args[1:], kwargs)
  neg,       // -args[0]
  pos,       // +args[0]
  not_,      // not args[0]
  and_,      // args[0] and args[1]
  or_,       // args[0] or args[1]
  binary,    // args[0] name args[1]: + - * / // % ** ~
  compare,   // args[0] ops[0] args[1] ops[1] args[2] ...
  cond,      // args[1] if args[0] else args[2] (args[2] null: undefined)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;  // test: `is not`
  bool soft = false;     // filter/test: unknown names raise when evaluated, not when parsed
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// An assignment target: a name, names of a tuple, or namespace.attr.
struct Target {
  std::vector<std::string> names;
  std::string attr;  // set: names[0].attr = ...
  bool tuple = false;
};

struct MacroParam {
  std::string name;
  ExprPtr def;  // null: required
};

enum class NodeKind { text, output, if_, for_, set, set_block, macro, call_block, filter_block, break_, continue_ };

struct Node {
  NodeKind kind;
  int line = 0;
  std::string text;                                // text; macro name
  ExprPtr expr;                                    // output, set value, for iterable, call, filter chain
  std::vector<std::pair<ExprPtr, Body>> branches;  // if/elif (condition, body)
  Body body, else_body;                            // for / macro / set_block / call / filter; for-else, if-else
  Target target;                                   // for / set / set_block
  ExprPtr cond;                                    // for ... if cond
  std::vector<MacroParam> params;                  // macro, call block caller
  std::vector<ExprPtr> filters;                    // set_block: {% set x | f %}
};

struct Program {
  Body body;
};

// Throws TemplateError(syntax) naming the line.
std::unique_ptr<Program> parse(const std::vector<Token>& tokens);

// The filters and tests the evaluator knows (template/builtins.cpp): the parser rejects other
// names outside if-branches, as jinja2's compiler does.
bool known_filter(const std::string& name);
bool known_test(const std::string& name);

}  // namespace sluice::tmpl
