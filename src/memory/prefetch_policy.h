// memory/prefetch_policy: whether a predicted expert is worth reading ahead, and which cached
// experts such a read may push out — the one place the stream policy (expert_stream.cpp)
// decides about prefetch. Pure bookkeeping: no I/O, no locks (the caller holds its own).
//
// Why a gate at all: a prefetch is a bet. Measured on the 48-layer qwen3-30b-a3b-shaped synth
// model in a 4 GB cgroup with a 2 GB cache, reading every guess (precision ~72%) gave 2.1 tok/s
// and 22.5 GB read, against 3.1 tok/s and 14.0 GB with no prefetch at all: the wrong guesses
// evicted experts the next tokens needed. Two rules keep a prefetch from making things worse:
//
//  1. Victims (may_evict): a prefetch takes free space, or an entry that is probationary, used
//     at most once, not held, not pinned, and not used by the current or the previous decode
//     step. Wrong guesses are made cold when their layer runs (ExpertCache::Entry::last_step
//     = 0), so a prefetch recycles the slots of earlier wrong guesses first. Protected (reused)
//     experts and the working set of the last two tokens are never a prefetch's victims.
//
//  2. Expected value (worth_it): a right guess (probability p) turns a demand read of B bytes,
//     which the forward would wait for, into a read that overlaps compute (and the victims it
//     evicted would have gone to that demand read anyway: the cache is full either way). A
//     wrong one reads B bytes nobody uses, which delay the next demand reads on the same disk,
//     and evicts V bytes for nothing, some of which a later token asks for again. So a bundle
//     is read ahead only when the demand-read bytes it is expected to save exceed the bytes it
//     is expected to waste:
//
//         p·t·B  >  (1 − p)·(B + r·V)
//
//     p: this layer's rolling precision at this rank of the guess list, counting only guesses
//        that were not cached when the gate looked at them (read or declined, so a throttled
//        layer can open again). Unconditional precision would be the wrong number: the guesses
//        already cached are mostly the right ones (the experts the last tokens used), so the
//        uncached rest is right far less often. Measured at 2 GB: 73% of all guesses right,
//        41% of those read ahead.
//     t: the share of used read-aheads that had landed when their layer asked for them. A
//        read still in flight when the layer runs is waited for anyway, so a right guess saves
//        little when the disk is the bottleneck (then prefetches queue behind demand reads and
//        land late). Measured at 2 GB with p·B > (1 − p)·(B + r·V) alone: 15% more bytes than
//        no prefetch for +0.4 points of hit rate, and 5-10% lower tok/s. t drifts back
//        towards 1 by 1/64 per step so a closed gate probes again.
//     r: the share of prefetch-evicted bytes that a demand miss asked for again within
//        kGhostSteps decode steps (ghost entries, as in ARC), i.e. the measured regret of
//        prefetch evictions. It over-counts (a demand eviction might have dropped the victim
//        too), which errs on the side of not prefetching.
//     With free space (V = 0) and t = 1 this is p > 1/2; evicting one bundle of regret r,
//     p > (1+r)/(2+r).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/expert_cache.h"

namespace sluice {

class PrefetchPolicy {
 public:
  static constexpr int kRanks = 16;  // ranks tracked separately; later ones share the last
  // Rolling precision: the newest outcome weighs max(kAlpha, 1/(n+1)) after n outcomes, i.e. a
  // plain mean (with the prior as one outcome) until n = 1/kAlpha, then an exponential average.
  // The mean makes a cold start learn from the first tokens: a wrong guess drops 0.75 to 0.375.
  static constexpr double kAlpha = 1.0 / 16;
  static constexpr double kPriorP = 0.75;     // precision assumed before a (layer, rank) is scored
  static constexpr uint64_t kGhostSteps = 8;  // a prefetch victim asked for within this many steps: regret
  static constexpr double kPriorR = 0.5;      // regret assumed before any victim is judged ...
  static constexpr double kPriorWeight = 8;   // ... with the weight of this many bundles

  // n_layers: the model's layers; bundle_bytes: a typical expert bundle (weights the prior of r).
  PrefetchPolicy(size_t n_layers, size_t bundle_bytes);

  // Rule 1: may a prefetch issued in decode step `step` evict `e`?
  static bool may_evict(const ExpertCache::Entry& e, uint64_t step) {
    return !e.in_protected && e.uses <= 1 && e.last_step + 1 < step;
  }
  // Rule 1 as the cache applies it. Only the kVictimScan least recently used probationary
  // entries are looked at: cold entries and wrong guesses (demoted to the front) sit there, and
  // a prefetch that finds no room is declined in microseconds. (Unbounded, a declined guess
  // walks both whole lists: ~700 nodes at a 2 GB budget, ~1700 at 5 GB, each likely a cache
  // miss, for up to ~10 guesses x 48 layers per token; an estimated tens of ms per token, the
  // size of the gap measured between gated prefetch and no prefetch before the bound. The
  // walk's cost was not measured on its own.)
  static constexpr size_t kVictimScan = 64;
  static ExpertCache::VictimRule victim_rule(uint64_t step) {
    ExpertCache::VictimRule r;
    r.may_evict = [step](const ExpertCache::Entry& e) { return may_evict(e, step); };
    r.probationary_only = true;
    r.max_scan = kVictimScan;
    return r;
  }
  // Rule 2: read ahead the rank-`rank` guess for `layer` (a bundle of `bytes`) when making room
  // for it evicts `victim_bytes`?
  bool worth_it(int layer, int rank, size_t bytes, size_t victim_bytes) const;

  // A new decode step (a forward pass) began: ages ghosts out.
  void new_step(uint64_t step);
  // Layer `layer` ran; its rank-`rank` guess, which was not cached when the gate looked at it,
  // was `used` or not.
  void score(int layer, int rank, bool used);
  // The same for every guess of `predicted` (best first) against the experts `used`.
  void score(int layer, std::span<const int32_t> predicted, std::span<const int32_t> used);
  // A prefetch evicted this entry (call before the cache frees it).
  void note_prefetch_victim(const ExpertCache::Entry& e, uint64_t step);
  // A demand miss (the forward asked for an expert that was not cached).
  void note_demand_miss(int layer, int32_t expert, uint64_t step);
  // A layer asked for an expert a prefetch brought in: it had `landed`, or was still in flight.
  void note_prefetch_use(bool landed);

  double precision(int layer, int rank) const;
  double regret() const;                         // r
  double timeliness() const { return timely_; }  // t
  uint64_t regretted_bytes() const { return regret_total_; }

 private:
  static uint64_t key(int layer, int32_t expert) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) | static_cast<uint32_t>(expert);
  }
  struct Ghost {
    size_t bytes = 0;
    uint64_t step = 0;
  };
  std::vector<std::array<double, kRanks>> precision_;  // [layer][rank]
  std::vector<std::array<uint32_t, kRanks>> scored_;   // [layer][rank]: outcomes so far
  std::unordered_map<uint64_t, Ghost> ghosts_;         // prefetch victims not judged yet
  double prior_bytes_ = 0;
  double judged_bytes_ = 0, regret_bytes_ = 0;  // victims judged so far, and those asked for again
  double timely_ = 1.0;                         // t
  uint64_t regret_total_ = 0;
};

}  // namespace sluice
