// template/value: Python's printing, comparison and json.dumps rules for template values.
#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sluice::tmpl {

void throw_value_error(ErrorKind kind, std::string msg) { throw ValueError{kind, std::move(msg)}; }

Value Value::undef(std::string hint) {
  Value v;
  v.type = Type::undefined;
  v.s = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::boolean(bool x) {
  Value v = with_type(Type::boolean);
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v = with_type(Type::integer);
  v.i = x;
  return v;
}
Value Value::floating(double x) {
  Value v = with_type(Type::floating);
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v = with_type(Type::string);
  v.s = std::make_shared<const std::string>(std::move(x));
  return v;
}
Value Value::list(List x, bool tuple) {
  Value v = with_type(Type::list);
  v.l = std::make_shared<List>(std::move(x));
  v.is_tuple = tuple;
  return v;
}
Value Value::dict(Dict x) {
  Value v = with_type(Type::dict);
  v.d = std::make_shared<Dict>(std::move(x));
  return v;
}
Value Value::ns(Dict x) {
  Value v = with_type(Type::ns);
  v.d = std::make_shared<Dict>(std::move(x));
  return v;
}
Value Value::function(Function f) {
  Value v = with_type(Type::function);
  v.fn = std::make_shared<Function>(std::move(f));
  return v;
}

const Value* Value::find(const std::string& key) const {
  if (!d) return nullptr;
  const bool special = !key.empty() && key[0] == '\x01';
  for (const auto& kv : *d) {
    if (kv.first == key) return &kv.second;
    if (special && kv.first.size() > 1 && kv.first[0] == '\x01' && kv.first[1] != 'n' && key[1] != 'n' &&
        kv.first[1] != 'F' && key[1] != 'F' && kv.first.compare(2, std::string::npos, key, 2) == 0)
      return &kv.second;  // 1 == 1.0 == True as dict keys
  }
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  if (const Value* old = find(key)) {
    *const_cast<Value*>(old) = std::move(v);  // Python keeps the first key, takes the new value
    return;
  }
  d->emplace_back(key, std::move(v));
}

const Value* Args::get(size_t index, const char* name) const {
  for (const auto& kv : kw)
    if (kv.first == name) return &kv.second;
  return index < pos.size() ? &pos[index] : nullptr;
}

std::string dict_key(const Value& k) {
  switch (k.type) {
    case Type::string: return k.str();
    // "\x01" + type + the value, equal for keys Python hashes equal (True, 1, 1.0).
    case Type::boolean:
      return std::string(
                 "\x01"
                 "b") +
             (k.b ? "1" : "0");
    case Type::integer: return "\x01i" + std::to_string(k.i);
    case Type::floating:
      if (k.f == std::floor(k.f) && std::fabs(k.f) < 9e18)
        return "\x01"
               "f" +
               std::to_string(static_cast<int64_t>(k.f));
      return "\x01"
             "F" +
             float_repr(k.f);
    case Type::none: return "\x01nNone";
    default: throw_value_error(ErrorKind::type, str_cat("unhashable type: '", type_name(k), "'"));
  }
}

Value key_value(const std::string& k) {
  if (k.empty() || k[0] != '\x01') return Value::string(k);
  const std::string r = k.substr(2);
  switch (k.size() > 1 ? k[1] : 'n') {
    case 'b': return Value::boolean(r == "1");
    case 'i': return Value::integer(std::strtoll(r.c_str(), nullptr, 10));
    case 'f':
    case 'F': return Value::floating(std::strtod(r.c_str(), nullptr));
    default: return Value::none();
  }
}

const char* type_name(const Value& v) {
  switch (v.type) {
    case Type::undefined: return "Undefined";
    case Type::none: return "NoneType";
    case Type::boolean: return "bool";
    case Type::integer: return "int";
    case Type::floating: return "float";
    case Type::string: return "str";
    case Type::list:
      switch (v.view) {
        case Value::View::generator: return "generator";
        case Value::View::keys: return "dict_keys";
        case Value::View::values: return "dict_values";
        case Value::View::items: return "dict_items";
        case Value::View::reversed: return "list_reverseiterator";
        default: return v.is_tuple ? "tuple" : "list";
      }
    case Type::dict: return "dict";
    case Type::function: return "function";
    case Type::ns: return "Namespace";
  }
  return "?";
}

std::string object_repr(const Value& v) {
  if (v.is_none()) return "'None'";
  return str_cat("'", type_name(v), " object'");
}

bool truthy(const Value& v) {
  switch (v.type) {
    case Type::undefined:
    case Type::none: return false;
    case Type::boolean: return v.b;
    case Type::integer: return v.i != 0;
    case Type::floating: return v.f != 0;
    case Type::string: return !v.s->empty();
    case Type::list: return v.view == Value::View::generator || v.view == Value::View::reversed || !v.l->empty();
    case Type::dict: return !v.d->empty();
    case Type::function:
    case Type::ns: return true;
  }
  return false;
}

// Python's float repr: the shortest digits that round-trip, fixed notation for exponents in
// [-4, 16), else d.ddde+XX.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string mant = sci.substr(0, e);
  bool neg = false;
  if (mant[0] == '-') {
    neg = true;
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + eb;
}

// Python's str.isprintable() for non-ASCII code points, approximately: the C1 controls, the
// separators other than the space, format characters, private use and surrogates are not.
static bool printable(uint32_t c) {
  if (c < 0xA0) return false;
  return !(c == 0xA0 || c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
           (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000 || c == 0xFEFF ||
           (c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB) || c == 0x110BD ||
           (c >= 0xE0000 && c <= 0xE007F) || c >= 0xF0000);
}

static std::string str_repr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (uint32_t c : utf8_decode(s)) {
    if (c >= 0x80) {
      if (printable(c)) {
        utf8_append(out, c);
      } else {
        char b[16];
        std::snprintf(b, sizeof b, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", c);
        out += b;
      }
      continue;
    }
    if (c == '\\')
      out += "\\\\";
    else if (c == static_cast<unsigned char>(q))
      out += std::string("\\") + static_cast<char>(q);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else
      out += static_cast<char>(c);
  }
  return out + q;
}

static std::string repr_rec(const Value& v, int depth);

std::string to_repr(const Value& v) { return repr_rec(v, 0); }

// Python gives up on deep nesting with RecursionError; so does this (a namespace can hold itself).
static std::string repr_rec(const Value& v, int depth) {
  if (depth > 200) throw_value_error(ErrorKind::limit, "maximum recursion depth exceeded while getting the repr");
  auto to_repr = [depth](const Value& x) { return repr_rec(x, depth + 1); };
  switch (v.type) {
    case Type::undefined: return "Undefined";
    case Type::string: return str_repr(*v.s);
    case Type::list: {
      if (v.view == Value::View::generator || v.view == Value::View::reversed)
        return str_cat("<", type_name(v), " object>");
      if (v.view != Value::View::none) {
        Value plain = v;
        plain.view = Value::View::none;
        return str_cat(type_name(v), "(", to_repr(plain), ")");
      }
      std::string out = v.is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.l->size(); ++k) out += (k ? ", " : "") + to_repr((*v.l)[k]);
      if (v.is_tuple && v.l->size() == 1) out += ",";
      return out + (v.is_tuple ? ")" : "]");
    }
    case Type::dict: {
      std::string out = "{";
      for (size_t k = 0; k < v.d->size(); ++k)
        out += (k ? ", " : "") + to_repr(key_value((*v.d)[k].first)) + ": " + to_repr((*v.d)[k].second);
      return out + "}";
    }
    case Type::ns: {
      std::string out = "<Namespace {";
      for (size_t k = 0; k < v.d->size(); ++k)
        out += (k ? ", " : "") + str_repr((*v.d)[k].first) + ": " + to_repr((*v.d)[k].second);
      return out + "}>";
    }
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.type) {
    case Type::undefined: return "";
    case Type::none: return "None";
    case Type::boolean: return v.b ? "True" : "False";
    case Type::integer: return std::to_string(v.i);
    case Type::floating: return float_repr(v.f);
    case Type::string: return *v.s;
    case Type::function: return "<function>";
    default: return to_repr(v);
  }
}

static double num(const Value& v) {
  return v.type == Type::floating ? v.f : v.type == Type::integer ? static_cast<double>(v.i) : (v.b ? 1.0 : 0.0);
}
static int64_t inum(const Value& v) { return v.type == Type::integer ? v.i : (v.b ? 1 : 0); }

static bool equal_rec(const Value& a, const Value& b, int depth);
bool equal(const Value& a, const Value& b) { return equal_rec(a, b, 0); }

static bool equal_rec(const Value& a, const Value& b, int depth) {
  if (depth > 200) throw_value_error(ErrorKind::limit, "maximum recursion depth exceeded in comparison");
  auto equal = [depth](const Value& x, const Value& y) { return equal_rec(x, y, depth + 1); };
  if (a.is_number() && b.is_number()) {
    if (a.type != Type::floating && b.type != Type::floating) return inum(a) == inum(b);
    return num(a) == num(b);
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case Type::undefined:
    case Type::none: return true;
    case Type::string: return *a.s == *b.s;
    case Type::list:
      if (a.is_tuple != b.is_tuple || a.l->size() != b.l->size()) return false;
      for (size_t k = 0; k < a.l->size(); ++k)
        if (!equal((*a.l)[k], (*b.l)[k])) return false;
      return true;
    case Type::dict:
      if (a.d->size() != b.d->size()) return false;
      for (const auto& kv : *a.d) {
        const Value* o = b.find(kv.first);
        if (!o || !equal(kv.second, *o)) return false;
      }
      return true;
    default: return a.fn == b.fn && a.d == b.d;
  }
}

static bool less_rec(const Value& a, const Value& b, int depth);
bool less(const Value& a, const Value& b) { return less_rec(a, b, 0); }

static bool less_rec(const Value& a, const Value& b, int depth) {
  if (depth > 200) throw_value_error(ErrorKind::limit, "maximum recursion depth exceeded in comparison");
  auto less = [depth](const Value& x, const Value& y) { return less_rec(x, y, depth + 1); };
  if (a.is_number() && b.is_number()) {
    if (a.type != Type::floating && b.type != Type::floating) return inum(a) < inum(b);
    return num(a) < num(b);
  }
  if (a.is_string() && b.is_string()) return *a.s < *b.s;  // UTF-8 byte order = code point order
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.l->size(), b.l->size());
    for (size_t k = 0; k < n; ++k) {
      if (less((*a.l)[k], (*b.l)[k])) return true;
      if (less((*b.l)[k], (*a.l)[k])) return false;
    }
    return a.l->size() < b.l->size();
  }
  throw_value_error(ErrorKind::type,
                    str_cat("'<' not supported between instances of '", type_name(a), "' and '", type_name(b), "'"));
}

