// apps/cli/common_opts: the shared options of the model-running subcommands.
#include "common_opts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <sstream>
#include <string>
#include <vector>


namespace sluice::cli {

// A number in [lo, hi] (either end may be open: ±infinity), with a message a person can read.
CLI::Validator in_range(double lo, double hi) {
  auto fmt = [](double v) {
    std::ostringstream ss;
    ss << v;
    return ss.str();
  };
  std::string want = std::isinf(hi) ? ">= " + fmt(lo) : std::isinf(lo) ? "<= " + fmt(hi) : fmt(lo) + ".." + fmt(hi);
  return CLI::Validator(
      [lo, hi, want](std::string& s) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(s, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != s.size()) return "'" + s + "' is not a number";
        if (!(v >= lo && v <= hi)) return "'" + s + "' is out of range (want " + want + ")";
        return {};
      },
      want);
}
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

void CommonOpts::add(CLI::App* app) {
  app->add_option("-m,--model", model, "GGUF model file, or a Hugging Face / MLX model folder")
      ->required()
      ->check(CLI::ExistingPath);
  app->add_option(
         "--backend", backend,
         "ref | cpu (int8 activations on quantized weights) | cpu-exact | cuda (when built; op level, see README)")
      ->capture_default_str();
  app->add_option("-t,--threads", threads, "worker threads (0 = all cores)")
      ->capture_default_str()
      ->check(in_range(0, 4096));
  app->add_option("-c,--ctx", ctx, "context size in tokens (0 = min(model's training context, 4096))")
      ->check(in_range(0, kInf));
  app->add_option("--cache-type", cache_type, "KV cache type of K and V (shorthand for both)")->capture_default_str();
  app->add_option("--cache-type-k", cache_type_k, "K cache type: " + std::string(cache_type_names()));
  app->add_option("--cache-type-v", cache_type_v, "V cache type: " + std::string(cache_type_names()));
  app->add_flag("--no-auto-asymmetric", no_auto_asymmetric, "keep a K type below 8 bits even with GQA >= 6");
  app->add_flag(
      "--no-kv-rotation", no_kv_rotation,
      "store q8_0/q4_0 K/V unrotated (default: Hadamard-rotated in blocks of 64, or of the largest power of two >= 16 dividing the head dim)");
  app->add_flag(
      "--no-kv-mean", no_kv_mean,
      "store tq K rows as given (default: minus a per-head mean of the first rows a sequence writes; exact, memory/kv_cache.h)");
  app->add_option("--kv-sinks-k", kv_sinks_k,
                  "keep K of positions 0..N-1 also in f16 and attend over those (attention sinks; quantized K only)")
      ->capture_default_str()
      ->check(in_range(0, kInf));
  app->add_option("--kv-sinks-v", kv_sinks_v, "the same for V")->capture_default_str()->check(in_range(0, kInf));
  app->add_option("--experts", experts, "where experts live: resident | mmap (page cache) | stream (bounded cache)")
      ->capture_default_str();
  app->add_option(
         "--expert-cache", expert_cache,
         "stream: expert cache budget, never exceeded (e.g. 4G, 512M; auto: 90% of the memory limit (cgroup or available) less the weights in memory and 512 MiB)")
      ->capture_default_str();
  app->add_option("--pin-experts", pin_experts,
                  "stream: keep the N most-routed experts of each layer cached (needs --routing-counts)");
  app->add_option("--routing-counts", routing_counts,
                  "routing-counts JSON choosing --pin-experts (from --routing-counts-out)");
  app->add_option("--routing-counts-out", routing_counts_out,
                  "after the run, add this run's per-layer expert routing counts to FILE (a calibration run)");
  app->add_option("--routing-trace-out", routing_trace_out,
                  "after the run, write every expert request to FILE, one layer's per line: \"layer e1 e2 ...\" "
                  "(for cache simulations, bench/stream/cache_sim.py, and training predictors)");
  app->add_flag("--prefetch,!--no-prefetch", prefetch,
                "mmap/stream: predict the next layer's experts and read them early");
  app->add_flag("--no-prefetch-gate", no_prefetch_gate,
                "stream: read every predicted expert, evicting any probationary one (for comparisons; the gate "
                "reads a guess only when it is expected to save more than it wastes)");
  app->add_option("--prefetch-extra", prefetch_extra, "the predictor stages the top k+M experts (-1: M = max(1, k/4))");
  app->add_option("--expert-io", expert_io, "stream: auto | uring | pread")->capture_default_str();
  app->add_flag("--no-direct-io", no_direct_io, "stream: read experts through the page cache instead of O_DIRECT");
  app->add_option("--pack-dir", pack_dir,
                  "stream on a model folder: where its experts are packed once and read from then on (default: "
                  "$SLUICE_PACK_DIR, $XDG_CACHE_HOME/sluice/packed or ~/.cache/sluice/packed)");
  app->add_option("--lora", lora,
                  "a LoRA adapter applied at run time (y += scale·B·A·x, the weights untouched): PATH or "
                  "PATH:SCALE, PATH a llama.cpp LoRA GGUF or an MLX-LM adapter folder (adapter_config.json, "
                  "adapters.safetensors); repeatable");
  app->add_flag("--lora-merge", lora_merge,
                "merge the --lora adapters into the weights at load (in memory only; the adapted matrices "
                "become f32 copies)");
  add_repack_flags(app, repack);
  add_mlx_in_place_flag(app, mlx_in_place);
  app->add_flag("--mmap", mmap_weights,
                "resident: map the file instead of reading it into memory (faster start, slower decode)");
  app->add_option("--gpu-expert-cache", gpu_expert_cache,
                  "cuda: VRAM budget for routed experts, cached by (layer, expert) (e.g. 8G; default: all in VRAM)");
}
EngineOptions CommonOpts::engine_options() const {
  EngineOptions o;
  o.backend = backend;
  o.n_threads = threads;
  o.gpu_expert_cache = gpu_expert_cache;
  o.kv.type_k = cache_type_k.empty() ? cache_type : cache_type_k;
  o.kv.type_v = cache_type_v.empty() ? cache_type : cache_type_v;
  o.kv.auto_asymmetric = !no_auto_asymmetric;
  o.kv.rotation = !no_kv_rotation;
  o.kv.k_mean = !no_kv_mean;
  o.kv.sinks_k = kv_sinks_k;
  o.kv.sinks_v = kv_sinks_v;
  o.experts.policy = experts;
  o.experts.cache = expert_cache;
  o.experts.pin_per_layer = pin_experts;
  o.experts.routing_counts = routing_counts;
  o.experts.prefetch = prefetch;
  o.experts.prefetch_extra = prefetch_extra;
  o.experts.prefetch_gate = !no_prefetch_gate;
  o.experts.io = expert_io;
  o.experts.direct_io = !no_direct_io;
  o.experts.progress = true;
  o.experts.record_routing_trace = !routing_trace_out.empty();
  o.experts.pack_dir = pack_dir;
  o.read_weights = !mmap_weights;
  o.lora = lora;
  o.lora_merge = lora_merge;
  o.repack = repack;
  o.mlx_in_place = mlx_in_place;
  // A line per GiB for big files (reading from a cold disk, or packing, takes a while), nothing
  // for small ones.
  const auto per_gib = [](const char* what) {
    return [what, last = size_t{0}](size_t done, size_t total) mutable {
      if (total < (size_t{1} << 30) || (done - last < (size_t{1} << 30) && done != total)) return;
      last = done;
      std::fprintf(stderr, "%s: %.1f / %.1f GB\n", what, done / 1e9, total / 1e9);
    };
  };
  o.load_progress = per_gib("loading");
  o.repack_progress = per_gib("repack");
  o.pack_progress = [last = size_t{0}](size_t done, size_t total) mutable {  // a line per 10% of the tensors
    if (done != total && done * 10 / total == last * 10 / total) return;
    last = done;
    std::fprintf(stderr, "pack: %zu / %zu tensors\n", done, total);
  };
  o.on_load_note = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  return o;
}
std::unique_ptr<Engine> CommonOpts::open() const { return Engine::open(model, engine_options()); }
void CommonOpts::report_backend(const Engine& e) {
  if (std::string line = e.backend_stats_line(); !line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
}
void CommonOpts::report_experts(const Engine& e) const {
  std::fprintf(stderr, "%s\n", e.expert_stats_line().c_str());
  if (!routing_counts_out.empty()) e.save_routing_counts(routing_counts_out);
  if (!routing_trace_out.empty()) e.save_routing_trace(routing_trace_out);
}
int64_t CommonOpts::context_size(const ModelInfo& m, int64_t n_prompt, int64_t n_more) const {
  const int64_t train = m.n_ctx_train > 0 ? m.n_ctx_train : int64_t{1} << 40;
  if (ctx > 0) {
    if (ctx > train)
      std::fprintf(stderr,
                   "warning: --ctx %lld is beyond the model's training context of %lld; expect worse output past it\n",
                   static_cast<long long>(ctx), static_cast<long long>(train));
    return ctx;
  }
  if (n_prompt > train)
    fail("the prompt has ", n_prompt, " tokens, more than the model's training context of ", train,
         " (--ctx N allows a longer context)");
  return std::min(train, std::max<int64_t>(std::min<int64_t>(train, 4096), n_prompt + n_more));
}

std::vector<int32_t> parse_token_list(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX) fail("--tokens: '", item, "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) fail("--tokens: no token ids given");
  return ids;
}

void add_repack_flags(CLI::App* cmd, std::optional<bool>& repack) {
  auto* on = cmd->add_flag_callback(
      "--repack", [&repack] { repack = true; },
      "cpu: interleave the Q4_0, Q4_1, Q4_K, Q5_K and Q6_K matrices 16 rows at a time for the int8 kernels. The "
      "default where the cpu backend's int8 kernels read them (AVX2, AVX-512); no memory beyond the weights (a "
      "GGUF file's rows go back to the file's pages, a folder's converted weights are interleaved in place)");
  cmd->add_flag_callback(
         "--no-repack", [&repack] { repack = false; }, "keep the rows as the file has them")
      ->excludes(on);
}

void add_mlx_in_place_flag(CLI::App* cmd, bool& in_place) {
  cmd->add_flag("--mlx-in-place", in_place,
                "a quantized MLX folder: read its affine groups where the folder keeps them (no conversion at load, "
                "~10% fewer bytes held) instead of converting them into Q4_1/Q5_1/Q8_A blocks (faster decode today)");
}

void add_generate_options(CLI::App* cmd, GenerateOptions& gp) {
  GenerateOptions& sp = gp;
  cmd->add_option("-n,--n-predict", gp.n_predict, "tokens to generate")
      ->capture_default_str()
      ->check(in_range(1, kInf));
  cmd->add_option("--temp", sp.temp, "temperature (0 = greedy)")->capture_default_str()->check(in_range(0, kInf));
  cmd->add_option("--top-k", sp.top_k, "top-k (0 = off)")->capture_default_str()->check(in_range(0, kInf));
  cmd->add_option("--top-p", sp.top_p, "top-p (1 = off)")->capture_default_str()->check(in_range(0, 1));
  cmd->add_option("--min-p", sp.min_p, "min-p (0 = off)")->capture_default_str()->check(in_range(0, 1));
  cmd->add_option("--repeat-penalty", sp.repeat_penalty, "repetition penalty (1 = off)")
      ->capture_default_str()
      ->check(in_range(1e-6, kInf));
  cmd->add_option("--presence-penalty", sp.presence_penalty, "presence penalty")
      ->capture_default_str()
      ->check(in_range(-2, 2));
  cmd->add_option("--frequency-penalty", sp.frequency_penalty, "frequency penalty")
      ->capture_default_str()
      ->check(in_range(-2, 2));
  cmd->add_option("--repeat-last-n", sp.penalty_last_n, "tokens the penalties look back over (-1: all)")
      ->capture_default_str()
      ->check(in_range(-1, kInf));
  cmd->add_option("-s,--seed", sp.seed, "RNG seed")->capture_default_str();
  cmd->add_flag("--ignore-eos", gp.ignore_eos, "keep generating after end-of-generation tokens");
  cmd->add_flag("!--no-special", gp.parse_special,
                "tokenize special-token text in the prompt (e.g. <|im_start|>) as plain text, not as the token");
  cmd->add_option("--stop", gp.stop,
                  "stop when the text reaches this string (repeatable; the string itself is not printed)")
      ->allow_extra_args(false);
}

}  // namespace sluice::cli
