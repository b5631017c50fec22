// tests/models/test_hf_folder: Hugging Face model folders (format/hf_folder.h) against MLX-LM
// loading the same folders (tests/data/hf/{llama,qwen3}, scripts/golden/make_hf_folders.py):
// tokenizer.json gives the ids `tokenizers` gives, the logits match MLX's float32 run on the
// bf16 weights, and greedy continues alike. Negative controls: Llama without the NEOX RoPE
// the HF layout needs, and Qwen3 with its q/k norms dropped, miss the golden. Unsupported or
// broken folders are refused by name. MLX-quantized copies (tests/data/hf/{llama-q4,qwen3-q4,
// llama-mixed}, mlx_lm.convert) match MLX-LM's float32 run of them as tightly, and hostile
// quantized tensors are refused naming the file, the tensor and the field. An MLX-LM LoRA
// adapter (tests/data/hf/llama-lora, scripts/golden/make_lora_adapter.py) merged at load
// (format/lora.h) matches MLX-LM running the base folder with it; broken adapters are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>

#include "backends/backend.h"
#include "core/error.h"
#include "format/hf_folder.h"
#include "format/safetensors.h"
#include "hf_folder_util.h"
#include "models/model.h"
#include "models/qwen35.h"
#include "runtime/session.h"
#include "sluice/inspect.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace sluice::test_hf_folder {
namespace {

using namespace test_hf;

class HfFolder : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFolder, MatchesMlxLm) {
  const std::string arch = GetParam();
  const nlohmann::json g = golden(arch);
  auto m = Model::load(folder(arch));
  EXPECT_EQ(m->hparams().arch, arch == "mixtral" ? "llama" : arch);
  if (arch == "bailingmoe3" || arch == "deepseek2") {
    EXPECT_EQ(m->hparams().rope_mode, RopeMode::normal);  // their MLA turns adjacent pairs
  } else if (arch != "kimi-linear") {                     // Kimi's MLA has no RoPE
    EXPECT_EQ(m->hparams().rope_mode, RopeMode::neox);
  }
  // The tokenizer: `tokenizers`' ids, with and without special tokens in the text.
  EXPECT_EQ(m->tokenizer().encode(g["text"].get<std::string>(), true), g["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(m->tokenizer().encode("<|im_start|>user\nHi<|im_end|>\n", true, true),
            g["chat_ids"].get<std::vector<int32_t>>());
  EXPECT_TRUE(m->tokenizer().is_eog(m->tokenizer().text_to_token("<|im_end|>")));
  EXPECT_FALSE(m->file().get_string_or("tokenizer.chat_template", "").empty());
  for (const char* backend : {"ref", "cpu", "cpu-exact"}) {
    auto be = make_backend(backend, 2);
    const double d = max_logit_diff(*m, *be, g);
    EXPECT_LT(d, 2e-3) << arch << " on " << backend;
    EXPECT_LT(max_logit_diff(*m, *be, g, /*chunks=*/true), 2e-3) << arch << " on " << backend << ", 7+6+rest";
    EXPECT_EQ(greedy(*m, *be, g["ids"].get<std::vector<int32_t>>(), 16), g["greedy"].get<std::vector<int32_t>>())
        << arch << " on " << backend;
  }
  // Negative controls.
  auto be = make_backend("ref", 2);
  if (arch == "llama") {
    m->mutable_hparams().rope_mode = RopeMode::normal;  // as a GGUF llama would run: wrong for HF's layout
  } else if (arch == "qwen3moe" || arch == "mixtral") {
    m->mutable_hparams().moe.norm_weights = false;  // the top-2 weights as softmax left them
  } else if (arch == "bailingmoe3" || arch == "deepseek2") {
    m->mutable_hparams().rope_mode = RopeMode::neox;  // rotate-half pairs: wrong for their MLA
  } else if (arch == "kimi-linear") {
    // The router's expert groups (num_expert_group 2, topk_group 1) ignored: top-2 of all 8.
    EXPECT_EQ(m->hparams().moe.n_group, 2);
    m->mutable_hparams().moe.n_group = m->mutable_hparams().moe.n_group_used = 1;
  } else if (arch == "qwen35moe" || arch == "qwen3next") {
    // Value heads tiled over the key heads (h % H_k, llama.cpp's order after its converter
    // reorders Qwen3.5's) instead of grouped (h / (H_v/H_k), the folder's order).
    auto dn = std::make_shared<DeltaNetHparams>(m->hparams().ext_as<DeltaNetHparams>());
    EXPECT_TRUE(dn->grouped_heads);
    dn->grouped_heads = false;
    m->mutable_hparams().ext = dn;
  } else {
    m->mutable_hparams().rope_base *= 4;  // qwen3 has no layout quirk: a wrong rope base must show
  }
  EXPECT_GT(max_logit_diff(*m, *be, g), 0.05) << arch << ": the negative control passes the golden";
}

INSTANTIATE_TEST_SUITE_P(Archs, HfFolder,
                         ::testing::Values("llama", "qwen3", "qwen3moe", "mixtral", "deepseek2", "qwen35moe",
                                           "qwen3next", "kimi-linear", "bailingmoe3"));

TEST(HfFolderErrors, RefusedByName) {
  const std::pair<std::string, std::function<void(const fs::path&)>> cases[] = {
      {"model_type 'gpt_neox' is not supported",
       [](const fs::path& d) { edit_json(d / "config.json", [](auto& j) { j["model_type"] = "gpt_neox"; }); }},
      // RoPE scaling other than linear and YaRN, and YaRN settings llama.cpp does not read.
      {"is not supported (types linear and yarn)",
       [](const fs::path& d) {
         edit_json(d / "config.json", [](auto& j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; });
       }},
      {"'original_max_position_embeddings' is missing",
       [](const fs::path& d) {
         edit_json(d / "config.json", [](auto& j) { j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}}; });
       }},
      {"is not supported (beta_fast 32, beta_slow 1",
       [](const fs::path& d) {
         edit_json(d / "config.json", [](auto& j) {
           j["rope_scaling"] = {{"type", "yarn"},
                                {"factor", 4.0},
                                {"original_max_position_embeddings", 64},
                                {"beta_fast", 16}};
         });
       }},
      {"mscale 0.5 is not supported (1)",
       [](const fs::path& d) {
         edit_json(d / "config.json", [](auto& j) {
           j["rope_scaling"] = {{"type", "yarn"},
                                {"factor", 4.0},
                                {"original_max_position_embeddings", 64},
                                {"mscale", 0.5}};
         });
       }},
      {"'factor' must be >= 1",
       [](const fs::path& d) {
         edit_json(d / "config.json", [](auto& j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 0.5}}; });
       }},
      {"quantization.mode \"mxfp4\" is not supported",
       [](const fs::path& d) {
         edit_json(d / "config.json", [](auto& j) {
           j["quantization"] = {{"group_size", 32}, {"bits", 4}, {"mode", "mxfp4"}};
         });
       }},
      {"quantization_config.quant_method \"gptq\" is not supported",
       [](const fs::path& d) {
         edit_json(d / "config.json", [](auto& j) { j["quantization_config"] = {{"quant_method", "gptq"}}; });
       }},
      {"'hidden_size' missing",
       [](const fs::path& d) { edit_json(d / "config.json", [](auto& j) { j.erase("hidden_size"); }); }},
      {"tokenizer.json: cannot open", [](const fs::path& d) { fs::remove(d / "tokenizer.json"); }},
      {"no model.safetensors", [](const fs::path& d) { fs::remove(d / "model.safetensors"); }},
      {"pre_tokenizer",
       [](const fs::path& d) {
         edit_json(d / "tokenizer.json", [](auto& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; });
       }},
      // A SentencePiece-style BPE with a Metaspace pre-tokenizer that splits on spaces (only
      // the unsplit "always" and "first" schemes run).
      {"is not supported (the legacy Prepend + Replace normalizer, or Metaspace",
       [](const fs::path& d) {
         edit_json(d / "tokenizer.json", [](auto& j) {
           j["model"]["byte_fallback"] = true;
           j["pre_tokenizer"] = {{"type", "Metaspace"},
                                 {"replacement", "\u2581"},
                                 {"prepend_scheme", "always"},
                                 {"split", true}};
         });
       }},
  };
  expect_refused(cases, "");
}

