// apps/cli/cmd_bench: the `sluice bench` options; the run is sluice::bench (src/bench/run_bench).
#include <memory>

#include "commands.h"
#include "common_opts.h"
#include "sluice/bench.h"
#include "sluice/sluice.h"

namespace sluice::cli {

CommandRunner add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchConfig>();
  CLI::App* b = app.add_subcommand("bench",
                                   "throughput (pp/tg tok/s), bytes per token and % of the measured memory bandwidth");
  b->add_option("-m,--model", args->models, "GGUF model file(s)");
  b->add_option("-p,--n-prompt", args->n_prompt, "prompt tokens per pp test (0: skip)")->capture_default_str();
  b->add_option("-n,--n-gen", args->n_gen, "generated tokens per tg test (0: skip)")->capture_default_str();
  b->add_option("-r,--repetitions", args->reps, "repetitions of each test")->capture_default_str();
  b->add_option("-t,--threads", args->threads, "thread counts, comma separated")->delimiter(',')->capture_default_str();
  const std::string types = cache_type_names();
  b->add_option("--cache-type", args->cache_type, "KV cache type(s) of K and V, comma separated: " + types)
      ->delimiter(',')
      ->capture_default_str();
  b->add_option("--cache-type-k", args->cache_type_k, "K cache type(s), comma separated (default: --cache-type)")
      ->delimiter(',');
  b->add_option("--cache-type-v", args->cache_type_v,
                "V cache type(s), comma separated (default: --cache-type); K and V lists pair up element by element, "
                "a single value pairs with all")
      ->delimiter(',');
  b->add_flag("--no-auto-asymmetric", args->no_auto_asym, "keep K below 8 bits even when GQA >= 6");
  b->add_flag(
      "--no-kv-rotation", args->no_kv_rotation,
      "store q8_0/q4_0 K/V unrotated (default: Hadamard-rotated in blocks of 64, or of the largest power of two >= 16 dividing the head dim)");
  b->add_flag(
      "--no-kv-mean", args->no_kv_mean,
      "store tq K rows as given (default: minus a per-head mean of the first rows a sequence writes; exact, memory/kv_cache.h)");
  b->add_option("--kv-sinks-k", args->kv_sinks_k,
                "keep K of positions 0..N-1 also in f16 and attend over those (attention sinks; quantized K only)")
      ->capture_default_str();
  b->add_option("--kv-sinks-v", args->kv_sinks_v, "the same for V")->capture_default_str();
  b->add_option("-d,--depth", args->depths,
                "positions already in the KV cache when each test starts, comma separated (llama-bench's @ dN); they "
                "hold SYNTHETIC K/V rows (Gaussian, written through the cache codecs), not a prefill")
      ->delimiter(',')
      ->capture_default_str();
  b->add_option("--sequences", args->sequences,
                "tg: numbers of sequences decoding together, comma separated (1: the plain tg row; N > 1 adds a "
                "\"tgM xN\" row: aggregate t/s, per sequence, bytes read per step)")
      ->delimiter(',')
      ->capture_default_str();
  b->add_option("--membw-mib", args->membw_mib, "buffer for the bandwidth kernel, MiB")->capture_default_str();
  b->add_flag("--membw", args->membw_only, "only measure memory read bandwidth per thread count");
  b->add_flag("--profile", args->profile,
              "per-stage time of the pp runs (matmul GMAC/s) and the tg runs (bytes, GB/s)");
  b->add_flag("--exact", args->exact, "float-decode matmuls (no int8 activations): the parity path");
  add_repack_flags(b, args->repack);
  add_mlx_in_place_flag(b, args->mlx_in_place);
  b->add_flag("--json", args->json, "JSON instead of a markdown table");
  b->add_flag("--lookup", args->lookup,
              "add speculative decoding by prompt lookup vs plain greedy on a rewrite task (speedup, acceptance, "
              "whether the tokens are identical)");
  b->add_option("--experts", args->experts,
                "where experts live: resident | mmap | stream (stream/mmap: store figures per tg row)")
      ->capture_default_str();
  b->add_option("--expert-cache", args->expert_cache,
                "stream: expert cache budget (e.g. 4G, 512M; auto: what the memory limit leaves)")
      ->capture_default_str();
  b->add_flag("--prefetch,!--no-prefetch", args->prefetch,
              "mmap/stream: predict the next layer's experts and read them early");
  return [args, b]() -> int {
    if (!b->parsed()) return 0;
    if (args->expert_cache != "auto") args->expert_cache_bytes = parse_byte_size("--expert-cache", args->expert_cache);
    return bench(*args);
  };
}

}  // namespace sluice::cli
