// tests/fuzz/template_libfuzzer: libFuzzer entry point for the chat-template interpreter
// (src/template). Built by the fuzz preset and run by scripts/fuzz SECONDS template, with the 55
// ../shared/chat-templates as seeds (template_seeds.cpp); by hand:
//   cmake --preset fuzz && cmake --build --preset fuzz --target template_libfuzzer
//   build/fuzz/template_libfuzzer -max_len=65536 CORPUS_DIR/ SEED_DIR/
// Each input is parsed as a template and, if it parses, rendered over a small conversation with
// tools, with tight sandbox limits. Contract: it renders or throws sluice::Error (TemplateError);
// anything else (another exception, a crash, a leak, UB, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "template/chat_template.h"

namespace {

const nlohmann::ordered_json& variables() {
  static const nlohmann::ordered_json v = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi ✓"},
      {"role": "assistant", "content": "", "reasoning_content": "think",
       "tool_calls": [{"id": "abc123XYZ", "type": "function",
                       "function": {"name": "f", "arguments": {"x": 1, "y": [true, null, 2.5]}}}]},
      {"role": "tool", "tool_call_id": "abc123XYZ", "content": "{\"ok\": 1}"},
      {"role": "user", "content": [{"type": "text", "text": "part"}]}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::ChatTemplateOptions opt;
  opt.clock = [] {
    std::tm tm{};
    tm.tm_year = 126;
    tm.tm_mday = 1;
    return tm;
  };
  opt.max_output = 1 << 20;
  opt.max_iterations = 20000;
  opt.max_call_depth = 50;
  try {
    const sluice::ChatTemplate t(std::string(reinterpret_cast<const char*>(data), size), "fuzz", opt);
    (void)t.render(variables());
  } catch (const sluice::Error&) {
    // A clean rejection.
  } catch (...) {
    std::abort();  // any other exception is a bug
  }
  return 0;
}
