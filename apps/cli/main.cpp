// apps/cli: the `sluice` command — argument parsing and the loops, no model knowledge.
#include <CLI/CLI.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "common_opts.h"

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "format/gguf.h"
#include "kvcodec/kvcodec.h"
#include "models/model.h"
#include "runtime/generator.h"
#include "runtime/parity.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "sampling/sampler.h"

using namespace sluice;
using sluice::cli::add_generate_options;
using sluice::cli::CommonOpts;
using sluice::cli::parse_cache_type;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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

std::string to_hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}


int cmd_run(const CommonOpts& co, const std::string& prompt, const GenerateParams& gp, bool lookup,
            const SpeculativeParams& spec, const std::string& draft_path) {
  auto t_load = Clock::now();
  auto model = co.load_model();
  auto be = co.make();
  std::fprintf(stderr, "loaded %s (%s, %lld layers, %.1f MB) in %.2f s; backend %s, %d threads\n", co.model.c_str(),
               model->hparams().arch.c_str(), static_cast<long long>(model->hparams().n_layer),
               model->weight_bytes() / 1e6, seconds_since(t_load), std::string(be->name()).c_str(), be->n_threads());
  // The context is sized before the generator tokenizes, so the prompt is tokenized here too.
  const auto n_prompt = static_cast<int64_t>(
      model->tokenizer().encode(prompt, /*add_special=*/true, gp.parse_special).size());
  Session s(*model, *be, co.kv(*model, n_prompt, gp.n_predict));

  // The drafter (and its vocabulary check) before any output.
  std::unique_ptr<Model> draft_model;
  std::unique_ptr<Drafter> drafter;
  if (!draft_path.empty()) {
    draft_model = Model::load(draft_path);
    drafter = std::make_unique<ModelDrafter>(*model, *draft_model, *be, co.kv(*draft_model, n_prompt, gp.n_predict));
  } else if (lookup) {
    drafter = std::make_unique<NgramDrafter>(spec);
  }
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  // Steady state = the second half of the decode: the first tokens fill the expert cache (or
  // the page cache), so the whole-run rate mixes warm-up with what a long run settles at.
  // (Not "after the cache filled": mmap has no cache of its own to watch, and a half is the
  // same rule for every policy.)
  const bool steady = model->experts().policy() != ExpertPolicy::resident && gp.n_predict >= 4;
  const int half = gp.n_predict / 2;
  ExpertStats at_half;
  auto t_half = Clock::now();
  const auto print = [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  SpeculativeStats spec_st;
  const GenerationStats st = drafter ? run_speculative(s, prompt, gp, *drafter, spec.draft_max, print, &spec_st)
                                     : Generator(s).run(prompt, gp, print, [&](int n_gen) {
                                         if (steady && n_gen == half) {
                                           at_half = model->experts().stats();
                                           t_half = Clock::now();
                                         }
                                       });
  if (st.stop == StopReason::context_full)
    std::fprintf(stderr, "\n[context full at %lld tokens]\n", static_cast<long long>(s.n_ctx()));
  // The text ends its line before the stats go to stderr (stdout may be a pipe, not flushed per line).
  std::printf("\n");
  std::fflush(stdout);
  const int n_gen = st.n_generated;
  const double t_prompt = st.prompt_seconds, t_gen = st.generate_seconds;
  std::fprintf(stderr,
               "prompt: %d tokens in %.3f s (%.1f tok/s); generation: %d tokens in %.3f s (%.1f tok/s); stop: %s\n",
               st.n_prompt, t_prompt, st.n_prompt / std::max(t_prompt, 1e-9), n_gen, t_gen,
               n_gen / std::max(t_gen, 1e-9), stop_reason_name(st.stop));
  if (drafter)
    std::fprintf(
        stderr,
        "speculative (%s, K=%d): %lld verify steps for %d tokens (%.2f per step); drafted %lld, "
        "accepted %lld (%.1f%%)%s\n",
        draft_path.empty() ? "prompt lookup" : "draft model", spec.draft_max, static_cast<long long>(spec_st.steps),
        n_gen, n_gen / std::max<double>(1.0, static_cast<double>(spec_st.steps)),
        static_cast<long long>(spec_st.drafted), static_cast<long long>(spec_st.accepted), 100.0 * spec_st.acceptance(),
        spec_st.replayed ? ("; " + std::to_string(spec_st.replayed) + " tokens replayed after rollbacks").c_str() : "");
  co.report_experts(*model);
  if (steady && n_gen > half)
    std::fprintf(
        stderr, "steady state (second half of the decode, tokens %d-%d): %s\n", half + 1, n_gen,
        format_expert_steady_state(at_half, model->experts().stats(), seconds_since(t_half), n_gen - half).c_str());
  CommonOpts::report_backend(*be);
  return 0;
}

int cmd_eval(const CommonOpts& co, const std::string& tokens_arg, int greedy, const std::string& logits_path) {
  auto model = co.load_model();
  auto be = co.make();
  std::vector<int32_t> ids = parse_token_list(tokens_arg);
  Session s(*model, *be, co.kv(*model, static_cast<int64_t>(ids.size()), greedy));
  auto logits = s.eval(ids, /*all_logits=*/true);
  if (!logits_path.empty()) {
    std::ofstream out(logits_path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!out) fail("cannot write logits to ", logits_path);
  }
  const int64_t n_vocab = model->hparams().n_vocab;
  std::vector<int32_t> generated;
  std::string text;
  int32_t next = argmax(logits.subspan(logits.size() - n_vocab));
  for (int i = 0; i < greedy; ++i) {
    // EOS does not stop the continuation: the goldens always have exactly N tokens.
    generated.push_back(next);
    text += model->tokenizer().token_to_piece(next);
    if (i + 1 == greedy) break;
    std::vector<int32_t> one{next};
    next = argmax(s.eval(one));
  }
  nlohmann::json j;
  j["prompt_tokens"] = ids;
  j["generated"] = generated;
  j["text"] = text;
  j["text_hex"] = to_hex(text);
  // Invalid UTF-8 in pieces is replaced by U+FFFD, as in the goldens' "text".
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  co.report_experts(*model);
  return 0;
}

int cmd_inspect(const std::string& path) {
  GgufFile f(path);
  std::printf("file: %s\nGGUF v%u, %zu metadata keys, %zu tensors, alignment %zu, data at offset %zu\n\n", path.c_str(),
              f.version(), f.metadata().size(), f.tensors().size(), f.alignment(), f.data_offset());
  std::printf("metadata:\n");
  for (const auto& [k, v] : f.metadata()) std::printf("  %-48s %s\n", k.c_str(), v.to_string().c_str());
  try {
    auto m = Model::load(path);
    const Hparams& hp = m->hparams();
    std::printf("\nhyperparameters (%s):\n", hp.arch.c_str());
    std::printf("  n_vocab %lld, n_embd %lld, n_layer %lld, n_head %lld, n_head_kv %lld, head_dim k/v %lld/%lld\n",
                (long long)hp.n_vocab, (long long)hp.n_embd, (long long)hp.n_layer, (long long)hp.n_head,
                (long long)hp.n_head_kv, (long long)hp.head_dim_k, (long long)hp.head_dim_v);
    std::printf("  n_ff %lld, rms_eps %g, rope base %g, n_rot %lld (%s), ctx_train %lld\n", (long long)hp.n_ff[0],
                hp.rms_eps, hp.rope_base, (long long)hp.n_rot, hp.rope_mode == RopeMode::neox ? "neox" : "normal",
                (long long)hp.n_ctx_train);
  } catch (const Error& e) {
    std::printf("\n(not runnable: %s)\n", e.what());
  }
  std::printf("\n%-40s %-6s %-24s %12s\n", "tensor", "type", "shape", "bytes");
  size_t total = 0;
  int64_t params = 0;
  for (const auto& t : f.tensors()) {
    std::string shape;
    for (int d = 0; d < t.n_dims; ++d) shape += (d ? ", " : "") + std::to_string(t.ne[d]);
    std::printf("%-40s %-6s %-24s %12zu\n", t.name.c_str(), std::string(dtype_name(t.type)).c_str(),
                ("[" + shape + "]").c_str(), t.nbytes);
    total += t.nbytes;
    params += t.n_elements();
  }
  std::printf("\ntotal: %zu tensors, %lld parameters, %zu bytes (%.2f MB), %.2f bits/weight\n", f.tensors().size(),
              (long long)params, total, total / 1e6, params ? 8.0 * total / params : 0.0);
  return 0;
}

int cmd_parity(const std::string& model_path, const std::string& a, const std::string& b, int threads,
               const std::string& cache_type, const std::string& tokens_arg, const std::string& prompt, int n_decode,
               bool verbose) {
  auto model = Model::load(model_path);
  auto ba = make_backend(a, threads), bb = make_backend(b, threads);
  std::vector<int32_t> ids = !tokens_arg.empty() ? parse_token_list(tokens_arg)
                                                 : model->tokenizer().encode(prompt, true);
  KvCacheOptions kv;
  kv.n_ctx = static_cast<int64_t>(ids.size()) + n_decode + 1;
  kv.type_k = kv.type_v = parse_cache_type(cache_type);
  for (const Backend* be : {ba.get(), bb.get()})
    if (const char* q8 = cpu_backend_q8_level(*be))
      std::fprintf(
          stderr,
          "note: backend '%s' multiplies quantized weights by int8 activations (%s): expect NMSE ~1e-5..1e-3 on "
          "quantized models and occasional expert-choice flips, above these float32 limits; cpu-exact is the "
          "backend that holds them, the int8 path is held to the llama.cpp goldens instead\n",
          be == ba.get() ? a.c_str() : b.c_str(), q8);
  auto rep = run_parity(*model, *ba, *model, *bb, ids, n_decode, kv);
  std::printf("%-20s %6s %10s %12s %12s  %s\n", "name", "layer", "n", "nmse", "max_abs", "");
  for (const auto& e : rep.entries)
    if (verbose || !e.ok())
      std::printf("%-20s %6d %10lld %12.3e %12.3e  %s\n", e.name.c_str(), e.layer, (long long)e.n, e.nmse, e.max_abs,
                  e.ok() ? "ok" : "DIVERGES");
  if (const ParityEntry* e = rep.first_divergence()) {
    std::printf("first divergence: %s (layer %d): nmse %.3e > tolerance %.1e, max |diff| %.3e\n", e->name.c_str(),
                e->layer, e->nmse, e->tolerance, e->max_abs);
    return 1;
  }
  double worst = 0;
  for (const auto& e : rep.entries) worst = std::max(worst, e.nmse);
  std::printf("%s vs %s: %zu intermediates agree (worst nmse %.3e, tolerance %.1e)\n", a.c_str(), b.c_str(),
              rep.entries.size(), worst, rep.entries.empty() ? 0.0 : rep.entries[0].tolerance);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice: a Mixture-of-Experts inference engine"};
  app.require_subcommand(1);

  CommonOpts run_co;
  std::string prompt = "Once upon a time";
  GenerateParams gp;
  auto* run = app.add_subcommand("run", "generate text from a prompt");
  run_co.add(run);
  run->add_option("-p,--prompt", prompt, "prompt text")->capture_default_str();
  add_generate_options(run, gp);
  bool lookup = false;
  SpeculativeParams spec;
  run->add_flag("--lookup", lookup,
                "speculative decoding by prompt lookup: draft the tokens that followed the last n-gram's earlier "
                "occurrence, verify them in one batch (same output as without)");
  std::string draft_path;
  run->add_option("--draft", draft_path,
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

  CommonOpts eval_co;
  std::string tokens_arg, logits_path;
  int greedy = 0;
  auto* eval = app.add_subcommand("eval", "evaluate token ids as one batch; print JSON, write logits");
  eval_co.add(eval);
  eval->add_option("--tokens", tokens_arg, "comma-separated token ids")->required();
  eval->add_option("--greedy", greedy, "greedy continuation length (EOS does not stop it)");
  eval->add_option("--logits", logits_path, "write prompt logits as float32 [n_tokens x n_vocab]");

  std::string inspect_path;
  auto* inspect = app.add_subcommand("inspect", "print a GGUF file's metadata, hyperparameters and tensors");
  inspect->add_option("file", inspect_path, "GGUF file")->required()->check(CLI::ExistingFile);

  std::string par_cache = "f16";
  std::string par_model, par_a = "ref", par_b = "cpu-exact", par_tokens, par_prompt = "Once upon a time";
  int par_threads = 0, par_decode = 4;
  bool par_verbose = false;
  auto* parity = app.add_subcommand("parity", "run two backends side by side; report the first diverging intermediate");
  parity->add_option("-m,--model", par_model, "GGUF model file, or a Hugging Face / MLX model folder")
      ->required()
      ->check(CLI::ExistingPath);
  parity->add_option("--a", par_a, "reference backend")->capture_default_str();
  parity->add_option("--b", par_b, "backend under test")->capture_default_str();
  parity->add_option("-t,--threads", par_threads, "threads");
  parity->add_option("--tokens", par_tokens, "comma-separated token ids (default: the tokenized prompt)");
  parity->add_option("-p,--prompt", par_prompt, "prompt text")->capture_default_str();
  parity->add_option("--decode", par_decode, "greedy decode steps compared after the prompt")->capture_default_str();
  parity->add_option("--cache-type", par_cache, "KV cache type: " + std::string(kv_type_names()))
      ->capture_default_str();
  parity->add_flag("-v,--verbose", par_verbose, "print every intermediate, not only divergent ones");

  auto run_synth = cli::add_synth_command(app);
  auto run_perplexity = cli::add_perplexity_command(app);
  auto run_pack = cli::add_pack_command(app);
  auto run_bench = cli::add_bench_command(app);
  auto run_template = cli::add_template_command(app);
  auto run_serve = cli::add_serve_command(app);
  auto run_chat = cli::add_chat_command(app);

  // CLI11 answers a mistyped command with "A subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "sluice: error: unknown command '%s' (commands: %s; sluice --help)\n", argv[1],
                   names.c_str());
      return 1;
    }
  }
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto* sub : app.get_subcommands())
      if (sub->get_name() == "chat") return run_chat();
    for (auto* sub : app.get_subcommands())
      if (sub->get_name() == "synth") return run_synth();
    for (auto* sub : app.get_subcommands())
      if (sub->get_name() == "perplexity") return run_perplexity();
    for (auto* sub : app.get_subcommands())
      if (sub->get_name() == "pack") return run_pack();
    for (auto* sub : app.get_subcommands())
      if (sub->get_name() == "bench") return run_bench();
    for (auto* sub : app.get_subcommands())
      if (sub->get_name() == "template") return run_template();
    for (auto* sub : app.get_subcommands())
      if (sub->get_name() == "serve") return run_serve();
    if (*run) {
      if (spec.ngram_min > spec.ngram_max)
        fail("--ngram-min ", spec.ngram_min, " is above --ngram-max ", spec.ngram_max);
      if (lookup && !draft_path.empty()) fail("--lookup and --draft: choose one drafter");
      return cmd_run(run_co, prompt, gp, lookup, spec, draft_path);
    }
    if (*eval) return cmd_eval(eval_co, tokens_arg, greedy, logits_path);
    if (*inspect) return cmd_inspect(inspect_path);
    if (*parity)
      return cmd_parity(par_model, par_a, par_b, par_threads, par_cache, par_tokens, par_prompt, par_decode,
                        par_verbose);
  } catch (const Error& e) {
    std::fprintf(stderr, "sluice: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
