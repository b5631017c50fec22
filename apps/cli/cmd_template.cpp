// apps/cli/cmd_template: `sluice template -f TEMPLATE [--messages M.json] [--tools T.json]
// [--add-generation-prompt] [--bos TEXT] [--eos TEXT]`: prints the prompt a chat template
// (sluice/template.h) renders, byte for byte as transformers' apply_chat_template would.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "sluice/error.h"
#include "sluice/template.h"

namespace sluice::cli {
namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open the ", what);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::ordered_json read_json(const std::string& path, const char* what) {
  try {
    return nlohmann::ordered_json::parse(read_file(path, what));
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a huge number
    fail(path, ": the ", what, " is not valid JSON: ", e.what());
  }
}

}  // namespace

CommandRunner add_template_command(CLI::App& app) {
  struct Opts {
    std::string tmpl, messages, tools, bos, eos;
    bool gen = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("template", "render a chat template (Jinja2) over messages and print the prompt");
  cmd->add_option("-f,--file", o->tmpl, "chat template (.jinja)")->required();
  cmd->add_option("--messages", o->messages,
                  "JSON file: an array of messages ({\"role\", \"content\", ...}), or an object with \"messages\" "
                  "(and optionally \"tools\")");
  cmd->add_option("--tools", o->tools, "JSON file: an array of tool definitions");
  cmd->add_flag("--add-generation-prompt", o->gen, "end with the assistant turn's opening");
  auto* bos = cmd->add_option("--bos", o->bos, "bos_token (undefined in the template when not given)");
  auto* eos = cmd->add_option("--eos", o->eos, "eos_token (undefined in the template when not given)");
  return [o, bos, eos] {
    const PromptTemplate t(read_file(o->tmpl, "template"), o->tmpl);
    PromptTemplateInput in;
    if (!o->messages.empty()) {
      nlohmann::ordered_json m = read_json(o->messages, "messages file");
      if (m.is_object() && m.contains("messages")) {
        if (m.contains("tools")) in.tools_json = m["tools"].dump();
        m = m["messages"];
      }
      if (!m.is_array()) fail(o->messages, ": expected an array of messages");
      in.messages_json = m.dump();
    }
    if (!o->tools.empty()) {
      const nlohmann::ordered_json tools = read_json(o->tools, "tools file");
      if (!tools.is_array()) fail(o->tools, ": expected an array of tool definitions");
      in.tools_json = tools.dump();
    }
    in.add_generation_prompt = o->gen;
    if (*bos) in.bos_token = o->bos;
    if (*eos) in.eos_token = o->eos;
    const std::string out = t.apply(in);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  };
}

}  // namespace sluice::cli
