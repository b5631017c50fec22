// runtime/speculative: prompt-lookup drafting and the verify loop.
#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace sluice {

std::vector<int32_t> ngram_draft(std::span<const int32_t> history, const SpeculativeParams& p, int max_tokens) {
  const auto n_hist = static_cast<ptrdiff_t>(history.size());
  if (max_tokens <= 0) return {};
  for (int n = p.ngram_max; n >= std::max(1, p.ngram_min); --n) {
    if (n_hist < n + 1) continue;
    const auto suffix = history.subspan(static_cast<size_t>(n_hist - n));
    // The latest earlier occurrence that has at least one token after it.
    for (ptrdiff_t i = n_hist - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), history.begin() + i)) continue;
      const ptrdiff_t from = i + n, take = std::min<ptrdiff_t>(max_tokens, n_hist - from);
      return {history.begin() + from, history.begin() + from + take};
    }
  }
  return {};
}

ModelDrafter::ModelDrafter(const Model& target, const Model& draft, Backend& backend, const KvCacheOptions& kv)
    : s_(draft, backend, kv) {
  const Vocab& a = target.tokenizer().vocab();
  const Vocab& b = draft.tokenizer().vocab();
  if (a.tokens.size() != b.tokens.size())
    fail("draft model: its vocabulary has ", b.tokens.size(), " tokens, the model's ", a.tokens.size(),
         " (speculative decoding needs the same vocabulary)");
  for (size_t i = 0; i < a.tokens.size(); ++i)
    if (a.tokens[i] != b.tokens[i])
      fail("draft model: token ", i, " is '", b.tokens[i], "' there and '", a.tokens[i],
           "' in the model (speculative decoding needs the same vocabulary)");
}

std::vector<int32_t> ModelDrafter::draft(std::span<const int32_t> history, int max_tokens) {
  if (max_tokens <= 0 || history.empty()) return {};
  // Keep the longest prefix both agree on, evaluate the rest; the draft context is the target's.
  size_t common = 0;
  while (common < evaluated_.size() && common < history.size() && evaluated_[common] == history[common]) ++common;
  if (common == history.size()) --common;  // the last token's logits are needed: evaluate it again
  const int64_t reached = s_.memory().seq_rewind(s_.seq(), static_cast<int64_t>(common));
  evaluated_.resize(static_cast<size_t>(reached));
  const int room = static_cast<int>(std::min<int64_t>(max_tokens, s_.n_ctx() - static_cast<int64_t>(history.size())));
  if (room <= 0) return {};
  std::span<const float> logits = s_.eval(history.subspan(evaluated_.size()));
  evaluated_.assign(history.begin(), history.end());
  std::vector<int32_t> out;
  for (int i = 0; i < room; ++i) {
    out.push_back(argmax(logits));
    if (i + 1 == room) break;
    logits = s_.eval(std::span<const int32_t>(&out.back(), 1));
    evaluated_.push_back(out.back());
  }
  return out;
}

GenerationStats run_speculative(Session& s, std::string_view prompt, const GenerateParams& p, Drafter& drafter,
                                int draft_max, const Generator::TextFn& on_text, SpeculativeStats* stats) {
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  if (draft_max < 0) fail("speculative: draft_max must be >= 0, got ", draft_max);
  const Tokenizer& tok = s.model().tokenizer();
  const auto V = static_cast<int32_t>(s.model().hparams().n_vocab);
  SpeculativeStats st;
  s.reset();
  std::vector<int32_t> history = tokenize_prompt(tok, prompt, p, s.n_ctx());

  Generation g(tok, p, history, on_text);
  const auto t0 = Clock::now();
  std::span<const float> rows = s.eval(history);
  const auto t1 = Clock::now();
  g.stats().prompt_seconds = secs(t0, t1);
  // `pending`: a kept token not evaluated yet (its position is s.n_past()).
  int32_t pending = g.next(rows.data(), V);
  const auto ended_early = [&] { return g.ended() && g.stats().stop != StopReason::max_tokens; };
  while (pending >= 0 && !ended_early()) {
    history.push_back(pending);
    if (s.n_past() >= s.n_ctx()) {
      g.end(StopReason::context_full);  // sampled from valid logits: it stays, unevaluated
      break;
    }
    const int64_t base = s.n_past();
    const int room = static_cast<int>(std::min<int64_t>(
        {draft_max, static_cast<int64_t>(p.n_predict - g.stats().n_generated), s.n_ctx() - base - 1}));
    std::vector<int32_t> batch{pending};
    if (!g.ended()) {
      const std::vector<int32_t> drafts = drafter.draft(history, room);
      batch.insert(batch.end(), drafts.begin(), drafts.end());
    }
    const size_t n_drafts = batch.size() - 1;
    // A model with recurrent state can only rewind to a checkpoint (a no-op for the others).
    if (n_drafts > 0) s.memory().seq_checkpoint(s.seq());
    rows = s.eval(batch, /*all_logits=*/n_drafts > 0);
    ++st.steps;
    st.drafted += static_cast<int64_t>(n_drafts);
    if (g.ended()) break;  // that was the last token (max tokens), evaluated like plain decoding's

    // Row i holds the logits after batch[i]: sample there; a draft equal to the sample is kept.
    size_t kept = 0;
    pending = -1;
    for (size_t i = 0; i <= n_drafts; ++i) {
      const int32_t t = g.next(rows.data() + static_cast<size_t>(i) * static_cast<size_t>(V), V);
      if (t < 0 || ended_early()) break;
      if (i < n_drafts && t == batch[i + 1]) {
        ++kept;
        history.push_back(t);
        if (g.ended()) break;  // max tokens on a kept draft: it is evaluated already
        continue;
      }
      pending = t;  // the first sample that differs from its draft (or follows the last one)
      break;
    }
    st.accepted += static_cast<int64_t>(kept);
    // The cache keeps batch[0] and the kept drafts; the rest is rolled back.
    const int64_t want = base + 1 + static_cast<int64_t>(kept);
    if (s.n_past() > want) {
      const int64_t reached = s.memory().seq_rewind(s.seq(), want);
      if (reached < want) {
        s.eval(std::span<const int32_t>(history).subspan(static_cast<size_t>(reached),
                                                         static_cast<size_t>(want - reached)));
        st.replayed += want - reached;
      }
    }
  }
  g.stats().generate_seconds = secs(t1, Clock::now());
  if (stats) *stats = st;
  return g.stats();
}

}  // namespace sluice
