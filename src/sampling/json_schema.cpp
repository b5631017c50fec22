// sampling/json_schema: the schema compiler, the byte-level JSON matcher and the token filter.
#include "sampling/json_schema.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"

namespace sluice {

using Node = JsonSchema::Node;
using Kind = JsonSchema::Node::Kind;

namespace {

// Node 0 of every schema: the literals of an unconstrained value.
constexpr int kAnyLiteralsNode = 0;
// Node 1: any value.
constexpr int kAnyNode = 1;

std::string where(const std::string& ptr) { return ptr.empty() ? "the schema's root" : ptr; }

[[noreturn]] void unsupported(const std::string& ptr, const std::string& what) {
  throw UnsupportedSchema("response_format schema: " + what + " at " + where(ptr) + " cannot be enforced");
}

bool is_annotation(const std::string& k) {
  static const std::set<std::string> a = {"title",      "description", "default",    "examples", "$schema",
                                          "$id",        "$comment",    "strict",     "readOnly", "writeOnly",
                                          "deprecated", "$defs",       "definitions"};
  return a.count(k) != 0;
}

}  // namespace

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const nlohmann::ordered_json& root) : root_(root) {
    Node lits;
    lits.kind = Kind::literal;
    lits.literals = {"false", "null", "true"};
    out_.nodes_.push_back(lits);
    out_.nodes_.push_back(Node{});  // kAnyNode: Kind::any
  }

  JsonSchema finish(int root) {
    out_.root_ = root;
    return std::move(out_);
  }

  int compile(const nlohmann::ordered_json& s, const std::string& ptr) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) unsupported(ptr, "the schema false (it accepts nothing)");
      return kAnyNode;
    }
    if (!s.is_object()) unsupported(ptr, "a schema that is not an object");
    if (s.contains("$ref")) return compile_ref(s, ptr);
    if (s.contains("nullable") && s["nullable"] == true) {
      nlohmann::ordered_json inner = s;
      inner.erase("nullable");
      return make_one_of({compile(inner, ptr), add_literals({"null"})}, ptr);
    }
    for (const char* k : {"anyOf", "oneOf", "allOf"})
      if (s.contains(k)) return compile_combinator(s, k, ptr);
    if (s.contains("enum") || s.contains("const")) return compile_literals(s, ptr);
    if (s.contains("type") && s["type"].is_array()) {
      std::vector<int> alts;
      for (const auto& t : s["type"]) {
        nlohmann::ordered_json one = s;
        one["type"] = t;
        alts.push_back(compile(one, ptr));
      }
      return make_one_of(alts, ptr);
    }
    std::string type;
    if (s.contains("type")) {
      if (!s["type"].is_string()) unsupported(ptr + "/type", "a type that is not a string or an array");
      type = s["type"].get<std::string>();
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      type = "object";
    } else if (s.contains("items")) {
      type = "array";
    }
    if (type.empty()) {
      check_keys(s, ptr, {"type"});
      return kAnyNode;
    }
    if (type == "object") return compile_object(s, ptr);
    if (type == "array") return compile_array(s, ptr);
    if (type == "string") {
      check_keys(s, ptr, {"type", "minLength", "maxLength"});
      Node n;
      n.kind = Kind::string;
      n.min_length = get_count(s, "minLength", ptr, 0);
      n.max_length = get_count(s, "maxLength", ptr, INT64_MAX);
      if (n.min_length > n.max_length) unsupported(ptr, "minLength above maxLength");
      return add(std::move(n));
    }
    if (type == "number" || type == "integer") {
      check_keys(s, ptr, {"type"});
      Node n;
      n.kind = type == "number" ? Kind::number : Kind::integer;
      return add(std::move(n));
    }
    if (type == "boolean") {
      check_keys(s, ptr, {"type"});
      return add_literals({"false", "true"});
    }
    if (type == "null") {
      check_keys(s, ptr, {"type"});
      return add_literals({"null"});
    }
    unsupported(ptr + "/type", "the type '" + type + "'");
  }

 private:
  int add(Node n) {
    out_.nodes_.push_back(std::move(n));
    return static_cast<int>(out_.nodes_.size()) - 1;
  }
  int add_literals(std::vector<std::string> lits) {
    std::sort(lits.begin(), lits.end());
    lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
    Node n;
    n.kind = Kind::literal;
    n.literals = std::move(lits);
    return add(std::move(n));
  }

  void check_keys(const nlohmann::ordered_json& s, const std::string& ptr, std::initializer_list<const char*> allowed) {
    for (const auto& [k, v] : s.items()) {
      if (is_annotation(k)) continue;
      bool ok = false;
      for (const char* a : allowed) ok = ok || k == a;
      if (!ok) unsupported(ptr + "/" + k, "the keyword '" + k + "'");
    }
  }

  int64_t get_count(const nlohmann::ordered_json& s, const char* key, const std::string& ptr, int64_t def) {
    if (!s.contains(key)) return def;
    const auto& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      unsupported(ptr + "/" + key, std::string("a ") + key + " that is not a non-negative integer");
    return v.get<int64_t>();
  }

  int compile_ref(const nlohmann::ordered_json& s, const std::string& ptr) {
    check_keys(s, ptr, {"$ref"});
    if (!s["$ref"].is_string()) unsupported(ptr + "/$ref", "a $ref that is not a string");
    const std::string ref = s["$ref"].get<std::string>();
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const nlohmann::ordered_json* target = nullptr;
    if (ref == "#") {
      target = &root_;
    } else {
      for (const char* base : {"#/$defs/", "#/definitions/"}) {
        const std::string b = base;
        if (ref.rfind(b, 0) != 0) continue;
        const std::string name = ref.substr(b.size());
        const auto defs = root_.find(b.substr(2, b.size() - 3));
        if (defs != root_.end() && defs->is_object() && defs->contains(name)) target = &(*defs)[name];
      }
    }
    if (!target) unsupported(ptr + "/$ref", "the reference '" + ref + "' (only #, #/$defs/NAME, #/definitions/NAME)");
    // A placeholder first, so a recursive schema refers back to this node.
    const int id = add(Node{});
    refs_[ref] = id;
    const int body = compile(*target, ref.substr(1));
    out_.nodes_[static_cast<size_t>(id)] = out_.nodes_[static_cast<size_t>(body)];
    return id;
  }

  int compile_combinator(const nlohmann::ordered_json& s, const char* k, const std::string& ptr) {
    check_keys(s, ptr, {k});
    const auto& list = s[k];
    if (!list.is_array() || list.empty()) unsupported(ptr + "/" + k, std::string("an empty or non-array ") + k);
    if (std::string(k) == "allOf") {
      if (list.size() != 1) unsupported(ptr + "/allOf", "allOf with more than one schema");
      return compile(list[0], ptr + "/allOf/0");
    }
    std::vector<int> alts;
    for (size_t i = 0; i < list.size(); ++i) alts.push_back(compile(list[i], ptr + "/" + k + "/" + std::to_string(i)));
    return make_one_of(alts, ptr + "/" + k);
  }

  int compile_literals(const nlohmann::ordered_json& s, const std::string& ptr) {
    check_keys(s, ptr, {"enum", "const", "type"});
    std::vector<std::string> lits;
    if (s.contains("const")) lits.push_back(s["const"].dump());
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) unsupported(ptr + "/enum", "an empty or non-array enum");
      for (const auto& v : s["enum"]) lits.push_back(v.dump());
    }
    return add_literals(std::move(lits));
  }

  int compile_object(const nlohmann::ordered_json& s, const std::string& ptr) {
    check_keys(s, ptr, {"type", "properties", "required", "additionalProperties"});
    Node n;
    n.kind = Kind::object;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) unsupported(ptr + "/required", "a required that is not an array");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) unsupported(ptr + "/required", "a required entry that is not a string");
        required.insert(r.get<std::string>());
      }
    }
    std::set<std::string> seen;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) unsupported(ptr + "/properties", "properties that are not an object");
      for (const auto& [name, sub] : s["properties"].items()) {
        const int child = compile(sub, ptr + "/properties/" + name);
        n.props.push_back({nlohmann::json(name).dump(), child, required.count(name) != 0});
        seen.insert(name);
      }
    }
    for (const auto& r : required)  // required but not described: any value
      if (!seen.count(r)) n.props.push_back({nlohmann::json(r).dump(), kAnyNode, true});
    const bool has_props = !n.props.empty();
    if (s.contains("additionalProperties") && !has_props) {
      const auto& ap = s["additionalProperties"];
      if (ap.is_boolean() && !ap.get<bool>()) {
        // Only {} is valid: an object node with no keys.
      } else {
        n.map_values = compile(ap, ptr + "/additionalProperties");
      }
    } else if (!has_props) {
      n.map_values = kAnyNode;
    }
    // Keys in schema order; a prop not required may be skipped, a required one may not.
    for (size_t i = 0; i <= n.props.size(); ++i) {
      std::vector<std::pair<std::string, int>> set;
      for (size_t j = i; j < n.props.size(); ++j) {
        set.emplace_back(n.props[j].key_json, static_cast<int>(j));
        if (n.props[j].required) break;
      }
      std::sort(set.begin(), set.end());
      n.key_sets.push_back(std::move(set));
    }
    const int id = add(std::move(n));
    return id;
  }

  int compile_array(const nlohmann::ordered_json& s, const std::string& ptr) {
    check_keys(s, ptr, {"type", "items", "minItems", "maxItems"});
    Node n;
    n.kind = Kind::array;
    n.items = kAnyNode;
    if (s.contains("items")) {
      if (s["items"].is_array()) unsupported(ptr + "/items", "tuple items (an array of schemas)");
      n.items = compile(s["items"], ptr + "/items");
    }
    n.min_items = get_count(s, "minItems", ptr, 0);
    n.max_items = get_count(s, "maxItems", ptr, INT64_MAX);
    if (n.min_items > n.max_items) unsupported(ptr, "minItems above maxItems");
    return add(std::move(n));
  }

  std::set<char> first_bytes(int id, int depth = 0) const {
    const Node& n = out_.nodes_[static_cast<size_t>(id)];
    if (depth > 32) return {};
    switch (n.kind) {
      case Kind::any: return {'{', '[', '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 't', 'f', 'n'};
      case Kind::object: return {'{'};
      case Kind::array: return {'['};
      case Kind::string: return {'"'};
      case Kind::number:
      case Kind::integer: return {'-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'};
      case Kind::literal: {
        std::set<char> f;
        for (const auto& l : n.literals) f.insert(l[0]);
        return f;
      }
      case Kind::one_of: {
        std::set<char> f;
        for (int a : n.alts)
          for (char c : first_bytes(a, depth + 1)) f.insert(c);
        return f;
      }
    }
    return {};
  }

  int make_one_of(const std::vector<int>& given, const std::string& ptr) {
    // Nested alternatives join this list: the matcher picks one by its first byte, one level.
    std::vector<int> alts;
    for (int a : given) {
      const Node& an = out_.nodes_[static_cast<size_t>(a)];
      if (an.kind == Kind::one_of)
        alts.insert(alts.end(), an.alts.begin(), an.alts.end());
      else
        alts.push_back(a);
    }
    if (alts.size() == 1) return alts[0];
    std::set<char> all;
    for (size_t i = 0; i < alts.size(); ++i)
      for (char c : first_bytes(alts[i])) {
        if (!all.insert(c).second)
          unsupported(ptr, std::string("alternatives that can both start with '") + c +
                               "' (they must differ in type: object, array, string, number, literal)");
      }
    Node n;
    n.kind = Kind::one_of;
    n.alts = alts;
    return add(std::move(n));
  }

  const nlohmann::ordered_json& root_;
  JsonSchema out_;
  std::map<std::string, int> refs_;
};

