// template/methods: the Python methods templates call on str, dict and list values
// (.strip(), .split(), .startswith(), .format(), .get(), .items(), ...), Python's str % args,
// iteration and len(). Mutating methods come back as undefined values that raise SecurityError
// when called, as jinja2's ImmutableSandboxedEnvironment does.
#include <algorithm>
#include <cstdio>

#include "template/interp.h"

namespace sluice::tmpl {
namespace {

using CPs = std::vector<uint32_t>;

const std::string& arg_str(const Args& a, size_t k, const char* what) {
  if (k >= a.pos.size() || !a.pos[k].is_string())
    throw_value_error(ErrorKind::type, str_cat(what, "() argument must be str"));
  return a.pos[k].str();
}

// str.strip family: chars given (a string) or whitespace (None / absent).
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  CPs cps = utf8_decode(s);
  CPs set;
  const bool ws = !chars || chars->is_none() || chars->is_undefined();
  if (!ws) {
    if (!chars->is_string()) throw_value_error(ErrorKind::type, "strip arg must be None or str");
    set = utf8_decode(chars->str());
  }
  auto strip_it = [&](uint32_t c) { return ws ? unicode_space(c) : std::find(set.begin(), set.end(), c) != set.end(); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return utf8_encode(CPs(cps.begin() + static_cast<std::ptrdiff_t>(b), cps.begin() + static_cast<std::ptrdiff_t>(e)));
}

Value split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  List out;
  if (!sep || sep->is_none()) {
    CPs cps = utf8_decode(s);
    std::vector<std::pair<size_t, size_t>> words;  // [b, e) in code points
    size_t k = 0;
    while (k < cps.size()) {
      while (k < cps.size() && unicode_space(cps[k])) ++k;
      if (k == cps.size()) break;
      size_t e = k;
      while (e < cps.size() && !unicode_space(cps[e])) ++e;
      words.emplace_back(k, e);
      k = e;
    }
    auto piece = [&](size_t b, size_t e) {
      return Value::string(
          utf8_encode(CPs(cps.begin() + static_cast<std::ptrdiff_t>(b), cps.begin() + static_cast<std::ptrdiff_t>(e))));
    };
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto& w : words) out.push_back(piece(w.first, w.second));
    } else if (!from_right) {
      // The rest of the string stays as it is, trailing whitespace included.
      for (size_t j = 0; j < static_cast<size_t>(maxsplit); ++j) out.push_back(piece(words[j].first, words[j].second));
      out.push_back(piece(words[static_cast<size_t>(maxsplit)].first, cps.size()));
    } else {
      const size_t first = words.size() - static_cast<size_t>(maxsplit);
      out.push_back(piece(0, words[first - 1].second));  // leading whitespace included
      for (size_t j = first; j < words.size(); ++j) out.push_back(piece(words[j].first, words[j].second));
    }
    return Value::list(out);
  }
  if (!sep->is_string()) throw_value_error(ErrorKind::type, "must be str or None");
  const std::string& d = sep->str();
  if (d.empty()) throw_value_error(ErrorKind::type, "empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t b = 0;
    while (true) {
      const size_t f = maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit ? std::string::npos
                                                                                       : s.find(d, b);
      if (f == std::string::npos) {
        parts.push_back(s.substr(b));
        break;
      }
      parts.push_back(s.substr(b, f - b));
      b = f + d.size();
    }
  } else {
    size_t e = s.size();
    while (true) {
      size_t f = std::string::npos;
      if (!(maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) && e >= d.size())
        f = s.rfind(d, e - d.size());
      if (f == std::string::npos) {
        parts.push_back(s.substr(0, e));
        break;
      }
      parts.push_back(s.substr(f + d.size(), e - f - d.size()));
      e = f;
    }
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.push_back(Value::string(p));
  return Value::list(out);
}

std::string map_case(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 swap
  CPs cps = utf8_decode(s);
  for (auto& c : cps) {
    const uint32_t lo = unicode_lower(c), up = unicode_upper(c);
    c = mode == 0 ? lo : mode == 1 ? up : (c != lo ? lo : up);
  }
  return utf8_encode(cps);
}