static void json_str(std::string& out, const std::string& s, bool ascii = false) {
  out += '"';
  if (ascii) {
    // ensure_ascii=True: every non-ASCII code point as \uXXXX (UTF-16 surrogates above U+FFFF).
    std::string plain;
    for (uint32_t cp : utf8_decode(s)) {
      if (cp < 0x80) {
        plain.clear();
        plain += static_cast<char>(cp);
        std::string esc;
        json_str(esc, plain);
        out += esc.substr(1, esc.size() - 2);
        continue;
      }
      char b[16];
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(b, sizeof b, "\\u%04x", cp);
      }
      out += b;
    }
    out += '"';
    return;
  }
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else
          out += static_cast<char>(c);
    }
  }
  out += '"';
}

static void json_rec(std::string& out, const Value& v, int indent, int depth, const std::string& item_sep,
                     const std::string& key_sep, bool sort_keys, bool ascii) {
  if (depth > 200) throw_value_error(ErrorKind::limit, "maximum recursion depth exceeded in tojson");
  auto newline = [&](int d) {
    if (indent < 0) return;
    check_size(out.size() + static_cast<size_t>(indent) * static_cast<size_t>(d));
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(d), ' ');
  };
  switch (v.type) {
    case Type::none: out += "null"; return;
    case Type::boolean: out += v.b ? "true" : "false"; return;
    case Type::integer: out += std::to_string(v.i); return;
    case Type::floating:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f < 0 ? "-Infinity" : "Infinity";
      else
        out += float_repr(v.f);
      return;
    case Type::string: json_str(out, *v.s, ascii); return;
    case Type::list:
      if (v.view != Value::View::none)
        throw_value_error(ErrorKind::type, str_cat("Object of type ", type_name(v), " is not JSON serializable"));
      if (v.l->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.l->size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        json_rec(out, (*v.l)[k], indent, depth + 1, item_sep, key_sep, sort_keys, ascii);
      }
      newline(depth);
      out += ']';
      return;
    case Type::dict: {
      if (v.d->empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : *v.d) items.push_back(&kv);
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        const Value key = key_value(items[k]->first);
        if (key.is_string())
          json_str(out, key.str(), ascii);
        else
          json_str(out, key.is_none() ? "null" : key.type == Type::boolean ? (key.b ? "true" : "false") : to_str(key));
        out += key_sep;
        json_rec(out, items[k]->second, indent, depth + 1, item_sep, key_sep, sort_keys, ascii);
      }
      newline(depth);
      out += '}';
      return;
    }
    default: throw_value_error(ErrorKind::type, str_cat("Object of type ", type_name(v), " is not JSON serializable"));
  }
}

