// apps/cli/cmd_synth: `sluice synth` (placeholder until src/synth lands).
#include "commands.h"

namespace sluice::cli {
CommandRunner add_synth_command(CLI::App& app) {
  app.add_subcommand("synth", "write a random-weight model (not available yet)");
  return [] { return 1; };
}
}  // namespace sluice::cli
