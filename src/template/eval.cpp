// template/eval: runs a parsed template as jinja2's generated Python would: scoping (a loop
// iteration, macro call and block capture each get a child scope; if-blocks do not), lookups,
// Python operators, loop variables, macros with caller(), and the sandbox limits.
#include <cmath>
#include <limits>

#include "template/interp.h"

namespace sluice::tmpl {
namespace {

bool is_int_like(const Value& v) { return v.type == Type::integer || v.type == Type::boolean; }
int64_t as_int(const Value& v) { return v.type == Type::integer ? v.i : (v.b ? 1 : 0); }
double as_float(const Value& v) { return v.type == Type::floating ? v.f : static_cast<double>(as_int(v)); }

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw_value_error(ErrorKind::type,
                    str_cat("unsupported operand type(s) for ", op, ": '", type_name(a), "' and '", type_name(b), "'"));
}

Value repeat(const Value& seq, int64_t n) {
  if (n > 0)
    check_size(static_cast<size_t>(std::min<double>(
        static_cast<double>(n) * static_cast<double>(seq.is_string() ? seq.str().size() : seq.l->size()), 1e18)));
  if (seq.is_string()) {
    std::string r;
    for (int64_t k = 0; k < n; ++k) r += seq.str();
    return Value::string(r);
  }
  List r;
  for (int64_t k = 0; k < n; ++k) r.insert(r.end(), seq.l->begin(), seq.l->end());
  return Value::list(r, seq.is_tuple);
}

}  // namespace

void undefined_fail(const Value& u) {
  throw_value_error(u.i == 1 ? ErrorKind::security : ErrorKind::undefined, u.str());
}

void Interp::count_iteration() {
  if (++iterations_ > limits_.max_iterations)
    throw_value_error(ErrorKind::limit, str_cat("more than ", limits_.max_iterations, " loop iterations"));
}

std::string Interp::render(const Program& prog, const Dict& variables) {
  auto root = std::make_shared<Scope>();
  for (auto& kv : builtin_globals(*this)) root->vars[kv.first] = kv.second;
  for (const auto& kv : variables) root->vars[kv.first] = kv.second;
  auto top = std::make_shared<Scope>();
  top->parent = root;
  struct Release {
    Interp& in;
    ~Release() {
      for (auto& s : in.closures_) {
        s->vars.clear();
        s->parent.reset();
      }
      for (auto& d : in.namespaces_) d->clear();
    }
  } release{*this};
  closures_.push_back(root);
  closures_.push_back(top);
  std::string out;
  exec(prog.body, top, out);
  return out;
}

