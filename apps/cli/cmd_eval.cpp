// apps/cli/cmd_eval: `sluice eval` — token ids evaluated as one batch: the JSON of the prompt,
// a greedy continuation and its text on stdout; the logits to a file (the goldens' format).
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common_opts.h"
#include "sluice/sluice.h"

namespace sluice::cli {
namespace {

struct EvalArgs {
  CommonOpts co;
  std::string tokens, logits_path;
  int greedy = 0;
};

std::string to_hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}


int cmd_eval(const CommonOpts& co, const std::string& tokens_arg, int greedy, const std::string& logits_path) {
  auto engine = co.open();
  std::vector<int32_t> ids = parse_token_list(tokens_arg);
  engine->set_context(co.context_size(engine->info(), static_cast<int64_t>(ids.size()), greedy));
  const std::vector<float> logits = engine->eval(ids, /*all_logits=*/true);
  if (!logits_path.empty()) {
    std::ofstream out(logits_path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!out) fail("cannot write logits to ", logits_path);
  }
  const auto n_vocab = static_cast<size_t>(engine->n_vocab());
  std::vector<int32_t> generated;
  std::string text;
  int32_t next = greedy_token(logits.data() + logits.size() - n_vocab, n_vocab);
  for (int i = 0; i < greedy; ++i) {
    // EOS does not stop the continuation: the goldens always have exactly N tokens.
    generated.push_back(next);
    text += engine->token_to_piece(next);
    if (i + 1 == greedy) break;
    const std::vector<float> row = engine->eval({next});
    next = greedy_token(row.data(), row.size());
  }
  nlohmann::json j;
  j["prompt_tokens"] = ids;
  j["generated"] = generated;
  j["text"] = text;
  j["text_hex"] = to_hex(text);
  // Invalid UTF-8 in pieces is replaced by U+FFFD, as in the goldens' "text".
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  co.report_experts(*engine);
  return 0;
}

}  // namespace

CommandRunner add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* eval = app.add_subcommand("eval", "evaluate token ids as one batch; print JSON, write logits");
  a->co.add(eval);
  eval->add_option("--tokens", a->tokens, "comma-separated token ids")->required();
  eval->add_option("--greedy", a->greedy, "greedy continuation length (EOS does not stop it)");
  eval->add_option("--logits", a->logits_path, "write prompt logits as float32 [n_tokens x n_vocab]");

  return [a] { return cmd_eval(a->co, a->tokens, a->greedy, a->logits_path); };
}

}  // namespace sluice::cli
