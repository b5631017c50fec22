// template/parser: tokens -> AST, by jinja2's grammar (jinja2/parser.py): the same precedence
// (or < and < not < compare < + - < ~ < * / // % < ** < unary < filters/tests < postfix).
#include <cstdlib>
#include <set>

#include "template/ast.h"

namespace sluice::tmpl {
namespace {

constexpr int kMaxDepth = 200;  // nesting of expressions and blocks (a stack-overflow guard)

struct Parser {
  const std::vector<Token>& t;
  size_t p = 0;
  int depth = 0;
  int soft = 0;  // > 0 inside an if-branch or a conditional expression

  const Token& cur() const { return t[p]; }
  const Token& peek(size_t k = 1) const { return t[std::min(p + k, t.size() - 1)]; }
  [[noreturn]] void fail(const std::string& msg) const { throw TemplateError(ErrorKind::syntax, cur().line, msg); }
  [[noreturn]] void fail_at(int line, const std::string& msg) const {
    throw TemplateError(ErrorKind::syntax, line, msg);
  }
  bool is_op(const char* o) const { return cur().kind == Tok::op && cur().text == o; }
  bool is_name(const char* n) const { return cur().kind == Tok::name && cur().text == n; }
  std::string describe() const {
    switch (cur().kind) {
      case Tok::var_end: return "end of print statement";
      case Tok::block_end: return "end of statement block";
      case Tok::eof: return "end of template";
      default: return cur().text;
    }
  }
  void expect_op(const char* o) {
    if (!is_op(o)) fail(str_cat("expected token '", o, "', got '", describe(), "'"));
    ++p;
  }
  std::string expect_name() {
    if (cur().kind != Tok::name) fail(str_cat("expected name, got '", describe(), "'"));
    return t[p++].text;
  }
  void expect_block_end() {
    if (cur().kind != Tok::block_end) fail(str_cat("expected token 'end of statement block', got '", describe(), "'"));
    ++p;
  }
  struct DepthGuard {
    Parser& ps;
    explicit DepthGuard(Parser& x) : ps(x) {
      if (++ps.depth > kMaxDepth) ps.fail("template nested too deeply");
    }
    ~DepthGuard() { --ps.depth; }
  };