// Kimi's tiktoken.model in place of tokenizer.json: a valid one (the 256 bytes, "ab", "abc")
// loads; each corruption is refused naming the file and the line or field.
TEST(HfFolderErrors, TiktokenVocabularyRefusedByName) {
  // The 256 single bytes in base64, rank = byte, then extra tokens.
  auto tiktoken = [](const fs::path& d, const std::vector<std::string>& extra_lines, bool with_class = true) {
    static const char* k64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::ofstream f(d / "tiktoken.model");
    for (int b = 0; b < 256; ++b) f << k64[b >> 2] << k64[(b & 3) << 4] << "== " << b << "\n";
    for (const auto& l : extra_lines) f << l << "\n";
    fs::remove(d / "tokenizer.json");
    nlohmann::json tc = {{"added_tokens_decoder", {{"259", {{"content", "[EOS]"}, {"special", true}}}}},
                         {"eos_token", "[EOS]"}};
    if (with_class) tc["tokenizer_class"] = "TikTokenTokenizer";
    std::ofstream(d / "tokenizer_config.json") << tc.dump();
  };
  {  // the valid one: "ab" (YWI=) 256, "abc" (YWJj) 257, "xyz" (eHl6) 258 (no merge makes it), [EOS] 259
    const std::string dir = broken_folder("tiktoken_ok", [&](const fs::path& d) {
      tiktoken(d, {"YWI= 256", "YWJj 257", "eHl6 258"});
    });
    const Tokenizer t(vocab_from_gguf(*open_folder_tokenizer(dir)));  // no weights: the llama folder's are 400 rows
    EXPECT_EQ(t.n_vocab(), 259 + 256);
    EXPECT_EQ(t.encode("abc", false), std::vector<int32_t>{257});
    EXPECT_EQ(t.encode("abd", false), (std::vector<int32_t>{256, 'd'}));
    EXPECT_EQ(t.encode("xyz", false), std::vector<int32_t>{258}) << "a word that is a token is taken whole";
    EXPECT_EQ(t.encode("xyzx", false), (std::vector<int32_t>{'x', 'y', 'z', 'x'})) << "no merge makes xyz";
    EXPECT_EQ(t.eos(), 259);
    EXPECT_EQ(t.token_to_piece(260), "<|reserved_token_260|>");
  }
  const FolderEdit cases[] = {
      {"tiktoken.model: line 257 is not 'base64 rank'", [&](const fs::path& d) { tiktoken(d, {"YWI=256"}); }},
      {"tiktoken.model: line 257 is not 'base64 rank'", [&](const fs::path& d) { tiktoken(d, {"Y!I= 256"}); }},
      {"line 257 has rank 300, expected 256", [&](const fs::path& d) { tiktoken(d, {"YWI= 300"}); }},
      {"line 257: the token of rank 256 repeats an earlier one", [&](const fs::path& d) { tiktoken(d, {"YQ== 256"}); }},
      {"tokenizer_class TikTokenTokenizer", [&](const fs::path& d) { tiktoken(d, {}, false); }},
      {"added token 700 ('[X]') is outside 256..511",
       [&](const fs::path& d) {
         tiktoken(d, {});
         edit_json(d / "tokenizer_config.json", [](auto& j) {
           j["added_tokens_decoder"]["700"] = {{"content", "[X]"}, {"special", true}};
         });
       }},
  };
  expect_refused(cases, "tiktoken_err");
}