bool is_cased_letter(uint32_t c) { return unicode_lower(c) != c || unicode_upper(c) != c; }

// Python str.title(): a cased character after an uncased one starts a word.
std::string py_title(const std::string& s) {
  CPs cps = utf8_decode(s);
  bool prev_cased = false;
  for (auto& c : cps) {
    const bool cased = is_cased_letter(c);
    c = cased ? (prev_cased ? unicode_lower(c) : unicode_upper(c)) : c;
    prev_cased = cased;
  }
  return utf8_encode(cps);
}

std::string capitalize(const std::string& s) {
  CPs cps = utf8_decode(s);
  for (size_t k = 0; k < cps.size(); ++k) cps[k] = k == 0 ? unicode_upper(cps[k]) : unicode_lower(cps[k]);
  return utf8_encode(cps);
}

bool all_of_cps(const std::string& s, bool (*pred)(uint32_t)) {
  CPs cps = utf8_decode(s);
  if (cps.empty()) return false;
  for (uint32_t c : cps)
    if (!pred(c)) return false;
  return true;
}

bool affix_match(const std::string& s, const Value& x, bool start) {
  auto one = [&](const Value& v) {
    if (!v.is_string()) throw_value_error(ErrorKind::type, "startswith first arg must be str or a tuple of str");
    const std::string& p = v.str();
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (x.is_list()) {
    for (const auto& v : *x.l)
      if (one(v)) return true;
    return false;
  }
  return one(x);
}

int64_t int_arg(const Args& a, size_t k, const char* name, int64_t def) {
  const Value* v = a.get(k, name);
  if (!v || v->is_none()) return def;
  if (v->type != Type::integer && v->type != Type::boolean)
    throw_value_error(ErrorKind::type, "an integer is required");
  return v->type == Type::integer ? v->i : v->b;
}

// str.format: {} {0} {name} with an optional :spec of fill/align/width only.
std::string py_format(const std::string& f, const Args& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < f.size(); ++k) {
    if (f[k] == '{' && k + 1 < f.size() && f[k + 1] == '{') {
      out += '{';
      ++k;
    } else if (f[k] == '}' && k + 1 < f.size() && f[k + 1] == '}') {
      out += '}';
      ++k;
    } else if (f[k] == '{') {
      const size_t e = f.find('}', k);
      if (e == std::string::npos) throw_value_error(ErrorKind::type, "Single '{' encountered in format string");
      std::string field = f.substr(k + 1, e - k - 1);
      const size_t colon = field.find(':');
      if (colon != std::string::npos) {
        if (colon + 1 != field.size()) throw_value_error(ErrorKind::type, "format specs are not supported");
        field.resize(colon);
      }
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_idx < a.pos.size() ? &a.pos[auto_idx] : nullptr;
        ++auto_idx;
      } else if (std::all_of(field.begin(), field.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        const size_t idx = std::stoul(field);
        v = idx < a.pos.size() ? &a.pos[idx] : nullptr;
      } else {
        for (const auto& kv : a.kw)
          if (kv.first == field) v = &kv.second;
        if (!v) throw_value_error(ErrorKind::type, str_cat("KeyError: '", field, "'"));
      }
      if (!v) throw_value_error(ErrorKind::type, "Replacement index out of range for positional args tuple");
      out += to_str(*v);
      check_size(out.size());
      k = e;
    } else if (f[k] == '}') {
      throw_value_error(ErrorKind::type, "Single '}' encountered in format string");
    } else {
      out += f[k];
    }
  }
  return out;
}

