// apps/cli/commands: each subcommand that lives in its own file registers itself here.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace sluice::cli {

// Adds a subcommand to `app` and returns the function that runs it (called when it was chosen).
using CommandRunner = std::function<int()>;
CommandRunner add_synth_command(CLI::App& app);  // apps/cli/cmd_synth.cpp
CommandRunner add_perplexity_command(CLI::App& app);  // apps/cli/cmd_perplexity.cpp
CommandRunner add_pack_command(CLI::App& app);   // apps/cli/cmd_pack.cpp
CommandRunner add_bench_command(CLI::App& app);  // apps/cli/cmd_bench.cpp

}  // namespace sluice::cli
