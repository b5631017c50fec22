// runtime/generator: the decode loop and the text stream (UTF-8 holding, stop strings).
#include "runtime/generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

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

void token_logprob(const float* logits, int32_t n_vocab, int32_t id, int n_top, TokenLogprob& out) {
  // log p_i = x_i - (max + log sum exp(x - max)), in double so a 150k-entry sum loses nothing.
  const float mx = *std::max_element(logits, logits + n_vocab);
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  out.id = id;
  out.logprob = static_cast<float>(logits[id] - lse);
  out.top.clear();
  const auto k = static_cast<size_t>(std::clamp<int64_t>(n_top, 0, n_vocab));
  if (k == 0) return;
  std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
  for (int32_t i = 0; i < n_vocab; ++i) ids[static_cast<size_t>(i)] = i;
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (size_t j = 0; j < k; ++j) out.top.emplace_back(ids[j], static_cast<float>(logits[ids[j]] - lse));
}

Generation::Generation(const Tokenizer& tok, const GenerateParams& p, std::span<const int32_t> prompt, TextFn on_text)
    : tok_(tok), p_(p), sampler_(p.sampler), stream_(p.stop), on_text_(std::move(on_text)) {
  for (int32_t id : prompt) sampler_.accept(id);            // penalties look at the prompt too, as llama-cli's do
  if (p.make_filter) sampler_.set_filter(p.make_filter());  // after the prompt: it sees generated tokens only
  st_.n_prompt = static_cast<int>(prompt.size());
}

void Generation::emit(const std::string& t) {
  if (!keep_ || t.empty()) return;
  text_ += t;
  if (on_text_) keep_ = on_text_(t);
}

void Generation::end(StopReason why) {
  if (ended()) return;
  st_.stop = why;
  emit(stream_.flush());
}

int32_t Generation::next(const float* logits, int32_t n_vocab) {
  if (ended()) return -1;
  if (st_.n_generated >= p_.n_predict) {
    end(StopReason::max_tokens);
    return -1;
  }
  const int32_t id = sampler_.sample(logits, n_vocab);
  sampler_.accept(id);
  if (!p_.ignore_eos && tok_.is_eog(id)) {
    end(StopReason::eos);
    return -1;
  }
  ++st_.n_generated;
  st_.tokens.push_back(id);
  // Before emit: whoever streams the text sees the logprobs of the tokens it came from.
  if (p_.n_logprobs >= 0) token_logprob(logits, n_vocab, id, p_.n_logprobs, st_.logprobs.emplace_back());
  emit(stream_.push(tok_.token_to_piece(id)));
  if (stream_.stopped())
    end(StopReason::stop_string);
  else if (!keep_)
    end(StopReason::callback);
  else if (const auto rest = sampler_.filter() ? sampler_.filter()->forced_rest() : std::nullopt) {
    // The constraint leaves one text (a forced tool call's closing markup): written now, as
    // the end the model would have reached, instead of a forward pass per token of it.
    emit(stream_.push(*rest));
    end(stream_.stopped() ? StopReason::stop_string : keep_ ? StopReason::eos : StopReason::callback);
  } else if (st_.n_generated >= p_.n_predict) {
    end(StopReason::max_tokens);
  }
  return id;
}

std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, std::string_view prompt, const GenerateParams& p,
                                     int64_t n_ctx) {
  std::vector<int32_t> ids = tok.encode(prompt, /*add_special=*/true, p.parse_special);
  if (ids.empty()) fail("the prompt has no tokens (an empty prompt needs a vocab that adds BOS)");
  if (static_cast<int64_t>(ids.size()) > n_ctx)
    fail("prompt of ", ids.size(), " tokens does not fit the context of ", n_ctx);
  return ids;
}

void decode_loop(Session& s, Generation& g, std::span<const float> logits, const DecodeHooks& hooks) {
  const auto n_vocab = static_cast<int32_t>(s.model().hparams().n_vocab);
  while (!g.ended()) {
    if (hooks.cancelled && hooks.cancelled()) {
      g.end(StopReason::callback);
      break;
    }
    if (hooks.before_sample) hooks.before_sample(g.stats().n_generated);
    const int32_t id = g.next(logits.data(), n_vocab);
    if (id < 0 || (g.ended() && g.stats().stop != StopReason::max_tokens)) break;
    if (s.n_past() >= s.n_ctx()) {
      // No room to evaluate this token; it was still sampled from valid logits, so it stays.
      g.end(StopReason::context_full);
      break;
    }
    const int32_t one[1] = {id};
    logits = s.eval(one);
    if (hooks.evaluated) hooks.evaluated(id);
  }
}

GenerationStats Generator::run(std::string_view prompt, const GenerateParams& p, const TextFn& on_text,
                               const StepFn& on_step) {
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  const Tokenizer& tok = s_.model().tokenizer();
  s_.reset();
  const std::vector<int32_t> ids = tokenize_prompt(tok, prompt, p, s_.n_ctx());

  Generation g(tok, p, ids, on_text);
  const auto t0 = Clock::now();
  std::span<const float> logits = s_.eval(ids);
  const auto t1 = Clock::now();
  g.stats().prompt_seconds = secs(t0, t1);
  DecodeHooks hooks;
  if (on_step)
    hooks.before_sample = [&](int n) {
      if (n < p.n_predict) on_step(n);
    };
  decode_loop(s_, g, logits, hooks);
  g.stats().generate_seconds = secs(t1, Clock::now());
  return g.stats();
}

}  // namespace sluice
