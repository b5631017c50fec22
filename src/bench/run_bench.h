// bench/run_bench: the `sluice bench` run — its options and the loop over models, thread
// counts, KV cache pairs, depths and tests (pp, tg, tg with several sequences), printing a
// markdown table or JSON (what each figure means: bench/run_bench.cpp's header).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct BenchArgs {
  std::vector<std::string> models;
  int n_prompt = 512, n_gen = 128, reps = 5;
  std::vector<int> threads{2};
  std::vector<int64_t> depths{0};
  std::vector<int> sequences{1};  // tg: sequences decoding together (one batch of N tokens per step)
  bool json = false, profile = false, membw_only = false, exact = false, no_auto_asym = false;
  bool no_kv_rotation = false;  // --no-kv-rotation: q8_0/q4_0 sides stored unrotated (memory/kv_cache.h)
  bool no_kv_mean = false;      // --no-kv-mean: tq K rows stored without the mean removed (memory/kv_cache.h)
  // KV cache types: --cache-type sets both sides; --cache-type-k/-v override one side. Lists
  // are paired element by element (a single value applies to every pair).
  std::vector<std::string> cache_type{"f16"}, cache_type_k, cache_type_v;
  size_t membw_mib = 1024;
  // Where the experts live (memory/expert_store.h), as for `sluice run`.
  std::string experts = "resident", expert_cache = "4G";  // as given (labels; "auto")
  size_t expert_cache_bytes = size_t{4} << 30;            // expert_cache parsed, unless "auto"
  bool prefetch = true;
  bool lookup = false;  // --lookup: speculative decoding by prompt lookup vs plain greedy (bench/lookup_bench.h)
};

// Runs the benchmark; prints to stdout (progress to stderr). Throws Error on bad arguments.
int run_bench(const BenchArgs& a);

}  // namespace sluice