std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep, bool sort_keys,
                    bool ensure_ascii) {
  std::string out;
  json_rec(out, v, indent, 0, item_sep, key_sep, sort_keys, ensure_ascii);
  return out;
}

std::vector<uint32_t> utf8_decode(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size();) {
    const auto c = static_cast<unsigned char>(s[k]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || (n > 0 && k + static_cast<size_t>(n) >= s.size())) {
      out.push_back(0xFFFD);  // invalid or truncated sequence
      ++k;
      continue;
    }
    uint32_t cp = n == 0 ? c : (c & (0x3F >> n));
    bool ok = true;
    for (int j = 1; j <= n; ++j) {
      const auto cc = static_cast<unsigned char>(s[k + static_cast<size_t>(j)]);
      if ((cc >> 6) != 2) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++k;
      continue;
    }
    out.push_back(cp);
    k += static_cast<size_t>(n) + 1;
  }
  return out;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_encode(const std::vector<uint32_t>& cps) {
  std::string out;
  for (uint32_t c : cps) utf8_append(out, c);
  return out;
}

// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic: the scripts chat
// templates and their messages use; other code points are left as they are.
uint32_t unicode_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_upper ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

uint32_t unicode_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c >= 0x100 && c <= 0x17F && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_upper ? (c % 2 == 0) : (c % 2 == 1)) return c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

bool unicode_space(uint32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace sluice::tmpl
