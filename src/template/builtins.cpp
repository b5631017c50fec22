// template/builtins: jinja2's filters and tests (jinja2/filters.py, jinja2/tests.py) with
// transformers' tojson, and the globals a chat template sees: range, namespace, dict,
// raise_exception, strftime_now.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "template/interp.h"

namespace sluice::tmpl {
namespace {

const char* kFilters[] = {"abs",        "attr",   "batch",      "capitalize",  "center",  "count",  "d",      "default",
                          "dictsort",   "e",      "escape",     "first",       "float",   "format", "indent", "int",
                          "items",      "join",   "last",       "length",      "list",    "lower",  "map",    "max",
                          "min",        "reject", "rejectattr", "replace",     "reverse", "round",  "safe",   "select",
                          "selectattr", "slice",  "sort",       "string",      "sum",     "title",  "tojson", "trim",
                          "unique",     "upper",  "wordcount",  "forceescape", "groupby"};
const char* kTests[] = {"boolean",  "callable", "defined",  "divisibleby", "eq",    "equalto", "==",  "escaped",
                        "even",     "false",    "float",    "ge",          ">=",    "gt",      ">",   "greaterthan",
                        "in",       "integer",  "iterable", "le",          "<=",    "lower",   "lt",  "<",
                        "lessthan", "mapping",  "ne",       "!=",          "none",  "number",  "odd", "sameas",
                        "sequence", "string",   "true",     "undefined",   "upper", "filter",  "test"};

bool in_list(const char* const* b, const char* const* e, const std::string& n) {
  return std::find_if(b, e, [&](const char* k) { return n == k; }) != e;
}

const Value* opt(const Args& a, size_t k, const char* name) { return a.get(k, name); }
bool opt_bool(const Args& a, size_t k, const char* name, bool def) {
  const Value* v = opt(a, k, name);
  return v ? truthy(*v) : def;
}
int64_t opt_int(const Args& a, size_t k, const char* name, int64_t def) {
  const Value* v = opt(a, k, name);
  if (!v || v->is_none()) return def;
  if (v->type == Type::integer) return v->i;
  if (v->type == Type::boolean) return v->b;
  // A float in range truncates; beyond int64 (or NaN) the cast would be undefined: refuse it.
  if (v->type == Type::floating && std::isfinite(v->f) && std::fabs(v->f) < 9.2e18) return static_cast<int64_t>(v->f);
  throw_value_error(ErrorKind::type, str_cat("'", type_name(*v), "' object cannot be interpreted as an integer"));
}

std::string lower_str(const std::string& s) {
  std::vector<uint32_t> c = utf8_decode(s);
  for (auto& x : c) x = unicode_lower(x);
  return utf8_encode(c);
}

// jinja2's make_attrgetter: "a.b.0" walks items; `lower` applies ignore_case (strings lowered).
Value attr_path(Interp& in, const Value& x, const std::string& path) {
  Value v = x;
  size_t b = 0;
  while (b <= path.size()) {
    size_t e = path.find('.', b);
    if (e == std::string::npos) e = path.size();
    const std::string part = path.substr(b, e - b);
    const bool digits = !part.empty() &&
                        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits ? in.getitem(v, Value::integer(std::atoll(part.c_str()))) : in.getitem(v, Value::string(part));
    b = e + 1;
  }
  return v;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(lower_str(v.str()));
  return v;
}

// select/reject/selectattr/rejectattr: args after the attribute are the test and its arguments.
Value select(Interp& in, const Value& seq, Args& a, bool attr, bool keep) {
  size_t k = 0;
  std::string attribute;
  if (attr) {
    if (a.pos.empty() || !a.pos[0].is_string())
      throw_value_error(ErrorKind::type, "selectattr needs an attribute name");
    attribute = a.pos[0].str();
    k = 1;
  }
  std::string test;
  Args targs;
  if (k < a.pos.size()) {
    if (!a.pos[k].is_string()) throw_value_error(ErrorKind::type, "the test name must be a string");
    test = a.pos[k].str();
    targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(k) + 1, a.pos.end());
    targs.kw = a.kw;
  }
  List out;
  if (!truthy(seq)) return make_view(out, Value::View::generator);  // jinja2: `if value:` first
  for (const auto& item : iterate(seq)) {
    const Value x = attr ? attr_path(in, item, attribute) : item;
    bool ok;
    if (test.empty())
      ok = truthy(x);
    else {
      Args ta = targs;
      ok = in.apply_test(test, x, ta);
    }
    if (ok == keep) out.push_back(item);
  }
  return make_view(out, Value::View::generator);
}

Value round_filter(const Value& x, const Args& a) {
  const int64_t prec = opt_int(a, 0, "precision", 0);
  const Value* m = opt(a, 1, "method");
  const std::string method = m && m->is_string() ? m->str() : "common";
  if (!x.is_number())
    throw_value_error(ErrorKind::type, str_cat("type ", type_name(x), " doesn't define __round__ method"));
  const double v = x.type == Type::floating ? x.f : static_cast<double>(x.type == Type::integer ? x.i : x.b);
  const double scale = std::pow(10.0, static_cast<double>(prec));
  if (method == "ceil") return Value::floating(std::ceil(v * scale) / scale);
  if (method == "floor") return Value::floating(std::floor(v * scale) / scale);
  if (method != "common") throw_value_error(ErrorKind::type, "method must be common, ceil or floor");
  if (x.type != Type::floating) return x.type == Type::integer ? x : Value::integer(x.b);
  // Python's round(): correctly rounded, half to even, on the exact binary value (as printf does).
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<int64_t>(prec, 0, 300)), v);
  return Value::floating(prec < 0 ? std::nearbyint(v * scale) / scale : std::strtod(buf, nullptr));
}