TEST(HfFolderErrors, Qwen35RefusedByName) {
  auto text_config = [](std::function<void(nlohmann::json&)> f) {
    return [f](const fs::path& d) { edit_json(d / "config.json", [&](auto& j) { f(j["text_config"]); }); };
  };
  const std::pair<std::string, std::function<void(const fs::path&)>> cases[] = {
      {"rope_parameters {", text_config([](auto& c) { c["rope_parameters"]["type"] = "yarn"; })},
      {"'linear_num_key_heads' missing", text_config([](auto& c) { c.erase("linear_num_key_heads"); })},
      {"linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2",
       text_config([](auto& c) { c["linear_num_value_heads"] = 3; })},
      {"mrope_section [1,2,0] must be at most 4 sizes summing to 2", text_config([](auto& c) {
         c["rope_parameters"]["mrope_section"] = {1, 2, 0};
       })},
      {"'blk.1.ffn_gate_inp_shexp.weight' (mlp.shared_expert_gate) must be [1, hidden_size]",
       [](const fs::path& d) {
         edit_st_header(d / "model.safetensors", [](auto& h) {
           h["language_model.model.layers.1.mlp.shared_expert_gate.weight"]["shape"] = {64, 1};
         });
       }},
      {"has 32 rows per expert, want 2 x moe_intermediate_size 32",
       [](const fs::path& d) {
         edit_st_header(d / "model.safetensors", [](auto& h) {  // a stacked gate given as fused gate_up
           const std::string from = "language_model.model.layers.0.mlp.switch_mlp.gate_proj.weight";
           h["language_model.model.layers.0.mlp.experts.gate_up_proj"] = h[from];
           h.erase(from);
         });
       }},
  };
  expect_refused(cases, "q35_err", "qwen35moe");
}

// The KDA + MLA hybrids: what mlx-lm would read differently, or what Sluice does not run, is
// refused naming the config field.
TEST(HfFolderErrors, KdaHybridsRefusedByName) {
  auto config = [](std::function<void(nlohmann::json&)> f) {
    return [f](const fs::path& d) { edit_json(d / "config.json", f); };
  };
  const FolderEdit kimi[] = {
      {"linear_attn_config.kda_layers holds 5 (want layer numbers 1..4)", config([](auto& c) {
         c["linear_attn_config"]["kda_layers"] = {1, 5};
       })},
      {"linear_attn_config.num_heads 4 differs from num_attention_heads 2",
       config([](auto& c) { c["linear_attn_config"]["num_heads"] = 4; })},
      {"q_lora_rank is set", config([](auto& c) { c["q_lora_rank"] = 32; })},
      {"moe_layer_freq other than 1", config([](auto& c) { c["moe_layer_freq"] = 2; })},
      {"moe_router_activation_func 'relu'", config([](auto& c) { c["moe_router_activation_func"] = "relu"; })},
      {"expert groups 3 / used 1 do not split num_experts 8", config([](auto& c) { c["num_expert_group"] = 3; })},
  };
  expect_refused(kimi, "kimi_err", "kimi-linear");
  const FolderEdit ling3[] = {
      // The same model_type without BailingMoeV3ForCausalLM is Ling 2.5 to mlx-lm.
      {"without BailingMoeV3ForCausalLM in architectures is Ling 2.5",
       config([](auto& c) { c["architectures"] = {"BailingMoeV2_5ForCausalLM"}; })},
      {"expert_swiglu_limit_list is set", config([](auto& c) { c["expert_swiglu_limit_list"] = {7.0}; })},
      {"gated_attention_proj_granularity_type \"element_wise\"",
       config([](auto& c) { c["gated_attention_proj_granularity_type"] = "element_wise"; })},
      {"kda_safe_gate false is not supported", config([](auto& c) { c["kda_safe_gate"] = false; })},
      {"kda_lower_bound 1 must be negative", config([](auto& c) { c["kda_lower_bound"] = 1.0; })},
      {"config.json: a field has the wrong type", config([](auto& c) { c["routed_scaling_factor"] = "2.5"; })},
      // A null q_lora_rank is one q_proj (mlx-lm's reading): the MLA layers' q_a/q_b go unused.
      {"missing tensor 'blk.3.attn_q.weight'", config([](auto& c) { c["q_lora_rank"] = nullptr; })},
      // One layer group more than the file has: layer 3 becomes KDA, whose tensors are not there.
      {"blk.3", config([](auto& c) { c["layer_group_size"] = 5; })},
  };
  expect_refused(ling3, "ling3_err", "bailingmoe3");
}

TEST(HfFolderErrors, PerExpertLayoutRefusedByName) {
  const std::string e3 = "model.layers.1.mlp.experts.3.up_proj.weight";
  auto unstacked_then = [](std::function<void(nlohmann::json&)> f) {
    return [f](const fs::path& d) {
      edit_st_header(d / "model.safetensors", [&](auto& h) {
        unstack_experts(h, [](int64_t e) { return e; });
        f(h);
      });
    };
  };
  const std::pair<std::string, std::function<void(const fs::path&)>> cases[] = {
      {"expert 3 of blk.1.ffn_up_exps is missing (num_experts 8; 7 found)",
       unstacked_then([&](auto& h) { h.erase(e3); })},
      {"'" + e3 + "' has shape [32,128], want [64, 64]", unstacked_then([&](auto& h) {
         h[e3]["shape"] = {32, 128};
       })},
      {"blk.1.ffn_up_exps has 9 experts stored, num_experts is 8", unstacked_then([&](auto& h) {
         h["model.layers.1.mlp.experts.8.up_proj.weight"] = {{"dtype", "BF16"},
                                                             {"shape", {0, 64}},
                                                             {"data_offsets", {0, 0}}};
       })},
  };
  expect_refused(cases, "per_expert_err", "qwen3moe");
}