JsonSchema JsonSchema::any_object() {
  const nlohmann::ordered_json s = {{"type", "object"}};
  return compile(s);
}

JsonSchema JsonSchema::compile(const nlohmann::ordered_json& schema) {
  SchemaCompiler c(schema);
  const int root = c.compile(schema, "");
  return c.finish(root);
}

// ---- the matcher ----

namespace {

enum FrameKind : uint8_t { kRoot, kObject, kMap, kArray, kString, kNumber, kLiteral };
// kRoot
enum : uint8_t { kRootValue, kRootDone };
// kObject / kMap / kArray
enum : uint8_t { kKeyOrEnd, kKeyOnly, kInKey, kColon, kValue, kCommaOrEnd, kFirstItem, kItem };
// kNumber
enum : uint8_t { kNumStart, kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumESign, kNumExp };
constexpr int64_t kMaxNumberBytes = 40;
constexpr uint32_t kMaxExponentDigits = 2;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

bool number_can_end(uint8_t st) { return st == kNumZero || st == kNumInt || st == kNumFrac || st == kNumExp; }

}  // namespace

JsonMatcher::JsonMatcher(const JsonSchema& s) : s_(&s) {
  stack_.reserve(16);
  stack_.push_back(Frame{s.root(), kRoot, kRootValue, 0, 0, 0, 0, 0, 0});
}

