// tests/fuzz/json_schema_libfuzzer: libFuzzer entry point for the JSON constraint
// (src/sampling/json_schema): the schema and the document a server request brings. Built by the
// fuzz preset and run by scripts/fuzz SECONDS json_schema. Input: a schema's JSON text, a NUL,
// then the document bytes. Contract: compile() returns or throws UnsupportedSchema; the matcher
// never crashes; and whenever it says a document is complete, an independent parser
// (nlohmann) parses it — a matcher that accepts broken JSON is a bug like a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "sampling/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view schema_text = nul == std::string_view::npos ? std::string_view("{}") : in.substr(0, nul);
  const std::string_view doc = nul == std::string_view::npos ? in : in.substr(nul + 1);
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(schema_text);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  sluice::JsonSchema s = sluice::JsonSchema::any_object();
  try {
    s = sluice::JsonSchema::compile(schema);
  } catch (const sluice::UnsupportedSchema&) {
    return 0;
  }
  sluice::JsonMatcher m(s);
  // Fed in pieces of growing length, as tokens arrive.
  size_t at = 0;
  for (size_t len = 1; at < doc.size(); len = len % 7 + 1) {
    const std::string_view piece = doc.substr(at, len);
    if (!m.feed(piece)) return 0;
    at += piece.size();
  }
  if (m.complete()) {
    try {
      (void)nlohmann::ordered_json::parse(doc);
    } catch (const nlohmann::json::exception& e) {
      std::abort();  // the matcher accepted a document nlohmann refuses
    }
  }
  return 0;
}
