// apps/cli/cmd_pack: `sluice pack IN -o OUT` (and --unpack): the expert-bundled layout of
// sluice/pack.h (memory/pack.h explains why a packed file is Sluice-only).
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "commands.h"
#include "sluice/pack.h"

namespace sluice::cli {

CommandRunner add_pack_command(CLI::App& app) {
  struct Opts {
    std::string in, out;
    bool unpack = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd =
      app.add_subcommand("pack",
                         "rewrite the expert tensors so each (layer, expert) is one 4 KiB-aligned region: one read "
                         "per streaming miss. The output is Sluice-only (llama.cpp needs the stacked tensors); "
                         "--unpack restores them. A model folder (MLX / Hugging Face) becomes such a GGUF, its "
                         "experts converted as they are written: how a folder's experts stream");
  cmd->add_option("input", o->in, "GGUF model, or a model folder (config.json + safetensors)")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("-o,--output", o->out, "output GGUF")->required();
  cmd->add_flag("--unpack", o->unpack, "the reverse: stacked expert tensors again, loadable by llama.cpp");
  return [o] {
    const bool tty = ::isatty(2);
    // A counter on a terminal; elsewhere (logs, CI) a line per tenth, so a long pack still shows
    // it is moving.
    const auto progress = [tty, tenth = size_t{0}](size_t done, size_t total) mutable {
      if (tty && (done % 64 == 0 || done == total)) std::fprintf(stderr, "\rwriting tensor %zu/%zu", done, total);
      if (!tty && done * 10 / total > tenth) {
        tenth = done * 10 / total;
        std::fprintf(stderr, "pack: %zu/%zu tensors written\n", done, total);
      }
    };
    const PackSummary r = pack_model(o->in, o->out, o->unpack, progress);
    std::fprintf(stderr, "%s%s %s -> %s: %d MoE layers, %lld experts, %.1f MB -> %.1f MB in %.2f s\n", tty ? "\r" : "",
                 o->unpack ? "unpacked" : "packed", o->in.c_str(), o->out.c_str(), r.moe_layers,
                 static_cast<long long>(r.experts), r.bytes_in / 1e6, r.bytes_out / 1e6, r.seconds);
    return 0;
  };
}

}  // namespace sluice::cli