// The CLI takes a folder where it takes a GGUF file.
TEST(HfFolderErrors, RunTakesAFolder) {
  int rc = 0;
  const std::string out = test::run_command(std::string(::sluice::test::cli_path()) + " run -m " + folder("llama") +
                                                " -p 'Once upon' -n 4 --temp 0 2>&1",
                                            &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("loaded"), std::string::npos) << out;
  // A dense folder under --experts stream: nothing to stream, loaded as it is, nothing packed
  // (an MoE folder's packed copy: test_folder_pack.cpp).
  const std::string packs = std::filesystem::temp_directory_path() / ("sluice_runfolder_" + std::to_string(::getpid()));
  const std::string stream = test::run_command(std::string(::sluice::test::cli_path()) + " run -m " + folder("llama") +
                                                   " --experts stream --pack-dir " + packs + " -n 1 2>&1",
                                               &rc);
  EXPECT_EQ(rc, 0) << stream;
  EXPECT_NE(stream.find("loaded"), std::string::npos) << stream;
  EXPECT_FALSE(std::filesystem::exists(packs)) << stream;
}

struct QuantCase {
  const char* dir;
  const char* arch;
  std::vector<std::string> summary;  // what the load line must say
  const char* base = nullptr;        // the float folder it was converted from (else arch's)
};

void PrintTo(const QuantCase& q, std::ostream* os) { *os << q.dir; }  // test names without pointer bytes

class HfQuantFolder : public ::testing::TestWithParam<QuantCase> {};

