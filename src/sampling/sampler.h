// sampling/sampler: the seeded RNG and the sampler chain that turns one row of logits into a
// token id: penalties -> top_k -> top_p -> min_p -> temperature -> dist, with the semantics of
// llama.cpp's llama_sampler_* stages (src/llama-sampling.cpp), and greedy argmax for temp <= 0.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice {

// Index of the largest logit, ties to the lowest id (llama.cpp's greedy rule); NaNs never win.
int32_t argmax(std::span<const float> logits);

// SplitMix64-seeded xoshiro256** (https://prng.di.unimi.it/). Every operation is defined here
// down to the bit, so a seed gives the same stream on every platform and standard library;
// std::uniform_real_distribution / std::discrete_distribution are implementation-defined and
// are not used anywhere in sampling.
class Rng {
 public:
  explicit Rng(uint64_t seed) { seed_with(seed); }
  void seed_with(uint64_t seed);
  uint64_t next_u64();
  // Uniform in [0, 1): the top 53 bits of next_u64() scaled by 2^-53, so every value is an exact
  // double and 1.0 is never returned.
  double next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_[4];
};

struct SamplerParams {
  float temp = 0.8f;                  // logits /= temp; <= 0 selects greedy argmax (ties -> lowest id)
  int top_k = 40;                     // keep the k largest logits; <= 0 keeps all
  float top_p = 0.95f;                // keep the smallest prefix of the sorted probs with sum >= p; >= 1 off
  float min_p = 0.05f;                // keep tokens with p >= min_p * p_max; <= 0 off
  float repeat_penalty = 1.0f;        // recent tokens: logit > 0 -> logit / r, logit <= 0 -> logit * r; 1 off
  float presence_penalty = 0.0f;      // recent tokens: logit -= presence (once, if seen at all)
  float frequency_penalty = 0.0f;     // recent tokens: logit -= count * frequency
  int penalty_last_n = 64;            // window of accepted tokens the penalties look at; 0 off, < 0 all
  uint64_t seed = 0x736c75696365ull;  // fixed by default so runs reproduce; callers may randomize
};

// One entry of the candidate array the stages filter and rewrite (llama_token_data).
struct TokenCandidate {
  int32_t id;
  float logit;
  float p;  // filled by softmax(); stale after a stage changes logits
};

struct Candidates {
  std::vector<TokenCandidate> data;
  bool sorted = false;  // data is in descending logit order (ties: ascending id)

  void sort_desc();
  // The entries of logits[0, n) that keep_top(k) would look at after its threshold pass over
  // the whole vocabulary, made without writing the whole vocabulary as candidates first (a
  // sampled token's ~1.8 MB pass at 151k entries): keep_top(k) then keeps the same k, in the
  // same order. Unsorted. k = 0: every entry.
  void assign_top(const float* logits, size_t n, size_t k);
  // Keeps the k first entries of the sorted order, sorted (the same entries and order as
  // sort_desc() then truncating, without sorting the rest).
  void keep_top(size_t k);
  // p = softmax(logit) over the current entries, computed in double and stored as float. Sorts.
  void softmax();
  // Walks the entries in sorted order with p = softmax(logit) over ALL current entries (what
  // softmax() then a loop would see), sorting only as far as the walk goes: visit(i) sees
  // data[0, i] sorted, their p set, and returns true to stop there. Returns the index it stopped
  // at, or data.size() (everything sorted then). Over a 151k vocabulary a nucleus of a few
  // hundred entries costs a selection instead of a full sort; p past the stop is stale there.
  // Up to kWalkFullSortMax entries it is softmax() and a loop: every p set.
  static constexpr size_t kWalkFullSortMax = 4096;
  template <class Visit>
  size_t walk_sorted(Visit&& visit);

 private:
  // Makes data[from, to) the next entries of the sorted order, sorted, given data[0, from) are.
  void sort_range(size_t from, size_t to);
  // The largest logit and the sum of exp(logit - max) over all entries, in double; false when
  // the largest logit is not finite (softmax() has the rule for that).
  bool exp_sum(double& max_logit, double& sum) const;
};

template <class Visit>
size_t Candidates::walk_sorted(Visit&& visit) {
  double max_logit = 0, sum = 0;
  if (sorted || data.size() <= kWalkFullSortMax || !exp_sum(max_logit, sum)) {
    softmax();
    for (size_t i = 0; i < data.size(); ++i)
      if (visit(i)) return i;
    return data.size();
  }
  size_t done = 0;  // data[0, done) are sorted
  for (size_t i = 0; i < data.size(); ++i) {
    if (i == done) {
      const size_t next = std::min(data.size(), std::max<size_t>(256, 4 * done));
      sort_range(done, next);
      done = next;
    }
    data[i].p = static_cast<float>(std::exp(static_cast<double>(data[i].logit) - max_logit) / sum);
    if (visit(i)) return i;
  }
  sorted = true;
  return data.size();
}

