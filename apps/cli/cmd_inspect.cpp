// apps/cli/cmd_inspect: `sluice inspect FILE|DIR` — a GGUF file's header (a model folder's: as GGUF), metadata, the model's
// hyperparameters (or why it cannot run) and the tensor table with totals.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "sluice/inspect.h"

namespace sluice::cli {
namespace {

int cmd_inspect(const std::string& path) {
  const GgufInfo f = gguf_info(path);
  if (f.folder)
    std::printf("folder: %s\nas GGUF: %zu metadata keys (config.json, tokenizer files), %zu tensors\n\n", path.c_str(),
                f.metadata.size(), f.tensors.size());
  else
    std::printf("file: %s\nGGUF v%u, %zu metadata keys, %zu tensors, alignment %zu, data at offset %zu\n\n",
                path.c_str(), f.version, f.metadata.size(), f.tensors.size(), f.alignment, f.data_offset);
  std::printf("metadata:\n");
  for (const auto& [k, v] : f.metadata) std::printf("  %-48s %s\n", k.c_str(), v.c_str());
  try {
    const ModelInfo hp = model_info(path);
    std::printf("\nhyperparameters (%s):\n", hp.arch.c_str());
    std::printf("  n_vocab %lld, n_embd %lld, n_layer %lld, n_head %lld, n_head_kv %lld, head_dim k/v %lld/%lld\n",
                (long long)hp.n_vocab, (long long)hp.n_embd, (long long)hp.n_layer, (long long)hp.n_head,
                (long long)hp.n_head_kv, (long long)hp.head_dim_k, (long long)hp.head_dim_v);
    std::printf("  n_ff %lld, rms_eps %g, rope base %g, n_rot %lld (%s), ctx_train %lld\n", (long long)hp.n_ff,
                hp.rms_eps, hp.rope_base, (long long)hp.n_rot, hp.rope_neox ? "neox" : "normal",
                (long long)hp.n_ctx_train);
  } catch (const Error& e) {
    std::printf("\n(not runnable: %s)\n", e.what());
  }
  std::printf("\n%-40s %-6s %-24s %12s\n", "tensor", "type", "shape", "bytes");
  size_t total = 0;
  int64_t params = 0;
  for (const auto& t : f.tensors) {
    std::string shape;
    for (size_t d = 0; d < t.shape.size(); ++d) shape += (d ? ", " : "") + std::to_string(t.shape[d]);
    std::printf("%-40s %-6s %-24s %12zu\n", t.name.c_str(), t.type.c_str(), ("[" + shape + "]").c_str(), t.nbytes);
    total += t.nbytes;
    params += t.n_elements;
  }
  std::printf("\ntotal: %zu tensors, %lld parameters, %zu bytes (%.2f MB), %.2f bits/weight\n", f.tensors.size(),
              (long long)params, total, total / 1e6, params ? 8.0 * total / params : 0.0);
  return 0;
}

}  // namespace

CommandRunner add_inspect_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto* inspect = app.add_subcommand("inspect",
                                     "print a GGUF file's (or model folder's) metadata, hyperparameters and tensors");
  inspect->add_option("file", *path, "GGUF file or model folder")->required()->check(CLI::ExistingPath);

  return [path] { return cmd_inspect(*path); };
}

}  // namespace sluice::cli
