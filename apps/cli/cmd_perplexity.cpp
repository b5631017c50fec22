// apps/cli/cmd_perplexity: `sluice perplexity` — perplexity of a text, and KL divergence of one
// configuration (KV codecs, weight types, backends) against a saved base run, printed as
// llama-perplexity prints them. The method and the file format live in the library
// (sluice/perplexity.h, runtime/perplexity).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "sluice/perplexity.h"
#include "sluice/sluice.h"

namespace sluice::cli {
namespace {

struct PerplexityArgs {
  std::string model, text_file, backend = "cpu", cache_type = "f16", cache_type_k, cache_type_v, kld_base, kld;
  int threads = 0;
  int64_t ctx = 512, chunks = -1;
  bool no_auto_asymmetric = false, no_kv_rotation = false, no_kv_mean = false;
  int64_t kv_sinks_k = 0, kv_sinks_v = 0;
};

int run(const PerplexityArgs& a) {
  if (!a.kld.empty() && !a.kld_base.empty()) fail("perplexity: --kld and --kld-base exclude each other");
  if (a.kld.empty() && a.text_file.empty()) fail("perplexity: -f TEXT is required (except with --kld)");
  const auto t0 = std::chrono::steady_clock::now();
  EngineOptions eo;
  eo.backend = a.backend;
  eo.n_threads = a.threads;
  auto engine = Engine::open(a.model, eo);
  std::vector<int32_t> tokens;
  if (a.kld.empty()) {
    std::FILE* f = std::fopen(a.text_file.c_str(), "rb");
    if (!f) fail("cannot open ", a.text_file);
    std::string text;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
    tokens = engine->tokenize(text, /*add_bos=*/true);
  }
  PerplexityConfig o;
  o.n_ctx = a.ctx;
  o.n_chunks = a.chunks;
  o.kv.type_k = a.cache_type_k.empty() ? a.cache_type : a.cache_type_k;
  o.kv.type_v = a.cache_type_v.empty() ? a.cache_type : a.cache_type_v;
  o.kv.auto_asymmetric = !a.no_auto_asymmetric;
  o.kv.rotation = !a.no_kv_rotation;
  o.kv.k_mean = !a.no_kv_mean;
  o.kv.sinks_k = a.kv_sinks_k;
  o.kv.sinks_v = a.kv_sinks_v;
  check_kv_options(o.kv);
  o.kld_base_out = a.kld_base;
  o.kld_in = a.kld;
  std::fprintf(stderr, "perplexity: %s (%s), backend %s, %d threads, %zu tokens\n", a.model.c_str(),
               engine->architecture().c_str(), engine->backend_name().c_str(), engine->n_threads(), tokens.size());
  const PerplexitySummary r = perplexity(*engine, tokens, o, stdout);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "kv cache: K %s%s, V %s%s, %zu bytes/token (all layers), ctx %lld, %lld chunks, %lld tokens scored, %.1f s\n",
      r.type_k.c_str(), r.rotated_k ? " (rotated)" : "", r.type_v.c_str(), r.rotated_v ? " (rotated)" : "",
      r.kv_bytes_per_token, static_cast<long long>(r.n_ctx), static_cast<long long>(r.n_chunks),
      static_cast<long long>(r.count), secs);
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
  if (r.has_kld) std::printf("\n%s", r.kld_report.c_str());
  return 0;
}

}  // namespace

CommandRunner add_perplexity_command(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  auto* cmd = app.add_subcommand("perplexity", "perplexity of a text; KL divergence against a saved base run");
  cmd->footer(
      "llama-perplexity's method: chunks of --ctx tokens, each from an empty cache with BOS first, scoring the second\n"
      "half. --kld-base FILE saves this run's log-probs (llama.cpp's --kl-divergence-base format); --kld FILE runs on\n"
      "the tokens stored in FILE and compares against them (KLD, Δp, same top token).");
  cmd->add_option("-m,--model", a->model, "GGUF model file, or a Hugging Face / MLX model folder")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("-f,--file", a->text_file, "text file to score");
  cmd->add_option("-c,--ctx", a->ctx, "chunk length in tokens")->capture_default_str();
  cmd->add_option("--chunks", a->chunks, "chunks to score (-1: all)")->capture_default_str();
  cmd->add_option("--backend", a->backend, "ref | cpu")->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "worker threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--cache-type", a->cache_type, "KV cache type of K and V (shorthand for both)")
      ->capture_default_str();
  cmd->add_option("--cache-type-k", a->cache_type_k, "K cache type: " + cache_type_names());
  cmd->add_option("--cache-type-v", a->cache_type_v, "V cache type: " + cache_type_names());
  cmd->add_flag("--no-auto-asymmetric", a->no_auto_asymmetric, "keep a K type below 8 bits even with GQA >= 6");
  cmd->add_flag(
      "--no-kv-rotation", a->no_kv_rotation,
      "store q8_0/q4_0 K/V unrotated (default: Hadamard-rotated in blocks of 64, or of the largest power of two >= 16 dividing the head dim)");
  cmd->add_flag(
      "--no-kv-mean", a->no_kv_mean,
      "store tq K rows as given (default: minus a per-head mean of the first rows a sequence writes; exact, memory/kv_cache.h)");
  cmd->add_option("--kv-sinks-k", a->kv_sinks_k,
                  "keep K of positions 0..N-1 also in f16 and attend over those (attention sinks; quantized K only)")
      ->capture_default_str();
  cmd->add_option("--kv-sinks-v", a->kv_sinks_v, "the same for V")->capture_default_str();
  cmd->add_option("--kld-base", a->kld_base, "write the base log-probs to FILE");
  cmd->add_option("--kld", a->kld, "compare against the base log-probs in FILE");
  return [a] { return run(*a); };
}

}  // namespace sluice::cli