Value indent_filter(const Value& x, const Args& a) {
  const Value* w = opt(a, 0, "width");
  const std::string ind =
      w && w->is_string()
          ? w->str()
          : std::string(static_cast<size_t>(std::clamp<int64_t>(opt_int(a, 0, "width", 4), 0, 1 << 16)), ' ');
  const bool first = opt_bool(a, 1, "first", false), blank = opt_bool(a, 2, "blank", false);
  std::string s = to_str(x) + "\n";
  std::vector<std::string> lines;
  size_t b = 0;
  for (size_t k = 0; k < s.size(); ++k)
    if (s[k] == '\n' || s[k] == '\r') {
      lines.push_back(s.substr(b, k - b));
      if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
      b = k + 1;
    }
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) {
      rv += (k ? "\n" + ind : "") + lines[k];
      check_size(rv.size());
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      rv += "\n" + (lines[k].empty() ? "" : ind + lines[k]);
      check_size(rv.size());
    }
  }
  return Value::string(first ? ind + rv : rv);
}

Value tojson_filter(const Value& x, const Args& a) {
  // transformers: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
  const Value* ind = opt(a, 1, "indent");
  int indent = -1;
  if (ind && !ind->is_none()) {
    if (ind->type == Type::string) throw_value_error(ErrorKind::type, "string indents are not supported");
    indent = static_cast<int>(std::clamp<int64_t>(opt_int(a, 1, "indent", 0), 0, 64));
  }
  std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
  const Value* sep = opt(a, 2, "separators");
  if (sep && !sep->is_none()) {
    if (!sep->is_list() || sep->l->size() != 2 || !(*sep->l)[0].is_string() || !(*sep->l)[1].is_string())
      throw_value_error(ErrorKind::type, "separators must be a pair of strings");
    item_sep = (*sep->l)[0].str();
    key_sep = (*sep->l)[1].str();
  }
  return Value::string(
      to_json(x, indent, item_sep, key_sep, opt_bool(a, 3, "sort_keys", false), opt_bool(a, 0, "ensure_ascii", false)));
}

Value minmax(Interp& in, const Value& x, const Args& a, bool want_max) {
  const bool cs = opt_bool(a, 0, "case_sensitive", false);
  const Value* attr = opt(a, 1, "attribute");
  List items = iterate(x);
  if (items.empty()) return Value::undef("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](size_t k) {
    return sort_key(attr && attr->is_string() ? attr_path(in, items[k], attr->str()) : items[k], cs);
  };
  for (size_t k = 1; k < items.size(); ++k)
    if (want_max ? less(key(best), key(k)) : less(key(k), key(best))) best = k;
  return items[best];
}

}  // namespace

bool known_filter(const std::string& name) { return in_list(std::begin(kFilters), std::end(kFilters), name); }
bool known_test(const std::string& name) { return in_list(std::begin(kTests), std::end(kTests), name); }