Value str_method(const Value& obj, const std::string& name) {
  static const char* known[] = {
      "strip",      "lstrip",    "rstrip",       "split",        "rsplit",    "startswith", "endswith",  "replace",
      "lower",      "upper",     "title",        "capitalize",   "find",      "rfind",      "index",     "rindex",
      "count",      "format",    "join",         "splitlines",   "isdigit",   "isalpha",    "isalnum",   "isspace",
      "isupper",    "islower",   "removeprefix", "removesuffix", "center",    "ljust",      "rjust",     "zfill",
      "swapcase",   "isnumeric", "isdecimal",    "istitle",      "partition", "rpartition", "casefold",  "isascii",
      "expandtabs", "encode",    "isidentifier", "isprintable",  "translate", "maketrans",  "format_map"};
  if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return name == k; }) == std::end(known))
    return Value::undef(str_cat("'str object' has no attribute '", name, "'"));
  return Value::function([obj, name](Args& a) -> Value {
    const std::string& s = obj.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return Value::string(strip(s, a.get(0, "chars"), name != "rstrip", name != "lstrip"));
    if (name == "split" || name == "rsplit")
      return split(s, a.get(0, "sep"), int_arg(a, 1, "maxsplit", -1), name == "rsplit");
    if (name == "startswith" || name == "endswith") {
      if (a.pos.empty()) throw_value_error(ErrorKind::type, name + "() takes at least 1 argument (0 given)");
      return Value::boolean(affix_match(s, a.pos[0], name == "startswith"));
    }
    if (name == "replace") {
      const std::string& from = arg_str(a, 0, "replace");
      const std::string& to = arg_str(a, 1, "replace");
      int64_t count = int_arg(a, 2, "count", -1);
      std::string out;
      if (from.empty()) {
        CPs cps = utf8_decode(s);
        for (size_t k = 0; k <= cps.size(); ++k) {
          if (count < 0 || static_cast<int64_t>(k) < count) out += to;
          check_size(out.size());
          if (k < cps.size()) utf8_append(out, cps[k]);
        }
        return Value::string(out);
      }
      size_t b = 0;
      for (int64_t n = 0; count < 0 || n < count; ++n) {
        const size_t f = s.find(from, b);
        if (f == std::string::npos) break;
        out += s.substr(b, f - b) + to;
        check_size(out.size());
        b = f + from.size();
      }
      return Value::string(out + s.substr(b));
    }
    if (name == "partition" || name == "rpartition") {
      const std::string& sep = arg_str(a, 0, name.c_str());
      if (sep.empty()) throw_value_error(ErrorKind::type, "empty separator");
      const size_t f = name == "partition" ? s.find(sep) : s.rfind(sep);
      if (f == std::string::npos)
        return name == "partition" ? Value::list({obj, Value::string(""), Value::string("")}, true)
                                   : Value::list({Value::string(""), Value::string(""), obj}, true);
      return Value::list({Value::string(s.substr(0, f)), Value::string(sep), Value::string(s.substr(f + sep.size()))},
                         true);
    }
    if (name == "isascii")
      return Value::boolean(
          std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
    if (name == "lower" || name == "casefold") return Value::string(map_case(s, 0));
    if (name == "upper") return Value::string(map_case(s, 1));
    if (name == "swapcase") return Value::string(map_case(s, 2));
    if (name == "title") return Value::string(py_title(s));
    if (name == "capitalize") return Value::string(capitalize(s));
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
      const std::string& sub = arg_str(a, 0, name.c_str());
      const CPs cps = utf8_decode(s);
      const CPs sc = utf8_decode(sub);
      int64_t found = -1, count = 0;
      for (size_t k = 0; k + sc.size() <= cps.size();) {
        if (std::equal(sc.begin(), sc.end(), cps.begin() + static_cast<std::ptrdiff_t>(k))) {
          if (found < 0 || name[0] == 'r') found = static_cast<int64_t>(k);
          ++count;
          if (name == "count") {
            k += std::max<size_t>(sc.size(), 1);
            continue;
          }
        }
        ++k;
      }
      if (name == "count") return Value::integer(count);
      if (found < 0 && (name == "index" || name == "rindex")) throw_value_error(ErrorKind::type, "substring not found");
      return Value::integer(found);
    }
    if (name == "format") return Value::string(py_format(s, a));
    if (name == "join") {
      if (a.pos.empty()) throw_value_error(ErrorKind::type, "join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const auto& v : iterate(a.pos[0])) {
        if (!v.is_string())
          throw_value_error(ErrorKind::type, str_cat("sequence item: expected str instance, ", type_name(v), " found"));
        if (!first) out += s;
        check_size(out.size());
        out += v.str();
        first = false;
      }
      return Value::string(out);
    }
    if (name == "splitlines") {
      List out;
      size_t b = 0;
      for (size_t k = 0; k < s.size(); ++k)
        if (s[k] == '\n' || s[k] == '\r') {
          out.push_back(Value::string(s.substr(b, k - b)));
          if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
          b = k + 1;
        }
      if (b < s.size()) out.push_back(Value::string(s.substr(b)));
      return Value::list(out);
    }
    if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
      return Value::boolean(all_of_cps(s, [](uint32_t c) { return c >= '0' && c <= '9'; }));
    if (name == "isalpha") return Value::boolean(all_of_cps(s, [](uint32_t c) { return is_cased_letter(c); }));
    if (name == "isalnum")
      return Value::boolean(all_of_cps(s, [](uint32_t c) { return is_cased_letter(c) || (c >= '0' && c <= '9'); }));
    if (name == "isspace") return Value::boolean(all_of_cps(s, unicode_space));
    if (name == "isupper" || name == "islower" || name == "istitle") {
      bool any = false, ok = true;
      for (uint32_t c : utf8_decode(s)) {
        if (!is_cased_letter(c)) continue;
        any = true;
        if (name == "isupper" && unicode_upper(c) != c) ok = false;
        if (name == "islower" && unicode_lower(c) != c) ok = false;
      }
      if (name == "istitle") return Value::boolean(any && py_title(s) == s);
      return Value::boolean(any && ok);
    }
    if (name == "removeprefix" || name == "removesuffix") {
      const std::string& x = arg_str(a, 0, name.c_str());
      const bool pre = name == "removeprefix";
      if (x.size() <= s.size() &&
          (pre ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0))
        return Value::string(pre ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
      return obj;
    }
    if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
      const int64_t width = int_arg(a, 0, "width", 0);
      const std::string fill = name == "zfill" ? "0" : a.pos.size() > 1 ? arg_str(a, 1, name.c_str()) : " ";
      const auto n = static_cast<int64_t>(utf8_decode(s).size());
      if (width <= n) return obj;
      const int64_t pad = std::min<int64_t>(width - n, 1 << 20);
      int64_t left = name == "ljust" ? 0 : name == "center" ? pad / 2 + (pad & width & 1) : pad;
      std::string out;
      for (int64_t k = 0; k < left; ++k) out += fill;
      if (name == "zfill" && !s.empty() && (s[0] == '-' || s[0] == '+'))
        out = s.substr(0, 1) + out + s.substr(1);
      else
        out += s;
      for (int64_t k = 0; k < pad - left; ++k) out += fill;
      return Value::string(out);
    }
    throw_value_error(ErrorKind::type, "unsupported str method " + name);
  });
}

}  // namespace

