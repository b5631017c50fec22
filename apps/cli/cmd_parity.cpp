// apps/cli/cmd_parity: `sluice parity` — two backends side by side over one model; the table of
// named intermediates that diverge (all with -v) and the first divergence (exit 1).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "common_opts.h"
#include "sluice/parity.h"
#include "sluice/sluice.h"

namespace sluice::cli {
namespace {

struct ParityArgs {
  std::string cache = "f16";
  std::string model, a = "ref", b = "cpu-exact", tokens, prompt = "Once upon a time";
  int threads = 0, decode = 4;
  bool verbose = false;
};

int cmd_parity(const std::string& model_path, const std::string& a, const std::string& b, int threads,
               const std::string& cache_type, const std::string& tokens_arg, const std::string& prompt, int n_decode,
               bool verbose) {
  EngineOptions eo;
  eo.backend = a;
  eo.n_threads = threads;
  auto engine = Engine::open(model_path, eo);
  std::vector<int32_t> ids = !tokens_arg.empty() ? parse_token_list(tokens_arg) : engine->tokenize(prompt, true);
  ParityConfig cfg;
  cfg.backend_b = b;
  cfg.n_threads = threads;
  cfg.cache_type = cache_type;
  cfg.n_decode = n_decode;
  cfg.on_int8_backend = [&](int which, const std::string& q8) {
    std::fprintf(stderr,
                 "note: backend '%s' multiplies quantized weights by int8 activations (%s): expect NMSE ~1e-5..1e-3 on "
                 "quantized models and occasional expert-choice flips, above these float32 limits; cpu-exact is the "
                 "backend that holds them, the int8 path is held to the llama.cpp goldens instead\n",
                 which == 0 ? a.c_str() : b.c_str(), q8.c_str());
  };
  const ParitySummary rep = parity(*engine, ids, cfg);
  std::printf("%-20s %6s %10s %12s %12s  %s\n", "name", "layer", "n", "nmse", "max_abs", "");
  for (const auto& e : rep.rows)
    if (verbose || !e.ok)
      std::printf("%-20s %6d %10lld %12.3e %12.3e  %s\n", e.name.c_str(), e.layer, (long long)e.n, e.nmse, e.max_abs,
                  e.ok ? "ok" : "DIVERGES");
  if (rep.first_divergence >= 0) {
    const ParityRow* e = &rep.rows[static_cast<size_t>(rep.first_divergence)];
    std::printf("first divergence: %s (layer %d): nmse %.3e > tolerance %.1e, max |diff| %.3e\n", e->name.c_str(),
                e->layer, e->nmse, e->tolerance, e->max_abs);
    return 1;
  }
  double worst = 0;
  for (const auto& e : rep.rows) worst = std::max(worst, e.nmse);
  std::printf("%s vs %s: %zu intermediates agree (worst nmse %.3e, tolerance %.1e)\n", a.c_str(), b.c_str(),
              rep.rows.size(), worst, rep.rows.empty() ? 0.0 : rep.rows[0].tolerance);
  return 0;
}

}  // namespace

CommandRunner add_parity_command(CLI::App& app) {
  auto o = std::make_shared<ParityArgs>();
  auto* parity = app.add_subcommand("parity", "run two backends side by side; report the first diverging intermediate");
  parity->add_option("-m,--model", o->model, "GGUF model file, or a Hugging Face / MLX model folder")
      ->required()
      ->check(CLI::ExistingPath);
  parity->add_option("--a", o->a, "reference backend")->capture_default_str();
  parity->add_option("--b", o->b, "backend under test")->capture_default_str();
  parity->add_option("-t,--threads", o->threads, "threads");
  parity->add_option("--tokens", o->tokens, "comma-separated token ids (default: the tokenized prompt)");
  parity->add_option("-p,--prompt", o->prompt, "prompt text")->capture_default_str();
  parity->add_option("--decode", o->decode, "greedy decode steps compared after the prompt")->capture_default_str();
  parity->add_option("--cache-type", o->cache, "KV cache type: " + cache_type_names())->capture_default_str();
  parity->add_flag("-v,--verbose", o->verbose, "print every intermediate, not only divergent ones");

  return [o] {
    return cmd_parity(o->model, o->a, o->b, o->threads, o->cache, o->tokens, o->prompt, o->decode, o->verbose);
  };
}

}  // namespace sluice::cli
