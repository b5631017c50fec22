// apps/cli/commands: each subcommand lives in its own file and registers itself here.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace sluice::cli {

// Adds a subcommand to `app` and returns the function that runs it (called when it was chosen).
using CommandRunner = std::function<int()>;
CommandRunner add_run_command(CLI::App& app);         // apps/cli/cmd_run.cpp
CommandRunner add_eval_command(CLI::App& app);        // apps/cli/cmd_eval.cpp
CommandRunner add_inspect_command(CLI::App& app);     // apps/cli/cmd_inspect.cpp
CommandRunner add_parity_command(CLI::App& app);      // apps/cli/cmd_parity.cpp
CommandRunner add_synth_command(CLI::App& app);       // apps/cli/cmd_synth.cpp
CommandRunner add_perplexity_command(CLI::App& app);  // apps/cli/cmd_perplexity.cpp
CommandRunner add_pack_command(CLI::App& app);        // apps/cli/cmd_pack.cpp
CommandRunner add_bench_command(CLI::App& app);       // apps/cli/cmd_bench.cpp
CommandRunner add_template_command(CLI::App& app);    // apps/cli/cmd_template.cpp
CommandRunner add_serve_command(CLI::App& app);       // apps/cli/cmd_serve.cpp
CommandRunner add_chat_command(CLI::App& app);        // apps/cli/cmd_chat.cpp
CommandRunner add_tokenize_command(CLI::App& app);    // apps/cli/cmd_tokenize.cpp

}  // namespace sluice::cli
