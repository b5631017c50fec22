// runtime/speculative: speculative decoding. Each step a drafter proposes up to K tokens —
// prompt lookup (NgramDrafter: the tokens that followed the latest earlier occurrence of the
// text's last n tokens, no extra model) or a small draft model with the same vocabulary
// (ModelDrafter: its greedy continuation); the token just
// sampled and the drafts are evaluated in ONE forward step with every row's logits, and the
// drafts are checked in order by sampling from those rows with the same Generation rules (and
// RNG draws) as plain decoding: a draft is kept while it equals the token sampled at its
// position; the first mismatch keeps the sampled token instead and the rows after it are
// rolled back (Memory::seq_rewind; a model with recurrent state lands on the checkpoint taken
// before the step and evaluates the kept tokens again).
//
// Both drafters propose fixed tokens (the draft model drafts greedily), and with a draft that
// is a single fixed token, "sample from the target, keep the draft if equal"
// is exactly the standard acceptance rule (accept with probability p(draft), else draw from p
// without it), so sampled output is distributed as plain sampling — with the same seed it is
// the same text whenever the verify rows' logits equal plain decode's — and greedy output is
// plain greedy's. Where the two evaluations round differently (a batch of K+1 rows against one
// row) a near-tie can flip: tests compare tokens on the real model.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/generator.h"
#include "runtime/session.h"

namespace sluice {

struct SpeculativeParams {
  int draft_max = 8;  // K: drafts per step (0: plain decoding through the same loop)
  int ngram_max = 4;  // the longest suffix looked up first ...
  int ngram_min = 2;  // ... down to this one
};

struct SpeculativeStats {
  int64_t steps = 0;     // forward steps after the prompt (each verifies one batch)
  int64_t drafted = 0;   // draft tokens evaluated
  int64_t accepted = 0;  // of them, kept
  int64_t replayed = 0;  // tokens evaluated again after a rollback to a checkpoint (recurrent models)
  double acceptance() const { return drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0; }
};

// Up to max_tokens tokens that followed the most recent earlier occurrence of the last n
// tokens of `history`, for n = ngram_max down to ngram_min (the first n that matches wins).
std::vector<int32_t> ngram_draft(std::span<const int32_t> history, const SpeculativeParams& p, int max_tokens);

// What proposes the drafts: up to max_tokens tokens to follow `history` (the prompt and every
// kept token so far, the last one not yet evaluated by the target).
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::vector<int32_t> draft(std::span<const int32_t> history, int max_tokens) = 0;
};

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const SpeculativeParams& p) : p_(p) {}
  std::vector<int32_t> draft(std::span<const int32_t> history, int max_tokens) override {
    return ngram_draft(history, p_, max_tokens);
  }

 private:
  SpeculativeParams p_;
};

// A draft model's greedy continuation. Its session keeps what it evaluated, so each step
// evaluates only the tokens the target kept since (rewinding past rejected drafts).
class ModelDrafter final : public Drafter {
 public:
  // Throws sluice::Error when the draft's vocabulary differs from the target's (token ids must
  // mean the same text in both).
  ModelDrafter(const Model& target, const Model& draft, Backend& backend, const KvCacheOptions& kv);
  std::vector<int32_t> draft(std::span<const int32_t> history, int max_tokens) override;

 private:
  Session s_;
  std::vector<int32_t> evaluated_;  // the tokens at positions 0..n_past of s_
};

// Generator::run with drafting: the same prompt handling, stop rules, text and errors.
GenerationStats run_speculative(Session& s, std::string_view prompt, const GenerateParams& p, Drafter& drafter,
                                int draft_max, const Generator::TextFn& on_text = {},
                                SpeculativeStats* stats = nullptr);

}  // namespace sluice
