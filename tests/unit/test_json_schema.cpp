// tests/unit/test_json_schema: the JSON constraint (sampling/json_schema.h) — documents the
// matcher accepts parse (nlohmann, an independent parser) and satisfy the schema (a small
// validator written here from the JSON Schema spec, not from the matcher); documents that
// break the schema are refused; schemas it cannot enforce are refused naming the keyword; and
// on the real SmolLM2 the constrained greedy answer parses where the free one does not.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "models/model.h"
#include "runtime/session.h"
#include "sampling/json_schema.h"
#include "test_util.h"

namespace sluice {
namespace {

using json = nlohmann::ordered_json;

bool accepts(const JsonSchema& s, std::string_view doc) {
  JsonMatcher m(s);
  return m.feed(doc) && m.complete();
}

// The validator of the test: the keywords the matcher claims to enforce, read from the spec.
bool valid(const json& v, const json& s, const json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    if (ref == "#") return valid(v, root, root);
    const std::string name = ref.substr(ref.rfind('/') + 1);
    const json& defs = root.contains("$defs") ? root["$defs"] : root["definitions"];
    return valid(v, defs[name], root);
  }
  if (s.value("nullable", false) && v.is_null()) return true;
  if (s.contains("anyOf")) {
    for (const auto& a : s["anyOf"])
      if (valid(v, a, root)) return true;
    return false;
  }
  if (s.contains("enum")) {
    bool in = false;
    for (const auto& e : s["enum"]) in = in || e == v;
    if (!in) return false;
  }
  if (s.contains("const") && s["const"] != v) return false;
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_array())
      for (const auto& t : s["type"]) types.push_back(t);
    else
      types.push_back(s["type"]);
    bool ok = false;
    for (const auto& t : types)
      ok = ok || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
           (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
           (t == "integer" && (v.is_number_integer() || v.is_number_unsigned())) ||
           (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
    if (!ok) return false;
  }
  if (v.is_object()) {
    for (const auto& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    const json props = s.value("properties", json::object());
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (!valid(x, props[k], root)) return false;
      } else if (s.contains("additionalProperties") && !valid(x, s["additionalProperties"], root)) {
        return false;
      }
    }
  }
  if (v.is_array()) {
    if (static_cast<int64_t>(v.size()) < s.value("minItems", int64_t{0})) return false;
    if (static_cast<int64_t>(v.size()) > s.value("maxItems", INT64_MAX)) return false;
    if (s.contains("items"))
      for (const auto& x : v)
        if (!valid(x, s["items"], root)) return false;
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    int64_t cps = 0;
    for (unsigned char c : str) cps += (c & 0xC0) != 0x80;
    if (cps < s.value("minLength", int64_t{0}) || cps > s.value("maxLength", INT64_MAX)) return false;
  }
  return true;
}

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer"},
    "mood": {"enum": ["happy", "sad", 3, null]},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "pet": {"anyOf": [{"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]},
                      {"type": "null"}]},
    "score": {"type": ["number", "null"]}
  },
  "required": ["name", "age"]
})");

