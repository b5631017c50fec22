// memory/prefetch_policy: the prefetch gate of the stream policy (see prefetch_policy.h).
#include "memory/prefetch_policy.h"

#include <algorithm>

namespace sluice {
namespace {
// Judged victim bytes fade by this factor per decode step, so r follows the run's phase
// (warm-up with free space, then a full cache) instead of averaging over all of it.
constexpr double kRegretDecay = 1.0 - 1.0 / 32;
}  // namespace

PrefetchPolicy::PrefetchPolicy(size_t n_layers, size_t bundle_bytes)
    : prior_bytes_(kPriorWeight * static_cast<double>(bundle_bytes)) {
  std::array<double, kRanks> init;
  init.fill(kPriorP);
  precision_.assign(n_layers, init);
  scored_.assign(n_layers, {});
}

double PrefetchPolicy::precision(int layer, int rank) const {
  if (layer < 0 || static_cast<size_t>(layer) >= precision_.size()) return 0.0;
  return precision_[layer][std::clamp(rank, 0, kRanks - 1)];
}

double PrefetchPolicy::regret() const {
  return (regret_bytes_ + kPriorR * prior_bytes_) / (judged_bytes_ + prior_bytes_);
}

bool PrefetchPolicy::worth_it(int layer, int rank, size_t bytes, size_t victim_bytes) const {
  const double p = precision(layer, rank), b = static_cast<double>(bytes);
  return p * timely_ * b > (1.0 - p) * (b + regret() * static_cast<double>(victim_bytes));
}

void PrefetchPolicy::new_step(uint64_t step) {
  timely_ += (1.0 - timely_) / 64;
  judged_bytes_ *= kRegretDecay;
  regret_bytes_ *= kRegretDecay;
  // A victim nobody asked for within kGhostSteps cost nothing.
  for (auto it = ghosts_.begin(); it != ghosts_.end();) {
    if (step > it->second.step + kGhostSteps) {
      judged_bytes_ += static_cast<double>(it->second.bytes);
      it = ghosts_.erase(it);
    } else {
      ++it;
    }
  }
}

void PrefetchPolicy::score(int layer, int rank, bool used) {
  if (layer < 0 || static_cast<size_t>(layer) >= precision_.size() || rank < 0) return;
  const int r = std::min(rank, kRanks - 1);
  double& p = precision_[layer][r];
  const uint32_t n = ++scored_[layer][r];
  p += std::max(kAlpha, 1.0 / (n + 1)) * ((used ? 1.0 : 0.0) - p);
}

void PrefetchPolicy::score(int layer, std::span<const int32_t> predicted, std::span<const int32_t> used) {
  for (size_t r = 0; r < predicted.size(); ++r)
    score(layer, static_cast<int>(r), std::find(used.begin(), used.end(), predicted[r]) != used.end());
}

void PrefetchPolicy::note_prefetch_victim(const ExpertCache::Entry& e, uint64_t step) {
  Ghost& g = ghosts_[key(e.layer, e.expert)];
  if (g.bytes) judged_bytes_ += static_cast<double>(g.bytes);  // evicted again before anyone asked: no regret
  g = {e.bytes, step};
}

void PrefetchPolicy::note_prefetch_use(bool landed) { timely_ += kAlpha * ((landed ? 1.0 : 0.0) - timely_); }

void PrefetchPolicy::note_demand_miss(int layer, int32_t expert, uint64_t step) {
  auto it = ghosts_.find(key(layer, expert));
  if (it == ghosts_.end()) return;
  const double b = static_cast<double>(it->second.bytes);
  judged_bytes_ += b;
  if (step <= it->second.step + kGhostSteps) {
    regret_bytes_ += b;
    regret_total_ += it->second.bytes;
  }
  ghosts_.erase(it);
}

}  // namespace sluice
