// sampling/json_schema: constrained sampling to JSON — OpenAI's response_format json_object (any
// JSON object) and json_schema (a value the schema accepts). The schema compiles to a small
// pushdown automaton over bytes (JsonMatcher); the sampler asks it, token by token, whether a
// token's text can continue the document (JsonTokenFilter), so a generation can only spell
// JSON that parses and validates. Never fail-open: a schema keyword the matcher cannot
// enforce (pattern, format, minimum, ...) is refused at compile time with its JSON pointer,
// so the caller answers 400 instead of returning unchecked output.
//
// Enforced: type (and type arrays), enum, const, properties (emitted in the schema's order;
// properties not in `required` may be skipped), required, additionalProperties (false; or a
// schema with no properties: a map), items, minItems, maxItems, minLength, maxLength (code
// points), anyOf/oneOf whose alternatives start with different characters, $ref into
// #/$defs or #/definitions (recursion allowed), nullable. Ignored because they constrain
// nothing: title, description, default, examples, $schema, $id, $comment, strict.
// Numbers are at most 40 bytes with an exponent of at most 2 digits (parsers refuse doubles
// beyond 1e308). Whitespace between tokens is allowed (at most kMaxWhitespaceRun bytes in a row) so the
// model can pretty-print; nothing may follow the top-level value.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/sampler.h"

namespace sluice {

// A schema the matcher cannot enforce; what() names the keyword and where it is.
class UnsupportedSchema : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class JsonSchema {
 public:
  // Any JSON object (response_format {"type": "json_object"}).
  static JsonSchema any_object();
  // Throws UnsupportedSchema for what the class comment does not list.
  static JsonSchema compile(const nlohmann::ordered_json& schema);

  struct Node;
  const std::vector<Node>& nodes() const { return nodes_; }
  int root() const { return root_; }

 private:
  friend class SchemaCompiler;
  std::vector<Node> nodes_;
  int root_ = 0;
};

struct JsonSchema::Node {
  enum class Kind : uint8_t { any, object, array, string, number, integer, literal, one_of };
  Kind kind = Kind::any;
  // object: properties in schema order; `"name"` is the key as its JSON text, quotes included.
  struct Prop {
    std::string key_json;
    int node = -1;
    bool required = false;
  };
  std::vector<Prop> props;
  // key_sets[i]: the keys allowed after the props before i were emitted or skipped: props
  // i.. up to the first required one, as (key_json, prop index) sorted by key_json.
  std::vector<std::vector<std::pair<std::string, int>>> key_sets;
  int map_values = -1;  // object without properties: any string key, values of this node (-1: any)
  // array
  int items = -1;  // -1: any
  int64_t min_items = 0, max_items = INT64_MAX;
  // string
  int64_t min_length = 0, max_length = INT64_MAX;
  // literal: the allowed values as JSON text, sorted (enum, const, true/false/null)
  std::vector<std::string> literals;
  // one_of: alternatives with disjoint first bytes
  std::vector<int> alts;
};

// The byte-level matcher: a copyable parse state over one JsonSchema.
class JsonMatcher {
 public:
  static constexpr int kMaxWhitespaceRun = 24;
  static constexpr int kMaxDepth = 64;

  explicit JsonMatcher(const JsonSchema& s);
  JsonMatcher(const JsonMatcher&) = default;
  JsonMatcher& operator=(const JsonMatcher&) = default;

  // Feeds bytes; false (and the state unusable: copy before trying) when they cannot continue
  // a valid document.
  bool feed(std::string_view bytes);
  // The document so far is a complete valid value: the generation may end here.
  bool complete() const;
  // Complete, and nothing may follow it (an object, array, string or literal closed at the top
  // level; a number could still take digits).
  bool finished() const;