TEST(JsonSchema, AcceptsWhatTheSchemaAllowsAndRefusesTheRest) {
  const JsonSchema s = JsonSchema::compile(kPerson);
  const char* good[] = {
      R"({"name":"Ann","age":3})",
      R"({"name": "Bob", "age": -12, "mood": "sad", "tags": ["a", "b"], "pet": {"kind": "cat"}, "score": 1.5e3})",
      "{\n  \"name\": \"Zo\\u00e9\",\n  \"age\": 0,\n  \"pet\": null,\n  \"score\": null\n}",
      R"({"name":"é","age":7,"mood":3})",
      R"({"name":"x","age":1,"mood":null,"tags":[]})",
      R"({"name":"\ud83d\ude00","age":1})",
  };
  for (const char* d : good) {
    EXPECT_TRUE(accepts(s, d)) << d;
    EXPECT_TRUE(valid(json::parse(d), kPerson, kPerson)) << "the test's validator disagrees: " << d;
  }
  const char* bad[] = {
      R"({"age":3,"name":"Ann"})",                           // order: name first (the matcher's rule; still valid JSON)
      R"({"name":"Ann"})",                                   // age required
      R"({"name":"","age":3})",                              // minLength 1
      R"({"name":"abcdefghijklm","age":3})",                 // maxLength 12
      R"({"name":"Ann","age":3.5})",                         // integer
      R"({"name":"Ann","age":3,"mood":"angry"})",            // enum
      R"({"name":"Ann","age":3,"tags":["a","b","c","d"]})",  // maxItems
      R"({"name":"Ann","age":3,"pet":{}})",                  // pet.kind required
      R"({"name":"Ann","age":3,"color":"red"})",             // unknown property
      R"({"name":"Ann","age":3,})",                          // trailing comma
      R"({"name":"Ann","age":03})",                          // leading zero
      R"({"name":"Ann","age":3} x)",                         // text after the value
      "{\"name\":\"A\x01\",\"age\":3}",                      // control byte in a string
      "{\"name\":\"A\xff\",\"age\":3}",                      // invalid UTF-8
      "{\"name\":\"\xf4\x9b\x81\x84\",\"age\":3}",           // past U+10FFFF (the fuzzer's find)
      "{\"name\":\"\xed\xa0\x80\",\"age\":3}",               // a surrogate
      "{\"name\":\"\xe0\x80\xaf\",\"age\":3}",               // overlong
      R"({"name":"\udfef","age":3})",                        // a lone low surrogate escape
      R"({"name":"\ud83dx","age":3})",                       // a high one without its pair
      R"({"name":"Ann","age":3)",                            // incomplete
  };
  for (const char* d : bad) EXPECT_FALSE(accepts(s, d)) << d;
}

TEST(JsonSchema, JsonObjectModeTakesAnyObjectOnly) {
  const JsonSchema s = JsonSchema::any_object();
  EXPECT_TRUE(accepts(s, R"({"a":[1,2,{"b":null}],"c":"d","e":true,"f":-0.5E-3})"));
  EXPECT_TRUE(accepts(s, "{}"));
  EXPECT_FALSE(accepts(s, "[1]"));
  EXPECT_FALSE(accepts(s, "\"text\""));
  EXPECT_FALSE(accepts(s, R"({"a":tru})"));
  EXPECT_FALSE(accepts(s, R"({"a":1 "b":2})"));
}

TEST(JsonSchema, RefsAndRecursion) {
  const json tree = json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
              "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
    "$ref": "#/$defs/node"})");
  const JsonSchema s = JsonSchema::compile(tree);
  EXPECT_TRUE(accepts(s, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4}]}]})"));
  EXPECT_FALSE(accepts(s, R"({"v":1,"kids":[{"w":2}]})"));
}

TEST(JsonSchema, RefusesWhatItCannotEnforceNamingIt) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"string","pattern":"^a"})", "'pattern' at /pattern"},
      {R"({"type":"object","properties":{"d":{"type":"string","format":"date-time"}}})", "/properties/d/format"},
      {R"({"type":"integer","minimum":3})", "'minimum'"},
      {R"({"anyOf":[{"type":"object"},{"type":"object","properties":{"a":{}}}]})", "both start with '{'"},
      {R"({"$ref":"#/$defs/missing"})", "#/$defs/missing"},
      {R"({"type":"array","items":[{"type":"string"}]})", "tuple items"},
      {R"(false)", "accepts nothing"},
  };
  for (const auto& [schema, want] : cases) {
    try {
      JsonSchema::compile(json::parse(schema));
      ADD_FAILURE() << "accepted " << schema;
    } catch (const UnsupportedSchema& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << schema << ": " << e.what();
    }
  }
}