// The tolerance is the float folders' (2e-3) on ref and cpu-exact, also after a chunked prefill:
// the repacked Q4_1/Q5_1/Q8_A blocks and the float32 dequantized routers give exactly the weights MLX's
// float32 quantized_matmul uses, so only the float order of the sums differs. The cpu backend
// multiplies them by int8 activations, as it does a GGUF's (decode at the bandwidth): that misses
// MLX by 0.03-0.05 on the dense folders (checked below 0.1), and where an MoE router's near-tie
// flips an expert (these tiny random routers have them) by 0.7-2.9, so on the MoE folders only
// that it took the int8 path is checked.
TEST_P(HfQuantFolder, MatchesMlxLm) {
  const QuantCase& q = GetParam();
  const nlohmann::json g = golden(q.dir);
  auto m = Model::load(folder(q.dir));
  EXPECT_EQ(m->hparams().arch, q.arch);
  const std::string line = m->file().get_string_or("sluice.folder.quantization", "");
  for (const auto& want : q.summary)
    EXPECT_NE(line.find(want), std::string::npos) << "want '" << want << "' in " << line;
  int repacked = 0;
  for (const TensorView& t : m->file().tensors()) repacked += t.type == DType::Q4_1 || t.type == DType::Q5_1;
  EXPECT_GT(repacked, 0) << q.dir;
  EXPECT_EQ(m->tokenizer().encode(g["text"].get<std::string>(), true), g["ids"].get<std::vector<int32_t>>());
  if (g.contains("marks_text")) {  // qwen35moe-q4: Qwen3.5's pre-tokenizer, rewritten by mlx_lm.convert
    EXPECT_EQ(m->file().get_string_or("tokenizer.ggml.pre", ""), "qwen35");
    EXPECT_EQ(m->tokenizer().encode(g["marks_text"].get<std::string>(), true),
              g["marks_ids"].get<std::vector<int32_t>>());
  }
  expect_golden(*m, g, {"ref", "cpu-exact"});
  auto exact = make_backend("cpu-exact", 2), int8 = make_backend("cpu", 2);
  EXPECT_LT(max_logit_diff(*m, *exact, g, /*chunks=*/true), 2e-3) << q.dir << ", 7+6+rest";
  const double d = max_logit_diff(*m, *int8, g);
  EXPECT_GT(d, 1e-4) << q.dir << ": the cpu backend did not take the int8 path";
  if (m->hparams().moe.n_expert == 0) {
    EXPECT_LT(d, 0.1) << q.dir << " on cpu (int8 activations)";
  }
  // Negative control: the float folder these were quantized from misses this golden, so the
  // test sees the quantized weights.
  auto be = make_backend("ref", 2);
  EXPECT_GT(max_logit_diff(*Model::load(folder(q.base ? q.base : q.arch)), *be, g), 0.05) << q.dir;

  // The same folder read in place (--mlx-in-place: DType::MLX_A* codes with their scale and
  // bias planes, every matrix but the routers): the same golden on ref and cpu-exact, also
  // chunked; the int8 kernels of its own (kernels_q8_affine_impl.h) within the converted
  // blocks' tolerance on the dense folders.
  ModelOptions in_place;
  in_place.mlx_in_place = true;
  auto mi = Model::load(folder(q.dir), in_place);
  const std::string how = mi->file().get_string_or("sluice.folder.quantization", "");
  int affine = 0;
  for (const TensorView& t : mi->file().tensors()) affine += dtype_is_affine(t.type);
  EXPECT_GT(affine, 0) << how;
  EXPECT_NE(how.find("(in place)"), std::string::npos) << how;
  EXPECT_EQ(how.find("(exact)"), std::string::npos) << how;
  expect_golden(*mi, g, {"ref", "cpu-exact"});
  EXPECT_LT(max_logit_diff(*mi, *exact, g, /*chunks=*/true), 2e-3) << q.dir << " in place, 7+6+rest";
  const double di = max_logit_diff(*mi, *int8, g);
  EXPECT_GT(di, 1e-4) << q.dir << ": the cpu backend did not take the int8 path in place";
  if (m->hparams().moe.n_expert == 0) {
    EXPECT_LT(di, 0.1) << q.dir << " in place on cpu (int8 activations)";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Quantized, HfQuantFolder,
    ::testing::Values(
        QuantCase{"llama-q4", "llama", {"4-bit g64 bf16 → q4_1 (exact): 16 tensors"}},
        QuantCase{"qwen3-q4", "qwen3", {"4-bit g64 bf16 → q4_1 (exact): 15 tensors"}},
        // Stacked experts (3-D codes and groups) and mlx-lm's 8-bit router.
        QuantCase{"qwen3moe-q4",
                  "qwen3moe",
                  {"4-bit g64 bf16 → q4_1 (exact): 15 tensors", "8-bit g64 bf16 → f32 (dequantized): 2 tensors"}},
        // Gated DeltaNet projections, the shared expert and its 8-bit gate; the down projections
        // (32 inputs, under one group of 64) stay bf16 as mlx-lm leaves them, unnamed in the config.
        QuantCase{"qwen35moe-q4",
                  "qwen35moe",
                  {"4-bit g64 bf16 → q4_1 (exact): 37 tensors", "8-bit g64 bf16 → f32 (dequantized): 8 tensors"}},
        // The fused in_proj_qkvz split after the repack (whole Q4_1 rows), in_proj_ba kept fused.
        QuantCase{"qwen3next-q4",
                  "qwen3next",
                  {"4-bit g64 bf16 → q4_1 (exact): 31 tensors", "8-bit g64 bf16 → f32 (dequantized): 8 tensors"}},
        // KDA projections and gates, MLA's per-head embed_q / unembed_out (3-D codes, like
        // stacked experts); f_b/g_b and the experts' down projections (32 inputs) stay bf16.
        QuantCase{"kimi-linear-q4",
                  "kimi-linear",
                  {"4-bit g64 bf16 → q4_1 (exact): 43 tensors", "8-bit g64 bf16 → f32 (dequantized): 3 tensors"}},
        // Ling 3: mlx-lm's predicate leaves MLA's q_a/q_b/kv_a/embed_q/unembed_out/gate, b_proj,
        // the embeddings and lm_head float, and quantizes nothing at 8 bits.
        QuantCase{"bailingmoe3-q4", "bailingmoe3", {"4-bit g64 bf16 → q4_1 (exact): 47 tensors"}},
        // Mixtral's router (no predicate of its own: 4 bits) dequantized to f32, as routers are.
        QuantCase{"mixtral-q4",
                  "llama",
                  {"4-bit g64 bf16 → q4_1 (exact): 16 tensors", "4-bit g64 bf16 → f32 (dequantized): 2 tensors"},
                  "mixtral"},
        // DeepSeek-V3: MLA's low-rank and per-head matrices (embed_q's 32 inputs stay bf16).
        QuantCase{"deepseek2-q4", "deepseek2", {"4-bit g64 bf16 → q4_1 (exact): 28 tensors"}},
        QuantCase{"llama-mixed",
                  "llama",
                  {"2-bit g32 bf16 → q4_1 (exact): 1 tensor", "3-bit g32 bf16 → q4_1 (exact): 9 tensors",
                   "5-bit g32 bf16 → q5_1 (exact): 2 tensors", "6-bit g64 bf16 → q8_a (exact): 2 tensors",
                   "8-bit g32 bf16 → q8_a (exact): 1 tensor"}}),
    [](const auto& info) {
      std::string n = info.param.dir;
      for (char& c : n)
        if (c == '-') c = '_';
      return n;
    });

// A safetensors file rewritten tensor by tensor (name, dtype, shape, bytes), for hostile copies.
struct StEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

void edit_safetensors(const fs::path& p, const std::function<void(std::vector<StEntry>&)>& edit) {
  std::vector<StEntry> es;
  {
    const SafetensorsFile f(p.string());
    for (const StTensor& t : f.tensors())
      es.push_back({t.name, std::string(st_dtype_name(t.dtype)), t.shape, {t.data, t.data + t.nbytes}});
  }
  edit(es);
  nlohmann::json h = nlohmann::json::object();
  size_t off = 0;
  for (const auto& e : es) {
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
    off += e.bytes.size();
  }
  const std::string hs = h.dump();
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  const uint64_t n = hs.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << hs;
  for (const auto& e : es)
    out.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
}

StEntry& entry(std::vector<StEntry>& es, const std::string& name) {
  for (auto& e : es)
    if (e.name == name) return e;
  throw std::runtime_error("no tensor " + name);
}

// MLA's kv_b_proj as transformers stores it ([H·(N+V), L], per head N key rows then V value
// rows) is split at load into the per-head matrices mlx-lm saves: the deepseek2 folder rebuilt
// with kv_b_proj meets its golden; with each head's value rows before its key rows (the same
// shape here, N = V = 32) it must not.
TEST(HfFolder, KvBProjIsSplitIntoThePerHeadMatrices) {
  const int64_t H = 4, N = 32, V = 32, L = 64, es = 2;  // tests/data/hf/deepseek2: bf16
  auto fuse = [](bool values_first) {
    return [values_first](const fs::path& d) {
      edit_safetensors(d / "model.safetensors", [&](std::vector<StEntry>& es_) {
        for (int l = 0; l < 3; ++l) {
          const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
          const StEntry k = entry(es_, p + "embed_q.weight"), v = entry(es_, p + "unembed_out.weight");
          StEntry kvb{p + "kv_b_proj.weight", k.dtype, {H * (N + V), L}, std::vector<uint8_t>(H * (N + V) * L * es)};
          for (int64_t h = 0; h < H; ++h) {
            uint8_t* head = kvb.bytes.data() + h * (N + V) * L * es;
            uint8_t* krows = head + (values_first ? V * L * es : 0);
            uint8_t* vrows = head + (values_first ? 0 : N * L * es);
            for (int64_t n = 0; n < N; ++n)
              for (int64_t j = 0; j < L; ++j)  // embed_q[h] is [L, N]: key row n is its column n
                std::memcpy(krows + (n * L + j) * es, k.bytes.data() + ((h * L + j) * N + n) * es, es);
            std::memcpy(vrows, v.bytes.data() + h * V * L * es, V * L * es);
          }
          std::erase_if(es_, [&](const StEntry& e) { return e.name == k.name || e.name == v.name; });
          es_.push_back(kvb);
        }
      });
    };
  };
  const nlohmann::json g = golden("deepseek2");
  expect_golden(*Model::load(broken_folder("kv_b", fuse(false), "deepseek2")), g, {"ref", "cpu"});
  auto be = make_backend("ref", 2);
  EXPECT_GT(max_logit_diff(*Model::load(broken_folder("kv_b_swapped", fuse(true), "deepseek2")), *be, g), 0.05);
}

// A folder loads strictly: a tensor whose name maps (MLA's kv_a_layernorm) but that no part of
// the model reads (layer 0 is KDA) is refused, not ignored; the unchanged folder loads.
TEST(HfFolderErrors, TensorsTheModelDoesNotReadAreRefused) {
  const FolderEdit cases[] = {
      {"tensor 'blk.0.attn_kv_a_norm.weight' is not one kimi-linear reads (1 such tensor",
       [](const fs::path& d) {
         edit_safetensors(d / "model.safetensors", [](std::vector<StEntry>& es) {
           StEntry extra = entry(es, "model.layers.0.self_attn.o_norm.weight");
           extra.name = "model.layers.0.self_attn.kv_a_layernorm.weight";
           es.push_back(extra);
         });
       }},
  };
  expect_refused(cases, "strict", "kimi-linear");
  EXPECT_NO_THROW(Model::load(broken_folder(
      "strict_ok", [](const fs::path&) {}, "kimi-linear")));
}

TEST(HfQuantFolderErrors, RefusedNamingFileTensorAndField) {
  const std::string up = "model.layers.0.mlp.up_proj";  // [128 out, 64 in]: 4-bit g64 codes [128, 8], scales [128, 1]
  auto st = [](const std::function<void(std::vector<StEntry>&)>& f) {
    return [f](const fs::path& d) { edit_safetensors(d / "model.safetensors", f); };
  };
  const std::pair<std::string, std::function<void(const fs::path&)>> cases[] = {
      {"tensor 'model.layers.0.mlp.up_proj.scales': shape [64, 2], want [128, 1]", st([&](auto& es) {
         entry(es, up + ".scales").shape = entry(es, up + ".biases").shape = {64, 2};
       })},
      {"tensor 'model.layers.0.mlp.up_proj.weight': packed width 7 words, want 64 inputs x 4 bits / 32 = 8",
       st([&](auto& es) {
         auto& w = entry(es, up + ".weight");
         w.shape = {128, 7};
         w.bytes.resize(128 * 7 * 4);
       })},
      {"packed width 8 words, want 64 inputs x 3 bits / 32 = 6 (config.json "
       "quantization['model.layers.0.mlp.up_proj'])",
       [&](const fs::path& d) {
         edit_json(d / "config.json", [&](auto& j) { j["quantization"][up] = {{"bits", 3}, {"group_size", 64}}; });
       }},
      {"quantization.bits 7 is not one MLX writes",
       [](const fs::path& d) { edit_json(d / "config.json", [](auto& j) { j["quantization"]["bits"] = 7; }); }},
      {"quantization['model.layers.0.mlp.up_proj'].group_size 48 is not one MLX writes",
       [&](const fs::path& d) {
         edit_json(d / "config.json", [&](auto& j) { j["quantization"][up] = {{"bits", 4}, {"group_size", 48}}; });
       }},
      {"quantization['model.layers.0.mlp.up_proj'] is false",
       [&](const fs::path& d) { edit_json(d / "config.json", [&](auto& j) { j["quantization"][up] = false; }); }},
      {"tensor 'model.layers.0.mlp.up_proj.biases' missing", st([&](auto& es) {
         es.erase(std::find_if(es.begin(), es.end(), [&](const StEntry& e) { return e.name == up + ".biases"; }));
       })},
      {"tensor 'model.layers.0.mlp.up_proj.biases': dtype F16, want BF16",
       st([&](auto& es) { entry(es, up + ".biases").dtype = "F16"; })},
      {"tensor 'model.layers.0.mlp.up_proj.weight': dtype I32, want U32",
       st([&](auto& es) { entry(es, up + ".weight").dtype = "I32"; })},
      {"tensor 'model.layers.0.mlp.up_proj.scales': dtype U8, want F16, BF16 or F32", st([&](auto& es) {
         auto& s = entry(es, up + ".scales");
         s.dtype = "U8";
         s.shape = {128, 2};
       })},
      {"tensor 'model.norm.weight': quantized", st([](auto& es) {
         es.push_back({"model.norm.scales", "BF16", {1}, {0, 0}});
         es.push_back({"model.norm.biases", "BF16", {1}, {0, 0}});
       })},
      {"tensor 'model.layers.0.mlp.foo.scales' has no model.layers.0.mlp.foo.weight", st([](auto& es) {
         es.push_back({"model.layers.0.mlp.foo.scales", "BF16", {1}, {0, 0}});
       })},
  };
  for (const auto& [want, edit] : cases) {
    const std::string dir = broken_folder("q" + std::to_string(&want - &cases[0].first), edit, "llama-q4");
    try {
      Model::load(dir);
      ADD_FAILURE() << "accepted a folder that should fail with: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      if (want.find("tensor '") != std::string::npos) {
        EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
      }
    }
  }
}