  struct Frame {
    int node;              // schema node (-1: any)
    uint8_t kind;          // FrameKind in json_schema.cpp
    uint8_t st;            // state within the frame
    uint16_t ws;           // whitespace bytes in a row
    uint32_t lo, hi, pos;  // literal / key matching: candidate range and bytes matched
    int64_t count;         // items, emitted props index, string code points
    uint8_t utf8_left;     // string: continuation bytes still expected
  };

 private:
  enum class Step { consumed, reject, pop_retry };
  Step step(char c);

  const JsonSchema* s_;
  std::vector<Frame> stack_;
};

// The token-level filter a Sampler consults: a token is allowed when its text continues the
// document; an end-of-generation token only when the document is complete. `piece(id)` is the
// token's text (Tokenizer::token_to_piece), `is_end(id)` its end-of-generation flag.
class JsonTokenFilter final : public TokenFilter {
 public:
  JsonTokenFilter(JsonSchema schema, std::function<std::string_view(int32_t)> piece,
                  std::function<bool(int32_t)> is_end);
  bool allowed(int32_t id) const override;
  void accept(int32_t id) override;
  bool complete() const { return m_.complete(); }

 private:
  JsonSchema schema_;
  JsonMatcher m_;
  mutable JsonMatcher scratch_;
  std::function<std::string_view(int32_t)> piece_;
  std::function<bool(int32_t)> is_end_;
};

// Text that must be one of several frames: a fixed prefix, a JSON value its schema accepts, a
// fixed suffix; then, with JsonFrameRepeat, more frames each started by its `next` text; then
// the close text and the end of the generation. What a forced tool call is (OpenAI's
// tool_choice "required" or a named function): the call markup of the model's format around
// the function's arguments, one frame per function allowed (runtime/tool_calls.h
// tool_call_frame), several calls where "required" allows parallel ones. Once the value is
// complete a byte that starts the suffix goes to the suffix (a suffix may start with
// whitespace the value would also take).
struct JsonFrame {
  std::string prefix;
  std::shared_ptr<const JsonSchema> schema;
  std::string suffix;
};
// After a complete frame: next[f] starts another frame f (the separator and that frame's
// prefix; empty vector: no further frame), close ends the text (may be empty). No `next` may
// be a prefix of another or of close, nor close of one of them (the text decides which).
struct JsonFrameRepeat {
  std::vector<std::string> next;
  std::string close;
};

class FramedJsonTokenFilter final : public TokenFilter {
 public:
  FramedJsonTokenFilter(std::vector<JsonFrame> frames, std::function<std::string_view(int32_t)> piece,
                        std::function<bool(int32_t)> is_end, JsonFrameRepeat repeat = {});
  bool allowed(int32_t id) const override;
  void accept(int32_t id) override;
  bool complete() const;  // the text may end here: a frame and the close were written
  std::optional<std::string> forced_rest() const override;
  int calls() const { return state_.calls; }  // frames written to their end so far

 private:
  // One state (the texts a frame may start with never share a prefix, so one suffices).
  struct State {
    int part = 0;            // 0: one of the candidate texts, 1: the value, 2: suffix, 3: a frame done, 4: closed
    bool first = true;       // part 0: the candidates are the frames' prefixes, else close and next
    std::vector<char> live;  // part 0: the candidates still matching
    size_t frame = 0;        // parts 1, 2: the frame
    size_t pos = 0;          // bytes of the candidate / suffix matched
    int calls = 0;
    std::optional<JsonMatcher> m;
  };
  // Candidate k of part 0: first: frames_[k].prefix; else k == 0: close, k >= 1: next[k - 1].
  const std::string& candidate(const State& st, size_t k) const;
  size_t n_candidates(const State& st) const;
  void start_candidates(State& st, bool first) const;
  bool feed(State& st, std::string_view bytes) const;
  bool done(const State& st) const;

  std::vector<JsonFrame> frames_;
  JsonFrameRepeat repeat_;
  State state_;
  mutable State scratch_;
  std::function<std::string_view(int32_t)> piece_;
  std::function<bool(int32_t)> is_end_;
};

}  // namespace sluice