// A random walk over the bytes the matcher allows ends, whenever it completes, in a document
// that parses and validates: the matcher never lets through what the schema refuses.
TEST(JsonSchema, RandomWalksOnlyProduceValidDocuments) {
  const JsonSchema s = JsonSchema::compile(kPerson);
  std::mt19937 rng(1234);
  std::string alphabet = "{}[],:\"\"\"\"\\ \n0123456789-.eE+abcdefghijklmnopqrstuvwxyz";
  alphabet += "\xc3\xa9";
  int completed = 0;
  for (int walk = 0; walk < 400; ++walk) {
    JsonMatcher m(s);
    std::string doc;
    for (int i = 0; i < 600; ++i) {
      if (m.complete() && std::uniform_int_distribution<int>(0, 3)(rng) == 0) break;
      std::string allowed;
      for (char c : alphabet) {
        JsonMatcher t = m;
        if (t.feed(std::string_view(&c, 1))) allowed += c;
      }
      if (allowed.empty()) break;
      const char c = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      ASSERT_TRUE(m.feed(std::string_view(&c, 1)));
      doc += c;
    }
    if (!m.complete()) continue;
    ++completed;
    json v;
    ASSERT_NO_THROW(v = json::parse(doc)) << doc;
    EXPECT_TRUE(valid(v, kPerson, kPerson)) << doc;
  }
  EXPECT_GT(completed, 50) << "too few walks completed to say anything";
}

// Sampling (not greedy) through the Sampler's lazy check: every pick is a token the filter
// allows, so every finished sequence over a toy vocabulary is a JSON object; the same draws
// without the filter make invalid ones (the negative control).
TEST(JsonSchema, SamplerDrawsOnlyAllowedTokens) {
  const std::vector<std::string> pieces = {"{", "}", "\"a\"", ":", "1", "x", ",", ""};
  const int32_t eos = 7;
  std::mt19937 rng(7);
  auto run = [&](bool constrained, int trials) {
    int valid_docs = 0, finished = 0;
    for (int t = 0; t < trials; ++t) {
      SamplerParams sp;
      sp.temp = 1.0f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f, sp.seed = 100 + t;
      Sampler sampler(sp);
      if (constrained)
        sampler.set_filter(std::make_unique<JsonTokenFilter>(
            JsonSchema::any_object(), [&](int32_t id) -> std::string_view { return pieces[static_cast<size_t>(id)]; },
            [&](int32_t id) { return id == eos; }));
      std::string doc;
      for (int i = 0; i < 40; ++i) {
        float logits[8];
        for (float& l : logits) l = std::uniform_real_distribution<float>(-2, 2)(rng);
        const int32_t id = sampler.sample(logits, 8);
        sampler.accept(id);
        if (id == eos) {
          ++finished;
          try {
            valid_docs += json::parse(doc).is_object();
          } catch (const nlohmann::json::exception&) {
          }
          break;
        }
        doc += pieces[static_cast<size_t>(id)];
      }
    }
    return std::make_pair(valid_docs, finished);
  };
  const auto [valid_c, finished_c] = run(true, 200);
  EXPECT_GT(finished_c, 20);
  EXPECT_EQ(valid_c, finished_c);
  const auto [valid_f, finished_f] = run(false, 200);
  EXPECT_LT(valid_f, finished_f / 2) << "unconstrained draws should mostly break JSON";
}

