// server/responses: the JSON bodies the OpenAI API answers with — a whole chat.completion /
// text_completion, the chunks of a stream, usage, logprobs — built from a job's text and
// end (server/engine.h). Generated text may hold bytes that are not UTF-8 (a token can end
// inside a character); dump() writes them as U+FFFD instead of failing.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/engine.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {

using ojson = nlohmann::ordered_json;

// What every object of one response shares.
struct ResponseHead {
  bool chat = true;
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
};

// OpenAI's finish_reason: stop (end of generation, a stop string, a cancel), length (max
// tokens, context full).
const char* finish_reason(StopReason r);
ojson usage_json(const JobResult& r);
// Chat: {"content": [{token, logprob, bytes, top_logprobs}]}; completions: the legacy
// {tokens, token_logprobs, top_logprobs, text_offset} (text_offset from `offset`).
ojson logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lp, bool chat, size_t offset = 0);
// The whole answer of a non-streamed request. `message` (chat): the assistant message parsed
// from the text (runtime/tool_calls.h), whose tool_calls make finish_reason "tool_calls";
// null: the text as content.
ojson full_response(const ResponseHead& h, const std::string& text, const ojson& logprobs, const JobResult& r,
                    const ojson& message = nullptr);
// One stream chunk: a delta of text (and its logprobs), or the closing one (finish set).
// `role`: the chat stream's first chunk names the assistant role. `reasoning` (chat): the
// delta's reasoning_content, sent before its content (which is then left out when empty).
ojson stream_chunk(const ResponseHead& h, const std::string& text, const ojson& logprobs, const char* finish,
                   bool role = false, const std::string& reasoning = {});
// A chat stream's tool calls, sent once the generation has ended and they parsed: the
// message's tool_calls array, each with its index.
ojson tool_calls_chunk(const ResponseHead& h, const ojson& tool_calls);
// The chunk after the closing one when stream_options.include_usage: no choices, the usage.
ojson usage_chunk(const ResponseHead& h, const JobResult& r);
// JSON text with invalid UTF-8 replaced, never throwing.
std::string dump(const ojson& j);

}  // namespace sluice::server