// The adapter on the llama folder against MLX-LM loading the folder with it (adapter_path), at
// run time and merged: as tight as the folders themselves. Negative control: the base folder
// without the adapter misses this golden (the adapter moves logits by up to ~1.5).
TEST(HfLora, MatchesMlxLmWithTheAdapter) {
  const nlohmann::json g = golden("llama-lora");
  for (const bool merge : {false, true}) {
    ModelOptions opt;
    opt.lora = {folder("llama-lora")};
    opt.lora_merge = merge;
    auto m = Model::load(folder("llama"), opt);
    EXPECT_EQ(m->lora_summary(), merge ? "lora: 3 tensors merged (rank 4, scale 2)"
                                       : "lora: 3 tensors adapted at run time (rank 4, scale 2)");
    expect_golden(*m, g, {"ref", "cpu", "cpu-exact"});
    // Layer 0 was not adapted: its tensors are still the folder's own bytes; layer 1's are too
    // at run time (the factors ride along), and f32 copies merged.
    const TensorView* q0 = m->file().find_tensor("blk.0.attn_q.weight");
    const TensorView* q1 = m->file().find_tensor("blk.1.attn_q.weight");
    EXPECT_EQ(q0->type, DType::BF16);
    EXPECT_EQ(q0->lora, nullptr);
    EXPECT_EQ(q1->type, merge ? DType::F32 : DType::BF16);
    EXPECT_EQ(q1->lora == nullptr, merge);
  }
  auto be = make_backend("ref", 2);
  EXPECT_GT(max_logit_diff(*Model::load(folder("llama")), *be, g), 0.05);
}

