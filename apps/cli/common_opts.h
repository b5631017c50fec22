// apps/cli/common_opts: the options every model-running subcommand takes (model file, backend,
// threads, context, KV cache types, where experts live) and what they build from them; and the
// sampling options of the generating subcommands (run, chat), checked before any work starts.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sluice/sluice.h"

namespace sluice::cli {

// A CLI11 check: a number in [lo, hi] (either end may be ±infinity), with a message naming
// the range ("'2' is out of range (want 0..1)").
CLI::Validator in_range(double lo, double hi);

struct CommonOpts {
  std::string model;
  std::string backend = "cpu";
  int threads = 0;
  int64_t ctx = 0;
  std::string cache_type = "f16", cache_type_k, cache_type_v;  // -k/-v override the shorthand
  bool no_auto_asymmetric = false, no_kv_rotation = false, no_kv_mean = false;
  int64_t kv_sinks_k = 0, kv_sinks_v = 0;  // KvOptions::sinks_k / sinks_v
  // Where the experts live (memory/expert_store.h).
  std::string experts = "resident";
  std::string expert_cache = "4G";
  int pin_experts = 0;
  std::string routing_counts, routing_counts_out, routing_trace_out;
  bool prefetch = true;
  bool no_prefetch_gate = false;
  int prefetch_extra = -1;
  std::string expert_io = "auto";
  bool no_direct_io = false;
  std::string pack_dir;
  std::string gpu_expert_cache;
  bool mmap_weights = false;
  std::optional<bool> repack;     // --repack / --no-repack; unset: the engine decides
  bool mlx_in_place = false;      // --mlx-in-place
  std::vector<std::string> lora;  // LoRA adapters (--lora, repeatable)
  bool lora_merge = false;

  void add(CLI::App* app);
  EngineOptions engine_options() const;
  // Loads the model (what the load did on stderr) and makes the backend.
  std::unique_ptr<Engine> open() const;
  // The backend's end-of-run figures on stderr (cuda: its expert tier; nothing for the others).
  static void report_backend(const Engine& e);
  // The store's figures on stderr, and the calibration file and trace when asked for.
  void report_experts(const Engine& e) const;
  // The context for a prompt of n_prompt tokens and n_more after it. Without --ctx:
  // min(training context, 4096), grown to n_prompt + n_more up to the training context; a
  // prompt longer than the training context fails, naming --ctx (which allows it, with a
  // warning when it goes past the training context).
  int64_t context_size(const ModelInfo& m, int64_t n_prompt, int64_t n_more) const;
};

// "1,403,407" -> token ids; fails naming --tokens for anything else.
std::vector<int32_t> parse_token_list(const std::string& s);

// -n, --temp, --top-k, --top-p, --min-p, penalties, --seed, --ignore-eos, --stop, --no-special
// on `cmd`, each checked for its range by CLI11 (a bad value is an error naming the option).
void add_generate_options(CLI::App* cmd, GenerateOptions& gp);
// --repack / --no-repack (run, chat, serve, bench): unset unless given.
void add_repack_flags(CLI::App* cmd, std::optional<bool>& repack);
// --mlx-in-place (run, chat, serve, bench).
void add_mlx_in_place_flag(CLI::App* cmd, bool& in_place);

}  // namespace sluice::cli