Flow Interp::exec(const Body& b, const ScopePtr& s, std::string& out) {
  for (const auto& n : b) {
    Flow f;
    try {
      f = exec_node(*n, s, out);
    } catch (const ValueError& e) {
      throw TemplateError(e.kind, n->line, e.msg);
    }
    if (out.size() > limits_.max_output)
      throw TemplateError(ErrorKind::limit, n->line, str_cat("output longer than ", limits_.max_output, " bytes"));
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

void Interp::assign(const Target& t, const Value& v, const ScopePtr& s) {
  if (!t.attr.empty()) {
    const Value* ns = s->lookup(t.names[0]);
    if (!ns || ns->type != Type::ns)
      throw_value_error(ErrorKind::type, "cannot assign attribute on non-namespace object");
    Value copy = *ns;
    copy.set(t.attr, v);  // shares the namespace's dict
    return;
  }
  if (!t.tuple) {
    s->vars[t.names[0]] = v;
    return;
  }
  List items = iterate(v);
  if (items.size() != t.names.size())
    throw_value_error(ErrorKind::type, str_cat(items.size() < t.names.size() ? "not enough" : "too many",
                                               " values to unpack (expected ", t.names.size(), ")"));
  for (size_t k = 0; k < items.size(); ++k) s->vars[t.names[k]] = items[k];
}

Flow Interp::exec_node(const Node& n, const ScopePtr& s, std::string& out) {
  switch (n.kind) {
    case NodeKind::text: out += n.text; return Flow::normal;
    case NodeKind::output: out += to_str(eval(*n.expr, s)); return Flow::normal;
    case NodeKind::if_:
      for (const auto& br : n.branches)
        if (truthy(eval(*br.first, s))) return exec(br.second, s, out);
      return exec(n.else_body, s, out);
    case NodeKind::for_: return exec_for(n, s, out);
    case NodeKind::set: assign(n.target, eval(*n.expr, s), s); return Flow::normal;
    case NodeKind::set_block:
    case NodeKind::filter_block: {
      auto inner = std::make_shared<Scope>();
      inner->parent = s;
      std::string buf;
      exec(n.body, inner, buf);
      Value v = Value::string(buf);
      for (const auto& f : n.filters) {
        Args a;
        eval_args(*f, 1, s, a);
        v = apply_filter(f->name, v, a);
      }
      if (n.kind == NodeKind::set_block)
        assign(n.target, v, s);
      else
        out += to_str(v);
      return Flow::normal;
    }
    case NodeKind::macro: s->vars[n.text] = make_macro(n, s); return Flow::normal;
    case NodeKind::call_block: {
      Value caller = make_macro(n, s);
      const Expr& c = *n.expr;
      Value fn = eval(*c.args[0], s);
      Args a;
      eval_args(c, 1, s, a);
      a.kw.emplace_back("caller", caller);
      out += to_str(call(fn, a));
      return Flow::normal;
    }
    case NodeKind::break_: return Flow::break_;
    case NodeKind::continue_: return Flow::continue_;
  }
  return Flow::normal;
}

Flow Interp::exec_for(const Node& n, const ScopePtr& s, std::string& out) {
  const Value seq = eval(*n.expr, s);
  List items = iterate(seq);
  if (n.cond) {
    List kept;
    for (const auto& it : items) {
      auto tmp = std::make_shared<Scope>();
      tmp->parent = s;
      assign(n.target, it, tmp);
      if (truthy(eval(*n.cond, tmp))) kept.push_back(it);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(n.else_body, s, out);
  const auto len = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < len; ++k) {
    count_iteration();
    auto it_scope = std::make_shared<Scope>();
    it_scope->parent = s;
    Dict loop;
    loop.emplace_back("index", Value::integer(k + 1));
    loop.emplace_back("index0", Value::integer(k));
    loop.emplace_back("revindex", Value::integer(len - k));
    loop.emplace_back("revindex0", Value::integer(len - k - 1));
    loop.emplace_back("first", Value::boolean(k == 0));
    loop.emplace_back("last", Value::boolean(k == len - 1));
    loop.emplace_back("length", Value::integer(len));
    loop.emplace_back("depth", Value::integer(1));  // only recursive loops (unsupported) go deeper
    loop.emplace_back("depth0", Value::integer(0));
    loop.emplace_back("previtem",
                      k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undef("there is no previous item"));
    loop.emplace_back("nextitem",
                      k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value::undef("there is no next item"));
    loop.emplace_back("cycle", Value::function([k](Args& a) -> Value {
                        if (a.pos.empty()) throw_value_error(ErrorKind::type, "no items for cycling given");
                        return a.pos[static_cast<size_t>(k) % a.pos.size()];
                      }));
    it_scope->vars["loop"] = Value::dict(std::move(loop));
    assign(n.target, items[static_cast<size_t>(k)], it_scope);
    const Flow f = exec(n.body, it_scope, out);
    if (f == Flow::break_) break;
  }
  return Flow::normal;
}

Value Interp::make_macro(const Node& n, const ScopePtr& closure) {
  const Node* node = &n;
  closures_.push_back(closure);
  return Value::function([this, node, closure](Args& a) -> Value {
    if (call_depth_ >= limits_.max_call_depth) throw_value_error(ErrorKind::limit, "maximum recursion depth exceeded");
    auto s = std::make_shared<Scope>();
    s->parent = closure;
    List varargs;
    Dict kwargs;
    for (size_t k = 0; k < a.pos.size(); ++k) {
      if (k < node->params.size())
        s->vars[node->params[k].name] = a.pos[k];
      else
        varargs.push_back(a.pos[k]);
    }
    for (const auto& kv : a.kw) {
      bool found = kv.first == "caller";
      for (const auto& p : node->params) found = found || p.name == kv.first;
      if (found)
        s->vars[kv.first] = kv.second;
      else
        kwargs.emplace_back(kv.first, kv.second);
    }
    for (const auto& p : node->params) {
      if (s->vars.count(p.name)) continue;
      s->vars[p.name] = p.def ? eval(*p.def, s) : Value::undef(str_cat("parameter '", p.name, "' was not provided"));
    }
    s->vars["varargs"] = Value::list(varargs, true);
    s->vars["kwargs"] = Value::dict(kwargs);
    std::string out;
    ++call_depth_;
    try {
      exec(node->body, s, out);
    } catch (...) {
      --call_depth_;
      throw;
    }
    --call_depth_;
    return Value::string(out);
  });
}

Value Interp::getattr(const Value& obj, const std::string& name) {
  switch (obj.type) {
    case Type::undefined: undefined_fail(obj);
    case Type::ns: {
      const Value* v = obj.find(name);
      return v ? *v : Value::undef(str_cat("'Namespace object' has no attribute '", name, "'"));
    }
    case Type::dict: {
      Value m = builtin_method(*this, obj, name);
      if (!m.is_undefined() || m.i == 1) return m;
      const Value* v = obj.find(name);
      return v ? *v : Value::undef(str_cat("'dict object' has no attribute '", name, "'"));
    }
    case Type::string:
    case Type::list: {
      Value m = builtin_method(*this, obj, name);
      if (!m.is_undefined() || m.i == 1) return m;
      return Value::undef(str_cat(object_repr(obj), " has no attribute '", name, "'"));
    }
    default: return Value::undef(str_cat(object_repr(obj), " has no attribute '", name, "'"));
  }
}

Value Interp::getitem(const Value& obj, const Value& key) {
  switch (obj.type) {
    case Type::undefined: undefined_fail(obj);
    case Type::dict:
    case Type::ns:
      if (key.is_string()) {
        const Value* v = obj.find(key.str());
        if (v) return *v;
        if (obj.type == Type::dict) {
          Value m = builtin_method(*this, obj, key.str());
          if (!m.is_undefined() || m.i == 1) return m;
        }
        return Value::undef(str_cat(object_repr(obj), " has no attribute '", key.str(), "'"));
      }
      if (const Value* v = key.is_number() || key.is_none() ? obj.find(dict_key(key)) : nullptr) return *v;
      return Value::undef(str_cat(object_repr(obj), " has no element ", to_repr(key)));
    case Type::list:
      if (obj.view != Value::View::none)  // not subscriptable: jinja2 turns the TypeError into undefined
        return Value::undef(str_cat(object_repr(obj), " has no element ", to_repr(key)));
      [[fallthrough]];
    case Type::string:
      if (is_int_like(key)) {
        int64_t k = as_int(key);
        if (obj.is_list()) {
          const auto n = static_cast<int64_t>(obj.l->size());
          if (k < 0) k += n;
          if (k >= 0 && k < n) return (*obj.l)[static_cast<size_t>(k)];
        } else {
          const auto cps = utf8_decode(obj.str());
          const auto n = static_cast<int64_t>(cps.size());
          if (k < 0) k += n;
          if (k >= 0 && k < n) return Value::string(utf8_encode({cps[static_cast<size_t>(k)]}));
        }
        return Value::undef(str_cat(object_repr(obj), " has no element ", as_int(key)));
      }
      if (key.is_string()) return getattr(obj, key.str());
      return Value::undef(str_cat(object_repr(obj), " has no element ", to_repr(key)));
    default: return Value::undef(str_cat(object_repr(obj), " has no element ", to_repr(key)));
  }
}

Value Interp::call(const Value& fn, Args& args) {
  if (fn.is_undefined()) undefined_fail(fn);
  if (fn.type != Type::function)
    throw_value_error(ErrorKind::type, str_cat("'", type_name(fn), "' object is not callable"));
  return (*fn.fn)(args);
}

void Interp::eval_args(const Expr& e, size_t first, const ScopePtr& s, Args& a) {
  for (size_t k = first; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k], s));
  for (const auto& kv : e.kwargs) a.kw.emplace_back(kv.first, eval(*kv.second, s));
}

Value Interp::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string l = to_str(a), r = to_str(b);
    check_size(l.size() + r.size());
    return Value::string(l + r);
  }
  if (a.is_undefined()) undefined_fail(a);
  if (b.is_undefined()) undefined_fail(b);
  if (op == "+" && ((a.is_string() && a.safe) || (b.is_string() && b.safe))) {
    // markupsafe.Markup.__add__/__radd__: the plain side is HTML-escaped, the result is Markup.
    if (!a.is_string() || !b.is_string()) unsupported("+", a, b);
    Value r = Value::string((a.safe ? a.str() : html_escape(a.str())) + (b.safe ? b.str() : html_escape(b.str())));
    r.safe = true;
    return r;
  }
  const bool nums = a.is_number() && b.is_number();
  const bool ints = is_int_like(a) && is_int_like(b);
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(as_int(a), as_int(b), &r)) throw_value_error(ErrorKind::type, "integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::floating(as_float(a) + as_float(b));
    if (a.is_string() && b.is_string()) {
      check_size(a.str().size() + b.str().size());
      return Value::string(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
      check_size(a.l->size() + b.l->size());
      List r = *a.l;
      r.insert(r.end(), b.l->begin(), b.l->end());
      return Value::list(r, a.is_tuple);
    }
    if (a.is_string())
      throw_value_error(ErrorKind::type, str_cat("can only concatenate str (not \"", type_name(b), "\") to str"));
    if (a.is_list())
      throw_value_error(ErrorKind::type, str_cat("can only concatenate list (not \"", type_name(b), "\") to list"));
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(as_int(a), as_int(b), &r)) throw_value_error(ErrorKind::type, "integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::floating(as_float(a) - as_float(b));
    unsupported("-", a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(as_int(a), as_int(b), &r)) throw_value_error(ErrorKind::type, "integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::floating(as_float(a) * as_float(b));
    if ((a.is_string() || a.is_list()) && is_int_like(b)) {
      Value r = repeat(a, as_int(b));
      r.safe = a.safe;
      return r;
    }
    if ((b.is_string() || b.is_list()) && is_int_like(a)) {
      Value r = repeat(b, as_int(a));
      r.safe = b.safe;
      return r;
    }
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!nums) unsupported("/", a, b);
    if (as_float(b) == 0) throw_value_error(ErrorKind::type, "division by zero");
    return Value::floating(as_float(a) / as_float(b));
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) return Value::string(percent_format(a.str(), b));
    if (!nums) unsupported(op, a, b);
    if (ints) {
      const int64_t x = as_int(a), y = as_int(b);
      if (y == 0)
        throw_value_error(ErrorKind::type,
                          op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) throw_value_error(ErrorKind::type, "integer overflow");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value::integer(op == "//" ? q : r);
    }
    // CPython's float_divmod.
    const double x = as_float(a), y = as_float(b);
    if (y == 0) throw_value_error(ErrorKind::type, op == "//" ? "float floor division by zero" : "float modulo");
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    double floordiv;
    if (div != 0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, x / y);
    }
    return Value::floating(op == "//" ? floordiv : mod);
  }
  if (op == "**") {
    if (!nums) unsupported("** or pow()", a, b);
    if (ints && as_int(b) >= 0) {
      int64_t r = 1, base = as_int(a);
      for (int64_t e = as_int(b); e > 0; --e)
        if (__builtin_mul_overflow(r, base, &r)) throw_value_error(ErrorKind::type, "integer overflow");
      return Value::integer(r);
    }
    if (as_float(a) == 0 && as_float(b) < 0)
      throw_value_error(ErrorKind::type, "0.0 cannot be raised to a negative power");
    return Value::floating(std::pow(as_float(a), as_float(b)));
  }
  throw_value_error(ErrorKind::type, "unknown operator " + op);
}