bool JsonMatcher::feed(std::string_view bytes) {
  for (char c : bytes)
    if (step(c) != Step::consumed) return false;
  return true;
}

bool JsonMatcher::finished() const {
  return stack_.size() == 1 && stack_[0].kind == kRoot && stack_[0].st == kRootDone;
}

bool JsonMatcher::complete() const {
  // Pop what the end of input would end (a number, a literal that matched a whole value).
  for (size_t i = stack_.size(); i-- > 0;) {
    const Frame& f = stack_[i];
    if (f.kind == kRoot) return f.st == kRootDone;
    if (f.kind == kNumber && number_can_end(f.st)) continue;
    if (f.kind == kLiteral) {
      const auto& lits = s_->nodes()[static_cast<size_t>(f.node)].literals;
      bool whole = false;
      for (uint32_t j = f.lo; j < f.hi; ++j) whole = whole || lits[j].size() == f.pos;
      if (whole) continue;
    }
    return false;
  }
  return false;
}

JsonMatcher::Step JsonMatcher::step(char c) {
  const auto& nodes = s_->nodes();
  // Pushes the frame a value of schema node `id` starts with, for its first byte c. A frame
  // whose first byte is structural ({ [ ") consumes it here; numbers and literals re-read it.
  auto push_value = [&](int id, char ch, bool& consumed) -> bool {
    for (int hops = 0; hops < 64; ++hops) {
      if (stack_.size() >= static_cast<size_t>(kMaxDepth)) return false;
      const Node& n = nodes[static_cast<size_t>(id)];
      Frame f{id, 0, 0, 0, 0, 0, 0, 0, 0};
      switch (n.kind) {
        case Kind::one_of: {
          int next = -1;
          for (int a : n.alts) {
            const Node& an = nodes[static_cast<size_t>(a)];
            bool starts = false;
            switch (an.kind) {
              case Kind::any: starts = true; break;
              case Kind::object: starts = ch == '{'; break;
              case Kind::array: starts = ch == '['; break;
              case Kind::string: starts = ch == '"'; break;
              case Kind::number:
              case Kind::integer: starts = ch == '-' || is_digit(ch); break;
              case Kind::literal:
                for (const auto& l : an.literals) starts = starts || l[0] == ch;
                break;
              case Kind::one_of: break;  // flattened by the compiler
            }
            if (starts) {
              next = a;
              break;
            }
          }
          if (next < 0) return false;
          id = next;
          continue;
        }
        case Kind::any:
          if (ch == '{') {
            f.kind = kMap, f.st = kKeyOrEnd;
            f.node = -1;
          } else if (ch == '[') {
            f.kind = kArray, f.st = kFirstItem;
            f.node = -1;
          } else if (ch == '"') {
            f.kind = kString;
            f.node = -1;
          } else if (ch == '-' || is_digit(ch)) {
            f.kind = kNumber, f.st = kNumStart, f.lo = 0;  // lo: 1 = integer only
            f.node = -1;
            stack_.push_back(f);
            consumed = false;
            return true;
          } else if (ch == 't' || ch == 'f' || ch == 'n') {
            f.kind = kLiteral, f.node = kAnyLiteralsNode, f.lo = 0;
            f.hi = static_cast<uint32_t>(nodes[kAnyLiteralsNode].literals.size());
            stack_.push_back(f);
            consumed = false;
            return true;
          } else {
            return false;
          }
          stack_.push_back(f);
          consumed = true;
          return true;
        case Kind::object:
          if (ch != '{') return false;
          f.kind = n.props.empty() && n.map_values >= 0 ? kMap : kObject;
          f.st = kKeyOrEnd;
          stack_.push_back(f);
          consumed = true;
          return true;
        case Kind::array:
          if (ch != '[') return false;
          f.kind = kArray, f.st = kFirstItem;
          stack_.push_back(f);
          consumed = true;
          return true;
        case Kind::string:
          if (ch != '"') return false;
          f.kind = kString;
          stack_.push_back(f);
          consumed = true;
          return true;
        case Kind::number:
        case Kind::integer:
          if (ch != '-' && !is_digit(ch)) return false;
          f.kind = kNumber, f.st = kNumStart, f.lo = n.kind == Kind::integer ? 1 : 0;
          stack_.push_back(f);
          consumed = false;
          return true;
        case Kind::literal:
          f.kind = kLiteral, f.lo = 0, f.hi = static_cast<uint32_t>(n.literals.size());
          stack_.push_back(f);
          consumed = false;
          return true;
      }
    }
    return false;
  };
  auto whitespace = [&](Frame& f) {
    if (++f.ws > kMaxWhitespaceRun) return Step::reject;
    return Step::consumed;
  };

  for (int guard = 0; guard < 2 * kMaxDepth + 8; ++guard) {
    if (stack_.empty()) return Step::reject;
    Frame& f = stack_.back();
    const Node* n = f.node >= 0 ? &nodes[static_cast<size_t>(f.node)] : nullptr;
    switch (f.kind) {
      case kRoot: {
        if (f.st == kRootDone) return Step::reject;  // nothing after the value
        if (is_ws(c)) return whitespace(f);
        f.st = kRootDone;
        bool consumed = false;
        if (!push_value(f.node, c, consumed)) return Step::reject;
        if (consumed) return Step::consumed;
        continue;
      }
      case kObject:
      case kMap: {
        // One state machine for both: an object of declared properties (keys from the schema,
        // in order, some required) and a map (any string key, one value schema).
        const bool map = f.kind == kMap;
        static const std::vector<std::pair<std::string, int>> kNoKeys;
        const auto& keys = map ? kNoKeys : n->key_sets[static_cast<size_t>(f.count)];
        auto may_end = [&] {
          if (map) return true;
          for (size_t j = static_cast<size_t>(f.count); j < n->props.size(); ++j)
            if (n->props[j].required) return false;
          return true;
        };
        const bool may_continue = map || !keys.empty();
        if (f.st != kInKey && is_ws(c)) return whitespace(f);
        f.ws = 0;
        switch (f.st) {
          case kKeyOrEnd:
          case kKeyOnly:
            if (c == '}' && f.st == kKeyOrEnd && may_end()) {
              stack_.pop_back();
              return Step::consumed;
            }
            if (c != '"' || !may_continue) return Step::reject;
            if (map) {  // the key is any string: a string frame reads it
              f.st = kColon;
              if (stack_.size() >= static_cast<size_t>(kMaxDepth)) return Step::reject;
              stack_.push_back(Frame{-1, kString, 0, 0, 0, 0, 0, 0, 0});
              return Step::consumed;
            }
            f.st = kInKey, f.lo = 0, f.hi = static_cast<uint32_t>(keys.size()), f.pos = 1;
            return Step::consumed;
          case kInKey: {
            uint32_t lo = f.hi, hi = f.lo;
            for (uint32_t j = f.lo; j < f.hi; ++j) {
              const std::string& k = keys[j].first;
              if (k.size() > f.pos && k[f.pos] == c) lo = std::min(lo, j), hi = std::max(hi, j + 1);
            }
            if (lo >= hi) return Step::reject;
            f.lo = lo, f.hi = hi, ++f.pos;
            // A key's text ends with its closing quote and holds no other bare quote, so a
            // whole match is the only candidate left.
            if (keys[lo].first.size() == f.pos) {
              const int prop = keys[lo].second;
              f.count = prop + 1;
              f.lo = static_cast<uint32_t>(prop);
              f.st = kColon;
            }
            return Step::consumed;
          }
          case kColon:
            if (c != ':') return Step::reject;
            f.st = kValue;
            return Step::consumed;
          case kValue: {
            f.st = kCommaOrEnd;
            const int value = map ? (n ? n->map_values : kAnyNode) : n->props[f.lo].node;
            bool consumed = false;
            if (!push_value(value, c, consumed)) return Step::reject;
            if (consumed) return Step::consumed;
            continue;
          }
          case kCommaOrEnd:
            if (c == '}' && may_end()) {
              stack_.pop_back();
              return Step::consumed;
            }
            if (c != ',' || !may_continue) return Step::reject;
            f.st = kKeyOnly;
            return Step::consumed;
        }
        return Step::reject;
      }
      case kArray: {
        const int items = n ? n->items : kAnyNode;
        const int64_t min_items = n ? n->min_items : 0, max_items = n ? n->max_items : INT64_MAX;
        if (is_ws(c)) return whitespace(f);
        f.ws = 0;
        if (c == ']' && f.st != kItem && f.count >= min_items) {
          stack_.pop_back();
          return Step::consumed;
        }
        if (f.st == kCommaOrEnd) {
          if (c != ',' || f.count >= max_items) return Step::reject;
          f.st = kItem;
          return Step::consumed;
        }
        if (f.count >= max_items) return Step::reject;
        ++f.count;
        f.st = kCommaOrEnd;
        bool consumed = false;
        if (!push_value(items, c, consumed)) return Step::reject;
        if (consumed) return Step::consumed;
        continue;
      }
      case kString: {
        const int64_t min_len = n ? n->min_length : 0, max_len = n ? n->max_length : INT64_MAX;
        const auto u = static_cast<unsigned char>(c);
        if (f.utf8_left > 0) {
          // lo..hi: the range of this continuation byte (narrower after E0, ED, F0, F4, which
          // would otherwise spell overlong forms, surrogates or code points past U+10FFFF).
          if (u < f.lo || u > f.hi) return Step::reject;
          --f.utf8_left;
          f.lo = 0x80, f.hi = 0xBF;
          return Step::consumed;
        }
        if (f.st == 1) {  // after a backslash
          if (c == 'u') {
            f.st = 2, f.pos = 0;
            return Step::consumed;
          }
          if (std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) return Step::reject;
          f.st = 0;
          return Step::consumed;
        }
        // \uXXXX: st 2..5 read its hex digits into pos. A high surrogate must be followed by
        // \u and a low one (st 6, 7, then 8..11), and a low one may not stand alone: parsers
        // refuse lone surrogates.
        if (f.st == 6 || f.st == 7) {
          if (c != (f.st == 6 ? '\\' : 'u')) return Step::reject;
          f.st = f.st == 6 ? 7 : 8;
          f.pos = 0;
          return Step::consumed;
        }
        if (f.st >= 2) {
          if (!is_hex(c)) return Step::reject;
          f.pos = f.pos * 16 + static_cast<uint32_t>(is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
          if (f.st != 5 && f.st != 11) {
            ++f.st;
            return Step::consumed;
          }
          const bool low = f.pos >= 0xDC00 && f.pos <= 0xDFFF, high = f.pos >= 0xD800 && f.pos <= 0xDBFF;
          if (f.st == 11 ? !low : low) return Step::reject;
          f.st = f.st == 5 && high ? 6 : 0;
          return Step::consumed;
        }
        if (c == '"') {
          if (f.count < min_len) return Step::reject;
          stack_.pop_back();
          return Step::consumed;
        }
        if (u < 0x20) return Step::reject;
        // Every other byte starts a code point (an escape, an ASCII byte or a UTF-8 lead).
        if (f.count >= max_len) return Step::reject;
        ++f.count;
        if (c == '\\') {
          f.st = 1;
        } else if (u >= 0x80) {
          if (u >= 0xC2 && u <= 0xDF)
            f.utf8_left = 1;
          else if (u >= 0xE0 && u <= 0xEF)
            f.utf8_left = 2;
          else if (u >= 0xF0 && u <= 0xF4)
            f.utf8_left = 3;
          else
            return Step::reject;
          f.lo = u == 0xE0 ? 0xA0 : u == 0xF0 ? 0x90 : 0x80;
          f.hi = u == 0xED ? 0x9F : u == 0xF4 ? 0x8F : 0xBF;
        }
        return Step::consumed;
      }
      case kNumber: {
        const bool integer = f.lo == 1;
        if (++f.count > kMaxNumberBytes) return Step::reject;
        uint8_t next = 255;
        switch (f.st) {
          case kNumStart: next = c == '-' ? kNumMinus : c == '0' ? kNumZero : is_digit(c) ? kNumInt : 255; break;
          case kNumMinus: next = c == '0' ? kNumZero : is_digit(c) ? kNumInt : 255; break;
          case kNumZero:
          case kNumInt:
          case kNumFrac:
            if (is_digit(c) && f.st != kNumZero)
              next = f.st;
            else if (c == '.' && f.st != kNumFrac && !integer)
              next = kNumDot;
            else if ((c == 'e' || c == 'E') && !integer)
              next = kNumE;
            break;
          case kNumDot: next = is_digit(c) ? kNumFrac : 255; break;
          case kNumE:
            if (c == '+' || c == '-') {
              next = kNumESign;
            } else if (is_digit(c)) {
              next = kNumExp;
              f.pos = 1;
            }
            break;
          case kNumESign:
          case kNumExp:
            // At most kMaxExponentDigits: parsers refuse doubles beyond ~1e308.
            if (is_digit(c) && ++f.pos <= kMaxExponentDigits) next = kNumExp;
            break;
        }
        if (next != 255) {
          f.st = next;
          return Step::consumed;
        }
        if (!number_can_end(f.st)) return Step::reject;
        stack_.pop_back();  // the number ended before c: the parent reads c
        continue;
      }
      case kLiteral: {
        const auto& lits = n->literals;
        uint32_t lo = f.hi, hi = f.lo;
        bool whole = false;
        for (uint32_t j = f.lo; j < f.hi; ++j) {
          const std::string& l = lits[j];
          if (l.size() == f.pos) whole = true;
          if (l.size() > f.pos && l[f.pos] == c) lo = std::min(lo, j), hi = std::max(hi, j + 1);
        }
        if (lo < hi) {
          f.lo = lo, f.hi = hi, ++f.pos;
          return Step::consumed;
        }
        if (!whole) return Step::reject;
        stack_.pop_back();  // a whole value matched before c
        continue;
      }
    }
    return Step::reject;
  }
  return Step::reject;
}

// ---- the token filter ----

JsonTokenFilter::JsonTokenFilter(JsonSchema schema, std::function<std::string_view(int32_t)> piece,
                                 std::function<bool(int32_t)> is_end)
    : schema_(std::move(schema)),
      m_(schema_),
      scratch_(schema_),
      piece_(std::move(piece)),
      is_end_(std::move(is_end)) {}

bool JsonTokenFilter::allowed(int32_t id) const {
  if (is_end_(id)) return m_.complete();
  const std::string_view p = piece_(id);
  if (p.empty()) return false;  // a token with no text would let the generation stall
  scratch_ = m_;
  return scratch_.feed(p);
}

void JsonTokenFilter::accept(int32_t id) {
  if (is_end_(id)) return;
  if (!m_.feed(piece_(id))) fail("json constraint: token ", id, " was accepted but does not continue the JSON");
}

FramedJsonTokenFilter::FramedJsonTokenFilter(std::vector<JsonFrame> frames,
                                             std::function<std::string_view(int32_t)> piece,
                                             std::function<bool(int32_t)> is_end, JsonFrameRepeat repeat)
    : frames_(std::move(frames)), repeat_(std::move(repeat)), piece_(std::move(piece)), is_end_(std::move(is_end)) {
  if (frames_.empty()) fail("framed json constraint: no frames");
  if (!repeat_.next.empty() && repeat_.next.size() != frames_.size())
    fail("framed json constraint: ", repeat_.next.size(), " next texts for ", frames_.size(), " frames");
  for (size_t f = 0; f < frames_.size(); ++f)
    if (!frames_[f].schema) fail("framed json constraint: frame ", f, " has no schema");
  // One state follows the text only if no candidate text is a prefix of another.
  auto check = [](const std::vector<const std::string*>& c, const char* what) {
    for (size_t a = 0; a < c.size(); ++a)
      for (size_t b = 0; b < c.size(); ++b)
        if (a != b && c[b]->starts_with(*c[a]))
          fail("framed json constraint: ", what, " '", *c[a], "' begins '", *c[b], "'");
  };
  std::vector<const std::string*> first, later;
  for (const JsonFrame& f : frames_) first.push_back(&f.prefix);
  if (!repeat_.close.empty()) later.push_back(&repeat_.close);
  for (const std::string& n : repeat_.next) {
    if (n.empty()) fail("framed json constraint: an empty next text");
    later.push_back(&n);
  }
  check(first, "the prefix");
  check(later, "the text");
  start_candidates(state_, /*first=*/true);
}

const std::string& FramedJsonTokenFilter::candidate(const State& st, size_t k) const {
  if (st.first) return frames_[k].prefix;
  return k == 0 ? repeat_.close : repeat_.next[k - 1];
}

size_t FramedJsonTokenFilter::n_candidates(const State& st) const {
  return st.first ? frames_.size() : 1 + repeat_.next.size();
}

// Part 0 with every candidate live; a lone empty prefix (the prompt holds all of it) goes
// straight to its value.
void FramedJsonTokenFilter::start_candidates(State& st, bool first) const {
  st.part = 0;
  st.first = first;
  st.pos = 0;
  st.live.assign(n_candidates(st), 1);
  if (first && frames_.size() == 1 && frames_[0].prefix.empty()) {
    st.part = 1;
    st.frame = 0;
    st.m.emplace(*frames_[0].schema);
  }
}

bool FramedJsonTokenFilter::feed(State& st, std::string_view bytes) const {
  for (size_t i = 0; i < bytes.size();) {
    const char c = bytes[i];
    switch (st.part) {
      case 0: {
        bool any = false;
        for (size_t k = 0; k < st.live.size(); ++k) {
          const std::string& t = candidate(st, k);
          st.live[k] = st.live[k] && st.pos < t.size() && t[st.pos] == c;
          any = any || st.live[k];
        }
        if (!any) return false;
        ++st.pos;
        ++i;
        for (size_t k = 0; k < st.live.size(); ++k) {
          if (!st.live[k] || st.pos != candidate(st, k).size()) continue;
          if (!st.first && k == 0) {  // the close
            st.part = 4;
          } else {
            st.frame = st.first ? k : k - 1;
            st.part = 1;
            st.m.emplace(*frames_[st.frame].schema);
          }
          st.pos = 0;
          break;
        }
        break;
      }
      case 1: {
        const JsonFrame& fr = frames_[st.frame];
        if (st.m->complete() && (fr.suffix.empty() || fr.suffix[0] == c)) {
          st.part = fr.suffix.empty() ? 3 : 2;
          st.pos = 0;
          if (st.part == 3) ++st.calls;
          break;  // c goes to the suffix (or to what follows the frame)
        }
        if (!st.m->feed(std::string_view(&c, 1))) return false;
        ++i;
        break;
      }
      case 2: {
        const JsonFrame& fr = frames_[st.frame];
        if (fr.suffix[st.pos] != c) return false;
        if (++st.pos == fr.suffix.size()) {
          st.part = 3;
          ++st.calls;
        }
        ++i;
        break;
      }
      case 3:  // the close or, where allowed, another frame
        start_candidates(st, /*first=*/false);
        if (repeat_.next.empty()) std::fill(st.live.begin() + 1, st.live.end(), 0);
        if (repeat_.close.empty()) st.live[0] = 0;
        break;
      default: return false;  // nothing may follow the close
    }
  }
  return true;
}

bool FramedJsonTokenFilter::done(const State& st) const {
  if (st.part == 4) return true;
  if (!repeat_.close.empty()) return false;
  return st.part == 3 || (st.part == 1 && st.m->complete() && frames_[st.frame].suffix.empty());
}

bool FramedJsonTokenFilter::complete() const { return done(state_); }

// Fixed from here when the value (or the suffix, or the close) is under way and no further
// frame may follow: the rest of the suffix, then the close.
std::optional<std::string> FramedJsonTokenFilter::forced_rest() const {
  if (!repeat_.next.empty()) return std::nullopt;  // another call or the close: the model's choice
  const State& st = state_;
  switch (st.part) {
    case 0: return st.first ? std::nullopt : std::optional(repeat_.close.substr(st.pos));
    case 1:
      if (!st.m->finished()) return std::nullopt;
      return frames_[st.frame].suffix + repeat_.close;
    case 2: return frames_[st.frame].suffix.substr(st.pos) + repeat_.close;
    case 3: return repeat_.close;
    default: return std::string();
  }
}

bool FramedJsonTokenFilter::allowed(int32_t id) const {
  if (is_end_(id)) return complete();
  const std::string_view p = piece_(id);
  if (p.empty()) return false;  // a token with no text would let the generation stall
  scratch_ = state_;            // copy-assigned: the scratch's buffers keep their allocations
  return feed(scratch_, p);
}

void FramedJsonTokenFilter::accept(int32_t id) {
  if (is_end_(id)) return;
  if (!feed(state_, piece_(id))) fail("framed json constraint: token ", id, " was accepted but fits no frame");
}

}  // namespace sluice