// The real model: asked for JSON, SmolLM2's greedy answer under the filter parses and fits the
// schema; the same prompt unconstrained does not give that (the negative control).
TEST(JsonSchema, ConstrainsTheRealModel) {
  const std::string path = test::find_smollm2_gguf();
  ASSERT_FALSE(path.empty()) << test::kSmolGgufRel << " not found: run scripts/setup";
  auto model = Model::load(path);
  auto be = make_backend("cpu", 2);
  const Tokenizer& tok = model->tokenizer();
  const json schema = json::parse(
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":20},"country":{"type":"string","maxLength":20}},"required":["city","country"]})");
  const std::string prompt =
      "<|im_start|>user\nName the capital of France as JSON with keys city and country.<|im_end|>\n"
      "<|im_start|>assistant\n";
  auto generate = [&](bool constrained) {
    KvCacheOptions kv;
    kv.n_ctx = 256;
    Session sess(*model, *be, kv);
    SamplerParams sp;
    sp.temp = 0;
    Sampler sampler(sp);
    if (constrained)
      sampler.set_filter(std::make_unique<JsonTokenFilter>(
          JsonSchema::compile(schema), [&](int32_t id) -> std::string_view { return tok.token_to_piece(id); },
          [&](int32_t id) { return tok.is_eog(id); }));
    std::vector<int32_t> ids = tok.encode(prompt, true, true);
    auto logits = sess.eval(ids);
    std::string out;
    for (int i = 0; i < 60; ++i) {
      const int32_t id = sampler.sample(logits.data(), static_cast<int32_t>(tok.n_vocab()));
      sampler.accept(id);
      if (tok.is_eog(id)) break;
      out += tok.token_to_piece(id);
      const int32_t one[1] = {id};
      logits = sess.eval(one);
    }
    return out;
  };
  const std::string constrained = generate(true);
  json v;
  ASSERT_NO_THROW(v = json::parse(constrained)) << constrained;
  EXPECT_TRUE(valid(v, schema, schema)) << constrained;
  EXPECT_EQ(v["city"], "Paris") << constrained;
  const std::string free = generate(false);
  bool free_valid = false;
  try {
    free_valid = valid(json::parse(free), schema, schema);
  } catch (const nlohmann::json::exception&) {
  }
  EXPECT_FALSE(free_valid) << "the unconstrained answer already fits, so this test shows nothing: " << free;
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// The forced tool call's filter: random draws over a toy vocabulary only ever finish as one of
// the frames — its prefix, a value of its schema, its suffix — and a suffix that starts with
// whitespace the value would also take (DeepSeek's "\n```") can still be reached.
// (Every byte of a frame has a token of its own here, as in a real byte-level vocabulary:
// otherwise a walk could reach a state no token continues.)
// (The suffixes' tails have tokens of their own, as a byte-level vocabulary has for every
// byte: otherwise a walk could reach a state no token continues.)
TEST(JsonSchema, FramedFilterSpellsOnlyAFrame) {
  const std::vector<std::string> pieces = {"<a>", "<b>", "{",    "}",      "\"x\"",   ":",         "1",    "\"s\"", ",",
                                           " ",   "\n",  "</a>", "\n</b>", "}\n</a>", "<a>{\"x\"", "</b>", ""};
  const int32_t eos = static_cast<int32_t>(pieces.size()) - 1;
  const json schema_a = {{"type", "object"},
                         {"properties", {{"x", {{"type", "integer"}}}}},
                         {"required", {"x"}},
                         {"additionalProperties", false}};
  auto frames = [&] {
    std::vector<JsonFrame> f;
    f.push_back({"<a>", std::make_shared<const JsonSchema>(JsonSchema::compile(schema_a)), "</a>"});
    f.push_back({"<b>", std::make_shared<const JsonSchema>(JsonSchema::any_object()), "\n</b>"});
    return f;
  };
  auto make = [&] {
    return std::make_unique<FramedJsonTokenFilter>(
        frames(), [&](int32_t id) -> std::string_view { return pieces[static_cast<size_t>(id)]; },
        [&](int32_t id) { return id == eos; });
  };
  {
    auto f = make();
    EXPECT_TRUE(f->allowed(0));
    EXPECT_TRUE(f->allowed(1));
    EXPECT_TRUE(f->allowed(14)) << "a token spanning the prefix and the value";
    EXPECT_FALSE(f->allowed(2)) << "the value before its prefix";
    EXPECT_FALSE(f->allowed(eos)) << "the end before any frame";
    f->accept(1);  // <b>: the any-object frame
    for (int32_t id : {2, 3}) f->accept(id);
    EXPECT_TRUE(f->allowed(10)) << "whitespace the value takes";
    EXPECT_TRUE(f->allowed(12)) << "the suffix, which starts with that whitespace";
    EXPECT_FALSE(f->allowed(eos));
    f->accept(12);
    EXPECT_TRUE(f->complete());
    EXPECT_TRUE(f->allowed(eos));
    EXPECT_FALSE(f->allowed(9)) << "nothing after the frame";
  }
  std::mt19937 rng(3);
  int finished = 0;
  for (int t = 0; t < 300; ++t) {
    SamplerParams sp;
    sp.temp = 1.0f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f, sp.seed = 500 + t;
    Sampler sampler(sp);
    sampler.set_filter(make());
    std::string doc;
    for (int i = 0; i < 30; ++i) {
      std::vector<float> logits(pieces.size());
      for (float& l : logits) l = std::uniform_real_distribution<float>(-2, 2)(rng);
      logits[static_cast<size_t>(eos)] += 3;  // end as soon as allowed
      const int32_t id = sampler.sample(logits.data(), static_cast<int32_t>(logits.size()));
      sampler.accept(id);
      if (id == eos) {
        ++finished;
        const bool a = doc.starts_with("<a>") && doc.ends_with("</a>");
        const bool b = doc.starts_with("<b>") && doc.ends_with("\n</b>");
        ASSERT_TRUE(a || b) << doc;
        const std::string inner = doc.substr(3, doc.size() - 3 - (a ? 4 : 5));
        const json v = json::parse(inner);
        ASSERT_TRUE(v.is_object()) << doc;
        if (a) {
          EXPECT_TRUE(v.size() == 1 && v["x"].is_number_integer()) << doc;
        }
        break;
      }
      doc += pieces[static_cast<size_t>(id)];
    }
  }
  EXPECT_GT(finished, 30) << "too few walks finished to say anything";
}

// forced_rest: once a frame's value is closed (or its suffix or the close under way) and no
// further frame may follow, the constraint leaves one text, which the generation writes at
// once (runtime/generator.cpp) instead of sampling it. Negative controls: nothing is forced
// while a prefix, a value, or a top-level number (more digits could follow) is open, nor where
// `next` lets another frame follow.
TEST(JsonSchema, FramedFilterForcesTheRestOnceOnlyOneTextFits) {
  const std::vector<std::string> pieces = {"<a>", "<b>", "{", "}", "\"x\"", ":", "1", "</", ""};
  const int32_t eos = static_cast<int32_t>(pieces.size()) - 1;
  const json schema_a = {{"type", "object"}, {"properties", {{"x", {{"type", "integer"}}}}}};
  auto make = [&](JsonFrameRepeat rep, json schema_b = json()) {
    std::vector<JsonFrame> f;
    f.push_back({"<a>", std::make_shared<const JsonSchema>(JsonSchema::compile(schema_a)), "</a>"});
    f.push_back({"<b>",
                 std::make_shared<const JsonSchema>(schema_b.is_null() ? JsonSchema::any_object()
                                                                       : JsonSchema::compile(schema_b)),
                 "</b>"});
    return std::make_unique<FramedJsonTokenFilter>(
        std::move(f), [&](int32_t id) -> std::string_view { return pieces[static_cast<size_t>(id)]; },
        [&](int32_t id) { return id == eos; }, std::move(rep));
  };
  {
    auto f = make({{}, "]"});
    EXPECT_FALSE(f->forced_rest()) << "which frame is the model's choice";
    f->accept(0);
    EXPECT_FALSE(f->forced_rest()) << "the value is open";
    for (int32_t id : {2, 4, 5, 6}) f->accept(id);  // {"x":1
    EXPECT_FALSE(f->forced_rest()) << "the object is still open";
    f->accept(3);
    ASSERT_TRUE(f->forced_rest());
    EXPECT_EQ(*f->forced_rest(), "</a>]");
    f->accept(7);  // "</": the suffix under way
    EXPECT_EQ(f->forced_rest().value_or("?"), "a>]");
  }
  {
    auto f = make({{}, ""});  // no close
    for (int32_t id : {1, 2, 3}) f->accept(id);
    EXPECT_EQ(f->forced_rest().value_or("?"), "</b>");
  }
  {
    auto f = make({{"<a>", "<b>"}, "]"});  // parallel frames: after one, another or the close
    for (int32_t id : {1, 2, 3}) f->accept(id);
    EXPECT_FALSE(f->forced_rest()) << "another frame may follow";
  }
  {
    auto f = make({{}, ""}, json{{"type", "integer"}});  // a top-level number in frame b
    for (int32_t id : {1, 6}) f->accept(id);
    EXPECT_FALSE(f->forced_rest()) << "the number may take more digits";
  }
}

// Several frames (parallel tool calls): after a complete frame, `next` starts another (here
// "\n" + its prefix), close (here "]") ends them; the end is allowed only after the close.
// Negative controls: without `next` a second frame is refused; a frame's bytes after the close
// are refused; texts that are prefixes of each other are refused at construction.
TEST(JsonSchema, FramedFilterRepeatsFramesUntilTheClose) {
  const std::vector<std::string> pieces = {"<a>", "<b>", "{}", "</a>", "</b>", "\n<a>", "\n<b>", "]", "\n", ""};
  const int32_t eos = static_cast<int32_t>(pieces.size()) - 1;
  auto frames = [] {
    std::vector<JsonFrame> f;
    f.push_back({"<a>", std::make_shared<const JsonSchema>(JsonSchema::any_object()), "</a>"});
    f.push_back({"<b>", std::make_shared<const JsonSchema>(JsonSchema::any_object()), "</b>"});
    return f;
  };
  auto make = [&](JsonFrameRepeat rep) {
    return std::make_unique<FramedJsonTokenFilter>(
        frames(), [&](int32_t id) -> std::string_view { return pieces[static_cast<size_t>(id)]; },
        [&](int32_t id) { return id == eos; }, std::move(rep));
  };
  {
    auto f = make({{"\n<a>", "\n<b>"}, "]"});
    for (int32_t id : {0, 2, 3}) f->accept(id);  // <a>{}</a>
    EXPECT_EQ(f->calls(), 1);
    EXPECT_FALSE(f->allowed(eos)) << "the close first";
    EXPECT_TRUE(f->allowed(6)) << "another frame";
    EXPECT_TRUE(f->allowed(8)) << "the separator alone: a next continues it";
    EXPECT_FALSE(f->allowed(0)) << "a frame without its separator";
    for (int32_t id : {6, 2, 4}) f->accept(id);  // \n<b>{}</b>
    EXPECT_EQ(f->calls(), 2);
    EXPECT_TRUE(f->allowed(7));
    f->accept(7);
    EXPECT_TRUE(f->complete());
    EXPECT_TRUE(f->allowed(eos));
    EXPECT_FALSE(f->allowed(5)) << "nothing after the close";
  }
  {
    auto f = make({{"\n<a>", "\n<b>"}, ""});  // no close: the end after any frame
    for (int32_t id : {1, 2, 4}) f->accept(id);
    EXPECT_TRUE(f->allowed(eos));
    EXPECT_TRUE(f->allowed(5));
    EXPECT_FALSE(f->allowed(7));
  }
  {
    auto f = make({{}, "]"});  // one frame, then the close
    for (int32_t id : {1, 2, 4}) f->accept(id);
    EXPECT_FALSE(f->allowed(5)) << "no second frame without next";
    EXPECT_FALSE(f->allowed(eos));
    EXPECT_TRUE(f->allowed(7));
  }
  EXPECT_THROW(make({{"\n<a>"}, ""}), Error) << "one next per frame";
  EXPECT_THROW(make({{"\n<a>", "\n<a>x"}, ""}), Error) << "a next that begins another";
  EXPECT_THROW(make({{"]x", "\n<b>"}, "]"}), Error) << "the close begins a next";
}

}  // namespace
}  // namespace sluice