static bool contains(const Value& container, const Value& x) {
  switch (container.type) {
    case Type::undefined: return false;
    case Type::string:
      if (!x.is_string())
        throw_value_error(ErrorKind::type,
                          str_cat("'in <string>' requires string as left operand, not ", type_name(x)));
      return container.str().find(x.str()) != std::string::npos;
    case Type::list:
      for (const auto& v : *container.l)
        if (equal(v, x)) return true;
      return false;
    case Type::dict:
    case Type::ns: return container.find(dict_key(x)) != nullptr;
    default:
      throw_value_error(ErrorKind::type, str_cat("argument of type '", type_name(container), "' is not iterable"));
  }
}

Value Interp::eval_compare(const Expr& e, const ScopePtr& s) {
  Value left = eval(*e.args[0], s);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.args[k + 1], s);
    const std::string& op = e.ops[k];
    bool r;
    if (op == "==")
      r = equal(left, right);
    else if (op == "!=")
      r = !equal(left, right);
    else if (op == "in")
      r = contains(right, left);
    else if (op == "notin")
      r = !contains(right, left);
    else {
      if (left.is_undefined()) undefined_fail(left);
      if (right.is_undefined()) undefined_fail(right);
      if (op == "<")
        r = less(left, right);
      else if (op == ">")
        r = less(right, left);
      else if (op == "<=")
        r = !less(right, left);
      else
        r = !less(left, right);
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interp::eval_call(const Expr& e, const ScopePtr& s) {
  Value fn = eval(*e.args[0], s);
  Args a;
  eval_args(e, 1, s, a);
  return call(fn, a);
}

static int64_t slice_index(const Value& v, int64_t n, int64_t def, bool neg_step) {
  if (v.is_none() || v.is_undefined()) return def;
  if (!is_int_like(v)) throw_value_error(ErrorKind::type, "slice indices must be integers or None");
  int64_t k = as_int(v);
  if (k < 0) k += n;
  if (neg_step) return std::clamp<int64_t>(k, -1, n - 1);
  return std::clamp<int64_t>(k, 0, n);
}

Value Interp::eval(const Expr& e, const ScopePtr& s) {
  switch (e.kind) {
    case ExprKind::constant: return e.value;
    case ExprKind::name: {
      const Value* v = s->lookup(e.name);
      return v ? *v : Value::undef(str_cat("'", e.name, "' is undefined"));
    }
    case ExprKind::list:
    case ExprKind::tuple: {
      List l;
      for (const auto& a : e.args) l.push_back(eval(*a, s));
      return Value::list(std::move(l), e.kind == ExprKind::tuple);
    }
    case ExprKind::dict: {
      Value d = Value::dict();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], s);
        d.set(dict_key(key), eval(*e.args[k + 1], s));
      }
      return d;
    }
    case ExprKind::attr: return getattr(eval(*e.args[0], s), e.name);
    case ExprKind::item: return getitem(eval(*e.args[0], s), eval(*e.args[1], s));
    case ExprKind::slice: {
      Value obj = eval(*e.args[0], s);
      if (obj.is_undefined()) undefined_fail(obj);
      Value st = e.args[3] ? eval(*e.args[3], s) : Value::none();
      const int64_t step = st.is_none() ? 1 : is_int_like(st) ? as_int(st) : 0;
      if (step == 0) throw_value_error(ErrorKind::type, "slice step cannot be zero");
      std::vector<uint32_t> cps;
      if (obj.is_string())
        cps = utf8_decode(obj.str());
      else if (!obj.is_list())
        throw_value_error(ErrorKind::type, str_cat("'", type_name(obj), "' object is not subscriptable"));
      const int64_t n = obj.is_string() ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.l->size());
      const int64_t lo = slice_index(e.args[1] ? eval(*e.args[1], s) : Value::none(), n, step > 0 ? 0 : n - 1,
                                     step < 0);
      const int64_t hi = slice_index(e.args[2] ? eval(*e.args[2], s) : Value::none(), n, step > 0 ? n : -1, step < 0);
      std::vector<size_t> idx;
      for (int64_t k = lo; step > 0 ? k < hi : k > hi; k += step) idx.push_back(static_cast<size_t>(k));
      if (obj.is_string()) {
        std::string r;
        for (size_t k : idx) utf8_append(r, cps[k]);
        return Value::string(r);
      }
      List r;
      for (size_t k : idx) r.push_back((*obj.l)[k]);
      return Value::list(r, obj.is_tuple);
    }
    case ExprKind::call: return eval_call(e, s);
    case ExprKind::filter: {
      Value x = eval(*e.args[0], s);
      Args a;
      eval_args(e, 1, s, a);
      return apply_filter(e.name, x, a);
    }
    case ExprKind::test: {
      Value x = eval(*e.args[0], s);
      Args a;
      eval_args(e, 1, s, a);
      return Value::boolean(apply_test(e.name, x, a) != e.negated);
    }
    case ExprKind::neg:
    case ExprKind::pos: {
      Value x = eval(*e.args[0], s);
      if (x.is_undefined()) undefined_fail(x);
      if (!x.is_number())
        throw_value_error(ErrorKind::type, str_cat("bad operand type for unary ", e.kind == ExprKind::neg ? "-" : "+",
                                                   ": '", type_name(x), "'"));
      if (e.kind == ExprKind::pos) return is_int_like(x) ? Value::integer(as_int(x)) : x;
      return is_int_like(x) ? Value::integer(-as_int(x)) : Value::floating(-x.f);
    }
    case ExprKind::not_: return Value::boolean(!truthy(eval(*e.args[0], s)));
    case ExprKind::and_: {
      Value a = eval(*e.args[0], s);
      return truthy(a) ? eval(*e.args[1], s) : a;
    }
    case ExprKind::or_: {
      Value a = eval(*e.args[0], s);
      return truthy(a) ? a : eval(*e.args[1], s);
    }
    case ExprKind::binary: return eval_binary(e.name, eval(*e.args[0], s), eval(*e.args[1], s));
    case ExprKind::compare: return eval_compare(e, s);
    case ExprKind::cond:
      if (truthy(eval(*e.args[0], s))) return eval(*e.args[1], s);
      if (e.args[2]) return eval(*e.args[2], s);
      return Value::undef("the inline if-expression evaluated to false and no else section was defined.");
  }
  return Value::none();
}

}  // namespace sluice::tmpl
