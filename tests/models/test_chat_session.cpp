// tests/models/test_chat_session: runtime/chat_session on real models — the prompt cache
// re-processes only what a turn adds (SmolLM2-135M-Instruct: a 2-turn count, and a
// 2,000-token conversation whose second turn evaluates <= 10% of its prompt), the answer equals
// a fresh run over the whole prompt, a hybrid model resumes from its checkpoint, and negative
// controls: a cache that is not rewound answers differently, a cache turned off reuses nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/chat_format.h"
#include "runtime/chat_session.h"
#include "test_util.h"

namespace sluice::test_chat_session {
namespace {

using ojson = nlohmann::ordered_json;

GenerateParams greedy(int n) {
  GenerateParams p;
  p.sampler.temp = 0;
  p.n_predict = n;
  return p;
}

// A loaded model and backend, and fresh sessions over them.
struct Rig {
  explicit Rig(const std::string& path) : model(Model::load(path)), be(make_backend("cpu", 2)), fmt(*model) {}
  Session session(int64_t n_ctx = 4096) { return Session(*model, *be, KvCacheOptions{.n_ctx = n_ctx}); }
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> be;
  ChatFormat fmt;
};

std::string smollm2() {
  const std::string m = test::find_smollm2_gguf();
  if (m.empty()) ADD_FAILURE() << test::kSmolGgufRel << " not found: run scripts/setup";
  return m;
}

// The conversation without its last message (the reply under test), answered from scratch.
ChatTurn fresh_reply(Rig& rig, const ojson& messages, const GenerateParams& p) {
  Session s = rig.session();
  ChatSession fresh(s, rig.fmt, p);
  ojson before = messages;
  before.erase(before.size() - 1);
  fresh.set_messages(before);
  return fresh.respond();
}

// The greeting SmolLM2's own template adds is left out (the first message is ours): with it,
// the int8-activation cpu path's first greedy token is not the one cpu-exact picks.
constexpr const char* kSystem = "You are a helpful assistant.";

TEST(ChatSession, SecondTurnReprocessesOnlyTheNewTokens) {
  const std::string path = smollm2();
  ASSERT_FALSE(path.empty());
  Rig rig(path);
  Session s = rig.session();
  ChatSession chat(s, rig.fmt, greedy(48));
  chat.set_system(kSystem);
  const ChatTurn t1 = chat.send("What is the capital of France?");
  EXPECT_EQ(t1.parsed.content, "The capital of France is Paris.");
  EXPECT_EQ(t1.stats.stop, StopReason::eos);
  EXPECT_EQ(t1.n_reused, 0);
  EXPECT_EQ(t1.n_evaluated, t1.n_prompt);

  const ChatTurn t2 = chat.send("And of Germany?");
  // Reused: the first prompt and the reply as generated (its end-of-turn token was sampled, not
  // evaluated). Evaluated: exactly the text the second turn adds.
  EXPECT_EQ(t2.n_reused, t1.n_prompt + t1.stats.n_generated);
  const auto added = rig.fmt.tokenize(
      "<|im_end|>\n<|im_start|>user\nAnd of Germany?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t2.n_evaluated, static_cast<int64_t>(added.size()));
  EXPECT_EQ(t2.n_evaluated, t2.n_prompt - t2.n_reused);
  EXPECT_EQ(chat.cached().size(), static_cast<size_t>(t2.n_prompt + t2.stats.n_generated));

  const ChatTurn ref = fresh_reply(rig, chat.messages(), greedy(48));
  EXPECT_EQ(ref.n_reused, 0);
  EXPECT_EQ(ref.n_prompt, t2.n_prompt);
  EXPECT_EQ(ref.text, t2.text);
  ASSERT_EQ(chat.messages().size(), 5u);
  EXPECT_EQ(chat.messages()[2], ojson::parse(R"({"role": "assistant", "content": "The capital of France is Paris."})"));

  // Negative control: with the cache off every turn evaluates the whole conversation.
  chat.set_prompt_cache(false);
  const ChatTurn t3 = chat.send("Thanks!");
  EXPECT_EQ(t3.n_reused, 0);
  EXPECT_EQ(t3.n_evaluated, t3.n_prompt);
}

// The multi-turn target: a 2,000-token conversation's second turn re-processes <= 10% of it.
TEST(ChatSession, LongConversationSecondTurnReprocessesUnderTenPercent) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = smollm2();
  ASSERT_FALSE(path.empty());
  Rig rig(path);
  std::string story = test::read_text_file(test::shared_dir() + "/corpus/stories-sampled.txt");
  ASSERT_GT(story.size(), 9000u);
  story.resize(9000);  // about 2,100 tokens of this text
  Session s = rig.session();
  ChatSession chat(s, rig.fmt, greedy(24));
  chat.set_system(kSystem);
  const ChatTurn t1 = chat.send("Read this story.\n\n" + story + "\n\nWho is the story about?");
  const ChatTurn t2 = chat.send("What happens at the end?");
  std::printf("[ long conversation: turn 1 prompt %lld tokens; turn 2 prompt %lld, reused %lld, evaluated %lld ]\n",
              static_cast<long long>(t1.n_prompt), static_cast<long long>(t2.n_prompt),
              static_cast<long long>(t2.n_reused), static_cast<long long>(t2.n_evaluated));
  EXPECT_GE(t2.n_prompt, 2000);
  EXPECT_LE(t2.n_evaluated * 10, t2.n_prompt);
  EXPECT_EQ(t2.n_reused, t1.n_prompt + t1.stats.n_generated);
  EXPECT_EQ(fresh_reply(rig, chat.messages(), greedy(24)).text, t2.text);
}

// Negative control: keeping the rows of a conversation that was reset, instead of rewinding to
// the common prefix, answers differently; the session's own turn (rewound) answers as a fresh run.
TEST(ChatSession, NegativeControlACacheThatDoesNotRewindAnswersDifferently) {
  const std::string path = smollm2();
  ASSERT_FALSE(path.empty());
  Rig rig(path);
  const std::string q1 = "What is the capital of France?", q2 = "Name a large animal.";
  Session s = rig.session();
  ChatSession chat(s, rig.fmt, greedy(16));
  chat.set_system(kSystem);
  const ChatTurn t1 = chat.send(q1);
  chat.reset();
  const ChatTurn t2 = chat.send(q2);
  EXPECT_GT(t2.n_reused, 0);                // the system prompt and the user header
  EXPECT_LT(t2.n_reused, t1.n_prompt - 3);  // but not the old question
  EXPECT_EQ(fresh_reply(rig, chat.messages(), greedy(16)).text, t2.text);

  // The same two turns with the stale rows left in place: the second prompt's new tokens are
  // evaluated after the whole first turn instead of after the common prefix.
  Session s2 = rig.session();
  ChatSession first(s2, rig.fmt, greedy(16));
  first.set_system(kSystem);
  first.send(q1);
  ojson conv = ojson::array({{{"role", "system"}, {"content", kSystem}}, {{"role", "user"}, {"content", q2}}});
  const auto ids = rig.fmt.tokenize(rig.fmt.render(conv));
  const auto& old = first.cached();
  size_t lcp = 0;
  while (lcp < ids.size() && lcp < old.size() && ids[lcp] == old[lcp]) ++lcp;
  auto logits = s2.eval(std::span(ids).subspan(lcp));  // no rewind
  std::string text;
  for (int i = 0; i < 16; ++i) {
    const int32_t id = argmax(logits);
    if (rig.model->tokenizer().is_eog(id)) break;
    text += rig.model->tokenizer().token_to_piece(id);
    const int32_t one[1] = {id};
    logits = s2.eval(one);
  }
  EXPECT_NE(text, t2.text) << "a cache that was not rewound gave the right answer: the test cannot tell";
}

TEST(ChatSession, ReasoningIsKeptApartAndNotFedBackAsContent) {
  const std::string path = smollm2();
  ASSERT_FALSE(path.empty());
  Rig rig(path);
  // ChatML whose generation prompt opens a think block (as Qwen3's and R1's do).
  const ChatFormat thinking(*rig.model,
                            "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
                            "'<|im_end|>\\n' -}}{%- endfor -%}{%- if add_generation_prompt -%}{{- "
                            "'<|im_start|>assistant\\n<think>\\n' -}}{%- endif -%}");
  Session s = rig.session();
  ChatSession chat(s, thinking, greedy(12));
  std::string reasoning, answer;
  const ChatTurn t = chat.send("What is the capital of France?", [&](std::string_view text, bool r) {
    (r ? reasoning : answer) += text;
    return true;
  });
  EXPECT_FALSE(t.text.empty());
  if (t.text.find("</think>") == std::string::npos) {
    EXPECT_NE(t.text.find(reasoning), std::string::npos);  // never closed: all of it is reasoning (trimmed)
    EXPECT_FALSE(reasoning.empty());
    EXPECT_EQ(answer, "");
  }
  // The stream's split is the parse's: one splitter (runtime/reasoning).
  EXPECT_EQ(t.parsed.reasoning_content, reasoning);
  EXPECT_EQ(t.parsed.content, answer);
  const ojson& reply = chat.messages().back();
  EXPECT_EQ(reply["content"], answer);
  EXPECT_EQ(reply.value("reasoning_content", ""), t.parsed.reasoning_content);
  EXPECT_FALSE(t.parsed.reasoning_content.empty());
}

TEST(ChatSession, CancelStopsTheReplyAndTheNextTurnGoesOn) {
  const std::string path = smollm2();
  ASSERT_FALSE(path.empty());
  Rig rig(path);
  Session s = rig.session();
  ChatSession chat(s, rig.fmt, greedy(48));
  chat.set_system(kSystem);
  int calls = 0;
  const ChatTurn t = chat.send("Tell me about Paris.", {}, [&] { return ++calls > 3; });
  EXPECT_EQ(t.stats.stop, StopReason::callback);
  EXPECT_EQ(t.stats.n_generated, 3);
  const ChatTurn t2 = chat.send("Thanks.");
  EXPECT_GT(t2.n_reused, t.n_prompt);
  EXPECT_EQ(chat.messages().size(), 5u);
}

TEST(ChatSession, ContextFullIsAClearErrorAndChangesNothing) {
  SLUICE_REQUIRE_SHARED();
  Rig rig(test::shared_dir() + "/models/stories260K.gguf");
  Session s = rig.session(64);
  ChatSession chat(s, rig.fmt, greedy(200));
  // A reply that runs into the end of the context stops there and is kept.
  const ChatTurn t = chat.send("Once upon a time");
  EXPECT_EQ(t.stats.stop, StopReason::context_full);
  EXPECT_EQ(chat.messages().size(), 2u);
  // A conversation that no longer fits: an error naming the sizes; the message is dropped again.
  try {
    chat.send("Tell me more about the little girl and her dog and the park and the sun.");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("holds 64"), std::string::npos) << e.what();
  }
  EXPECT_EQ(chat.messages().size(), 2u);
}

TEST(ChatSession, SetMessagesValidatesBeforeChangingAnything) {
  SLUICE_REQUIRE_SHARED();
  Rig rig(test::shared_dir() + "/models/stories260K.gguf");
  Session s = rig.session(512);
  ChatSession chat(s, rig.fmt, greedy(4));
  const ojson conv = ojson::parse(R"([{"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}])");
  chat.set_messages(ojson::parse(conv.dump()));
  EXPECT_EQ(chat.messages(), conv);
  EXPECT_EQ(chat.system(), "Be brief.");
  for (const char* bad : {R"({"role": "user"})", R"([{"content": "x"}])", R"([{"role": "user", "content": 5}])"}) {
    EXPECT_THROW(chat.set_messages(ojson::parse(bad)), Error) << bad;
    EXPECT_EQ(chat.messages(), conv) << bad;
  }
  chat.reset();
  EXPECT_EQ(chat.messages(), ojson::parse(R"([{"role": "system", "content": "Be brief."}])"));
}

