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

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "format/gguf.h"
#include "kvcodec/kvcodec.h"
#include "models/model.h"
#include "runtime/generator.h"
#include "runtime/parity.h"
#include "runtime/session.h"
#include "sampling/sampler.h"

using namespace sluice;

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


std::optional<DType> parse_cache_type(const std::string& s) {
  auto t = kv_type_from_name(s);
  if (!t) fail("cache type '", s, "' is not supported (", kv_type_names(), ")");
  return t;
}

struct CommonOpts {
  std::string model;
  std::string backend = "cpu";
  int threads = 0;
  int64_t ctx = 0;
  std::string cache_type = "f16", cache_type_k, cache_type_v;  // -k/-v override the shorthand
  bool no_auto_asymmetric = false, no_kv_rotation = false, no_kv_mean = false;
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
  std::string gpu_expert_cache;
  bool mmap_weights = false;
  void add(CLI::App* app) {
    app->add_option("-m,--model", model, "GGUF model file")->required()->check(CLI::ExistingFile);
    app->add_option(
           "--backend", backend,
           "ref | cpu (int8 activations on quantized weights) | cpu-exact | cuda (when built; op level, see README)")
        ->capture_default_str();
    app->add_option("-t,--threads", threads, "worker threads (0 = all cores)")->capture_default_str();
    app->add_option("-c,--ctx", ctx, "context size in tokens (0 = min(model's, 4096))");
    app->add_option("--cache-type", cache_type, "KV cache type of K and V (shorthand for both)")->capture_default_str();
    app->add_option("--cache-type-k", cache_type_k, "K cache type: " + std::string(kv_type_names()));
    app->add_option("--cache-type-v", cache_type_v, "V cache type: " + std::string(kv_type_names()));
    app->add_flag("--no-auto-asymmetric", no_auto_asymmetric, "keep a K type below 8 bits even with GQA >= 6");
    app->add_flag(
        "--no-kv-rotation", no_kv_rotation,
        "store q8_0/q4_0 K/V unrotated (default: Hadamard-rotated in blocks of 64, or of the largest power of two >= 16 dividing the head dim)");
    app->add_flag(
        "--no-kv-mean", no_kv_mean,
        "store tq K rows as given (default: minus a per-head mean of the first rows a sequence writes; exact, memory/kv_cache.h)");
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
    app->add_option("--prefetch-extra", prefetch_extra,
                    "the predictor stages the top k+M experts (-1: M = max(1, k/4))");
    app->add_option("--expert-io", expert_io, "stream: auto | uring | pread")->capture_default_str();
    app->add_flag("--no-direct-io", no_direct_io, "stream: read experts through the page cache instead of O_DIRECT");
    app->add_flag("--mmap", mmap_weights,
                  "resident: map the file instead of reading it into memory (faster start, slower decode)");
    app->add_option("--gpu-expert-cache", gpu_expert_cache,
                    "cuda: VRAM budget for routed experts, cached by (layer, expert) (e.g. 8G; default: all in VRAM)");
  }
  std::unique_ptr<Backend> make() const {
    BackendOptions o{.n_threads = threads};
    if (!gpu_expert_cache.empty()) {
      if (backend != "cuda") fail("--gpu-expert-cache needs --backend cuda");
      o.gpu_expert_cache = cli::parse_byte_size("--gpu-expert-cache", gpu_expert_cache);
    }
    return make_backend(backend, o);
  }
  // The backend's end-of-run figures on stderr (cuda: its expert tier; nothing for the others).
  static void report_backend(const Backend& be) {
    if (std::string line = be.stats_line(); !line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
  }
  ModelOptions model_options() const {
    ModelOptions o;
    o.experts.policy = expert_policy_from_name(experts);
    cli::set_expert_cache(o.experts, expert_cache);
    o.experts.pin_per_layer = pin_experts;
    o.experts.routing_counts_path = routing_counts;
    o.experts.prefetch = prefetch;
    o.experts.prefetch_extra = prefetch_extra;
    o.experts.prefetch_gate = !no_prefetch_gate;
    o.experts.io = expert_io;
    o.experts.direct_io = !no_direct_io;
    o.experts.progress = true;
    o.read_weights = !mmap_weights;
    o.progress = [last = size_t{0}](size_t done, size_t total) mutable {
      // A line per GiB for big files (reading from a cold disk takes a while), nothing for small ones.
      if (total < (size_t{1} << 30) || (done - last < (size_t{1} << 30) && done != total)) return;
      last = done;
      std::fprintf(stderr, "loading: %.1f / %.1f GB\n", done / 1e9, total / 1e9);
    };
    return o;
  }
  // The model, with the routing trace recording when --routing-trace-out asks for it.
  std::unique_ptr<Model> load_model() const {
    auto m = Model::load(model, model_options());
    if (!routing_trace_out.empty()) m->experts().record_routing_trace();
    return m;
  }
  // The store's figures on stderr, and the calibration file when asked for.
  void report_experts(const Model& m) const {
    std::fprintf(stderr, "%s\n", format_expert_stats(m.experts().stats()).c_str());
    if (!routing_counts_out.empty()) m.experts().save_routing_counts(routing_counts_out);
    if (!routing_trace_out.empty()) m.experts().save_routing_trace(routing_trace_out);
  }
  KvCacheOptions kv(const Model& m, int64_t need) const {
    KvCacheOptions o;
    o.n_ctx = ctx > 0 ? ctx : std::max<int64_t>(std::min<int64_t>(m.hparams().n_ctx_train, 4096), need);
    o.type_k = *parse_cache_type(cache_type_k.empty() ? cache_type : cache_type_k);
    o.type_v = *parse_cache_type(cache_type_v.empty() ? cache_type : cache_type_v);
    o.auto_asymmetric = !no_auto_asymmetric;
    if (no_kv_rotation) o.rotation = KvCacheOptions::Rotation::off;
    if (no_kv_mean) o.k_mean = KvCacheOptions::KMean::off;
    return o;
  }
};

int cmd_run(const CommonOpts& co, const std::string& prompt, const GenerateParams& gp) {
  auto t_load = Clock::now();
  auto model = co.load_model();
  auto be = co.make();
  std::fprintf(stderr, "loaded %s (%s, %lld layers, %.1f MB) in %.2f s; backend %s, %d threads\n", co.model.c_str(),
               model->hparams().arch.c_str(), static_cast<long long>(model->hparams().n_layer),
               model->weight_bytes() / 1e6, seconds_since(t_load), std::string(be->name()).c_str(), be->n_threads());
  // The context is sized before the generator tokenizes, so the prompt is tokenized here too.
  const auto n_prompt = static_cast<int64_t>(model->tokenizer().encode(prompt, /*add_special=*/true).size());
  Session s(*model, *be, co.kv(*model, n_prompt + gp.n_predict));

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
  const GenerationStats st = Generator(s).run(
      prompt, gp,
      [](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        return true;
      },
      [&](int n_gen) {
        if (steady && n_gen == half) {
          at_half = model->experts().stats();
          t_half = Clock::now();
        }
      });
  if (st.stop == StopReason::context_full)
    std::fprintf(stderr, "\n[context full at %lld tokens]\n", static_cast<long long>(s.n_ctx()));
  std::printf("\n");
  const int n_gen = st.n_generated;
  const double t_prompt = st.prompt_seconds, t_gen = st.generate_seconds;
  std::fprintf(stderr,
               "prompt: %d tokens in %.3f s (%.1f tok/s); generation: %d tokens in %.3f s (%.1f tok/s); stop: %s\n",
               st.n_prompt, t_prompt, st.n_prompt / std::max(t_prompt, 1e-9), n_gen, t_gen,
               n_gen / std::max(t_gen, 1e-9), stop_reason_name(st.stop));
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
  Session s(*model, *be, co.kv(*model, static_cast<int64_t>(ids.size()) + greedy));
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
  kv.type_k = kv.type_v = *parse_cache_type(cache_type);
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
  SamplerParams& sp = gp.sampler;
  auto* run = app.add_subcommand("run", "generate text from a prompt");
  run_co.add(run);
  run->add_option("-p,--prompt", prompt, "prompt text")->capture_default_str();
  run->add_option("-n,--n-predict", gp.n_predict, "tokens to generate")->capture_default_str();
  run->add_option("--temp", sp.temp, "temperature (0 = greedy)")->capture_default_str();
  run->add_option("--top-k", sp.top_k, "top-k (0 = off)")->capture_default_str();
  run->add_option("--top-p", sp.top_p, "top-p (1 = off)")->capture_default_str();
  run->add_option("--min-p", sp.min_p, "min-p (0 = off)")->capture_default_str();
  run->add_option("--repeat-penalty", sp.repeat_penalty, "repetition penalty (1 = off)")->capture_default_str();
  run->add_option("--presence-penalty", sp.presence_penalty, "presence penalty")->capture_default_str();
  run->add_option("--frequency-penalty", sp.frequency_penalty, "frequency penalty")->capture_default_str();
  run->add_option("--repeat-last-n", sp.penalty_last_n, "tokens the penalties look back over")->capture_default_str();
  run->add_option("-s,--seed", sp.seed, "RNG seed")->capture_default_str();
  run->add_flag("--ignore-eos", gp.ignore_eos, "keep generating after end-of-sequence");
  run->add_option("--stop", gp.stop,
                  "stop when the text reaches this string (repeatable; the string itself is not printed)")
      ->allow_extra_args(false);

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
  parity->add_option("-m,--model", par_model, "GGUF model file")->required()->check(CLI::ExistingFile);
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

  CLI11_PARSE(app, argc, argv);
  try {
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
    if (*run) return cmd_run(run_co, prompt, gp);
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
