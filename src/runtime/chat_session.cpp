// runtime/chat_session: the conversation, the prompt cache's prefix reuse, one turn's decode
// loop (Generation's per-token rules over this session), and the reasoning/answer split of
// the stream.
#include "runtime/chat_session.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace sluice {

using ojson = nlohmann::ordered_json;

ChatSession::ChatSession(Session& s, const ChatFormat& fmt, GenerateParams p)
    : s_(s),
      fmt_(fmt),
      p_(std::move(p)),
      tool_format_(detect_tool_call_format(fmt.source())),
      markers_(detect_reasoning_markers(fmt.source())) {
  s_.reset();
}

void ChatSession::set_system(const std::string& text) {
  const bool has = !messages_.empty() && messages_[0].value("role", "") == "system";
  if (has) messages_.erase(messages_.begin());
  system_ = text;
  if (!text.empty()) messages_.insert(messages_.begin(), ojson{{"role", "system"}, {"content", text}});
}

void ChatSession::reset() {
  messages_ = ojson::array();
  set_system(system_);
}

void ChatSession::set_messages(const ojson& messages) {
  if (!messages.is_array()) fail("a conversation is a JSON array of messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) fail("message ", i, " has no string \"role\"");
    if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null())
      fail("message ", i, ": \"content\" is neither a string nor null");
  }
  messages_ = messages;
  const bool has_system = !messages_.empty() && messages_[0]["role"] == "system";
  system_ = has_system && messages_[0].contains("content") && messages_[0]["content"].is_string()
                ? messages_[0]["content"].get<std::string>()
                : std::string();
}

int64_t ChatSession::evaluate_prompt(const std::vector<int32_t>& ids, std::span<const float>& logits) {
  const auto n = static_cast<int64_t>(ids.size());
  int64_t keep = 0;
  if (reuse_) {
    const auto lcp = std::mismatch(ids.begin(), ids.end(), cached_.begin(), cached_.end()).first - ids.begin();
    // At least the last token is evaluated: its logits start the reply.
    keep = std::min<int64_t>(lcp, n - 1);
  }
  const int64_t reached = s_.rewind(keep);
  cached_.resize(static_cast<size_t>(reached));
  try {
    logits = s_.eval(std::span(ids).subspan(static_cast<size_t>(reached)));
  } catch (...) {
    // Whatever batches ran before the failure are in the session: keep the list in step.
    cached_.assign(ids.begin(), ids.begin() + std::min(n, s_.n_past()));
    throw;
  }
  cached_ = ids;
  s_.checkpoint();
  return reached;
}

ChatTurn ChatSession::send(const std::string& user_text, const TextFn& on_text, const CancelFn& cancelled) {
  messages_.push_back({{"role", "user"}, {"content", user_text}});
  try {
    return respond(on_text, cancelled);
  } catch (...) {
    messages_.erase(messages_.size() - 1);  // the turn did not happen
    throw;
  }
}

ChatTurn ChatSession::respond(const TextFn& on_text, const CancelFn& cancelled) {
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  const Tokenizer& tok = s_.model().tokenizer();

  const std::string prompt = fmt_.render(messages_, tools_, /*add_generation_prompt=*/true);
  const std::vector<int32_t> ids = fmt_.tokenize(prompt);
  if (ids.empty()) fail("the conversation renders to no tokens");
  if (static_cast<int64_t>(ids.size()) >= s_.n_ctx())
    fail("context full: the conversation is ", ids.size(), " tokens and the context holds ", s_.n_ctx());

  ChatTurn turn;
  turn.n_prompt = static_cast<int64_t>(ids.size());
  const bool opens = prompt_opens_reasoning(prompt, markers_);
  bool keep_streaming = true;
  ReasoningSplitter split(
      opens,
      [&](bool reasoning, std::string_view t) {
        if (keep_streaming && on_text) keep_streaming = on_text(t, reasoning);
      },
      markers_);
  Generation g(tok, p_, ids, [&](std::string_view t) {
    split.push(t);
    return keep_streaming;
  });

  const auto t0 = Clock::now();
  std::span<const float> logits;
  turn.n_reused = evaluate_prompt(ids, logits);
  turn.n_evaluated = turn.n_prompt - turn.n_reused;
  const auto t1 = Clock::now();
  g.stats().prompt_seconds = secs(t0, t1);
  DecodeHooks hooks;
  hooks.cancelled = cancelled;
  hooks.evaluated = [&](int32_t id) { cached_.push_back(id); };
  decode_loop(s_, g, logits, hooks);
  split.flush();
  s_.checkpoint();  // the next turn usually re-renders this reply as generated: resume after it
  g.stats().generate_seconds = secs(t1, Clock::now());
  turn.stats = g.stats();
  turn.text = g.text();

  ToolCallParseOptions po;
  po.parse_tool_calls = !tools_.is_null();
  po.reasoning_open = opens;
  po.reasoning_markers = markers_;
  po.tools = tools_;
  turn.parsed = parse_model_output(turn.text, tool_format_, po);
  ojson reply = turn.parsed.to_message();
  if (reply["content"].is_null()) reply["content"] = "";  // templates concatenate it
  messages_.push_back(std::move(reply));
  return turn;
}

}  // namespace sluice
