// runtime/reasoning: marker detection and the streaming reasoning/answer splitter.
#include "runtime/reasoning.h"

#include <algorithm>

#include "core/ascii.h"

namespace sluice {
namespace {

// Length of the longest suffix of `s` that is a proper prefix of `tag` (held back: the tag may
// be completed by the next piece).
size_t partial_tag_tail(std::string_view s, std::string_view tag) {
  for (size_t len = std::min(s.size(), tag.size() - 1); len > 0; --len)
    if (s.substr(s.size() - len) == tag.substr(0, len)) return len;
  return 0;
}

size_t trailing_space(std::string_view s, size_t end) {
  size_t n = 0;
  while (n < end && is_ascii_space(s[end - n - 1])) ++n;
  return n;
}

}  // namespace

ReasoningMarkers detect_reasoning_markers(std::string_view src) {
  auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
  // ByteDance-Seed-OSS, Command R7B / Cohere2, Gemma 4 (../shared/chat-templates).
  if (has("<seed:think>")) return {"<seed:think>", "</seed:think>"};
  if (has("<|START_THINKING|>")) return {"<|START_THINKING|>", "<|END_THINKING|>"};
  if (has("<|channel>thought")) return {"<|channel>thought", "<channel|>"};
  return {};
}

bool prompt_opens_reasoning(std::string_view prompt, const ReasoningMarkers& m) {
  const size_t open = prompt.rfind(m.open);
  if (open == std::string_view::npos || prompt.find(m.close, open) != std::string_view::npos) return false;
  const std::string_view rest = prompt.substr(open + m.open.size());
  return std::all_of(rest.begin(), rest.end(), is_ascii_space);
}

ReasoningSplitter::ReasoningSplitter(bool open, Out out, ReasoningMarkers m)
    : state_(open ? State::reasoning_start : State::start), out_(std::move(out)), m_(std::move(m)), saw_(open) {}

void ReasoningSplitter::push(std::string_view piece) {
  held_ += piece;
  for (;;) {
    switch (state_) {
      case State::start: {
        size_t lead = 0;
        while (lead < held_.size() && is_ascii_space(held_[lead])) ++lead;
        const std::string_view rest = std::string_view(held_).substr(lead);
        if (rest.starts_with(m_.open)) {
          held_.erase(0, lead + m_.open.size());
          state_ = State::reasoning_start;
          saw_ = true;
          continue;
        }
        if (std::string_view(m_.open).starts_with(rest)) return;  // still could be the marker
        state_ = State::answer;
        continue;
      }
      case State::reasoning_start: {  // the whitespace after the opening marker is not reasoning
        size_t lead = 0;
        while (lead < held_.size() && is_ascii_space(held_[lead])) ++lead;
        held_.erase(0, lead);
        if (held_.empty()) return;
        state_ = State::reasoning;
        continue;
      }
      case State::reasoning: {
        const size_t close = held_.find(m_.close);
        if (close != std::string::npos) {
          const size_t n = close - trailing_space(held_, close);
          if (n > 0) out_(true, std::string_view(held_).substr(0, n));
          held_.erase(0, close + m_.close.size());
          state_ = State::after_reasoning;
          continue;
        }
        // Hold a marker that may be starting, and the whitespace before it (it may end the block).
        size_t emit = held_.size() - partial_tag_tail(held_, m_.close);
        emit -= trailing_space(held_, emit);
        if (emit > 0) out_(true, std::string_view(held_).substr(0, emit));
        held_.erase(0, emit);
        return;
      }
      case State::after_reasoning: {  // templates write blank lines after the close
        size_t lead = 0;
        while (lead < held_.size() && is_ascii_space(held_[lead])) ++lead;
        held_.erase(0, lead);
        if (held_.empty()) return;
        state_ = State::answer;
        continue;
      }
      case State::answer:
        if (!held_.empty()) out_(false, held_);
        held_.clear();
        return;
    }
  }
}

void ReasoningSplitter::flush() {
  if (state_ == State::start && !held_.empty()) out_(false, held_);
  if (state_ == State::reasoning) {
    // Ended inside the block (max tokens): all of it is reasoning, trimmed as a closed one.
    const size_t n = held_.size() - trailing_space(held_, held_.size());
    if (n > 0) out_(true, std::string_view(held_).substr(0, n));
  }
  held_.clear();
}

ReasoningSplit split_reasoning(std::string_view text, bool open, const ReasoningMarkers& m) {
  ReasoningSplit r;
  ReasoningSplitter sp(
      open, [&](bool reasoning, std::string_view t) { (reasoning ? r.reasoning : r.answer) += t; }, m);
  sp.push(text);
  sp.flush();
  r.had_block = sp.saw_reasoning();
  return r;
}

}  // namespace sluice
