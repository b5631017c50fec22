// tests/models/test_template_cli: `sluice template` end to end: a real template over messages and
// tools files prints jinja2's bytes (tests/data/chat_templates/expected.json); a missing file, bad
// JSON and a template syntax error each give an error naming the file (and line) and exit 1.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace sluice::test_template_cli {
namespace {

const std::string kCli = ::sluice::test::cli_path();
using ojson = nlohmann::ordered_json;

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

ojson load(const std::string& name) {
  return ojson::parse(test::read_text_file(std::string(SLUICE_SOURCE_DIR) + "/tests/data/chat_templates/" + name));
}

TEST(TemplateCli, PrintsWhatJinja2Renders) {
  const std::string tmpl = test::shared_dir() + "/chat-templates/meta-llama-Llama-3.1-8B-Instruct.jinja";
  if (!std::filesystem::exists(tmpl)) GTEST_SKIP() << "no " << tmpl;
  const ojson convs = load("conversations.json");
  ojson conv;
  for (const auto& c : convs["conversations"])
    if (c["name"] == "tools") conv = c;
  ASSERT_FALSE(conv.is_null());
  const std::string messages = write_temp("tcli_messages.json", conv["messages"].dump());
  const std::string tools = write_temp("tcli_tools.json", convs["tools"].dump());
  int rc = 0;
  const std::string out = test::run_command(kCli + " template -f " + tmpl + " --messages " + messages + " --tools " +
                                                tools + " --add-generation-prompt --bos '<|begin_of_text|>'" +
                                                " --eos '<|eot_id|>'",
                                            &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(out, load("expected.json")["templates"]["meta-llama-Llama-3.1-8B-Instruct"]["tools"]["output"]);
}

TEST(TemplateCli, BadInputNamesTheFileAndFails) {
  const std::string good = write_temp("tcli_good.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}");
  const std::string msgs = write_temp("tcli_msgs.json", R"([{"role": "user", "content": "hi"}])");
  int rc = 0;
  EXPECT_EQ(test::run_command(kCli + " template -f " + good + " --messages " + msgs, &rc), "hi");
  EXPECT_EQ(rc, 0);

  std::string err = test::run_command(kCli + " template -f /nonexistent/t.jinja 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("/nonexistent/t.jinja"), std::string::npos) << err;

  const std::string bad_json = write_temp("tcli_bad.json", "[{\"role\": \"user\",\n \"content\": }]");
  err = test::run_command(kCli + " template -f " + good + " --messages " + bad_json + " 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find(bad_json), std::string::npos) << err;
  EXPECT_NE(err.find("line 2"), std::string::npos) << err;

  const std::string bad_tmpl = write_temp("tcli_bad.jinja", "ok\n{% if messages %}\n{{ messages[0] }\n{% endif %}");
  err = test::run_command(kCli + " template -f " + bad_tmpl + " 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find(bad_tmpl + ":3:"), std::string::npos) << err;

  const std::string raising = write_temp("tcli_raise.jinja", "a\n{{ raise_exception('no system role') }}");
  err = test::run_command(kCli + " template -f " + raising + " 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find(raising + ":2: no system role"), std::string::npos) << err;
}

}  // namespace
}  // namespace sluice::test_template_cli
