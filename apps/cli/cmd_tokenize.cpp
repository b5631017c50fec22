// apps/cli/cmd_tokenize: `sluice tokenize -m MODEL` — token ids of a text (-p, -f or stdin) by
// the model's tokenizer alone (no weights read), as llama-tokenize prints them; --jsonl reads one
// JSON string per line and writes one JSON array of ids per line (the oracle tests compare
// those with Hugging Face tokenizers).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "commands.h"
#include "sluice/error.h"
#include "sluice/tokenize.h"

namespace sluice::cli {
namespace {

struct TokenizeOpts {
  std::string model, prompt, file;
  bool jsonl = false, add_special = false, no_parse_special = false, pieces = false;
};

int cmd_tokenize(const TokenizeOpts& o) {
  const ModelTokenizer tok(o.model);
  std::ifstream fin;
  if (!o.file.empty()) {
    fin.open(o.file, std::ios::binary);
    if (!fin) throw Error(o.file + ": cannot open");
  }
  std::istream& in = o.file.empty() ? std::cin : fin;
  if (o.jsonl) {
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n) {
      if (line.empty()) continue;
      nlohmann::json s;
      try {
        s = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw Error((o.file.empty() ? std::string("stdin") : o.file) + ": line " + std::to_string(n) +
                    ": not a JSON string: " + e.what());
      }
      if (!s.is_string()) throw Error("line " + std::to_string(n) + ": not a JSON string");
      std::printf(
          "%s\n",
          nlohmann::json(tok.tokenize(s.get<std::string>(), o.add_special, !o.no_parse_special)).dump().c_str());
    }
    return 0;
  }
  std::string text = o.prompt;
  if (text.empty()) text.assign(std::istreambuf_iterator<char>(in), {});
  for (int32_t id : tok.tokenize(text, o.add_special, !o.no_parse_special)) {
    if (o.pieces)
      std::printf(
          "%6d -> %s\n", id,  // a piece may be part of a UTF-8 sequence: shown with U+FFFD
          nlohmann::json(tok.token_text(id)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    else
      std::printf("%d ", id);
  }
  if (!o.pieces) std::printf("\n");
  return 0;
}

}  // namespace

CommandRunner add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOpts>();
  auto* cmd = app.add_subcommand("tokenize", "token ids of a text by the model's tokenizer (no weights read)");
  cmd->add_option("-m,--model", o->model, "GGUF file or model folder")->required()->check(CLI::ExistingPath);
  cmd->add_option("-p,--prompt", o->prompt, "the text (else -f FILE, else stdin)");
  cmd->add_option("-f,--file", o->file, "read the text from FILE")->check(CLI::ExistingFile);
  cmd->add_flag("--jsonl", o->jsonl, "input: one JSON string per line; output: one JSON array of ids per line");
  cmd->add_flag("--add-special", o->add_special, "add BOS/EOS as the model does");
  cmd->add_flag("--no-parse-special", o->no_parse_special, "tokenize special-token text as plain text");
  cmd->add_flag("--pieces", o->pieces, "print each id with its text");
  return [o] { return cmd_tokenize(*o); };
}

}  // namespace sluice::cli
