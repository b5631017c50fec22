// bench/lookup_bench: `sluice bench --lookup`, speculative decoding by prompt lookup
// (runtime/speculative) against plain greedy decoding, on a task that repeats its input: rewrite
// a paragraph with one word changed, asked through the model's chat template (ChatML when it
// has none). What a real model copies from its prompt the drafter proposes, so this is the case
// prompt lookup is for; a random-weight synth model copies nothing and shows the cost of the
// drafts instead.
#pragma once
#include <vector>

#include "memory/kv_cache.h"
#include "models/model.h"
#include "runtime/speculative.h"

namespace sluice {

struct LookupBenchResult {
  std::vector<double> plain_tps, lookup_tps;  // generated tokens per second, one per repetition
  SpeculativeStats spec;                      // of the last repetition
  int n_prompt = 0, n_generated = 0;          // of the last plain repetition
  bool identical = true;                      // every repetition's lookup tokens equal plain greedy's
};

// reps repetitions of: plain greedy decoding of up to n_gen tokens, then the same with prompt
// lookup (default SpeculativeParams), each from an empty cache. Throws sluice::Error when the
// prompt does not fit kv.n_ctx with n_gen tokens after it.
LookupBenchResult bench_lookup(const Model& m, Backend& be, const KvCacheOptions& kv, int n_gen, int reps);

}  // namespace sluice
