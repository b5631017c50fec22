// tests/unit/test_chat_format: a model's chat template applied to a conversation
// (runtime/chat_format.h) — SmolLM2's own template (its GGUF's tokenizer.chat_template: ChatML
// with a default system turn) and the ChatML fallback for a model without one (stories260K).
#include <gtest/gtest.h>

#include "models/model.h"
#include "runtime/chat_format.h"
#include "test_util.h"

namespace sluice {
namespace {

using json = nlohmann::ordered_json;

TEST(ChatFormat, RendersTheModelsTemplateAndTokenizesItsSpecialTokens) {
  const std::string path = test::find_smollm2_gguf();
  ASSERT_FALSE(path.empty()) << test::kSmolGgufRel << " not found: run scripts/setup";
  auto model = Model::load(path);
  const ChatFormat f(*model);
  EXPECT_FALSE(f.is_fallback());
  const json messages = json::parse(R"([{"role": "user", "content": "Hi"}])");
  // What the template's text says it writes: a default system turn, then the user's, then the
  // assistant's opening.
  const std::string want =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  const std::string prompt = f.render(messages);
  EXPECT_EQ(prompt, want);
  EXPECT_EQ(f.render(messages, nullptr, false),
            want.substr(0, want.size() - std::string("<|im_start|>assistant\n").size()));
  const std::vector<int32_t> ids = f.tokenize(prompt);
  const Tokenizer& tok = model->tokenizer();
  const int32_t im_start = tok.text_to_token("<|im_start|>"), im_end = tok.text_to_token("<|im_end|>");
  ASSERT_GE(im_start, 0);
  EXPECT_EQ(ids.front(), im_start) << "the first token is the template's <|im_start|>, with no BOS before it here";
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_start), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_end), 2);
  // Negative control: tokenized without parsing special tokens, the markers are plain text.
  const std::vector<int32_t> plain = tok.encode(prompt, true, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_start), 0);
}

TEST(ChatFormat, FallsBackToChatMlAndTakesAnOverride) {
  SLUICE_REQUIRE_SHARED();
  auto model = Model::load(test::shared_dir() + "/models/stories260K.gguf");
  const ChatFormat f(*model);
  EXPECT_TRUE(f.is_fallback());
  const json messages = json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  EXPECT_EQ(f.render(messages),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  // This vocab has no <|im_start|>: the text is tokenized as text, after the vocab's BOS.
  const std::vector<int32_t> ids = f.tokenize(f.render(messages));
  EXPECT_EQ(ids.front(), model->tokenizer().bos());
  const ChatFormat o(*model, "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}");
  EXPECT_FALSE(o.is_fallback());
  EXPECT_EQ(o.render(messages, nullptr, false), "<s>[system] S\n[user] U\n");
  // The template wrote BOS itself: tokenize does not add a second one.
  const std::vector<int32_t> oi = o.tokenize(o.render(messages, nullptr, false));
  EXPECT_EQ(oi.front(), model->tokenizer().bos());
  EXPECT_NE(oi[1], model->tokenizer().bos());
}

}  // namespace
}  // namespace sluice
