// runtime/reasoning: a reply's reasoning apart from its answer — the markers a template's
// model thinks between (<think>...</think> for Qwen3/QwQ/DeepSeek R1/SmolLM3 and most others;
// <seed:think> for Seed-OSS, <|START_THINKING|> for Command R7B/Cohere2, <|channel>thought ...
// <channel|> for Gemma 4), and the one splitter every caller uses: `sluice chat` shows the two
// apart as they stream (runtime/chat_session), the server sends them as reasoning_content and
// content (stream and non-stream alike), and parse_model_output (runtime/tool_calls) keeps the
// reasoning out of the content. One splitter, so a stream's pieces joined are exactly what the
// whole reply parses into.
//
// The rule (llama.cpp's --reasoning-format deepseek, DeepSeek's API): an opening marker at the
// very start of the reply (after whitespace), or a prompt that ends inside an opened block,
// starts the reasoning; the closing marker ends it. The reasoning is trimmed of the whitespace
// next to its markers, and so is the answer's start after the close. A reply that ends inside
// the block is all reasoning.
#pragma once
#include <functional>
#include <string>
#include <string_view>

namespace sluice {

struct ReasoningMarkers {
  std::string open = "<think>", close = "</think>";
};

// The markers a chat template's source writes reasoning between (<think> when it names none
// of the others).
ReasoningMarkers detect_reasoning_markers(std::string_view template_source);

// True when a rendered prompt ends inside an opened reasoning block (ignoring trailing
// whitespace): the generation starts in the reasoning (Qwen3 thinking, R1's "<｜Assistant｜><think>\n").
bool prompt_opens_reasoning(std::string_view prompt, const ReasoningMarkers& m = {});

// Splits streamed reply text into reasoning and answer as it arrives. A marker split across
// pieces, and whitespace that may turn out to sit next to a marker, is held until known.
class ReasoningSplitter {
 public:
  using Out = std::function<void(bool reasoning, std::string_view text)>;
  // open: the prompt already opened the block (prompt_opens_reasoning).
  ReasoningSplitter(bool open, Out out, ReasoningMarkers m = {});
  void push(std::string_view piece);
  void flush();  // the end of the reply: what is held back, as what it was (trailing space of the reasoning dropped)
  bool in_reasoning() const { return state_ == State::reasoning_start || state_ == State::reasoning; }
  bool saw_reasoning() const { return saw_; }  // a block was opened (by the reply or the prompt)

 private:
  enum class State { start, reasoning_start, reasoning, after_reasoning, answer };
  State state_;
  Out out_;
  ReasoningMarkers m_;
  std::string held_;
  bool saw_ = false;
};

// A whole reply through the splitter: the reasoning (empty without a block) and the answer.
struct ReasoningSplit {
  std::string reasoning, answer;
  bool had_block = false;
};
ReasoningSplit split_reasoning(std::string_view text, bool open, const ReasoningMarkers& m = {});

}  // namespace sluice
