// server/responses: OpenAI's response objects, field for field as its API reference gives them.
#include "server/responses.h"

namespace sluice::server {

const char* finish_reason(StopReason r) {
  switch (r) {
    case StopReason::max_tokens:
    case StopReason::context_full: return "length";
    default: return "stop";
  }
}

ojson usage_json(const JobResult& r) {
  ojson u;
  u["prompt_tokens"] = r.n_prompt;
  u["completion_tokens"] = r.n_generated;
  u["total_tokens"] = r.n_prompt + r.n_generated;
  u["prompt_tokens_details"] = {{"cached_tokens", r.n_cached}};
  return u;
}

namespace {

ojson bytes_of(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

ojson logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lp, bool chat, size_t offset) {
  if (chat) {
    ojson content = ojson::array();
    for (const TokenLogprob& t : lp) {
      const std::string& piece = tok.token_to_piece(t.id);
      ojson e = {{"token", piece}, {"logprob", t.logprob}, {"bytes", bytes_of(piece)}};
      ojson top = ojson::array();
      for (const auto& [id, l] : t.top) {
        const std::string& p = tok.token_to_piece(id);
        top.push_back({{"token", p}, {"logprob", l}, {"bytes", bytes_of(p)}});
      }
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return {{"content", std::move(content)}};
  }
  ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(), offs = ojson::array();
  for (const TokenLogprob& t : lp) {
    const std::string& piece = tok.token_to_piece(t.id);
    tokens.push_back(piece);
    lps.push_back(t.logprob);
    ojson top = ojson::object();
    for (const auto& [id, l] : t.top) top[tok.token_to_piece(id)] = l;
    tops.push_back(std::move(top));
    offs.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

namespace {

ojson head_json(const ResponseHead& h, bool chunk) {
  ojson j;
  j["id"] = h.id;
  j["object"] = h.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  j["created"] = h.created;
  j["model"] = h.model;
  j["system_fingerprint"] = "sluice";
  return j;
}

}  // namespace

ojson full_response(const ResponseHead& h, const std::string& text, const ojson& logprobs, const JobResult& r,
                    const ojson& message) {
  ojson j = head_json(h, false);
  ojson c;
  c["index"] = 0;
  const bool calls = message.is_object() && message.contains("tool_calls");
  if (h.chat)
    c["message"] = message.is_object() ? message : ojson{{"role", "assistant"}, {"content", text}};
  else
    c["text"] = text;
  c["logprobs"] = logprobs;
  c["finish_reason"] = calls ? "tool_calls" : finish_reason(r.stop);
  j["choices"] = ojson::array({c});
  j["usage"] = usage_json(r);
  return j;
}

ojson stream_chunk(const ResponseHead& h, const std::string& text, const ojson& logprobs, const char* finish, bool role,
                   const std::string& reasoning) {
  ojson j = head_json(h, true);
  ojson c;
  c["index"] = 0;
  if (h.chat) {
    ojson d = ojson::object();
    if (role) d["role"] = "assistant";
    if (!reasoning.empty()) d["reasoning_content"] = reasoning;
    if (!finish && (reasoning.empty() || !text.empty())) d["content"] = text;
    c["delta"] = std::move(d);
  } else {
    c["text"] = text;
  }
  c["logprobs"] = logprobs;
  c["finish_reason"] = finish ? ojson(finish) : ojson();
  j["choices"] = ojson::array({c});
  return j;
}

ojson tool_calls_chunk(const ResponseHead& h, const ojson& tool_calls) {
  ojson j = head_json(h, true);
  ojson calls = ojson::array();
  for (size_t i = 0; i < tool_calls.size(); ++i) {
    ojson c = tool_calls[i];
    c["index"] = i;
    calls.push_back(std::move(c));
  }
  j["choices"] = ojson::array(
      {{{"index", 0}, {"delta", {{"tool_calls", calls}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  return j;
}

ojson usage_chunk(const ResponseHead& h, const JobResult& r) {
  ojson j = head_json(h, true);
  j["choices"] = ojson::array();
  j["usage"] = usage_json(r);
  return j;
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

}  // namespace sluice::server
