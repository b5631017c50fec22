// server/request: an OpenAI request body -> a checked CompletionRequest. Every field the
// server reads is type- and range-checked here, and a bad one is a 400 naming it (ApiError),
// so nothing past this point sees malformed input. Fields that change what the model must
// produce but are not implemented (n > 1, logit_bias, a schema keyword the JSON matcher cannot
// enforce, a tool's parameters schema it cannot enforce under a forced tool_choice, echo, ...)
// are refused with a 400 rather than ignored: a client must never get an answer that silently
// broke its constraints. Fields that only describe the caller (user, metadata, ...) are ignored.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/generator.h"
#include "sampling/json_schema.h"

namespace sluice::server {

struct CompletionRequest {
  bool chat = false;                // /v1/chat/completions (else /v1/completions)
  std::string model;                // as sent ("" when absent)
  nlohmann::ordered_json messages;  // chat: OpenAI's messages, each content a string (text parts joined)
  nlohmann::ordered_json tools;     // chat: the tools array, or null
  std::string prompt;               // completions: the prompt text...
  std::vector<int32_t> prompt_ids;  // ...or its token ids (prompt_is_ids)
  bool prompt_is_ids = false;
  GenerateParams gen;       // sampling, stop strings, logprobs; n_predict set by the server
  int64_t max_tokens = -1;  // -1: until the context is full
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  bool logprobs = false;       // report logprobs (gen.n_logprobs alternatives each)
  // response_format json_object / json_schema: the compiled constraint (null: free text).
  std::shared_ptr<const JsonSchema> schema;
  // tool_choice "required" (any of the tools) or {"type": "function", "function": {"name": N}}
  // (that one): the reply must be one call of these, each with its arguments' schema (the
  // function's `parameters`), enforced by constrained sampling. Empty: no call is forced.
  struct ForcedTool {
    std::string name;
    std::shared_ptr<const JsonSchema> arguments;
  };
  std::vector<ForcedTool> forced_tools;
  // tool_choice "required" with parallel_tool_calls not false (OpenAI's default true): the
  // forced reply may hold several calls, in the model's syntax for them.
  bool forced_parallel = false;
  // reasoning_format "none": the reasoning stays inline in the content; "deepseek"/"auto": it
  // goes to reasoning_content. Unset: the server's --reasoning-format.
  std::optional<bool> split_reasoning;
};

// Parses and checks `body` (token ids of a completions prompt against n_vocab). Throws
// ApiError: 400 for invalid JSON (invalid UTF-8 included), a wrong type or value (naming the
// field), or an unsupported feature.
CompletionRequest parse_completion_request(const std::string& body, bool chat, int32_t n_vocab);

}  // namespace sluice::server