  ExprPtr make(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // ---- expressions ----
  ExprPtr expression() {
    DepthGuard g(*this);
    ExprPtr e = or_expr();
    while (is_name("if")) {
      const int line = cur().line;
      ++p;
      ++soft;
      auto c = make(ExprKind::cond, line);
      c->args.push_back(or_expr());
      c->args.push_back(std::move(e));
      if (is_name("else")) {
        ++p;
        c->args.push_back(expression());
      } else {
        c->args.push_back(nullptr);
      }
      --soft;
      e = std::move(c);
    }
    return e;
  }
  ExprPtr binary(ExprKind k, ExprPtr a, ExprPtr b, int line, const std::string& op = "") {
    auto e = make(k, line);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const int line = t[p++].line;
      e = binary(ExprKind::or_, std::move(e), and_expr(), line);
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const int line = t[p++].line;
      e = binary(ExprKind::and_, std::move(e), not_expr(), line);
    }
    return e;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      DepthGuard g(*this);
      auto e = make(ExprKind::not_, t[p++].line);
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    const int line = cur().line;
    ExprPtr first = math1();
    ExprPtr c;
    while (true) {
      std::string op;
      if (cur().kind == Tok::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = t[p++].text;
      } else if (is_name("in")) {
        ++p;
        op = "in";
      } else if (is_name("not") && peek().kind == Tok::name && peek().text == "in") {
        p += 2;
        op = "notin";
      } else {
        break;
      }
      if (!c) {
        c = make(ExprKind::compare, line);
        c->args.push_back(std::move(first));
      }
      c->ops.push_back(op);
      c->args.push_back(math1());
    }
    return c ? std::move(c) : std::move(first);
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Token& o = t[p++];
      e = binary(ExprKind::binary, std::move(e), concat(), o.line, o.text);
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      const int line = t[p++].line;
      e = binary(ExprKind::binary, std::move(e), math2(), line, "~");
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& o = t[p++];
      e = binary(ExprKind::binary, std::move(e), power(), o.line, o.text);
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary(true);
    while (is_op("**")) {
      const int line = t[p++].line;
      e = binary(ExprKind::binary, std::move(e), unary(true), line, "**");
    }
    return e;
  }
  ExprPtr unary(bool with_filter) {
    DepthGuard g(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& o = t[p++];
      e = make(o.text == "-" ? ExprKind::neg : ExprKind::pos, o.line);
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filter_expr(std::move(e));
    return e;
  }
  ExprPtr primary() {
    const Token& k = cur();
    switch (k.kind) {
      case Tok::name: {
        ++p;
        auto e = make(ExprKind::constant, k.line);
        if (k.text == "true" || k.text == "True")
          e->value = Value::boolean(true);
        else if (k.text == "false" || k.text == "False")
          e->value = Value::boolean(false);
        else if (k.text == "none" || k.text == "None")
          e->value = Value::none();
        else {
          e->kind = ExprKind::name;
          e->name = k.text;
        }
        return e;
      }
      case Tok::string: {
        std::string s;
        while (cur().kind == Tok::string) s += t[p++].text;
        auto e = make(ExprKind::constant, k.line);
        e->value = Value::string(s);
        return e;
      }
      case Tok::integer: {
        ++p;
        auto e = make(ExprKind::constant, k.line);
        errno = 0;
        const long long v = std::strtoll(k.text.c_str(), nullptr, 10);
        if (errno == ERANGE) fail_at(k.line, "integer literal too large: " + k.text);
        e->value = Value::integer(v);
        return e;
      }
      case Tok::floating: {
        ++p;
        auto e = make(ExprKind::constant, k.line);
        e->value = Value::floating(std::strtod(k.text.c_str(), nullptr));
        return e;
      }
      case Tok::op:
        if (k.text == "(") {
          ++p;
          ExprPtr e = tuple(true);
          expect_op(")");
          return e;
        }
        if (k.text == "[") {
          ++p;
          auto e = make(ExprKind::list, k.line);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(expression());
          }
          expect_op("]");
          return e;
        }
        if (k.text == "{") {
          ++p;
          auto e = make(ExprKind::dict, k.line);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->args.push_back(expression());
            expect_op(":");
            e->args.push_back(expression());
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    fail(str_cat("unexpected '", describe(), "'"));
  }
  // A comma-separated tuple (or one expression); in parentheses `()` is the empty tuple.
  ExprPtr tuple(bool in_parens, bool with_condexpr = true) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        ++p;
        comma = true;
      }
      if (in_parens && is_op(")")) break;
      if (!in_parens && (cur().kind == Tok::block_end || cur().kind == Tok::var_end || is_name("in") || is_name("if")))
        break;
      items.push_back(with_condexpr ? expression() : or_expr());
    }
    if (items.size() == 1 && !comma) return std::move(items[0]);
    if (items.empty() && !in_parens) fail(str_cat("unexpected '", describe(), "'"));
    auto e = make(ExprKind::tuple, line);
    e->args = std::move(items);
    return e;
  }
  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const int line = t[p++].line;
        auto a = make(ExprKind::attr, line);
        if (cur().kind == Tok::integer) {
          a->kind = ExprKind::item;
          a->args.push_back(std::move(e));
          auto idx = make(ExprKind::constant, line);
          idx->value = Value::integer(std::strtoll(t[p++].text.c_str(), nullptr, 10));
          a->args.push_back(std::move(idx));
        } else {
          a->name = expect_name();
          a->args.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (is_op("[")) {
        e = subscript(std::move(e));
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }
  ExprPtr subscript(ExprPtr obj) {
    const int line = t[p++].line;
    ExprPtr parts[3];
    int n = 0;
    bool is_slice = false;
    while (true) {
      if (is_op(":")) {
        is_slice = true;
        ++p;
        if (++n > 2) fail("invalid slice");
        continue;
      }
      if (is_op("]")) break;
      if (parts[n]) fail(str_cat("unexpected '", describe(), "'"));
      parts[n] = expression();
    }
    expect_op("]");
    auto e = make(is_slice ? ExprKind::slice : ExprKind::item, line);
    e->args.push_back(std::move(obj));
    if (is_slice)
      for (auto& x : parts) e->args.push_back(std::move(x));
    else
      e->args.push_back(std::move(parts[0]));
    if (!is_slice && !e->args[1]) fail("expected an index");
    return e;
  }
  // `(` args `)` into e->args (after any already there) and e->kwargs.
  void call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (e.args.size() > 1 || !e.kwargs.empty()) expect_op(",");
      if (is_op(")")) break;
      if (cur().kind == Tok::name && peek().kind == Tok::op && peek().text == "=") {
        std::string k = t[p].text;
        p += 2;
        e.kwargs.emplace_back(k, expression());
      } else {
        if (!e.kwargs.empty()) fail("positional argument follows keyword argument");
        e.args.push_back(expression());
      }
    }
    expect_op(")");
  }
  ExprPtr call(ExprPtr callee) {
    auto e = make(ExprKind::call, cur().line);
    e->args.push_back(std::move(callee));
    call_args(*e);
    return e;
  }
  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".")) {
      ++p;
      n += "." + expect_name();
    }
    return n;
  }
  ExprPtr filter(ExprPtr e) {
    auto f = make(ExprKind::filter, cur().line);
    f->name = dotted_name();
    f->soft = soft > 0;
    if (!f->soft && !known_filter(f->name)) fail_at(f->line, str_cat("No filter named '", f->name, "'."));
    f->args.push_back(std::move(e));
    if (is_op("(")) call_args(*f);
    return f;
  }
  ExprPtr filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        ++p;
        e = filter(std::move(e));
      } else if (is_name("is")) {
        ++p;
        auto x = make(ExprKind::test, cur().line);
        if (is_name("not")) {
          ++p;
          x->negated = true;
        }
        x->name = dotted_name();
        x->soft = soft > 0;
        if (!x->soft && !known_test(x->name)) fail_at(x->line, str_cat("No test named '", x->name, "'."));
        x->args.push_back(std::move(e));
        const Token& c = cur();
        if (is_op("(")) {
          call_args(*x);
        } else if ((c.kind == Tok::name || c.kind == Tok::string || c.kind == Tok::integer || c.kind == Tok::floating ||
                    is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail("You cannot chain multiple tests with is");
          x->args.push_back(postfix(primary()));
        }
        e = std::move(x);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  // ---- statements ----
  Target target(bool allow_attr) {
    Target tg;
    tg.names.push_back(expect_name());
    if (allow_attr && is_op(".")) {
      ++p;
      tg.attr = expect_name();
      return tg;
    }
    while (is_op(",")) {
      ++p;
      tg.tuple = true;
      if (cur().kind != Tok::name || is_name("in")) break;
      tg.names.push_back(expect_name());
    }
    return tg;
  }

  // Statements until `{% name %}` with name in `ends`; leaves p at that name.
  Body body_until(const std::set<std::string>& ends, const std::string& innermost, int open_line) {
    Body b;
    while (true) {
      const Token& k = cur();
      if (k.kind == Tok::eof) {
        if (ends.empty()) return b;
        std::string want;
        for (const auto& s : ends) want += (want.empty() ? "'" : " or '") + s + "'";
        fail_at(k.line, str_cat("Unexpected end of template. Jinja was looking for the following tags: ", want,
                                ". The innermost block that needs to be closed is '", innermost, "' (opened on line ",
                                open_line, ")."));
      }
      if (k.kind == Tok::text) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::text;
        n->line = k.line;
        n->text = k.text;
        b.push_back(std::move(n));
        ++p;
      } else if (k.kind == Tok::var_begin) {
        ++p;
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::output;
        n->line = k.line;
        n->expr = tuple(false);
        if (cur().kind != Tok::var_end)
          fail(str_cat("expected token 'end of print statement', got '", describe(), "'"));
        ++p;
        b.push_back(std::move(n));
      } else if (k.kind == Tok::block_begin) {
        if (peek().kind == Tok::name && ends.count(peek().text)) {
          ++p;
          return b;
        }
        ++p;
        b.push_back(statement());
      } else {
        fail(str_cat("unexpected '", describe(), "'"));
      }
    }
  }

  NodePtr statement() {
    DepthGuard g(*this);
    const int line = cur().line;
    if (cur().kind != Tok::name) fail("tag name expected");
    const std::string tag = t[p++].text;
    auto n = std::make_unique<Node>();
    n->line = line;
    if (tag == "if") {
      n->kind = NodeKind::if_;
      ++soft;
      while (true) {
        ExprPtr c = tuple(false);
        expect_block_end();
        Body b = body_until({"elif", "else", "endif"}, "if", line);
        n->branches.emplace_back(std::move(c), std::move(b));
        const std::string which = t[p++].text;
        if (which == "elif") continue;
        if (which == "else") {
          expect_block_end();
          n->else_body = body_until({"endif"}, "if", line);
          ++p;
        }
        break;
      }
      --soft;
      expect_block_end();
    } else if (tag == "for") {
      n->kind = NodeKind::for_;
      n->target = target(false);
      if (!is_name("in")) fail(str_cat("expected token 'in', got '", describe(), "'"));
      ++p;
      n->expr = tuple(false, false);
      const int saved = soft;
      soft = 0;
      if (is_name("if")) {
        ++p;
        n->cond = expression();
      }
      if (is_name("recursive")) fail("recursive for loops are not supported");
      expect_block_end();
      n->body = body_until({"endfor", "else"}, "for", line);
      if (t[p++].text == "else") {
        expect_block_end();
        n->else_body = body_until({"endfor"}, "for", line);
        ++p;
      }
      soft = saved;
      expect_block_end();
    } else if (tag == "set") {
      n->target = target(true);
      if (is_op("=")) {
        ++p;
        n->kind = NodeKind::set;
        n->expr = tuple(false);
        expect_block_end();
      } else {
        n->kind = NodeKind::set_block;
        while (is_op("|")) {
          ++p;
          n->filters.push_back(filter(nullptr));
        }
        expect_block_end();
        const int saved = soft;
        soft = 0;
        n->body = body_until({"endset"}, "set", line);
        soft = saved;
        ++p;
        expect_block_end();
      }
    } else if (tag == "macro" || tag == "call") {
      n->kind = tag == "macro" ? NodeKind::macro : NodeKind::call_block;
      if (tag == "macro") n->text = expect_name();
      if (tag == "macro" || is_op("(")) {
        expect_op("(");
        while (!is_op(")")) {
          if (!n->params.empty()) expect_op(",");
          MacroParam mp;
          mp.name = expect_name();
          if (is_op("=")) {
            ++p;
            mp.def = expression();
          } else if (!n->params.empty() && n->params.back().def) {
            fail("non-default argument follows default argument");
          }
          n->params.push_back(std::move(mp));
        }
        expect_op(")");
      }
      if (tag == "call") {
        n->expr = expression();
        if (n->expr->kind != ExprKind::call) fail("expected call");
      }
      expect_block_end();
      const int saved = soft;
      soft = 0;
      const std::string end = tag == "macro" ? "endmacro" : "endcall";
      n->body = body_until({end}, tag, line);
      soft = saved;
      ++p;
      if (tag == "macro" && cur().kind == Tok::name && cur().text == n->text) ++p;
      expect_block_end();
    } else if (tag == "filter" || tag == "generation") {
      n->kind = NodeKind::filter_block;
      if (tag == "filter") {
        n->filters.push_back(filter(nullptr));
        while (is_op("|")) {
          ++p;
          n->filters.push_back(filter(nullptr));
        }
      }
      expect_block_end();
      const int saved = soft;
      soft = 0;
      n->body = body_until({"end" + tag}, tag, line);
      soft = saved;
      ++p;
      expect_block_end();
    } else if (tag == "break" || tag == "continue") {
      n->kind = tag == "break" ? NodeKind::break_ : NodeKind::continue_;
      expect_block_end();
    } else {
      fail_at(line, str_cat("Encountered unknown tag '", tag, "'."));
    }
    return n;
  }
};

}  // namespace

std::unique_ptr<Program> parse(const std::vector<Token>& tokens) {
  Parser ps{tokens};
  auto prog = std::make_unique<Program>();
  prog->body = ps.body_until({}, "", 0);
  return prog;
}

}  // namespace sluice::tmpl