// One stage of the chain. accept()/reset() let stateful stages (penalties) track history.
class SamplerStage {
 public:
  virtual ~SamplerStage() = default;
  virtual std::string_view name() const = 0;
  virtual void apply(Candidates& c) = 0;
  virtual void accept(int32_t /*token*/) {}
  virtual void reset() {}
};

// Repetition / frequency / presence penalties over the last `last_n` accepted tokens, as
// llama.cpp's llama_sampler_penalties: for a token seen `count` > 0 times,
//   logit = logit <= 0 ? logit * repeat : logit / repeat;  logit -= count * freq + presence.
// Callers should accept() the prompt tokens as well as generated ones, as llama-cli does.
class PenaltiesStage final : public SamplerStage {
 public:
  PenaltiesStage(int last_n, float repeat, float frequency, float presence);
  std::string_view name() const override { return "penalties"; }
  void apply(Candidates& c) override;
  void accept(int32_t token) override;
  void reset() override;
  bool active() const;

 private:
  int last_n_;
  float repeat_, frequency_, presence_;
  std::deque<int32_t> history_;              // newest at the back, at most last_n_ entries
  std::unordered_map<int32_t, int> counts_;  // occurrences of each token in history_
};

class TopKStage final : public SamplerStage {
 public:
  explicit TopKStage(int k) : k_(k) {}
  std::string_view name() const override { return "top_k"; }
  void apply(Candidates& c) override;

 private:
  int k_;
};

// Nucleus sampling (Holtzman et al. 2019, https://arxiv.org/abs/1904.09751): sort by prob, keep
// entries up to and including the first one where the running sum reaches p.
class TopPStage final : public SamplerStage {
 public:
  explicit TopPStage(float p) : p_(p) {}
  std::string_view name() const override { return "top_p"; }
  void apply(Candidates& c) override;

 private:
  float p_;
};

// min-p (Nguyen et al. 2024, https://arxiv.org/abs/2407.01082): keep p_i >= min_p * p_max,
// tested as logit_i >= logit_max + ln(min_p), which needs no softmax.
class MinPStage final : public SamplerStage {
 public:
  explicit MinPStage(float p) : p_(p) {}
  std::string_view name() const override { return "min_p"; }
  void apply(Candidates& c) override;

 private:
  float p_;
};

class TemperatureStage final : public SamplerStage {
 public:
  explicit TemperatureStage(float t) : t_(t) {}
  std::string_view name() const override { return "temperature"; }
  void apply(Candidates& c) override;

 private:
  float t_;
};

// A constraint on which tokens may come next (sampling/json_schema.h: JSON). Consulted after
// the chain picks a token: when the pick is not allowed, every disallowed token is masked and
// the pick is made again (llama.cpp's lazy grammar check; for greedy the same as masking first).
class TokenFilter {
 public:
  virtual ~TokenFilter() = default;
  virtual bool allowed(int32_t id) const = 0;
  virtual void accept(int32_t id) = 0;  // the token was kept: advance
  // The one text the constraint still allows, end included, when no choice is left (a forced
  // tool call's markup after its arguments): the generation writes it at once and ends
  // instead of sampling it token by token. nullopt while a choice remains.
  virtual std::optional<std::string> forced_rest() const { return std::nullopt; }
};

class Sampler {
 public:
  explicit Sampler(SamplerParams params);

  // Picks a token from logits[0 .. n_vocab). Does not accept() it: the caller does, after it
  // decides to keep the token (as with llama_sampler_sample + llama_sampler_accept).
  int32_t sample(const float* logits, int32_t n_vocab);
  // Records a token in the penalty history (prompt tokens too) and advances the filter.
  void accept(int32_t token);
  // Constrains every later sample() (set it after accepting the prompt: the filter sees only
  // generated tokens). sample() throws sluice::Error when the filter allows no token at all.
  void set_filter(std::unique_ptr<TokenFilter> f) { filter_ = std::move(f); }
  TokenFilter* filter() const { return filter_.get(); }
  // Clears the history and restarts the RNG from the seed.
  void reset();

  const SamplerParams& params() const { return params_; }
  // The candidates left after the last sample()'s filtering stages, with p normalized over them
  // (empty after a greedy sample; over Candidates::kWalkFullSortMax of them, p only as far as
  // the draw walked). For tests and logprob reporting.
  const Candidates& last_candidates() const { return cur_; }

 private:
  SamplerParams params_;
  Rng rng_;
  std::vector<std::unique_ptr<SamplerStage>> stages_;  // in chain order, before dist
  PenaltiesStage* penalties_ = nullptr;                // owned by stages_
  Candidates cur_;
  std::unique_ptr<TokenFilter> filter_;
  std::vector<float> masked_;  // logits with the filter's disallowed tokens at -inf

  int32_t sample_unfiltered(const float* logits, int32_t n_vocab);
};

}  // namespace sluice