// What mlx_lm.lora does without keys (tests/data/hf/qwen3moe-lora-experts): every linear of both
// layers, the routers and the experts' SwitchLinears (lora_a [E, r, in], lora_b [E, out, r]:
// per-expert terms on the stacked tensors, which slice2d hands each expert's view). Against
// MLX-LM on every backend through the one-token, small-batch (chunked prefill) and grouped
// paths. Negative control: the same adapter with its experts' lora_b zeroed.
TEST(HfLora, ExpertAdaptersMatchMlxLm) {
  const nlohmann::json g = golden("qwen3moe-lora-experts");
  ModelOptions opt;
  opt.lora = {folder("qwen3moe-lora-experts")};
  auto m = Model::load(folder("qwen3moe"), opt);
  EXPECT_EQ(m->lora_summary(), "lora: 16 tensors adapted at run time (rank 4, scale 2)");
  const TensorView* exps = m->file().find_tensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(exps->expert_lora, nullptr);
  ASSERT_NE(exps->slice2d(3).lora, nullptr);
  EXPECT_EQ(exps->slice2d(3).lora->size(), 1u);
  expect_golden(*m, g, {"ref", "cpu", "cpu-exact"});
  for (const char* backend : {"ref", "cpu"}) {
    auto be = make_backend(backend, 2);
    EXPECT_LT(max_logit_diff(*m, *be, g, /*chunks=*/true), 2e-3) << backend << ", 7+6+rest";
  }
  const std::string zeroed = broken_folder(
      "lora_experts_zeroed",
      [](const fs::path& d) {
        const fs::path p = d / "adapters.safetensors";
        std::string bytes = test::read_text_file(p.string());
        uint64_t n = 0;
        std::memcpy(&n, bytes.data(), 8);
        const nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
        for (const auto& [name, v] : h.items())
          if (name.find("switch_mlp") != std::string::npos && name.ends_with("lora_b"))
            std::fill(bytes.begin() + 8 + static_cast<int64_t>(n) + v["data_offsets"][0].get<int64_t>(),
                      bytes.begin() + 8 + static_cast<int64_t>(n) + v["data_offsets"][1].get<int64_t>(), '\0');
        std::ofstream(p, std::ios::binary) << bytes;
      },
      "qwen3moe-lora-experts");
  ModelOptions without;
  without.lora = {zeroed};
  auto be = make_backend("ref", 2);
  EXPECT_GT(max_logit_diff(*Model::load(folder("qwen3moe"), without), *be, g), 0.05);
}

// Two adapters at once: the llama adapter twice at half its scale each is the adapter at full
// scale (y = W·x + ½·s·BAx + ½·s·BAx); once at half scale alone misses the golden.
TEST(HfLora, AdaptersAddUp) {
  const nlohmann::json g = golden("llama-lora");
  ModelOptions opt;
  opt.lora = {folder("llama-lora") + ":0.5", folder("llama-lora") + ":0.5"};
  auto m = Model::load(folder("llama"), opt);
  EXPECT_EQ(m->lora_summary(),
            "lora: 3 tensors adapted at run time (rank 4, scale 1); lora: 3 tensors adapted at run "
            "time (rank 4, scale 1)");
  expect_golden(*m, g, {"ref", "cpu"});
  opt.lora.pop_back();
  auto be = make_backend("ref", 2);
  EXPECT_GT(max_logit_diff(*Model::load(folder("llama"), opt), *be, g), 0.05);
}

// `sluice inspect DIR`: the folder as the GGUF it maps to (what the loader will bind); a GGUF
// file keeps its header.
TEST(HfFolder, InspectReadsAFolderAsItsGguf) {
  const GgufInfo f = gguf_info(folder("kimi-linear-q4"));
  EXPECT_TRUE(f.folder);
  EXPECT_NE(std::find(f.metadata.begin(), f.metadata.end(),
                      std::make_pair(std::string("kimi-linear.attention.head_count_kv"), std::string("[0, 0, 0, 1]"))),
            f.metadata.end());
  bool k_b = false;
  for (const auto& t : f.tensors)
    if (t.name == "blk.3.attn_k_b.weight") {
      k_b = true;
      EXPECT_EQ(t.type, "q4_1");
      EXPECT_EQ(t.shape, (std::vector<int64_t>{64, 64, 2}));  // nope in, kv_lora out, per head
    }
  EXPECT_TRUE(k_b);
  EXPECT_EQ(model_info(folder("kimi-linear-q4")).arch, "kimi-linear");
  if (!test::have_shared()) return;
  const GgufInfo g = gguf_info(test::shared_dir() + "/models/stories260K.gguf");
  EXPECT_FALSE(g.folder);
  EXPECT_EQ(g.version, 3u);
}

// An MLX-LM adapter on each MoE folder (scripts/golden/make_lora_adapter.py), applied at run
// time, against MLX-LM loading the folder with it; the base folder alone misses the golden.
struct LoraCase {
  const char* adapter;
  const char* base;
  int n_tensors;
  std::vector<const char*> adapted;  // GGUF tensors that must carry the adapter
};