Value Interp::apply_filter(const std::string& f, const Value& x, Args& a) {
  if (!known_filter(f)) throw_value_error(ErrorKind::syntax, str_cat("No filter named '", f, "' found."));
  if (f == "default" || f == "d") {
    const Value* dv = opt(a, 0, "default_value");
    const Value def = dv ? *dv : Value::string("");
    if (x.is_undefined() || (opt_bool(a, 1, "boolean", false) && !truthy(x))) return def;
    return x;
  }
  if (f == "tojson") return tojson_filter(x, a);
  if (f == "length" || f == "count") return Value::integer(py_len(x));
  if (f == "safe" || f == "e" || f == "escape" || f == "forceescape") {
    if (x.is_string() && x.safe && f != "forceescape") return x;
    Value r = Value::string(f == "safe" ? to_str(x) : html_escape(to_str(x)));
    r.safe = true;
    return r;
  }
  if (f == "string") return x.is_string() ? x : Value::string(to_str(x));
  if (f == "items") {
    if (x.is_undefined()) return Value::list();
    if (!x.is_dict()) throw_value_error(ErrorKind::type, "Can only get item pairs from a mapping.");
    List out;
    for (const auto& kv : *x.d) out.push_back(Value::list({key_value(kv.first), kv.second}, true));
    return make_view(out, Value::View::generator);
  }
  if (f == "list") return Value::list(iterate(x));
  if (f == "first" || f == "last") {
    List items = iterate(x);
    if (items.empty()) return Value::undef(str_cat("No ", f, " item, sequence was empty."));
    return f == "first" ? items.front() : items.back();
  }
  if (f == "reverse") {
    if (x.is_string()) {
      auto c = utf8_decode(x.str());
      std::reverse(c.begin(), c.end());
      return Value::string(utf8_encode(c));
    }
    List items = iterate(x);
    std::reverse(items.begin(), items.end());
    return make_view(items, Value::View::reversed);
  }
  if (f == "join") {
    const Value* d = opt(a, 0, "d");
    const std::string sep = d ? to_str(*d) : "";
    const Value* attr = opt(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& v : iterate(x)) {
      if (!first) out += sep;
      check_size(out.size());
      out += to_str(attr && !attr->is_none() ? attr_path(*this, v, to_str(*attr)) : v);
      first = false;
    }
    return Value::string(out);
  }
  if (f == "map") {
    List out;
    const Value* attr = nullptr;
    for (const auto& kv : a.kw)
      if (kv.first == "attribute") attr = &kv.second;
    if (attr) {
      const Value* def = nullptr;
      for (const auto& kv : a.kw)
        if (kv.first == "default") def = &kv.second;
      for (const auto& v : iterate(x)) {
        Value r = attr_path(*this, v, to_str(*attr));
        out.push_back(r.is_undefined() && def ? *def : r);
      }
      return make_view(out, Value::View::generator);
    }
    if (a.pos.empty() || !a.pos[0].is_string()) throw_value_error(ErrorKind::type, "map requires a filter argument");
    const std::string name = a.pos[0].str();
    Args rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const auto& v : iterate(x)) {
      Args r = rest;
      out.push_back(apply_filter(name, v, r));
    }
    return make_view(out, Value::View::generator);
  }
  if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr")
    return select(*this, x, a, f.size() > 6, f[0] == 's');
  if (f == "sort" || f == "dictsort" || f == "unique") {
    const bool reverse = f == "sort"       ? opt_bool(a, 0, "reverse", false)
                         : f == "dictsort" ? opt_bool(a, 2, "reverse", false)
                                           : false;
    const bool cs = opt_bool(a, f == "sort" ? 1 : 0, "case_sensitive", false);
    const Value* attr = f == "dictsort" ? nullptr : opt(a, f == "sort" ? 2 : 1, "attribute");
    List items;
    bool by_value = false;
    if (f == "dictsort") {
      if (!x.is_dict()) throw_value_error(ErrorKind::type, "dictsort needs a mapping");
      for (const auto& kv : *x.d) items.push_back(Value::list({key_value(kv.first), kv.second}, true));
      const Value* by = opt(a, 1, "by");
      by_value = by && by->is_string() && by->str() == "value";
    } else {
      items = iterate(x);
    }
    auto key = [&](const Value& v) {
      if (f == "dictsort") return sort_key((*v.l)[by_value ? 1 : 0], cs);
      return sort_key(attr && !attr->is_none() ? attr_path(*this, v, to_str(*attr)) : v, cs);
    };
    if (f == "unique") {
      List out, seen;
      for (const auto& v : items) {
        const Value k = key(v);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
          seen.push_back(k);
          out.push_back(v);
        }
      }
      return make_view(out, Value::View::generator);
    }
    std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
      return reverse ? less(key(q), key(p)) : less(key(p), key(q));
    });
    return Value::list(items);
  }
  if (f == "trim") {
    Value r = builtin_method(*this, Value::string(to_str(x)), "strip").fn->operator()(a);
    r.safe = x.is_string() && x.safe;  // Markup.strip() stays Markup
    return r;
  }
  if (f == "upper" || f == "lower" || f == "capitalize" || f == "center") {
    Args none;
    Value m = builtin_method(*this, Value::string(to_str(x)), f);
    if (f == "center" && a.pos.empty() && a.kw.empty()) none.pos.push_back(Value::integer(80));
    return m.fn->operator()(f == "center" && !a.pos.empty() ? a : none);
  }
  if (f == "replace") {
    Args r;
    r.pos = a.pos;
    if (const Value* c = opt(a, 2, "count")) {
      r.pos.resize(2);
      r.pos.push_back(*c);
    }
    return builtin_method(*this, Value::string(to_str(x)), "replace").fn->operator()(r);
  }
  if (f == "title") {
    // jinja2's do_title: words split at runs of whitespace, - ( { [ <; first letter upper, rest lower.
    auto c = utf8_decode(to_str(x));
    bool start = true;
    for (auto& ch : c) {
      const bool sep = unicode_space(ch) || ch == '-' || ch == '(' || ch == '{' || ch == '[' || ch == '<';
      if (sep) {
        start = true;
        continue;
      }
      ch = start ? unicode_upper(ch) : unicode_lower(ch);
      start = false;
    }
    return Value::string(utf8_encode(c));
  }
  if (f == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (uint32_t c : utf8_decode(to_str(x))) {
      const bool w = c == '_' || (c >= '0' && c <= '9') || unicode_lower(c) != unicode_upper(c) || c >= 0x80;
      if (w && !in_word) ++n;
      in_word = w && !unicode_space(c);
    }
    return Value::integer(n);
  }
  if (f == "int") {
    const int64_t def = opt_int(a, 0, "default", 0);
    const int64_t base = opt_int(a, 1, "base", 10);
    if (x.type == Type::integer) return x;
    if (x.type == Type::boolean) return Value::integer(x.b);
    if (x.type == Type::floating) {
      if (!std::isfinite(x.f)) return Value::integer(def);
      // Python makes a big integer; this interpreter has 64-bit ones only (and the cast
      // beyond them is undefined).
      if (std::fabs(x.f) >= 9.2e18) throw_value_error(ErrorKind::limit, "int(): the value exceeds 64-bit integers");
      return Value::integer(static_cast<int64_t>(x.f));
    }
    if (x.is_string()) {
      std::string s = x.str();
      while (!s.empty() && unicode_space(static_cast<unsigned char>(s.back()))) s.pop_back();
      size_t b = 0;
      while (b < s.size() && unicode_space(static_cast<unsigned char>(s[b]))) ++b;
      s = s.substr(b);
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(s.c_str(), &end, static_cast<int>(base == 0 ? 0 : base));
      if (!s.empty() && end && *end == 0 && errno == 0) return Value::integer(v);
      end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == 0 && std::isfinite(d)) return Value::integer(static_cast<int64_t>(d));
    }
    return Value::integer(def);
  }
  if (f == "float") {
    const Value* dv = opt(a, 0, "default");
    const Value def = dv ? *dv : Value::floating(0.0);
    if (x.type == Type::floating) return x;
    if (x.type == Type::integer || x.type == Type::boolean)
      return Value::floating(x.type == Type::integer ? static_cast<double>(x.i) : x.b);
    if (x.is_string()) {
      char* end = nullptr;
      const double d = std::strtod(x.str().c_str(), &end);
      if (!x.str().empty() && end && *end == 0) return Value::floating(d);
    }
    return def;
  }
  if (f == "abs") {
    if (x.type == Type::integer) return Value::integer(x.i < 0 ? -x.i : x.i);
    if (x.type == Type::boolean) return Value::integer(x.b);
    if (x.type == Type::floating) return Value::floating(std::fabs(x.f));
    throw_value_error(ErrorKind::type, str_cat("bad operand type for abs(): '", type_name(x), "'"));
  }
  if (f == "round") return round_filter(x, a);
  if (f == "indent") return indent_filter(x, a);
  if (f == "sum") {
    const Value* attr = opt(a, 0, "attribute");
    const Value* start = opt(a, 1, "start");
    Value acc = start ? *start : Value::integer(0);
    for (const auto& v : iterate(x)) {
      Value item = attr && !attr->is_none() ? attr_path(*this, v, to_str(*attr)) : v;
      acc = eval_binary("+", acc, item);
    }
    return acc;
  }
  if (f == "min" || f == "max") return minmax(*this, x, a, f == "max");
  if (f == "batch" || f == "slice") {
    const int64_t n = opt_int(a, 0, f == "batch" ? "linecount" : "slices", 1);
    if (n <= 0) throw_value_error(ErrorKind::type, "batch size must be positive");
    const Value* fill = opt(a, 1, "fill_with");
    List items = iterate(x), out;
    if (f == "batch") {
      for (size_t k = 0; k < items.size(); k += static_cast<size_t>(n)) {
        List row(items.begin() + static_cast<std::ptrdiff_t>(k),
                 items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), k + static_cast<size_t>(n))));
        if (fill && !fill->is_none())
          while (row.size() < static_cast<size_t>(n)) row.push_back(*fill);
        out.push_back(Value::list(row));
      }
    } else {
      const size_t len = items.size(), per = len / static_cast<size_t>(n), extra = len % static_cast<size_t>(n);
      size_t offset = 0;
      for (size_t k = 0; k < static_cast<size_t>(n); ++k) {
        const size_t start = offset + k * per + std::min(k, extra);
        const size_t end = start + per + (k < extra ? 1 : 0);
        List row(items.begin() + static_cast<std::ptrdiff_t>(start), items.begin() + static_cast<std::ptrdiff_t>(end));
        if (fill && !fill->is_none() && k >= extra && extra) row.push_back(*fill);
        out.push_back(Value::list(row));
      }
    }
    return make_view(out, Value::View::generator);
  }
  if (f == "attr") {
    if (a.pos.empty() || !a.pos[0].is_string()) throw_value_error(ErrorKind::type, "attr needs a name");
    return getattr(x, a.pos[0].str());
  }
  if (f == "format") {
    Value args = Value::list(a.pos, true);
    return Value::string(percent_format(to_str(x), args));
  }
  throw_value_error(ErrorKind::type, str_cat("filter '", f, "' is not implemented"));
}

