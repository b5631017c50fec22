// bench/run_bench: `sluice bench`, modelled on llama-bench: prompt processing (pp N) and
// token generation (tg N) throughput per thread count, KV cache type pair and depth, as a
// markdown table or JSON. Decode rows also give the bytes actually read per token (counted
// op by op by CountingBackend: dense weights, the experts chosen, KV rows), the achieved GB/s
// and its fraction of the read bandwidth measured by this binary in this run with the same
// thread count (--membw alone prints just that). --profile adds per-stage tables: time and
// bytes per decoded token, time and matmul multiply-adds per prompt batch. Depth (-d,
// llama-bench's "@ dN"): the runs start with N positions already in the cache, filled with
// synthetic K/V rows through the cache's codecs (kv_fill_synthetic), not by a prefill, which
// for 16K tokens would take many minutes on a few cores.
#include "bench/run_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels.h"
#include "bench/bench.h"
#include "bench/lookup_bench.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "kvcodec/kvcodec.h"
#include "memory/expert_store.h"
#include "models/model.h"
#include "runtime/session.h"

namespace sluice {
namespace {

struct CachePair {
  DType k, v;
};

struct Stats {
  double mean = 0, sd = 0;
};
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}
Stats stats(const std::vector<double>& v) {
  Stats s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(s.sd / static_cast<double>(v.size() - 1));
  }
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds used by this process (all threads). On a machine shared with other jobs the
// wall-clock rate moves with their load; tokens per CPU second (× threads) moves much less
// (the pool's waits spin only microseconds before sleeping), so JSON reports both.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// "1.23 GiB" / "45.6 MiB", "3.05 B" / "51.2 M": llama-bench's units, readable for tiny models too.
std::string human(double v, double big, const char* big_unit, double small, const char* small_unit) {
  char b[64];
  if (v >= big)
    std::snprintf(b, sizeof b, "%.2f %s", v / big, big_unit);
  else
    std::snprintf(b, sizeof b, "%.2f %s", v / small, small_unit);
  return b;
}

std::string base_name(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// The --profile table of a pp row: time per prompt batch by stage, and each stage's matmul
// multiply-adds per second against the int8 peak measured in the same run (the attend stage, the
// float attention op, RoPE and the KV store, does no int8 multiply-adds).
std::string pp_profile(const BenchCounters& c, const std::string& model, int threads, const std::string& cache,
                       int n_prompt, const std::string& at, int reps, double total_s, double peak) {
  std::string out;
  char buf[320];
  std::snprintf(buf, sizeof buf, "\nprofile: %s, %d threads, cache %s, pp%d%s (per batch; int8 peak %.1f GMAC/s)\n\n",
                model.c_str(), threads, cache.c_str(), n_prompt, at.c_str(), peak / 1e9);
  out += buf;
  out += "| stage | ms | % time | GMAC | GMAC/s | % of int8 peak |\n| --- | ---: | ---: | ---: | ---: | ---: |\n";
  double staged = 0;
  for (size_t i = 0; i < c.seconds.size(); ++i) {
    staged += c.seconds[i];
    const double gmac = static_cast<double>(c.stage_macs[i]) / reps / 1e9;
    const double rate = c.seconds[i] > 0 ? static_cast<double>(c.stage_macs[i]) / c.seconds[i] : 0;
    std::snprintf(buf, sizeof buf, "| %s | %.1f | %.1f | %.2f | %.1f | %.1f |\n",
                  std::string(bench_stage_name(static_cast<BenchStage>(i))).c_str(), 1e3 * c.seconds[i] / reps,
                  100 * c.seconds[i] / total_s, gmac, rate / 1e9, peak > 0 ? 100 * rate / peak : 0.0);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "| (outside ops: routing, gather) | %.1f | %.1f | | | |\n",
                1e3 * (total_s - staged) / reps, 100 * (total_s - staged) / total_s);
  out += buf;
  const double rate = static_cast<double>(c.macs) / total_s;
  std::snprintf(buf, sizeof buf, "| total | %.1f | 100 | %.2f | %.1f | %.1f |\n", 1e3 * total_s / reps,
                static_cast<double>(c.macs) / reps / 1e9, rate / 1e9, peak > 0 ? 100 * rate / peak : 0.0);
  out += buf;
  return out;
}

// The --profile table of a tg row: time and bytes per token by stage against the bandwidth.
std::string tg_profile(const BenchCounters& c, const std::string& model, int threads, const std::string& cache,
                       const std::string& test, double n_tok, double total_s, double bw) {
  std::string out;
  double staged = 0;
  for (double x : c.seconds) staged += x;
  char buf[320];
  std::snprintf(buf, sizeof buf, "\nprofile: %s, %d threads, cache %s, %s (per token; SOL at %.1f GB/s)\n\n",
                model.c_str(), threads, cache.c_str(), test.c_str(), bw / 1e9);
  out += buf;
  out += "| stage | ms | % time | MB read | GB/s | SOL % |\n| --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (size_t i = 0; i < c.seconds.size(); ++i) {
    const double ms = 1e3 * c.seconds[i] / n_tok, mb = c.bytes[i] / n_tok / 1e6;
    const double g = c.seconds[i] > 0 ? c.bytes[i] / c.seconds[i] : 0;
    std::snprintf(buf, sizeof buf, "| %s | %.3f | %.1f | %.2f | %.1f | %.1f |\n",
                  std::string(bench_stage_name(static_cast<BenchStage>(i))).c_str(), ms, 100 * c.seconds[i] / total_s,
                  mb, g / 1e9, 100 * g / bw);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "| (outside ops: routing, gather, sampling) | %.3f | %.1f | | | |\n",
                1e3 * (total_s - staged) / n_tok, 100 * (total_s - staged) / total_s);
  out += buf;
  std::snprintf(buf, sizeof buf, "| total | %.3f | 100 | %.2f | %.1f | %.1f |\n", 1e3 * total_s / n_tok,
                c.total_bytes() / n_tok / 1e6, c.total_bytes() / total_s / 1e9, 100 * c.total_bytes() / total_s / bw);
  out += buf;
  return out;
}

DType cache_type_or_fail(const std::string& s) {
  if (const auto t = kv_type_from_name(s)) return *t;
  fail("bench: unknown cache type '", s, "' (", kv_type_names(), ")");
}

std::vector<CachePair> cache_pairs(const BenchArgs& a) {
  const auto& ks = a.cache_type_k.empty() ? a.cache_type : a.cache_type_k;
  const auto& vs = a.cache_type_v.empty() ? a.cache_type : a.cache_type_v;
  if (ks.size() != vs.size() && ks.size() != 1 && vs.size() != 1)
    fail("bench: ", ks.size(), " K cache types and ", vs.size(), " V cache types: give equal counts or one of either");
  std::vector<CachePair> out;
  for (size_t i = 0; i < std::max(ks.size(), vs.size()); ++i)
    out.push_back({cache_type_or_fail(ks[ks.size() == 1 ? 0 : i]), cache_type_or_fail(vs[vs.size() == 1 ? 0 : i])});
  return out;
}

// "f16", or "q8_0/tq4" when K and V differ.
std::string cache_label(DType k, DType v) {
  return k == v ? std::string(kv_type_name(k)) : std::string(kv_type_name(k)) + "/" + std::string(kv_type_name(v));
}

}  // namespace