// stories260K (no template: ChatML as text, a SentencePiece vocab without ChatML tokens) and the
// qwen35moe hybrid (recurrent state: a rewind lands on a checkpoint taken at the end of a turn).
TEST(ChatSession, TinyModelsReuseTheCacheAndMatchAFreshRun) {
  SLUICE_REQUIRE_SHARED();
  for (const char* file : {"/models/stories260K.gguf", "/golden/qwen35moe/model.gguf"}) {
    SCOPED_TRACE(file);
    Rig rig(test::shared_dir() + file);
    EXPECT_TRUE(rig.fmt.is_fallback());
    Session s = rig.session(1024);
    ChatSession chat(s, rig.fmt, greedy(20));
    const ChatTurn t1 = chat.send("Once upon a time, there was a girl");
    const ChatTurn t2 = chat.send("She had a dog");
    // Pure attention keeps the whole common prefix; the hybrid lands on the checkpoint after
    // the reply (or, if the re-rendered reply tokenizes differently, the one after the prompt).
    EXPECT_GE(t2.n_reused, t1.n_prompt);
    EXPECT_LE(t2.n_reused, t1.n_prompt + t1.stats.n_generated);
    const bool hybrid = std::string(file).find("qwen35") != std::string::npos;
    if (hybrid) {
      const auto cps = s.memory().seq_checkpoints(s.seq());
      EXPECT_NE(std::find(cps.begin(), cps.end(), t2.n_prompt), cps.end()) << "a checkpoint at the end of the prompt";
    }
    EXPECT_EQ(fresh_reply(rig, chat.messages(), greedy(20)).text, t2.text);
  }
}

TEST(ReasoningSplitter, SplitsTagsAcrossPieces) {
  auto run = [](bool open, std::vector<std::string> pieces) {
    std::string out;
    ReasoningSplitter sp(open, [&](bool r, std::string_view t) { out += (r ? "R:" : "A:") + std::string(t) + "|"; });
    for (const auto& p : pieces) sp.push(p);
    sp.flush();
    return out;
  };
  EXPECT_EQ(run(false, {"<th", "ink>ab", "c</th", "ink>\n\nAns", "wer"}), "R:ab|R:c|A:Ans|A:wer|");
  EXPECT_EQ(run(true, {"abc</think>", " x"}), "R:abc|A:x|");
  EXPECT_EQ(run(false, {"Hello", " <think>"}), "A:Hello|A: <think>|");     // not leading: text
  EXPECT_EQ(run(false, {"  ", "<thin"}), "A:  <thin|");                    // ended mid-tag: as text
  EXPECT_EQ(run(true, {"never closed </th"}), "R:never closed|R: </th|");  // trailing space held, then dropped
}

}  // namespace
}  // namespace sluice::test_chat_session