void PrintTo(const LoraCase& c, std::ostream* os) { *os << c.adapter; }

class HfLoraArch : public ::testing::TestWithParam<LoraCase> {};

TEST_P(HfLoraArch, MatchesMlxLmWithTheAdapter) {
  const LoraCase& c = GetParam();
  const nlohmann::json g = golden(c.adapter);
  ModelOptions opt;
  opt.lora = {folder(c.adapter)};
  auto m = Model::load(folder(c.base), opt);
  EXPECT_EQ(m->lora_summary(),
            "lora: " + std::to_string(c.n_tensors) + " tensors adapted at run time (rank 4, scale 2)");
  for (const char* t : c.adapted) EXPECT_NE(m->file().find_tensor(t)->lora, nullptr) << t;
  expect_golden(*m, g, {"ref", "cpu", "cpu-exact"});
  auto be = make_backend("ref", 2);
  EXPECT_GT(max_logit_diff(*Model::load(folder(c.base)), *be, g), 0.05);
}

INSTANTIATE_TEST_SUITE_P(
    Moe, HfLoraArch,
    ::testing::Values(
        // Both layers' q_proj and o_proj (the experts are not adapted).
        LoraCase{"qwen3moe-lora", "qwen3moe", 4, {"blk.0.attn_q.weight", "blk.1.attn_output.weight"}},
        // The last two layers: the Gated DeltaNet's in_proj_qkv and out_proj, the attention's
        // q_proj (with its gate half), the shared expert's down projection.
        LoraCase{"qwen35moe-lora", "qwen35moe", 5, {"blk.2.attn_qkv.weight", "blk.3.attn_q.weight"}},
        // q_proj, the DeltaNet's out_proj, the shared expert's up projection.
        LoraCase{"qwen3next-lora", "qwen3next", 4, {"blk.2.ssm_out.weight", "blk.3.attn_q.weight"}},
        // The DeltaNet's fused in_proj_qkvz (split at load into attn_qkv and attn_gate, its B
        // with it: two tensors from one adapted module) and in_proj_ba (read fused).
        LoraCase{"qwen3next-lora-qkvz",
                 "qwen3next",
                 3,
                 {"blk.2.attn_qkv.weight", "blk.2.attn_gate.weight", "blk.2.ssm_ba.weight"}},
        // q_proj and o_proj of a KDA and of the MLA layer, the KDA's decay-gate input f_a_proj,
        // MLA's kv_a_proj_with_mqa, the shared expert's up projection.
        LoraCase{"kimi-linear-lora", "kimi-linear", 8, {"blk.2.ssm_f_a.weight", "blk.3.attn_kv_a_mqa.weight"}},
        // The last three layers: attention.g_proj is the KDA output gate in layer 2 and the MLA
        // head gate in layers 3 and 4 (one module name, two GGUF tensors chosen by the layer's
        // kind); MLA's q_b_proj and dense, the KDA's q_proj, the shared experts' down projections.
        LoraCase{"bailingmoe3-lora", "bailingmoe3", 11, {"blk.2.ssm_g_a.weight", "blk.3.attn_gate.weight"}}));

// A copy of the adapter with its config or factors changed: each is refused naming the file
// and what is wrong, before the model is used.
TEST(HfLora, BrokenAdaptersAreRefusedByName) {
  const std::string a = "model.layers.1.self_attn.q_proj";
  auto cfg = [](std::function<void(nlohmann::json&)> f) {
    return [f](const fs::path& d) { edit_json(d / "adapter_config.json", f); };
  };
  // Rewrites adapters.safetensors with its header entries edited (data bytes kept; entries are
  // renamed, not copied: the reader refuses two entries over the same bytes).
  auto st = [](std::function<void(nlohmann::json&)> f) {
    return [f](const fs::path& d) { edit_st_header(d / "adapters.safetensors", f); };
  };
  const std::pair<std::string, std::function<void(const fs::path&)>> cases[] = {
      {"fine_tune_type 'dora' is not supported", cfg([](auto& j) { j["fine_tune_type"] = "dora"; })},
      {"lora_parameters.scale missing", cfg([](auto& j) { j["lora_parameters"].erase("scale"); })},
      {"'" + a + ".lora_b' missing", st([&](auto& h) { h.erase(a + ".lora_b"); })},
      {"is not a LoRA factor (.lora_a / .lora_b; DoRA magnitudes are not supported)", st([&](auto& h) {
         h[a + ".m"] = h[a + ".lora_a"];
         h.erase(a + ".lora_a");
       })},
      {"model.layers.9.self_attn.q_proj' adapts blk.9.attn_q.weight, which", st([&](auto& h) {
         for (const char* f : {".lora_a", ".lora_b"}) {
           h["model.layers.9.self_attn.q_proj" + std::string(f)] = h[a + f];
           h.erase(a + f);
         }
       })},
      {"'model.layers.1.mlp.down_proj': the factors make a [64, 64] update but blk.1.ffn_down.weight is [64, 128]",
       st([&](auto& h) {  // q_proj's lora_a [64, 4] and down_proj's [128, 4] swapped
         const std::string d = "model.layers.1.mlp.down_proj.lora_a";
         std::swap(h[a + ".lora_a"], h[d]);
       })},
      {"adapters.safetensors: cannot open", [](const fs::path& d) { fs::remove(d / "adapters.safetensors"); }},
  };
  for (const auto& [want, edit] : cases) {
    const std::string dir = broken_folder("lora" + std::to_string(&want - &cases[0].first), edit, "llama-lora");
    ModelOptions opt;
    opt.lora = {dir};
    try {
      Model::load(folder("llama"), opt);
      ADD_FAILURE() << "accepted an adapter that should fail with: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace sluice::test_hf_folder
