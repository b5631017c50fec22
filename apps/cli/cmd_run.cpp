// apps/cli/cmd_run: `sluice run` — generate from a prompt, streamed to stdout; load, speed,
// speculative-decoding and expert-store figures to stderr.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "common_opts.h"
#include "sluice/sluice.h"

namespace sluice::cli {
namespace {

struct RunArgs {
  CommonOpts co;
  std::string prompt = "Once upon a time";
  GenerateOptions gp;
  bool lookup = false;
  std::string draft_path;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int cmd_run(const CommonOpts& co, const std::string& prompt, GenerateOptions gp, const std::string& draft_path) {
  auto t_load = Clock::now();
  auto engine = co.open();
  const ModelInfo info = engine->info();
  std::fprintf(stderr, "loaded %s (%s, %lld layers, %.1f MB) in %.2f s; backend %s, %d threads\n", co.model.c_str(),
               info.arch.c_str(), static_cast<long long>(info.n_layer), info.weight_bytes / 1e6, seconds_since(t_load),
               engine->backend_name().c_str(), engine->n_threads());
  // The context is sized before the generator tokenizes, so the prompt is tokenized here too.
  const auto n_prompt = static_cast<int64_t>(engine->tokenize(prompt, /*add_bos=*/true, gp.parse_special).size());
  engine->set_context(co.context_size(info, n_prompt, gp.n_predict));

  // The drafter (and its vocabulary check) before any output.
  if (!draft_path.empty())
    engine->set_draft_context(co.context_size(engine->load_draft(draft_path), n_prompt, gp.n_predict));
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  // Steady state = the second half of the decode: the first tokens fill the expert cache (or
  // the page cache), so the whole-run rate mixes warm-up with what a long run settles at.
  // (Not "after the cache filled": mmap has no cache of its own to watch, and a half is the
  // same rule for every policy.)
  const bool steady = engine->expert_policy() != "resident" && gp.n_predict >= 4;
  const int half = gp.n_predict / 2;
  gp.on_token = [&](int n_gen) {
    if (steady && n_gen == half) engine->mark_expert_stats();
  };
  const auto print = [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  GenerateStats st;
  engine->generate(prompt, gp, print, &st);
  if (st.stop_reason == StopReason::context_full)
    std::fprintf(stderr, "\n[context full at %lld tokens]\n", static_cast<long long>(engine->context_size()));
  // The text ends its line before the stats go to stderr (stdout may be a pipe, not flushed per line).
  std::printf("\n");
  std::fflush(stdout);
  const int n_gen = st.n_generated;
  const double t_prompt = st.prompt_seconds, t_gen = st.generate_seconds;
  std::fprintf(stderr,
               "prompt: %d tokens in %.3f s (%.1f tok/s); generation: %d tokens in %.3f s (%.1f tok/s); stop: %s\n",
               st.n_prompt, t_prompt, st.n_prompt / std::max(t_prompt, 1e-9), n_gen, t_gen,
               n_gen / std::max(t_gen, 1e-9), stop_reason_name(st.stop_reason));
  if (gp.speculative.mode != SpeculativeMode::off)
    std::fprintf(
        stderr,
        "speculative (%s, K=%d): %lld verify steps for %d tokens (%.2f per step); drafted %lld, "
        "accepted %lld (%.1f%%)%s\n",
        draft_path.empty() ? "prompt lookup" : "draft model", gp.speculative.draft_max,
        static_cast<long long>(st.spec_steps), n_gen, n_gen / std::max<double>(1.0, static_cast<double>(st.spec_steps)),
        static_cast<long long>(st.spec_drafted), static_cast<long long>(st.spec_accepted), 100.0 * st.spec_acceptance(),
        st.spec_replayed ? ("; " + std::to_string(st.spec_replayed) + " tokens replayed after rollbacks").c_str() : "");
  co.report_experts(*engine);
  if (steady && n_gen > half)
    std::fprintf(stderr, "steady state (second half of the decode, tokens %d-%d): %s\n", half + 1, n_gen,
                 engine->expert_stats_since_mark(n_gen - half).c_str());
  CommonOpts::report_backend(*engine);
  return 0;
}

}  // namespace

CommandRunner add_run_command(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* run = app.add_subcommand("run", "generate text from a prompt");
  a->co.add(run);
  run->add_option("-p,--prompt", a->prompt, "prompt text")->capture_default_str();
  add_generate_options(run, a->gp);
  SpeculativeOptions& spec = a->gp.speculative;
  run->add_flag("--lookup", a->lookup,
                "speculative decoding by prompt lookup: draft the tokens that followed the last n-gram's earlier "
                "occurrence, verify them in one batch (same output as without)");
  run->add_option("--draft", a->draft_path,
                  "speculative decoding with a draft model (same vocabulary): its greedy continuation is verified in "
                  "one batch (same output as without)")
      ->check(CLI::ExistingFile);
  run->add_option("--draft-max", spec.draft_max, "--lookup / --draft: most draft tokens per step")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  run->add_option("--ngram-max", spec.ngram_max, "--lookup: longest n-gram looked up")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  run->add_option("--ngram-min", spec.ngram_min, "--lookup: shortest n-gram looked up")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));

  return [a] {
    SpeculativeOptions& spec = a->gp.speculative;
    if (spec.ngram_min > spec.ngram_max) fail("--ngram-min ", spec.ngram_min, " is above --ngram-max ", spec.ngram_max);
    if (a->lookup && !a->draft_path.empty()) fail("--lookup and --draft: choose one drafter");
    spec.mode = a->lookup                ? SpeculativeMode::lookup
                : !a->draft_path.empty() ? SpeculativeMode::draft_model
                                         : SpeculativeMode::off;
    return cmd_run(a->co, a->prompt, a->gp, a->draft_path);
  };
}

}  // namespace sluice::cli
