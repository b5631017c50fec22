// apps/cli/commands: each subcommand that lives in its own file registers itself here.
#pragma once
#include <CLI/CLI.hpp>
#include <cstddef>
#include <functional>
#include <string>

#include "memory/expert_store.h"

namespace sluice::cli {

// Adds a subcommand to `app` and returns the function that runs it (called when it was chosen).
using CommandRunner = std::function<int()>;
CommandRunner add_synth_command(CLI::App& app);       // apps/cli/cmd_synth.cpp
CommandRunner add_perplexity_command(CLI::App& app);  // apps/cli/cmd_perplexity.cpp
CommandRunner add_pack_command(CLI::App& app);        // apps/cli/cmd_pack.cpp
CommandRunner add_bench_command(CLI::App& app);       // apps/cli/cmd_bench.cpp
CommandRunner add_template_command(CLI::App& app);    // apps/cli/cmd_template.cpp
CommandRunner add_serve_command(CLI::App& app);       // apps/cli/cmd_serve.cpp
CommandRunner add_chat_command(CLI::App& app);        // apps/cli/cmd_chat.cpp

// "4G", "512M", "1.5GiB", "65536": bytes (K/M/G/T are powers of 1024); fails naming `opt`
// otherwise (apps/cli/options.cpp).
size_t parse_byte_size(const std::string& opt, const std::string& s);
// --expert-cache: "auto" (sized to the memory limit, memory/memory_limit.h) or a size.
void set_expert_cache(ExpertStoreOptions& o, const std::string& s);

}  // namespace sluice::cli