Value builtin_method(Interp& in, const Value& obj, const std::string& name) {
  (void)in;
  auto unsafe = [&]() {
    Value u = Value::undef(str_cat("access to attribute '", name, "' of '", type_name(obj), "' object is unsafe."));
    u.i = 1;
    return u;
  };
  if (obj.is_string()) return str_method(obj, name);
  if (obj.is_dict()) {
    if (name == "get")
      return Value::function([obj](Args& a) -> Value {
        if (a.pos.empty()) throw_value_error(ErrorKind::type, "get expected at least 1 argument, got 0");
        const Value* v = obj.find(dict_key(a.pos[0]));
        return v ? *v : a.pos.size() > 1 ? a.pos[1] : Value::none();
      });
    if (name == "items" || name == "keys" || name == "values")
      return Value::function([obj, name](Args&) -> Value {
        List out;
        for (const auto& kv : *obj.d) {
          if (name == "items")
            out.push_back(Value::list({key_value(kv.first), kv.second}, true));
          else
            out.push_back(name == "keys" ? key_value(kv.first) : kv.second);
        }
        return make_view(out, name == "items"  ? Value::View::items
                              : name == "keys" ? Value::View::keys
                                               : Value::View::values);
      });
    if (name == "copy") return Value::function([obj](Args&) -> Value { return Value::dict(*obj.d); });
    if (name == "pop" || name == "popitem" || name == "update" || name == "setdefault" || name == "clear")
      return unsafe();
    return Value::undef("");
  }
  if (obj.is_list()) {
    if (!obj.is_tuple && (name == "append" || name == "pop" || name == "insert" || name == "extend" ||
                          name == "remove" || name == "clear" || name == "sort" || name == "reverse"))
      return unsafe();
    if (name == "index" || name == "count")
      return Value::function([obj, name](Args& a) -> Value {
        if (a.pos.empty()) throw_value_error(ErrorKind::type, name + "() takes exactly one argument");
        int64_t n = 0;
        for (size_t k = 0; k < obj.l->size(); ++k)
          if (equal((*obj.l)[k], a.pos[0])) {
            if (name == "index") return Value::integer(static_cast<int64_t>(k));
            ++n;
          }
        if (name == "index") throw_value_error(ErrorKind::type, "x not in list");
        return Value::integer(n);
      });
    return Value::undef("");
  }
  return Value::undef("");
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value make_view(List items, Value::View view) {
  Value v = Value::list(std::move(items));
  v.view = view;
  return v;
}

List iterate(const Value& v) {
  switch (v.type) {
    case Type::undefined: return {};
    case Type::list: {
      List out = *v.l;
      if (v.view == Value::View::generator || v.view == Value::View::reversed) v.l->clear();  // consumed
      return out;
    }
    case Type::dict: {
      List out;
      for (const auto& kv : *v.d) out.push_back(key_value(kv.first));
      return out;
    }
    case Type::string: {
      List out;
      for (uint32_t c : utf8_decode(v.str())) out.push_back(Value::string(utf8_encode({c})));
      return out;
    }
    default: throw_value_error(ErrorKind::type, str_cat("'", type_name(v), "' object is not iterable"));
  }
}

int64_t py_len(const Value& v) {
  switch (v.type) {
    case Type::undefined: return 0;
    case Type::string: return static_cast<int64_t>(utf8_decode(v.str()).size());
    case Type::list:
      if (v.view == Value::View::generator || v.view == Value::View::reversed) break;
      return static_cast<int64_t>(v.l->size());
    case Type::dict: return static_cast<int64_t>(v.d->size());
    default: break;
  }
  { throw_value_error(ErrorKind::type, str_cat("object of type '", type_name(v), "' has no len()")); }
}

std::string percent_format(const std::string& fmt, const Value& args) {
  List items = args.is_list() && args.is_tuple ? *args.l : List{args};
  size_t next = 0;
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    size_t e = k + 1;
    while (e < fmt.size() && std::string("-+ #0123456789.").find(fmt[e]) != std::string::npos) ++e;
    if (e >= fmt.size()) throw_value_error(ErrorKind::type, "incomplete format");
    const char conv = fmt[e];
    const std::string spec = fmt.substr(k + 1, e - k - 1);
    k = e;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= items.size()) throw_value_error(ErrorKind::type, "not enough arguments for format string");
    const Value& v = items[next++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      const std::string s = conv == 's' ? to_str(v) : to_repr(v);
      std::snprintf(buf, sizeof buf, ("%" + spec + "s").c_str(), s.c_str());
      out += spec.empty() ? s : std::string(buf);
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v.is_number())
        throw_value_error(ErrorKind::type,
                          str_cat("%", conv, " format: a real number is required, not ", type_name(v)));
      const long long n = v.type == Type::floating ? static_cast<long long>(v.f) : v.type == Type::integer ? v.i : v.b;
      std::snprintf(buf, sizeof buf, ("%" + spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), n);
      out += buf;
    } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' || conv == 'G') {
      if (!v.is_number()) throw_value_error(ErrorKind::type, str_cat("must be real number, not ", type_name(v)));
      const double d = v.type == Type::floating ? v.f : static_cast<double>(v.type == Type::integer ? v.i : v.b);
      std::snprintf(buf, sizeof buf, ("%" + spec + conv).c_str(), d);
      out += buf;
    } else {
      throw_value_error(ErrorKind::type, str_cat("unsupported format character '", conv, "'"));
    }
  }
  if (next < items.size() && !(items.size() == 1 && items[0].is_dict()))
    throw_value_error(ErrorKind::type, "not all arguments converted during string formatting");
  return out;
}

}  // namespace sluice::tmpl
