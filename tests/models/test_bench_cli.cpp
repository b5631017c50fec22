// tests/models/test_bench_cli: `sluice bench` end to end on stories260K — K/V cache type
// lists paired element by element, depth runs on a synthetic cache (table label "@ dN" and the
// note saying the depth is synthetic; JSON fields), the --profile tables, the expert store's
// figures with --experts stream, and clear errors for bad options. Speed is never asserted.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels.h"
#include "core/cpu_features.h"
#include "test_util.h"

namespace sluice::test_bench_cli {
namespace {

const std::string kCli = ::sluice::test::cli_path();

std::string bench(const std::string& args, int* rc) {
  return test::run_command(kCli + " bench -m " + test::shared_dir() + "/models/stories260K.gguf -p 0 -n 2 -r 1 -t 1 " +
                               "--membw-mib 8 " + args + " 2>/dev/null",
                           rc);
}

TEST(BenchCli, CacheTypesAndDepthInJson) {
  SLUICE_REQUIRE_SHARED();
  int rc = 0;
  // stories260K: 4 KV heads of D = 8 per row (32 elements), so q8_0 blocks fit and tq4 takes D = 8.
  const std::string out = bench("-d 0,40 --cache-type-k f16,q8_0 --cache-type-v f16,tq4 --json", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 4u) << out;  // 2 cache pairs × 2 depths, tg only
  const char* want[4][3] = {{"f16", "f16", "tg2"},
                            {"f16", "f16", "tg2 @ d40"},
                            {"q8_0", "tq4", "tg2"},
                            {"q8_0", "tq4", "tg2 @ d40"}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(j[i]["cache_type_k"], want[i][0]) << j[i];
    EXPECT_EQ(j[i]["cache_type_v"], want[i][1]) << j[i];
    EXPECT_EQ(j[i]["test"], want[i][2]) << j[i];
    EXPECT_EQ(j[i]["depth"], i % 2 ? 40 : 0) << j[i];
    EXPECT_EQ(j[i]["depth_synthetic"], i % 2 == 1) << j[i];
    EXPECT_GT(j[i]["tps_mean"].get<double>(), 0.0) << j[i];
  }
  // K and V bytes per token: f16 2·(32·2)·5 layers; q8_0 K 34 + tq4 V 4·(2 + 4) = 58 per layer.
  EXPECT_EQ(j[0]["kv_bytes_per_token"], 640);
  EXPECT_EQ(j[2]["kv_bytes_per_token"], 5 * (34 + 24));
  // The machine is named in every row: vendor, model, ISA level, AMX.
  for (const auto& row : j) {
    ASSERT_TRUE(row.contains("cpu")) << row;
    EXPECT_FALSE(row["cpu"]["vendor"].get<std::string>().empty());
    EXPECT_FALSE(row["cpu"]["model"].get<std::string>().empty());
    EXPECT_TRUE(row["cpu"]["isa"] == "generic" || row["cpu"]["isa"] == "avx2" || row["cpu"]["isa"] == "avx512");
    // AMX is used where granted (its tiles serve Q4_K/Q5_K/Q6_K prefill) unless SLUICE_CPU_AMX=0.
    EXPECT_EQ(row["cpu"]["amx_used"],
              cpu::q8_kernels_amx() && cpu_backend_default_options().q8_amx && cpu_isa_select() == CpuIsa::avx512);
    EXPECT_EQ(row["cpu"]["amx_int8"], cpu_features().amx_int8);
  }
}

// --sequences: N sequences decode together, so per step the dense weights are read once for
// all of them; bytes per token must fall below the single sequence's (the MoE model's experts
// are the union of the tokens' choices, never more than N times one token's).
TEST(BenchCli, SequencesDecodeTogether) {
  SLUICE_REQUIRE_SHARED();
  int rc = 0;
  const std::string out = test::run_command(kCli + " bench -m " + test::shared_dir() +
                                                "/golden/qwen3moe/model.gguf -p 0 -n 3 -r 2 -t 1 --membw-mib 8 "
                                                "--sequences 1,4 --json 2>/dev/null",
                                            &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 2u) << out;
  const auto& multi = j[0]["test"] == "tg3 x4" ? j[0] : j[1];
  const auto& single = j[0]["test"] == "tg3" ? j[0] : j[1];
  ASSERT_EQ(multi["test"], "tg3 x4") << out;
  ASSERT_EQ(single["test"], "tg3") << out;
  EXPECT_EQ(multi["sequences"], 4);
  EXPECT_GT(multi["tps_per_sequence"].get<double>(), 0.0);
  const double per_token = multi["bytes_per_token"].get<double>(), per_step = multi["bytes_per_step"].get<double>();
  // The single sequence reads its step's bytes for one token: gbps / tps.
  const double single_per_token = single["gbps"].get<double>() * 1e9 / single["tps_mean"].get<double>();
  EXPECT_LT(per_token, 0.9 * single_per_token)
      << "4 sequences read " << per_token << " B/token, one reads " << single_per_token;
  EXPECT_GT(per_step, single_per_token) << "a step of 4 tokens reads more than a step of 1";
  EXPECT_LE(per_step, 4 * single_per_token) << "and never more than 4 steps of 1";
  // The repetitions ran interleaved, round r pairing x4's sample r with one sequence's: the
  // ratio is the median (of two: the mean) of those pairs' ratios, not of the means.
  EXPECT_EQ(multi["interleaved"], true);
  const auto& m4 = multi["samples_tps"];
  const auto& m1 = single["samples_tps"];
  ASSERT_EQ(m4.size(), 2u);
  ASSERT_EQ(m1.size(), 2u);
  const double paired = 0.5 * (m4[0].get<double>() / m1[0].get<double>() + m4[1].get<double>() / m1[1].get<double>());
  EXPECT_NEAR(multi["speedup_vs_one_sequence"].get<double>(), paired, 1e-9 * paired);
  // Markdown: the sequences table.
  const std::string md = test::run_command(kCli + " bench -m " + test::shared_dir() +
                                               "/golden/qwen3moe/model.gguf -p 0 -n 2 -r 1 -t 1 --membw-mib 8 "
                                               "--sequences 3 2>/dev/null",
                                           &rc);
  ASSERT_EQ(rc, 0) << md;
  for (const char* key : {"| tg2 x3 |", "t/s per sequence", "MB read per step"})
    EXPECT_NE(md.find(key), std::string::npos) << key << "\n" << md;
  EXPECT_EQ(md.find("| tg2 |"), std::string::npos) << "--sequences 3 alone runs no single-sequence row\n" << md;
  EXPECT_EQ(md.find("vs one sequence:"), std::string::npos) << "no ratio, so no note on how it was made\n" << md;
}

TEST(BenchCli, MarkdownSaysTheDepthIsSynthetic) {
  SLUICE_REQUIRE_SHARED();
  int rc = 0;
  const std::string out = bench("-d 16 --cache-type q8_0", &rc);
  ASSERT_EQ(rc, 0) << out;
  for (const char* key :
       {"cpu: ", "; kernels: ", "; AMX: ", "| cache K/V |", "| q8_0 | tg2 @ d16 |", "synthetic K/V rows"})
    EXPECT_NE(out.find(key), std::string::npos) << key << "\n" << out;
}

// --profile prints a table per pp row (time and matmul GMAC/s per stage against the int8
// peak) and one per tg row (time and bytes per token).
TEST(BenchCli, ProfileTablesForPromptAndDecode) {
  SLUICE_REQUIRE_SHARED();
  int rc = 0;
  const std::string out =
      test::run_command(kCli + " bench -m " + test::shared_dir() +
                            "/models/stories260K.gguf -p 16 -n 2 -r 1 -t 1 --membw-mib 8 --profile 2>/dev/null",
                        &rc);
  ASSERT_EQ(rc, 0) << out;
  for (const char* key : {"pp16 (per batch; int8 peak", "| stage | ms | % time | GMAC | GMAC/s | % of int8 peak |",
                          "tg2 (per token; SOL at", "| stage | ms | % time | MB read | GB/s | SOL % |", "| attention |",
                          "| dense_ffn |", "| total |"})
    EXPECT_NE(out.find(key), std::string::npos) << key << "\n" << out;
}

// --experts stream: each tg row carries the expert store's figures over its repetitions (JSON
// fields; a table under the markdown), here with a cache of 1 MB so that experts are read.
TEST(BenchCli, StreamedExpertsReportTheStore) {
  SLUICE_REQUIRE_SHARED();
  const std::string model =
      (std::filesystem::temp_directory_path() / ("sluice_bench_moe_" + std::to_string(::getpid()) + ".gguf")).string();
  int rc = 0;
  std::string out = test::run_command(kCli + " synth --arch qwen3moe --preset tiny --seed 5 -q -o " + model + " 2>&1",
                                      &rc);
  ASSERT_EQ(rc, 0) << out;
  const std::string common = kCli + " bench -m " + model + " -p 4 -n 4 -r 1 -t 1 --membw-mib 8 ";
  out = test::run_command(common + "--experts stream --expert-cache 1M --json 2>/dev/null", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 2u) << out;  // pp4, tg4
  EXPECT_FALSE(j[0].contains("experts")) << j[0];
  const auto& tg = j[1];
  EXPECT_EQ(tg["experts"], "stream") << tg;
  EXPECT_EQ(tg["expert_cache_bytes"], 1 << 20) << tg;
  const double hit = tg["expert_hit_rate"].get<double>();
  EXPECT_TRUE(hit >= 0.0 && hit < 1.0) << tg;  // a 1 MB cache cannot hold this model's experts
  EXPECT_GT(tg["expert_bytes_read_per_token"].get<double>(), 0.0) << tg;
  EXPECT_GT(tg["peak_rss_bytes"].get<double>(), 0.0) << tg;
  // The disk's O_DIRECT speed measured in the same run, and the decode's reads as a share of it
  // (0 where the file system refuses O_DIRECT, e.g. tmpfs; then there is no figure to compare).
  const double disk = tg["disk_bytes_per_s"].get<double>();
  EXPECT_GE(disk, 0.0) << tg;
  if (disk > 0) {
    EXPECT_GT(tg["disk_sol"].get<double>(), 0.0) << tg;
  }
  out = test::run_command(common + "--experts stream --expert-cache 1M 2>/dev/null", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("expert store during the tg runs (stream, --expert-cache 1M"), std::string::npos) << out;
  EXPECT_NE(out.find("hit rate"), std::string::npos) << out;
  EXPECT_NE(out.find("O_DIRECT speed measured here"), std::string::npos) << out;
  std::filesystem::remove(model);
}

// --lookup on the real model: the rewrite task's tokens are plain greedy's, and SmolLM2 copies
// the paragraph, so most drafts are accepted (a property of the model copying its input; the
// speedup, a wall-clock figure, is reported but not asserted). The same run on stories260K, which
// has no chat template and does not copy, is the control: its rows carry the same fields, and
// its acceptance stays low.
TEST(BenchCli, LookupReportsAcceptanceAndIdenticalTokens) {
  SLUICE_REQUIRE_SHARED();
  const std::string smol = test::find_smollm2_gguf();
  ASSERT_FALSE(smol.empty()) << test::kSmolGgufRel << " not found: run scripts/setup";
  int rc = 0;
  const std::string out = test::run_command(kCli + " bench -m " + smol +
                                                " -p 0 -n 48 -r 1 -t 2 --membw-mib 8 --lookup --json 2>/dev/null",
                                            &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 2u) << out;  // tg48, then the lookup row
  const auto& r = j[1];
  EXPECT_EQ(r["test"], "tg48 lookup") << r;
  EXPECT_EQ(r["identical_to_plain"], true) << r;
  EXPECT_EQ(r["n_generated"], 48) << r;
  EXPECT_GT(r["n_prompt"].get<int>(), 150) << r;
  EXPECT_LE(r["accepted"].get<int64_t>(), r["drafted"].get<int64_t>()) << r;
  EXPECT_GT(r["acceptance"].get<double>(), 0.6) << r;
  EXPECT_GT(r["plain_tps_mean"].get<double>(), 0.0) << r;
  EXPECT_GT(r["speedup"].get<double>(), 0.0) << r;

  const auto c = nlohmann::json::parse(test::run_command(kCli + " bench -m " + test::shared_dir() +
                                                             "/models/stories260K.gguf -p 0 -n 48 -r 1 -t 1 "
                                                             "--membw-mib 8 --lookup --json 2>/dev/null",
                                                         &rc));
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(c.size(), 2u) << c;
  EXPECT_EQ(c[1]["identical_to_plain"], true) << c[1];
  EXPECT_GT(c[1]["drafted"].get<int64_t>(), 10) << c[1];  // it did draft: the low acceptance is measured
  EXPECT_LT(c[1]["acceptance"].get<double>(), 0.6) << c[1];
}

TEST(BenchCli, BadOptionsFail) {
  SLUICE_REQUIRE_SHARED();
  int rc = 0;
  std::string out = test::run_command(kCli + " bench -m " + test::shared_dir() +
                                          "/models/stories260K.gguf -p 0 -n 2 -r 1 --cache-type tq5 2>&1",
                                      &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown cache type 'tq5'"), std::string::npos) << out;
  out = test::run_command(
      kCli + " bench -m " + test::shared_dir() +
          "/models/stories260K.gguf -p 0 -n 2 -r 1 --cache-type-k f16,q8_0 --cache-type-v f16,q8_0,tq4 2>&1",
      &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("2 K cache types and 3 V cache types"), std::string::npos) << out;
}

}  // namespace
}  // namespace sluice::test_bench_cli