int run_bench(const BenchArgs& a) {
  nlohmann::json out = nlohmann::json::array();
  if (a.membw_only) {
    if (!a.json) std::printf("| threads | read GB/s |\n| ---: | ---: |\n");
    for (int t : a.threads) {
      const double bw = membw_read(t, a.membw_mib << 20, a.reps);
      if (a.json)
        out.push_back({{"threads", t}, {"membw_gbps", bw / 1e9}});
      else
        std::printf("| %d | %.2f |\n", t, bw / 1e9);
    }
    if (a.json) std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (a.models.empty()) fail("bench: -m MODEL is required (or --membw)");
  const std::vector<CachePair> pairs = cache_pairs(a);
  int64_t max_depth = 0;
  for (int64_t d : a.depths) {
    if (d < 0) fail("bench: depth must be >= 0, got ", d);
    max_depth = std::max(max_depth, d);
  }
  // The machine beside every figure: vendor, model, the ISA level the kernels dispatch on, AMX.
  const CpuIdentity cpu = cpu_identity();
  const CpuFeatures& feat = cpu_features();
  const std::string isa(cpu_isa_name(cpu_isa_select()));
  // AMX: the int8 tiles of Q4_K/Q5_K/Q6_K prefill, where granted and not turned off.
  const bool amx_used = !a.exact && cpu_backend_default_options().q8_amx && cpu_isa_select() == CpuIsa::avx512 &&
                        cpu::q8_kernels_amx();
  const std::string amx = amx_used        ? "used (AMX-INT8 prefill tiles: Q4_K, Q5_K, Q6_K)"
                          : feat.amx_int8 ? "present, not used (SLUICE_CPU_AMX=0, --exact or no kernel permission)"
                                          : "none";
  const nlohmann::json cpu_json = {
      {"vendor", cpu.vendor},           {"model", cpu.model},        {"isa", isa},
      {"avx512_vnni", feat.avx512vnni}, {"amx_int8", feat.amx_int8}, {"amx_used", amx_used}};
  if (!a.json)
    std::printf("cpu: %s (%s); kernels: %s%s; AMX: %s\n\n", cpu.model.c_str(), cpu.vendor.c_str(), isa.c_str(),
                feat.avx512vnni ? " + VNNI" : "", amx.c_str());
  if (!a.json)
    std::printf(
        "| model | size | params | backend | threads | cache K/V | test | t/s | GB/s read / membw | SOL %% |\n"
        "| --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: |\n");
  std::string profile_text, experts_text, sequences_text, lookup_text;
  std::string ratio_note;  // how the sequences table's "vs one sequence" column was made, once one was
  for (const std::string& path : a.models) {
    std::fprintf(stderr, "bench: loading %s\n", path.c_str());
    ModelOptions mo;
    mo.experts.policy = expert_policy_from_name(a.experts);
    mo.experts.cache_auto = a.expert_cache == "auto";
    if (!mo.experts.cache_auto) mo.experts.cache_bytes = a.expert_cache_bytes;
    mo.experts.auto_extra_bytes = a.membw_mib << 20;  // the bandwidth test's buffer, allocated before each tg rep
    mo.experts.prefetch = a.prefetch;
    mo.experts.progress = true;
    mo.mlx_in_place = a.mlx_in_place;
    mo.on_note = [](const std::string& line) { std::fprintf(stderr, "bench: %s\n", line.c_str()); };
    {
      CpuBackendOptions o = cpu_backend_default_options();
      o.q8_activations = !a.exact;  // what the runs below read, asked of a one-thread twin
      const auto twin = make_cpu_backend(1, cpu_isa_select(), o);
      mo.repack = a.repack.value_or(repack_by_default(*twin));
      mo.repack_in_place = cpu_backend_reads_every_rows16(*twin);
    }
    mo.repack_progress = [last = size_t{0}](size_t done, size_t total) mutable {
      if (done - last < (size_t{1} << 30) && done != total) return;  // a line per GiB
      last = done;
      std::fprintf(stderr, "bench: repack %.1f / %.1f GB\n", done / 1e9, total / 1e9);
    };
    auto model = Model::load(path, mo);
    if (!model->repack_summary().empty()) std::fprintf(stderr, "bench: %s\n", model->repack_summary().c_str());
    if (const std::string q = model->file().get_string_or("sluice.folder.quantization", ""); !q.empty())
      std::fprintf(stderr, "bench: %s\n", q.c_str());
    const bool streamed = model->experts().policy() != ExpertPolicy::resident;
    // The disk's speed of light for the tg rows' expert reads: 1 GiB in O_DIRECT reads of 1 MiB
    // (the size of an expert's slices) at random offsets, 32 in flight, best of two. No figure,
    // not a failed bench, where O_DIRECT is refused (tmpfs) or the file is under 1 MiB.
    double disk_bw = 0;
    if (streamed) {
      std::fprintf(stderr, "bench: measuring the disk's O_DIRECT read speed on %s\n", path.c_str());
      try {
        disk_bw = disk_read_bandwidth(path, size_t{1} << 30, size_t{1} << 20, 32, 2);
      } catch (const Error& e) {
        std::fprintf(stderr, "bench: no disk figure: %s\n", e.what());
      }
    }
    const Hparams& hp = model->hparams();
    int64_t params = 0;
    for (const auto& t : model->file().tensors()) params += t.n_elements();
    const std::string size = human(static_cast<double>(model->weight_bytes()), 1 << 30, "GiB", 1 << 20, "MiB");
    const std::string n_params = human(static_cast<double>(params), 1e9, "B", 1e6, "M");
    for (int t : a.threads) {
      CpuBackendOptions opt = cpu_backend_default_options();
      opt.q8_activations = !a.exact;
      auto inner = make_cpu_backend(t, cpu_isa_select(), opt);
      CountingBackend be(*inner, a.profile);
      const char* q8 = cpu_backend_q8_level(*inner);
      const std::string be_name = std::string("cpu ") + std::string(cpu_isa_name(cpu_isa_select())) +
                                  (q8 ? std::string(" q8:") + q8 : std::string(" exact"));
      std::fprintf(stderr, "bench: %d threads: measuring read bandwidth (%zu MiB)\n", t, a.membw_mib);
      const double bw = membw_read(t, a.membw_mib << 20, a.reps);
      const double peak = a.n_prompt > 0 ? int8_peak(t) : 0;
      const double amx_peak = a.n_prompt > 0 && amx_used ? amx_int8_peak(t) : 0;
      if (amx_peak > 0 && !a.json)
        std::fprintf(stderr, "bench: %d threads: AMX-INT8 peak %.1f GMAC/s (int8 VNNI peak %.1f)\n", t, amx_peak / 1e9,
                     peak / 1e9);
      for (const CachePair& cp : pairs) {
        KvCacheOptions kv;
        kv.n_ctx = max_depth + std::max({a.n_prompt, a.n_gen, 2}) + 1;  // 2: the warm-up batch
        kv.type_k = cp.k;
        kv.type_v = cp.v;
        kv.auto_asymmetric = !a.no_auto_asym;
        if (a.no_kv_rotation) kv.rotation = KvCacheOptions::Rotation::off;
        if (a.no_kv_mean) kv.k_mean = KvCacheOptions::KMean::off;
        kv.n_sink_k = a.kv_sinks_k;
        kv.n_sink_v = a.kv_sinks_v;
        Session s(*model, be, kv);
        // The types after the cache policy (auto-asymmetric K, fallbacks), as they ran.
        const DType tk = s.kv_cache().type_k(), tv = s.kv_cache().type_v();
        const bool rot = s.kv_cache().k_rotation().on() || s.kv_cache().v_rotation().on();
        const std::string cache = cache_label(tk, tv) + (rot ? " rot" : "");
        if (max_depth > 0) {
          std::fprintf(stderr, "bench: %d threads, cache %s: writing %lld synthetic positions x %lld layers\n", t,
                       cache.c_str(), static_cast<long long>(max_depth), static_cast<long long>(hp.n_layer));
          kv_fill_synthetic(s.kv_cache_mut(), *inner, hp.n_layer, max_depth, 1234);
        }
        std::mt19937 rng(42);
        std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(hp.n_vocab - 1));
        for (int64_t depth : a.depths) {
          const std::string at = depth > 0 ? " @ d" + std::to_string(depth) : "";
          // sol: achieved / measured bandwidth, the median of the per-repetition ratios (each tg
          // repetition is preceded by its own bandwidth measurement, so a noisy neighbour slows
          // both alike); bw_run: the bandwidth shown beside it (median of those measurements).
          auto row = [&](const std::string& test, const std::vector<double>& tps, double gbps,
                         const std::vector<double>& cpu_tps = {}, double sol = 0, double bw_run = 0,
                         double macs_per_s = 0) {
            if (bw_run <= 0) bw_run = bw;
            if (sol <= 0 && gbps > 0) sol = gbps / bw_run;
            const Stats st = stats(tps);
            if (a.json) {
              nlohmann::json j = {{"model", base_name(path)},
                                  {"cpu", cpu_json},
                                  {"size_bytes", model->weight_bytes()},
                                  {"params", params},
                                  {"backend", be_name},
                                  {"threads", t},
                                  {"cache_type_k", kv_type_name(tk)},
                                  {"cache_type_v", kv_type_name(tv)},
                                  {"kv_bytes_per_token", s.kv_cache().bytes_per_token()},
                                  {"depth", depth},
                                  {"depth_synthetic", depth > 0},
                                  {"test", test},
                                  {"tps_mean", st.mean},
                                  {"tps_sd", st.sd},
                                  {"samples_tps", tps},
                                  {"membw_gbps", bw_run / 1e9}};
              if (gbps > 0) {
                j["gbps"] = gbps / 1e9;
                j["sol_fraction"] = sol;
              }
              if (!cpu_tps.empty()) j["samples_tps_per_cpu_thread"] = cpu_tps;  // tokens / (CPU s / threads)
              if (macs_per_s > 0) {
                j["matmul_gmacs"] = macs_per_s / 1e9;
                j["int8_peak_gmacs"] = peak / 1e9;
                if (peak > 0) j["int8_peak_fraction"] = macs_per_s / peak;
                if (amx_peak > 0) {
                  j["amx_int8_peak_gmacs"] = amx_peak / 1e9;
                  j["amx_peak_fraction"] = macs_per_s / amx_peak;
                }
              }
              out.push_back(j);
            } else if (gbps > 0) {
              std::printf("| %s | %s | %s | %s | %d | %s | %s | %.2f ± %.2f | %.2f / %.2f | %.1f |\n",
                          base_name(path).c_str(), size.c_str(), n_params.c_str(), be_name.c_str(), t, cache.c_str(),
                          test.c_str(), st.mean, st.sd, gbps / 1e9, bw_run / 1e9, 100.0 * sol);
            } else if (macs_per_s > 0 && peak > 0) {
              // Prefill rows: matmul GMAC/s against the int8 peak (see the note under the table).
              std::printf("| %s | %s | %s | %s | %d | %s | %s | %.2f ± %.2f | %.1f / %.1f GMAC/s | %.1f |\n",
                          base_name(path).c_str(), size.c_str(), n_params.c_str(), be_name.c_str(), t, cache.c_str(),
                          test.c_str(), st.mean, st.sd, macs_per_s / 1e9, peak / 1e9, 100.0 * macs_per_s / peak);
            } else {
              std::printf("| %s | %s | %s | %s | %d | %s | %s | %.2f ± %.2f | | |\n", base_name(path).c_str(),
                          size.c_str(), n_params.c_str(), be_name.c_str(), t, cache.c_str(), test.c_str(), st.mean,
                          st.sd);
            }
            std::fflush(stdout);
          };
          // Warm-up: one short batch and one decode step at the depth (page faults of the
          // mapping and of the cache rows, pool start).
          {
            std::vector<int32_t> w{tok(rng), tok(rng)};
            s.set_n_past(depth);
            s.eval(w);
            s.set_n_past(depth);
          }
          if (a.n_prompt > 0) {
            std::vector<double> tps, macs_s;
            be.reset();
            double total_s = 0;
            for (int r = 0; r < a.reps; ++r) {
              std::fprintf(stderr, "bench: %d threads, %s: pp%d%s rep %d/%d\n", t, cache.c_str(), a.n_prompt,
                           at.c_str(), r + 1, a.reps);
              std::vector<int32_t> p(static_cast<size_t>(a.n_prompt));
              for (auto& x : p) x = tok(rng);
              s.set_n_past(depth);
              const uint64_t m0 = be.counters().macs;
              const auto t0 = std::chrono::steady_clock::now();
              s.eval(p);
              const double sec = seconds_since(t0);
              total_s += sec;
              tps.push_back(a.n_prompt / sec);
              macs_s.push_back(static_cast<double>(be.counters().macs - m0) / sec);
            }
            row("pp" + std::to_string(a.n_prompt) + at, tps, 0, {}, 0, 0, stats(macs_s).mean);
            if (a.profile)
              profile_text += pp_profile(be.counters(), base_name(path), t, cache, a.n_prompt, at, a.reps, total_s,
                                         peak);
          }
          // The tg tests, one per --sequences entry: 1 is the plain single-sequence row; N > 1 is
          // N sequences decoding together, every step one batch of N tokens, so the dense weights
          // are read once per step and each chosen expert once for all tokens routed to it (t/s is
          // the aggregate). With resident experts the repetitions are interleaved, round r running
          // every test once, so a ratio between two tests compares runs seconds apart, not the
          // whole bench apart (the bandwidth of a shared VM drifts by 2x within minutes); the
          // expert store's figures are deltas over one test's repetitions, so streamed experts
          // keep them together.
          struct TgTest {
            int n_seq = 1;
            std::vector<double> tps, gbps, cpu_tps, bw_rep, sol_rep, bytes_step;
            double total_s = 0;
            BenchCounters counters;
            ExpertStats e0, e1;
          };
          std::vector<TgTest> tg;
          if (a.n_gen > 0) {
            for (int n : a.sequences)
              if (n > 1) tg.emplace_back().n_seq = n;
            if (std::find(a.sequences.begin(), a.sequences.end(), 1) != a.sequences.end()) tg.emplace_back();
          }
          const auto tg_rep = [&](TgTest& x, int r) {
            std::fprintf(stderr, "bench: %d threads, %s: tg%d%s%s rep %d/%d\n", t, cache.c_str(), a.n_gen,
                         x.n_seq > 1 ? (" x" + std::to_string(x.n_seq) + " sequences").c_str() : "", at.c_str(), r + 1,
                         a.reps);
            if (r == 0) x.e0 = model->experts().stats();
            be.restore(x.counters);
            std::optional<Memory> mem;
            std::vector<int32_t> seqs, next;
            if (x.n_seq > 1) {
              MemoryOptions mopt;
              mopt.kv = kv;
              mem.emplace(model->memory_layout(), mopt);
              for (int i = 0; i < x.n_seq; ++i) {
                seqs.push_back(mem->seq_new());
                next.push_back(tok(rng));
                if (depth > 0) {
                  kv_fill_synthetic(mem->kv(seqs.back()), *inner, hp.n_layer, depth, 1234 + static_cast<uint64_t>(i));
                  mem->seq_set_len(seqs.back(), depth);
                }
              }
            }
            x.bw_rep.push_back(membw_read(t, a.membw_mib << 20, 1));
            const uint64_t b0 = be.counters().total_bytes();
            double sec = 0;
            if (mem) {
              sec = decode_together(*model, be, *mem, seqs, next, a.n_gen);
            } else {
              s.set_n_past(depth);
              std::vector<int32_t> one{tok(rng)};
              const double c0 = process_cpu_seconds();
              const auto t0 = std::chrono::steady_clock::now();
              for (int i = 0; i < a.n_gen; ++i) {
                auto logits = s.eval(one);
                one[0] = argmax(logits);
              }
              sec = seconds_since(t0);
              x.cpu_tps.push_back(a.n_gen / ((process_cpu_seconds() - c0) / t));
            }
            const double bytes = static_cast<double>(be.counters().total_bytes() - b0);
            x.total_s += sec;
            x.tps.push_back(static_cast<double>(a.n_gen) * x.n_seq / sec);
            x.gbps.push_back(bytes / sec);
            x.bytes_step.push_back(bytes / a.n_gen);
            x.sol_rep.push_back(x.gbps.back() / x.bw_rep.back());
            x.counters = be.counters();
            x.e1 = model->experts().stats();
          };
          const bool interleave = !streamed && tg.size() > 1;
          for (int r = 0; r < (interleave ? a.reps : 0); ++r)
            for (TgTest& x : tg) tg_rep(x, r);
          for (TgTest& x : tg)
            for (int r = 0; r < (interleave ? 0 : a.reps); ++r) tg_rep(x, r);
          // Each N's aggregate t/s over one sequence's: the median of the rounds' ratios when
          // interleaved (each ratio from runs side by side), else the ratio of the means.
          const TgTest* one_seq = !tg.empty() && tg.back().n_seq == 1 ? &tg.back() : nullptr;
          const auto vs_one = [&](const TgTest& x) {
            if (!one_seq) return 0.0;
            if (!interleave) return stats(x.tps).mean / stats(one_seq->tps).mean;
            std::vector<double> q;
            for (size_t r = 0; r < x.tps.size(); ++r) q.push_back(x.tps[r] / one_seq->tps[r]);
            return median(q);
          };
          for (const TgTest& x : tg) {
            const std::string test = "tg" + std::to_string(a.n_gen) +
                                     (x.n_seq > 1 ? " x" + std::to_string(x.n_seq) : "");
            row(test + at, x.tps, stats(x.gbps).mean, x.cpu_tps, median(x.sol_rep), median(x.bw_rep));
            if (a.profile)
              profile_text += tg_profile(x.counters, base_name(path), t, cache, test + at,
                                         static_cast<double>(a.n_gen) * a.reps * x.n_seq, x.total_s, median(x.bw_rep));
            if (x.n_seq > 1) {
              const double step_bytes = stats(x.bytes_step).mean, speedup = vs_one(x);
              if (a.json) {
                out.back()["sequences"] = x.n_seq;
                out.back()["tps_per_sequence"] = stats(x.tps).mean / x.n_seq;
                out.back()["bytes_per_step"] = step_bytes;
                out.back()["bytes_per_token"] = step_bytes / x.n_seq;
                if (speedup > 0) {
                  out.back()["speedup_vs_one_sequence"] = speedup;
                  out.back()["interleaved"] = interleave;
                }
              } else {
                char ratio[32] = "";
                if (speedup > 0) {
                  std::snprintf(ratio, sizeof ratio, "%.2fx", speedup);
                  ratio_note = interleave ? "vs one sequence: the median of the rounds' ratios (the repetitions run "
                                            "interleaved, one of each test per round)"
                                          : "vs one sequence: the ratio of the means (streamed experts: each test's "
                                            "repetitions run together)";
                }
                char buf[320];
                std::snprintf(buf, sizeof buf, "| %s | %d | tg%d x%d%s | %.2f | %.2f | %.1f | %.1f | %s |\n",
                              base_name(path).c_str(), t, a.n_gen, x.n_seq, at.c_str(), stats(x.tps).mean,
                              stats(x.tps).mean / x.n_seq, step_bytes / 1e6, step_bytes / x.n_seq / 1e6, ratio);
                sequences_text += buf;
              }
            } else if (streamed) {
              // The expert store over the tg repetitions (the pp runs before them warmed it).
              const ExpertStats &e0 = x.e0, &e1 = x.e1;
              const double total_s = x.total_s;
              const int64_t n_tok = static_cast<int64_t>(a.n_gen) * a.reps;
              if (a.json) {
                const auto d = [&](uint64_t ExpertStats::*f) { return static_cast<double>(e1.*f - e0.*f); };
                nlohmann::json& j = out.back();
                j["experts"] = e1.policy;
                j["expert_cache_bytes"] = e1.cache_budget;
                j["expert_hit_rate"] = d(&ExpertStats::requests) > 0 ? d(&ExpertStats::hits) / d(&ExpertStats::requests)
                                                                     : 0.0;
                j["prefetch_recall"] = d(&ExpertStats::used_with_prediction) > 0
                                           ? d(&ExpertStats::predicted_used) / d(&ExpertStats::used_with_prediction)
                                           : 0.0;
                j["prefetch_precision"] = d(&ExpertStats::predicted) > 0
                                              ? d(&ExpertStats::predicted_used) / d(&ExpertStats::predicted)
                                              : 0.0;
                j["expert_bytes_read_per_token"] = d(&ExpertStats::bytes_read) / static_cast<double>(n_tok);
                j["stall_ms_per_token"] = 1e3 * (e1.stall_seconds - e0.stall_seconds) / static_cast<double>(n_tok);
                j["peak_rss_bytes"] = peak_rss_bytes();
                j["disk_bytes_per_s"] = disk_bw;
                j["disk_sol"] = disk_bw > 0 ? d(&ExpertStats::bytes_read) / total_s / disk_bw : 0.0;
              } else {
                const double read_bw = double(e1.bytes_read - e0.bytes_read) / std::max(total_s, 1e-9);
                char sol[96];
                std::snprintf(sol, sizeof sol, " | %.0f%% of %.0f MB/s", disk_bw > 0 ? 100 * read_bw / disk_bw : 0.0,
                              disk_bw / 1e6);
                experts_text += "| " + base_name(path) + " | " + std::to_string(t) + " | tg" + std::to_string(a.n_gen) +
                                at + " | " + format_expert_steady_state(e0, e1, total_s, n_tok) + sol + " |\n";
              }
            }
          }
          if (a.lookup && depth == 0 && a.n_gen > 0) {
            std::fprintf(stderr, "bench: %d threads, %s: tg%d plain vs prompt lookup, %d repetitions\n", t,
                         cache.c_str(), a.n_gen, a.reps);
            KvCacheOptions lkv = kv;
            lkv.n_ctx = 1024 + a.n_gen;  // the rewrite prompt (~250 tokens) and what follows it
            const LookupBenchResult lr = bench_lookup(*model, be, lkv, a.n_gen, a.reps);
            const double plain = stats(lr.plain_tps).mean, look = stats(lr.lookup_tps).mean;
            const std::string test = "tg" + std::to_string(a.n_gen) + " lookup";
            if (a.json) {
              row(test, lr.lookup_tps, 0);
              nlohmann::json& j = out.back();
              j["plain_tps_mean"] = plain;
              j["samples_plain_tps"] = lr.plain_tps;
              j["speedup"] = plain > 0 ? look / plain : 0.0;
              j["n_prompt"] = lr.n_prompt;
              j["n_generated"] = lr.n_generated;
              j["steps"] = lr.spec.steps;
              j["drafted"] = lr.spec.drafted;
              j["accepted"] = lr.spec.accepted;
              j["acceptance"] = lr.spec.acceptance();
              j["identical_to_plain"] = lr.identical;
            } else {
              char buf[320];
              std::snprintf(buf, sizeof buf,
                            "| %s | %d | %s | %d | %d | %.2f | %.2f | %.2fx | %lld | %lld | %.1f%% | %s |\n",
                            base_name(path).c_str(), t, cache.c_str(), lr.n_prompt, lr.n_generated, plain, look,
                            plain > 0 ? look / plain : 0.0, static_cast<long long>(lr.spec.steps),
                            static_cast<long long>(lr.spec.drafted), 100 * lr.spec.acceptance(),
                            lr.identical ? "yes" : "NO");
              lookup_text += buf;
            }
          }
        }
      }
    }
  }
  if (!a.json && max_depth > 0)
    std::printf(
        "\n@ dN: the run starts with N positions in the KV cache, synthetic K/V rows (Gaussian, K RMS 1, "
        "V RMS 0.5) written through the cache's codecs, not a prefill.\n");
  if (!experts_text.empty())
    std::printf(
        "\nexpert store during the tg runs (%s, --expert-cache %s%s; peak RSS %.2f GB):\n\n"
        "| model | threads | test | figures | disk (reads over the decode / O_DIRECT speed measured here) |\n"
        "| --- | ---: | --- | --- | ---: |\n%s",
        a.experts.c_str(), a.expert_cache.c_str(), a.prefetch ? "" : ", no prefetch", peak_rss_bytes() / 1e9,
        experts_text.c_str());
  if (!sequences_text.empty())
    std::printf(
        "\nsequences decoding together (tgN xS: S sequences, one batch of S tokens per step):\n\n"
        "| model | threads | test | aggregate t/s | t/s per sequence | MB read per step | MB read per token | vs one sequence |\n"
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n%s%s",
        sequences_text.c_str(), ratio_note.empty() ? "" : ("\n" + ratio_note + "\n").c_str());
  if (!lookup_text.empty())
    std::printf(
        "\nspeculative decoding by prompt lookup vs plain greedy, on a rewrite task (one paragraph with one "
        "word changed, through the model's chat template; steps/drafted/accepted of the last repetition):\n\n"
        "| model | threads | cache | prompt | generated | plain t/s | lookup t/s | speedup | steps | drafted | "
        "accepted | tokens identical |\n"
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n%s",
        lookup_text.c_str());
  if (!a.json && a.n_prompt > 0)
    std::printf(
        "\npp rows: matmul multiply-accumulates per second (weights x activations, attention not counted) / "
        "the int8 peak measured by the same binary (vpdpbusd chains, or vpmaddubsw into 16-bit sums without VNNI)%s.\n",
        amx_used ? "; with AMX, the JSON also has amx_int8_peak_gmacs (tdpbssd chains) and amx_peak_fraction" : "");
  if (a.json)
    std::cout << out.dump(2) << "\n";
  else
    std::printf("%s", profile_text.c_str());
  return 0;
}

}  // namespace sluice
