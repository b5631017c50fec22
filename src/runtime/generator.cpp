// runtime/generator: the decode loop and the text stream (UTF-8 holding, stop strings).
#include "runtime/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace sluice {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::none: return "none";
    case StopReason::eos: return "eos";
    case StopReason::stop_string: return "stop_string";
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::context_full: return "context_full";
    case StopReason::callback: return "callback";
  }
  return "?";
}

size_t utf8_incomplete_tail(std::string_view s) {
  // Walk back over continuation bytes (10xxxxxx) to the lead byte; a sequence is at most 4 bytes.
  const size_t n = s.size();
  for (size_t k = 1; k <= std::min<size_t>(n, 4); ++k) {
    const auto c = static_cast<unsigned char>(s[n - k]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
    return need > k ? k : 0;
  }
  return 0;  // four continuation bytes in a row: invalid whatever follows
}

TextStream::TextStream(std::vector<std::string> stop) {
  for (auto& s : stop)
    if (!s.empty()) stop_.push_back(std::move(s));
}

size_t TextStream::stop_prefix_tail() const {
  size_t best = 0;
  for (const auto& s : stop_)
    for (size_t len = std::min(s.size() - 1, held_.size()); len > best; --len)
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        best = len;
        break;
      }
  return best;
}

std::string TextStream::push(std::string_view piece) {
  if (stopped_) return {};
  held_ += piece;
  // Every text emitted so far was held back while a stop string could start in it, so a stop
  // string can only start inside held_: searching it alone is enough. The earliest match wins.
  size_t cut = std::string::npos;
  for (const auto& s : stop_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  size_t n = held_.size() - std::max(utf8_incomplete_tail(held_), stop_prefix_tail());
  // A stop string that starts with a continuation byte could leave a split character before it.
  n -= utf8_incomplete_tail(std::string_view(held_).substr(0, n));
  std::string out = held_.substr(0, n);
  held_.erase(0, n);
  return out;
}

std::string TextStream::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

GenerationStats Generator::run(std::string_view prompt, const GenerateParams& p, const TextFn& on_text,
                               const StepFn& on_step) {
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  const Tokenizer& tok = s_.model().tokenizer();
  const auto n_vocab = static_cast<int32_t>(s_.model().hparams().n_vocab);
  s_.reset();
  const std::vector<int32_t> ids = tok.encode(prompt, /*add_special=*/true);
  if (ids.empty()) fail("the prompt has no tokens (an empty prompt needs a vocab that adds BOS)");
  if (static_cast<int64_t>(ids.size()) > s_.n_ctx())
    fail("prompt of ", ids.size(), " tokens does not fit the context of ", s_.n_ctx());

  // Penalties look at the prompt too, as llama-cli's do.
  Sampler sampler(p.sampler);
  for (int32_t id : ids) sampler.accept(id);
  TextStream text(p.stop);
  bool keep = true;  // false once on_text asked to stop; it is not called again after that
  auto emit = [&](const std::string& t) {
    if (keep && !t.empty() && on_text) keep = on_text(t);
  };

  GenerationStats st;
  st.n_prompt = static_cast<int>(ids.size());
  const auto t0 = Clock::now();
  std::span<const float> logits = s_.eval(ids);
  const auto t1 = Clock::now();
  st.prompt_seconds = secs(t0, t1);
  while (st.stop == StopReason::none) {
    if (st.n_generated >= p.n_predict) {
      st.stop = StopReason::max_tokens;
      break;
    }
    if (on_step) on_step(st.n_generated);
    const int32_t id = sampler.sample(logits.data(), n_vocab);
    sampler.accept(id);
    if (!p.ignore_eos && tok.is_eog(id)) {
      st.stop = StopReason::eos;
      break;
    }
    ++st.n_generated;
    st.tokens.push_back(id);
    emit(text.push(tok.token_to_piece(id)));
    if (text.stopped()) {
      st.stop = StopReason::stop_string;
    } else if (!keep) {
      st.stop = StopReason::callback;
    } else if (s_.n_past() >= s_.n_ctx()) {
      // No room to evaluate this token; it was still sampled from valid logits, so it stays.
      st.stop = st.n_generated >= p.n_predict ? StopReason::max_tokens : StopReason::context_full;
    } else {
      // Evaluated even after the last token: the session then holds the whole generation (a
      // caller could continue it), and the CLI's routing figures count one pass per token.
      const int32_t one[1] = {id};
      logits = s_.eval(one);
    }
  }
  emit(text.flush());
  st.generate_seconds = secs(t1, Clock::now());
  return st;
}

}  // namespace sluice
