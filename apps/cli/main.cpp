// apps/cli: the `sluice` command — each subcommand registers its options (apps/cli/cmd_*.cpp)
// and runs over the public API (include/sluice/); here: dispatch and the error exit codes.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "sluice/error.h"

using namespace sluice;

int main(int argc, char** argv) {
  CLI::App app{"sluice: a Mixture-of-Experts inference engine"};
  app.require_subcommand(1);
  // In the order of `sluice --help` (a braced list is evaluated left to right).
  const std::vector<std::pair<std::string, cli::CommandRunner>> commands = {
      {"run", cli::add_run_command(app)},           {"eval", cli::add_eval_command(app)},
      {"inspect", cli::add_inspect_command(app)},   {"parity", cli::add_parity_command(app)},
      {"synth", cli::add_synth_command(app)},       {"perplexity", cli::add_perplexity_command(app)},
      {"pack", cli::add_pack_command(app)},         {"bench", cli::add_bench_command(app)},
      {"template", cli::add_template_command(app)}, {"serve", cli::add_serve_command(app)},
      {"chat", cli::add_chat_command(app)},         {"tokenize", cli::add_tokenize_command(app)},
  };

  // CLI11 answers a mistyped command with "A subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "sluice: error: unknown command '%s' (commands: %s; sluice --help)\n", argv[1],
                   names.c_str());
      return 1;
    }
  }
  CLI11_PARSE(app, argc, argv);
  try {
    for (const CLI::App* sub : app.get_subcommands())
      for (const auto& [name, run] : commands)
        if (sub->get_name() == name) return run();
  } catch (const Error& e) {
    std::fprintf(stderr, "sluice: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
