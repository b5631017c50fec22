// tests/fuzz/request_seeds: writes the seed corpus of request_libfuzzer — request bodies that
// reach every field the server reads, the way OpenAI clients send them.
//
//   request_seeds OUT_DIR [SHARED_DIR]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: request_seeds OUT_DIR [SHARED_DIR]\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  std::filesystem::create_directories(out);
  const char* seeds[] = {
      R"({"model": "m", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9,
          "top_k": 40, "min_p": 0.05, "seed": 42, "stop": ["\n", "END"], "presence_penalty": 0.5,
          "frequency_penalty": -0.5, "stream": true, "stream_options": {"include_usage": true}, "logprobs": 3})",
      R"({"prompt": [[1, 2, 3, 4]], "max_tokens": 2.0, "echo": false, "best_of": 1, "n": 1, "suffix": null})",
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content":
          [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}], "max_completion_tokens": 8,
          "logprobs": true, "top_logprobs": 2, "tool_choice": "auto", "tools": [{"type": "function",
          "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})",
      R"({"messages": [{"role": "developer", "content": "x"}, {"role": "assistant", "content": null,
          "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
          {"role": "tool", "tool_call_id": "1", "content": "42"}], "response_format": {"type": "json_schema",
          "json_schema": {"name": "t", "schema": {"type": "object", "properties": {"a": {"type": "integer"},
          "b": {"enum": ["x", "y"]}}, "required": ["a"], "additionalProperties": false}}}})",
      R"({"messages": [{"role": "user", "content": "q"}], "response_format": {"type": "json_object"},
          "logit_bias": {}, "user": "u", "ignore_eos": true, "repeat_penalty": 1.1})",
      R"({"messages": [{"role": "user", "content": "q"}], "tool_choice": "required", "parallel_tool_calls": false,
          "tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b",
          "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}}]})",
  };
  int n = 0;
  for (const char* s : seeds) std::ofstream(out / ("seed" + std::to_string(n++) + ".json")) << s;
  std::printf("request_seeds: %d seeds in %s\n", n, out.c_str());
  return 0;
}
