// sluice/bench.h: the `sluice bench` run — llama-bench-style throughput table (pp/tg tok/s,
// bytes read per token against the measured bandwidth, the int8 peak), printed to stdout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice {

struct BenchConfig {
  std::vector<std::string> models{};
  int n_prompt = 512, n_gen = 128, reps = 5;
  std::vector<int> threads{2};
  std::vector<int64_t> depths{0};  // positions already in the KV cache (synthetic rows)
  std::vector<int> sequences{1};   // tg: sequences decoding together (one batch of N tokens per step)
  bool json = false, profile = false, membw_only = false, exact = false, no_auto_asym = false;
  bool no_kv_rotation = false;             // q8_0/q4_0 sides stored unrotated
  bool no_kv_mean = false;                 // tq K rows stored without the mean removed
  int64_t kv_sinks_k = 0, kv_sinks_v = 0;  // positions 0..N-1 also kept in f16 (attention sinks)
  // KV cache types: cache_type sets both sides; cache_type_k/_v override one side. Lists are
  // paired element by element (a single value applies to every pair).
  std::vector<std::string> cache_type{"f16"}, cache_type_k, cache_type_v;
  size_t membw_mib = 1024;
  // Where the experts live, as for Engine (ExpertOptions).
  std::string experts = "resident", expert_cache = "4G";  // as given (labels; "auto")
  size_t expert_cache_bytes = size_t{4} << 30;            // expert_cache parsed, unless "auto"
  bool prefetch = true;
  bool lookup = false;  // speculative decoding by prompt lookup vs plain greedy
  // Interleaved copies for the int8 kernels (ModelOptions::repack); unset: repack_by_default.
  std::optional<bool> repack;
  bool mlx_in_place = false;  // ModelOptions::mlx_in_place
};

// Runs the benchmark; prints to stdout (progress to stderr); returns the exit status. Throws
// Error on bad arguments.
int bench(const BenchConfig& cfg);

}  // namespace sluice
