// apps/cli/cmd_synth: `sluice synth` — option parsing, the default tokenizer lookup, the
// progress bar and the preset table; the model itself is written by the library (sluice/synth.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "sluice/error.h"
#include "sluice/synth.h"

namespace sluice::cli {
namespace {

namespace fs = std::filesystem;

struct SynthArgs {
  SynthConfig opt;
  std::string output;
  bool list_presets = false;
  bool quiet = false;
};

// --tokenizer default: ../shared/models/stories260K.gguf for a GGUF, tests/data/hf/qwen3 (a
// 400-token byte-level BPE folder) for an MLX folder, relative to the repository, found from the
// working directory (the repo root) or from any directory above the binary (it may sit at
// build-x/sluice or build/release/sluice inside the repo).
std::string default_tokenizer(const std::string& rel, std::vector<std::string>* tried) {
  std::vector<fs::path> cands = {fs::path(rel)};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
      cands.push_back(dir / rel);
  for (const auto& c : cands) {
    tried->push_back(c.lexically_normal().string());
    if (fs::exists(c, ec)) return c.lexically_normal().string();
  }
  return {};
}

std::string fmt_count(double n) {
  char b[32];
  if (n >= 1e9)
    std::snprintf(b, sizeof b, "%.2fG", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(b, sizeof b, "%.1fM", n / 1e6);
  else
    std::snprintf(b, sizeof b, "%.0fK", n / 1e3);
  return b;
}

int list_presets() {
  std::printf("%-10s %-17s %6s %6s %7s %9s %8s %9s  %s\n", "arch", "preset", "n_embd", "layers", "heads", "experts",
              "vocab", "params", "shape");
  for (const SynthPreset& s : synth_preset_table()) {
    const bool tok_vocab = s.n_vocab == 0;  // the parameter count assumes stories260K's 512
    const std::string experts = s.n_expert ? std::to_string(s.n_expert) + "/" + std::to_string(s.n_expert_used) +
                                                 (s.n_expert_shared ? "+" + std::to_string(s.n_expert_shared) : "")
                                           : "-";
    std::printf("%-10s %-17s %6lld %6lld %3lld/%-3lld %9s %8s %9s  %s\n", s.arch.c_str(), s.preset.c_str(),
                (long long)s.n_embd, (long long)s.n_layer, (long long)s.n_head,
                (long long)(s.kv_lora_rank ? 1 : s.n_head_kv), experts.c_str(),
                tok_vocab ? "tok" : std::to_string(s.n_vocab).c_str(), fmt_count(double(s.n_params)).c_str(),
                s.note.c_str());
  }
  std::printf(
      "\nheads: query/kv (deepseek2: MLA, one latent kv head). experts: total/used+shared.\n"
      "vocab 'tok': the tokenizer's size (params shown for 512). --layers N overrides the layer count,\n"
      "--vocab N the vocabulary (the tokenizer is padded with unused tokens).\n"
      "types: ");
  for (const auto& t : synth_types()) std::printf("%s ", t.c_str());
  std::printf("\n");
  return 0;
}

// Progress on stderr: redrawn in place on a terminal (at most 5 times a second), otherwise a
// line per 10% so logs stay short.
class ProgressBar {
 public:
  ProgressBar() : tty_(isatty(STDERR_FILENO) != 0) {}
  void operator()(const SynthStatus& p) {
    const double frac = p.bytes_total ? double(p.bytes_done) / double(p.bytes_total) : 1.0;
    if (!p.done) {
      if (tty_ && p.seconds - last_ < 0.2) return;
      if (!tty_ && frac < next_step_) return;
    } else if (!tty_ && printed_all_) {
      return;  // the last chunk's line already said 100%
    }
    last_ = p.seconds;
    printed_all_ = p.bytes_done == p.bytes_total;
    while (next_step_ <= frac) next_step_ += 0.1;
    const double mbs = p.seconds > 0 ? p.bytes_done / 1e6 / p.seconds : 0.0;
    const double eta = mbs > 0 ? (p.bytes_total - p.bytes_done) / 1e6 / mbs : 0.0;
    char line[256];
    std::snprintf(line, sizeof line, "[%4d/%d] %6.2f/%.2f GB %5.1f%%  %7.1f MB/s  ETA %3d:%02d  %-32.32s", p.tensor,
                  p.n_tensors, p.bytes_done / 1e9, p.bytes_total / 1e9, 100.0 * frac, mbs, int(eta) / 60, int(eta) % 60,
                  std::string(p.name).c_str());
    std::fprintf(stderr, tty_ ? "\r%s" : "%s\n", line);
    if (tty_ && p.done) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  double last_ = -1.0;
  double next_step_ = 0.0;
  bool printed_all_ = false;
};

int run(const SynthArgs& a) {
  if (a.list_presets) return list_presets();
  if (a.output.empty()) fail("synth: -o/--output is required");
  SynthConfig opt = a.opt;
  if (opt.tokenizer.empty()) {
    const bool mlx = opt.format == "mlx";
    const std::string rel = mlx ? "tests/data/hf/qwen3" : "../shared/models/stories260K.gguf";
    std::vector<std::string> tried;
    opt.tokenizer = default_tokenizer(rel, &tried);
    if (opt.tokenizer.empty()) {
      std::string t;
      for (const auto& x : tried) t += (t.empty() ? "" : ", ") + x;
      fail("synth: default tokenizer ", rel, " not found (tried ", t, "); pass --tokenizer ",
           mlx ? "DIR, a model folder with tokenizer.json" : "FILE with any GGUF that has tokenizer.ggml.* keys");
    }
  }
  auto bar = std::make_shared<ProgressBar>();
  if (!a.quiet) opt.progress = [bar](const SynthStatus& p) { (*bar)(p); };
  const SynthSummary r = synth(opt, a.output);
  std::string types;
  for (const auto& [t, n] : r.type_counts) types += (types.empty() ? "" : ", ") + t + " x" + std::to_string(n);
  std::fprintf(stderr,
               "wrote %s: %s (%s preset), %lld layers, vocab %lld, type %s, seed %llu\n"
               "  %s parameters, %d tensors (%s), %.3f GB in %.1f s (%.1f MB/s)\n",
               a.output.c_str(), r.arch.c_str(), r.preset.c_str(), (long long)r.n_layer, (long long)r.n_vocab,
               opt.type.c_str(), (unsigned long long)opt.seed, fmt_count(double(r.n_params)).c_str(), r.n_tensors,
               types.c_str(), r.file_bytes / 1e9, r.seconds, r.seconds > 0 ? r.file_bytes / 1e6 / r.seconds : 0.0);
  return 0;
}

}  // namespace

CommandRunner add_synth_command(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  SynthConfig& o = args->opt;
  auto* cmd = app.add_subcommand("synth",
                                 "write a random-weight model of any supported architecture (GGUF, llama.cpp layout)");
  cmd->footer(
      "Weights are N(0, (gain/sqrt(fan_in))^2), deterministic in (seed, tensor name, index): gain 0.5 (0.5/sqrt(layers)\n"
      "for attn_output and ffn_down*, so deep models keep their routing spread over the experts), 1 for the q/k path,\n"
      "4 for the LM head and softmax routers, 1.5 for sigmoid routers; embeddings N(0, 0.25), norms 1 + N(0, 0.0025).\n"
      "With --vocab above the tokenizer's size the padding tokens get zero LM-head rows (logit 0), so text stays real.\n"
      "qwen35moe, qwen3next: ssm_a = -U(1,16) (-exp(A_log)), ssm_dt.bias N(0, 0.01), conv taps N(0, 1/K);\n"
      "--layers keeps an attention layer every 4th layer.\n"
      "kimi-linear, bailingmoe3 (KDA + MLA): ssm_a U(-4,-1) (-exp(A_log)) / U(1,2) (exp(A_log)), ssm_dt.bias\n"
      "U(-4.6,-2.25) / U(-4,-2) (a decay of ~0.6-0.99 per token), conv taps N(0, 1/K); MLA every 4th layer (kimi: and\n"
      "the last; ling3-8b: and those after the last group of 4).\n"
      "Types: f32, f16; q8_0, q4_0, q4_k, q6_k (every matrix, like llama-quantize --pure); q4_k_m (llama.cpp's Q4_K_M\n"
      "mix). Norms, routers and ssm_conv1d* stay f32; rows a block does not divide fall back as llama.cpp does (Q4_K->Q5_0,\n"
      "Q6_K->Q8_0, Q5_K->Q5_1, else F16).\n"
      "--routing-locality X (MoE only): the last quarter of the residual channels is handed, in proportion X, from the\n"
      "token embedding and the FFN outputs (scaled by 1-X there) to the attention outputs (scaled by 1+3X); each router\n"
      "reads those channels with weight 1+X and the others with 1-X; and the query side (attn_q, attn_q_b or the q norm)\n"
      "is scaled by 1-0.75X so attention averages the context more evenly. At X=1 routing follows the attention context,\n"
      "which moves slowly along the sequence, so consecutive tokens reuse experts (tiny presets, seed 1: 70-82% of a token's\n"
      "experts were the previous token's, vs 24-25% at X=0 and 27-29% at X=0.5). X=0 (default) is the plain model.\n"
      "--format mlx writes the same seed's weights as the folder mlx_lm.convert would (config.json, model.safetensors\n"
      "under mlx-lm's names, the tokenizer folder's files): --type q4 is MLX affine 4-bit in groups of --group-size with\n"
      "the routers at 8 bits, --type f32 loads to the GGUF's logits. Every architecture but olmoe; deepseek2 needs a\n"
      "sigmoid-routed preset (tiny-v3), bailingmoe3 a layer count mlx-lm's MLA rule agrees with.");
  cmd->add_option(
      "--arch", o.arch,
      "llama | mixtral | qwen3 | qwen3moe | olmoe | deepseek2 | qwen35moe | qwen3next | kimi-linear | bailingmoe3 "
      "(optional with a full-size preset)");
  cmd->add_option("--preset", o.preset, "tiny, or a full-size shape (see --list-presets)")->capture_default_str();
  cmd->add_option("--layers", o.layers, "override the preset's layer count");
  cmd->add_option("--vocab", o.vocab, "override the vocabulary size (pads the tokenizer with unused tokens)");
  cmd->add_option(
         "--type", o.type,
         "f32 | f16 | q8_0 | q4_0 | q4_k | q6_k | q4_k_m | q2_k | q3_k | iq4_nl | iq4_xs; with --format mlx f32 | f16 | bf16 | q2 | q3 | q4 | q5 | q6 | q8")
      ->capture_default_str();
  cmd->add_option("--format", o.format,
                  "gguf (one file, llama.cpp's layout) | mlx (a folder as mlx_lm.convert writes it)")
      ->check(CLI::IsMember({"gguf", "mlx"}))
      ->capture_default_str();
  cmd->add_option("--group-size", o.group_size, "--format mlx: the affine quantization's group (32, 64, 128)")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "GGUF file (or, with --format mlx, folder) to write");
  cmd->add_option("--seed", o.seed, "weight seed")->capture_default_str();
  cmd->add_option(
      "--tokenizer", o.tokenizer,
      "GGUF whose tokenizer.* keys are copied (default ../shared/models/stories260K.gguf, relative to the repo); with "
      "--format mlx a folder whose tokenizer files are copied (default tests/data/hf/qwen3)");
  cmd->add_option("--routing-locality", o.routing_locality, "0..1: make consecutive tokens reuse experts (see below)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "threads for generation and quantization (0 = all cores)")
      ->capture_default_str();
  cmd->add_flag(
      "--fast", o.fast,
      "benchmark models: large quantized matrices reuse a pool of 64 encoded rows block by block (same size and "
      "distribution, written at disk speed; different weights)");
  cmd->add_flag("--list-presets", args->list_presets, "print the preset table and exit");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress bar");
  return [args] { return run(*args); };
}

}  // namespace sluice::cli
