// sampling/sampler.cpp: RNG, the chain stages and Sampler. Semantics read from llama.cpp
// src/llama-sampling.cpp (llama_sampler_{penalties,top_k,top_p,min_p,temp,dist,greedy}); the
// code is our own.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace sluice {

// ---- Rng ----

void Rng::seed_with(uint64_t seed) {
  // SplitMix64 spreads any seed (0 included) over the 256-bit state; xoshiro must not start
  // from all zeros, which SplitMix64 output never is for four consecutive draws.
  uint64_t x = seed;
  for (uint64_t& s : s_) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    s = z ^ (z >> 31);
  }
}

uint64_t Rng::next_u64() {
  const auto rotl = [](uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

// ---- Candidates ----

namespace {
// Descending logit, ties by ascending id: a total order, so the order, and so every later
// stage, is deterministic whatever the sort algorithm.
bool before(const TokenCandidate& a, const TokenCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Keeps, in one pass over at(0..n), the entries that can be among the k first of the sorted
// order, written to out[0, w) (returns w; out holds 4k + 64): a buffer at the front collects
// every entry not below the running threshold, and when it fills, a selection keeps its k first
// and raises the threshold to the k-th's logit (an entry below it is after k kept ones). Most of
// a vocabulary is then one compare per entry. out may be the source itself (w never passes i).
// Whether the pass pays before a selection of k among n (else the selection alone).
bool threshold_pass_pays(size_t n, size_t k) { return k > 0 && n > 8 * k + 512; }

template <class At>
size_t drop_below_top(TokenCandidate* out, size_t n, size_t k, At at) {
  const size_t cap = 4 * k + 64;
  float threshold = -std::numeric_limits<float>::infinity();
  size_t w = 0;
  for (size_t i = 0; i < n; ++i) {
    const TokenCandidate c = at(i);
    if (c.logit < threshold) continue;
    out[w++] = c;
    if (w == cap) {
      std::nth_element(out, out + k - 1, out + w, before);
      threshold = out[k - 1].logit;
      w = k;
    }
  }
  return w;
}
}  // namespace

void Candidates::sort_desc() {
  if (sorted) return;
  std::sort(data.begin(), data.end(), before);
  sorted = true;
}

void Candidates::assign_top(const float* logits, size_t n, size_t k) {
  sorted = false;
  if (!threshold_pass_pays(n, k)) {  // keep_top skips the pass too: every entry
    data.resize(n);
    for (size_t i = 0; i < n; ++i) data[i] = {static_cast<int32_t>(i), logits[i], 0.0f};
    return;
  }
  data.resize(4 * k + 64);
  data.resize(drop_below_top(data.data(), n, k, [&](size_t i) {
    return TokenCandidate{static_cast<int32_t>(i), logits[i], 0.0f};
  }));
}

void Candidates::keep_top(size_t k) {
  if (k >= data.size()) return sort_desc();
  if (!sorted) {
    // A threshold pass, a selection, then a sort of the k kept: over a 151k vocabulary at
    // k = 40 ~0.1 ms instead of a ~15 ms sort, and (the order being total) the same result.
    if (threshold_pass_pays(data.size(), k))
      data.erase(data.begin() + static_cast<std::ptrdiff_t>(
                                    drop_below_top(data.data(), data.size(), k, [&](size_t i) { return data[i]; })),
                 data.end());
    std::nth_element(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(k), data.end(), before);
    std::sort(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(k), before);
    sorted = true;
  }
  // Shrinking with erase, not resize: GCC 12 -O3 -Warray-bounds misreads resize's grow path.
  data.erase(data.begin() + static_cast<std::ptrdiff_t>(k), data.end());
}

void Candidates::sort_range(size_t from, size_t to) {
  const auto b = data.begin();
  if (to < data.size())
    std::nth_element(b + static_cast<std::ptrdiff_t>(from), b + static_cast<std::ptrdiff_t>(to), data.end(), before);
  std::sort(b + static_cast<std::ptrdiff_t>(from), b + static_cast<std::ptrdiff_t>(to), before);
}

bool Candidates::exp_sum(double& max_logit, double& sum) const {
  if (data.empty()) return false;
  float m = data[0].logit;
  for (const auto& t : data) m = std::max(m, t.logit);
  if (!std::isfinite(m)) return false;
  max_logit = m;
  sum = 0.0;
  for (const auto& t : data) sum += std::exp(static_cast<double>(t.logit) - max_logit);
  return true;
}

void Candidates::softmax() {
  sort_desc();
  if (data.empty()) return;
  const double max_logit = data[0].logit;
  if (!std::isfinite(max_logit)) {
    // All -inf (or a NaN/inf row): no distribution exists; put all mass on the first entry so
    // sampling still returns a valid id rather than NaN-driven garbage.
    for (auto& c : data) c.p = 0.0f;
    data[0].p = 1.0f;
    return;
  }
  double sum = 0.0;
  std::vector<double> e(data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    e[i] = std::exp(static_cast<double>(data[i].logit) - max_logit);
    sum += e[i];
  }
  for (size_t i = 0; i < data.size(); ++i) data[i].p = static_cast<float>(e[i] / sum);
}

// ---- stages ----

PenaltiesStage::PenaltiesStage(int last_n, float repeat, float frequency, float presence)
    : last_n_(last_n), repeat_(repeat), frequency_(frequency), presence_(presence) {
  if (!(repeat > 0.0f)) fail("sampler: repeat_penalty must be > 0, got ", repeat);
}

bool PenaltiesStage::active() const {
  return last_n_ != 0 && (repeat_ != 1.0f || frequency_ != 0.0f || presence_ != 0.0f);
}

void PenaltiesStage::apply(Candidates& c) {
  if (!active() || counts_.empty()) return;
  auto penalize = [&](TokenCandidate& t, int count) {
    // Dividing a negative logit would raise it; multiplying pushes it further down instead.
    t.logit = t.logit <= 0.0f ? t.logit * repeat_ : t.logit / repeat_;
    t.logit -= static_cast<float>(count) * frequency_ + presence_;
  };
  // The chain's first stage sees the row in id order: each counted token is then found by
  // index, not by a hash lookup per vocabulary entry.
  bool by_index = true;
  for (const auto& [id, count] : counts_)
    by_index = by_index && id >= 0 && static_cast<size_t>(id) < c.data.size() &&
               c.data[static_cast<size_t>(id)].id == id;
  if (by_index) {
    for (const auto& [id, count] : counts_) penalize(c.data[static_cast<size_t>(id)], count);
  } else {
    for (auto& t : c.data) {
      const auto it = counts_.find(t.id);
      if (it != counts_.end()) penalize(t, it->second);
    }
  }
  c.sorted = false;
}

void PenaltiesStage::accept(int32_t token) {
  if (!active()) return;
  history_.push_back(token);
  ++counts_[token];
  if (last_n_ > 0 && history_.size() > static_cast<size_t>(last_n_)) {
    const int32_t old = history_.front();
    history_.pop_front();
    if (--counts_[old] == 0) counts_.erase(old);
  }
}

void PenaltiesStage::reset() {
  history_.clear();
  counts_.clear();
}

void TopKStage::apply(Candidates& c) {
  if (k_ <= 0 || static_cast<size_t>(k_) >= c.data.size()) return;
  c.keep_top(static_cast<size_t>(k_));
}

void TopPStage::apply(Candidates& c) {
  if (p_ >= 1.0f || c.data.empty()) return;
  double cum = 0.0;
  // min_keep = 1 is implied: the stop index i keeps i + 1 >= 1 entries.
  const size_t stop = c.walk_sorted([&](size_t i) { return (cum += c.data[i].p) >= p_; });
  if (stop < c.data.size()) c.data.erase(c.data.begin() + static_cast<std::ptrdiff_t>(stop + 1), c.data.end());
  c.sorted = true;
}

void MinPStage::apply(Candidates& c) {
  if (p_ <= 0.0f || c.data.empty()) return;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (const auto& t : c.data) max_logit = std::max(max_logit, t.logit);
  const float min_logit = max_logit + std::log(p_);
  // erase-remove keeps the relative order, so a sorted array stays sorted; the max always passes.
  c.data.erase(std::remove_if(c.data.begin(), c.data.end(),
                              [&](const TokenCandidate& t) { return t.logit < min_logit; }),
               c.data.end());
}

void TemperatureStage::apply(Candidates& c) {
  if (t_ <= 0.0f) {
    // Only the argmax survives (llama_sampler_temp with t <= 0).
    c.keep_top(1);
    return;
  }
  for (auto& t : c.data) t.logit /= t_;  // positive scale: order unchanged
}

int32_t argmax(std::span<const float> logits) {
  // The first index of the largest value (NaNs never win; a NaN at 0 returns 0), in two passes:
  // the maximum over 8 independent lanes (one compare chain per element cost ~0.3 ms of a
  // 151936-entry vocabulary, a few percent of a decode step), then its first occurrence.
  const size_t n = logits.size();
  if (n == 0) return 0;
  float lane[8];
  std::fill(lane, lane + 8, logits[0]);
  size_t i = 1;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] = logits[i + j] > lane[j] ? logits[i + j] : lane[j];
  for (; i < n; ++i) lane[0] = logits[i] > lane[0] ? logits[i] : lane[0];
  float m = lane[0];
  for (int j = 1; j < 8; ++j) m = lane[j] > m ? lane[j] : m;
  for (size_t k = 0; k < n; ++k)
    if (logits[k] == m) return static_cast<int32_t>(k);
  return 0;
}

// ---- Sampler ----

Sampler::Sampler(SamplerParams params) : params_(params), rng_(params.seed) {
  auto pen = std::make_unique<PenaltiesStage>(params.penalty_last_n, params.repeat_penalty, params.frequency_penalty,
                                              params.presence_penalty);
  penalties_ = pen.get();
  stages_.push_back(std::move(pen));
  stages_.push_back(std::make_unique<TopKStage>(params.top_k));
  stages_.push_back(std::make_unique<TopPStage>(params.top_p));
  stages_.push_back(std::make_unique<MinPStage>(params.min_p));
  stages_.push_back(std::make_unique<TemperatureStage>(params.temp));
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab) {
  if (n_vocab <= 0) fail("sampler: n_vocab must be > 0, got ", n_vocab);
  const int32_t id = sample_unfiltered(logits, n_vocab);
  if (!filter_ || filter_->allowed(id)) return id;
  masked_.assign(logits, logits + n_vocab);
  bool any = false;
  for (int32_t i = 0; i < n_vocab; ++i) {
    if (filter_->allowed(i))
      any = true;
    else
      masked_[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
  }
  if (!any) fail("sampler: the constraint allows no token of the vocabulary here");
  const int32_t again = sample_unfiltered(masked_.data(), n_vocab);
  // Penalties can lift a masked -inf only to -inf, and every filter stage keeps the maximum, so
  // the second pick is an allowed token; checked anyway, the filter's promise is the point.
  if (!filter_->allowed(again)) fail("sampler: the constrained pick ", again, " is not allowed");
  return again;
}

int32_t Sampler::sample_unfiltered(const float* logits, int32_t n_vocab) {
  // Greedy without penalties: the scan alone (no candidate list of the whole vocabulary).
  if (params_.temp <= 0.0f && !penalties_->active()) return argmax({logits, static_cast<size_t>(n_vocab)});
  // When the top-k stage runs first (sampling, no penalty before it changes a logit), only its
  // candidates are written, the same ones it would keep from the whole vocabulary; else k = 0
  // writes every entry.
  const bool top_k_first = params_.temp > 0.0f && params_.top_k > 0 && !penalties_->active();
  cur_.assign_top(logits, static_cast<size_t>(n_vocab), top_k_first ? static_cast<size_t>(params_.top_k) : 0);

  if (params_.temp <= 0.0f) {
    // Greedy: penalties still apply (they change the argmax); the filters cannot remove the
    // argmax, so they are skipped. Scan order makes ties go to the lowest id.
    penalties_->apply(cur_);
    size_t best = 0;
    for (size_t i = 1; i < cur_.data.size(); ++i) {
      if (cur_.data[i].logit > cur_.data[best].logit) best = i;
    }
    const int32_t id = cur_.data[best].id;
    cur_.data.clear();
    return id;
  }

  for (auto& s : stages_) s->apply(cur_);
  // Inverse-CDF draw over the kept entries, highest probability first. If rounding leaves the
  // running sum just below u, the last entry is taken.
  const double u = rng_.next_double();
  double cum = 0.0;
  const size_t pick = cur_.walk_sorted([&](size_t i) { return u < (cum += cur_.data[i].p); });
  if (pick < cur_.data.size()) return cur_.data[pick].id;
  // The last entry that has any probability (a masked -inf entry at the end has none).
  for (auto it = cur_.data.rbegin(); it != cur_.data.rend(); ++it)
    if (it->p > 0) return it->id;
  return cur_.data.front().id;
}

void Sampler::accept(int32_t token) {
  for (auto& s : stages_) s->accept(token);
  if (filter_) filter_->accept(token);
}

void Sampler::reset() {
  for (auto& s : stages_) s->reset();
  rng_.seed_with(params_.seed);
}

}  // namespace sluice