bool Interp::apply_test(const std::string& t, const Value& x, Args& a) {
  if (!known_test(t)) throw_value_error(ErrorKind::syntax, str_cat("No test named '", t, "' found."));
  const Value* arg = a.pos.empty() ? nullptr : &a.pos[0];
  auto need = [&]() -> const Value& {
    if (!arg) throw_value_error(ErrorKind::type, str_cat("test '", t, "' needs an argument"));
    return *arg;
  };
  if (t == "defined") return !x.is_undefined();
  if (t == "undefined") return x.is_undefined();
  if (t == "none") return x.is_none();
  if (t == "string") return x.is_string();
  if (t == "number") return x.is_number();
  if (t == "integer") return x.type == Type::integer;
  if (t == "float") return x.type == Type::floating;
  if (t == "boolean") return x.type == Type::boolean;
  if (t == "true") return x.type == Type::boolean && x.b;
  if (t == "false") return x.type == Type::boolean && !x.b;
  if (t == "mapping") return x.is_dict();
  if (t == "iterable") return x.is_list() || x.is_dict() || x.is_string() || x.is_undefined();
  if (t == "sequence") return x.is_list() || x.is_dict() || x.is_string();
  if (t == "callable") return x.type == Type::function;
  if (t == "escaped") return false;
  if (t == "filter") return known_filter(to_str(need()));
  if (t == "test") return known_test(to_str(need()));
  if (t == "lower" || t == "upper") {
    if (!x.is_string()) return false;
    Args none;
    return truthy(builtin_method(*this, x, t == "lower" ? "islower" : "isupper").fn->operator()(none));
  }
  if (t == "odd" || t == "even" || t == "divisibleby") {
    if (x.type != Type::integer && x.type != Type::boolean)
      throw_value_error(ErrorKind::type, str_cat("unsupported operand type(s) for %: '", type_name(x), "' and 'int'"));
    const int64_t v = x.type == Type::integer ? x.i : x.b;
    if (t == "odd") return v % 2 != 0;
    if (t == "even") return v % 2 == 0;
    const Value& d = need();
    if (d.type != Type::integer || d.i == 0) throw_value_error(ErrorKind::type, "divisibleby needs a non-zero integer");
    return v % d.i == 0;
  }
  if (t == "eq" || t == "equalto" || t == "==") return equal(x, need());
  if (t == "ne" || t == "!=") return !equal(x, need());
  if (t == "lt" || t == "<" || t == "lessthan") return less(x, need());
  if (t == "gt" || t == ">" || t == "greaterthan") return less(need(), x);
  if (t == "le" || t == "<=") return !less(need(), x);
  if (t == "ge" || t == ">=") return !less(x, need());
  if (t == "sameas") {
    const Value& y = need();
    if (x.type != y.type) return false;
    if (x.is_list()) return x.l == y.l;
    if (x.is_dict() || x.type == Type::ns) return x.d == y.d;
    if (x.type == Type::function) return x.fn == y.fn;
    return equal(x, y);
  }
  if (t == "in") {
    const Value& c = need();
    if (c.is_string()) return x.is_string() && c.str().find(x.str()) != std::string::npos;
    if (c.is_dict()) return x.is_string() && c.find(x.str());
    for (const auto& v : iterate(c))
      if (equal(v, x)) return true;
    return false;
  }
  throw_value_error(ErrorKind::type, str_cat("test '", t, "' is not implemented"));
}

Dict builtin_globals(Interp& in) {
  Dict g;
  g.emplace_back("range", Value::function([&in](Args& a) -> Value {
                   int64_t start = 0, stop = 0, step = 1;
                   auto num = [](const Value& v) {
                     if (v.type != Type::integer && v.type != Type::boolean)
                       throw_value_error(ErrorKind::type,
                                         str_cat("'", type_name(v), "' object cannot be interpreted as an integer"));
                     return v.type == Type::integer ? v.i : static_cast<int64_t>(v.b);
                   };
                   if (a.pos.size() == 1)
                     stop = num(a.pos[0]);
                   else if (a.pos.size() >= 2) {
                     start = num(a.pos[0]);
                     stop = num(a.pos[1]);
                     if (a.pos.size() > 2) step = num(a.pos[2]);
                   } else
                     throw_value_error(ErrorKind::type, "range expected at least 1 argument, got 0");
                   if (step == 0) throw_value_error(ErrorKind::type, "range() arg 3 must not be zero");
                   List out;
                   for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
                     if (out.size() >= 100000)  // jinja2's sandbox MAX_RANGE
                       throw_value_error(ErrorKind::limit,
                                         "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
                     in.count_iteration();
                     out.push_back(Value::integer(k));
                   }
                   return Value::list(out);
                 }));
  g.emplace_back("namespace", Value::function([&in](Args& a) -> Value {
                   Dict d;
                   for (const auto& v : a.pos)
                     if (v.is_dict()) d.insert(d.end(), v.d->begin(), v.d->end());
                   Value ns = Value::ns(d);
                   for (const auto& kv : a.kw) ns.set(kv.first, kv.second);
                   in.track(ns.d);
                   return ns;
                 }));
  g.emplace_back("dict", Value::function([](Args& a) -> Value {
                   Value d = Value::dict();
                   for (const auto& v : a.pos)
                     if (v.is_dict())
                       for (const auto& kv : *v.d) d.set(kv.first, kv.second);
                   for (const auto& kv : a.kw) d.set(kv.first, kv.second);
                   return d;
                 }));
  g.emplace_back("raise_exception", Value::function([](Args& a) -> Value {
                   throw_value_error(ErrorKind::raised, a.pos.empty() ? std::string() : to_str(a.pos[0]));
                 }));
  g.emplace_back("strftime_now", Value::function([&in](Args& a) -> Value {
                   if (a.pos.empty() || !a.pos[0].is_string())
                     throw_value_error(ErrorKind::type, "strftime_now needs a format string");
                   const std::tm tm = in.now();
                   char buf[1024];
                   const size_t n = std::strftime(buf, sizeof buf, a.pos[0].str().c_str(), &tm);
                   return Value::string(std::string(buf, n));
                 }));
  return g;
}

}  // namespace sluice::tmpl
