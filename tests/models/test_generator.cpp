// tests/models/test_generator: the one decode loop (runtime/generator.h). The text stream on its
// own (UTF-8 holding, stop strings over several pieces), then Generator on stories260K: every
// stop reason, and the public Engine::generate printing what `sluice run` prints.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "sluice/sluice.h"
#include "test_util.h"

namespace sluice::test_generator {
namespace {

// True when `s` is well-formed UTF-8 (no overlong/surrogate checks: the tests only need to see
// that no character was cut).
bool complete_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80                 ? 1
                       : c >= 0xC2 && c <= 0xDF ? 2
                       : c >= 0xE0 && c <= 0xEF ? 3
                       : c >= 0xF0 && c <= 0xF4 ? 4
                                                : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

TEST(TextStream, IncompleteTail) {
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
  EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xC3"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2\x82"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2\x82\xAC"), 0u);  // € complete
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);   // 😀 missing its last byte
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\x80"), 0u);  // stray continuation: nothing can complete it
  EXPECT_EQ(utf8_incomplete_tail("a\xFF"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xC0"), 0u);  // never valid
}

TEST(TextStream, HoldsACharacterSplitOverPieces) {
  TextStream ts({});
  EXPECT_EQ(ts.push("a\xE2"), "a");
  EXPECT_EQ(ts.push("\x82"), "");
  EXPECT_EQ(ts.push("\xAC"
                    "b"),
            "\xE2\x82\xAC"
            "b");
  EXPECT_EQ(ts.flush(), "");
}

TEST(TextStream, InvalidBytesPassThroughAsIs) {
  TextStream ts({});
  EXPECT_EQ(ts.push("\xE2"), "");
  EXPECT_EQ(ts.push("a"),
            "\xE2"
            "a");  // 'a' cannot continue it: released unchanged, no U+FFFD
  EXPECT_EQ(ts.push("x\xF0\x9F"), "x");
  EXPECT_EQ(ts.flush(), "\xF0\x9F");  // the end: held bytes as they are
}

TEST(TextStream, StopStringOverThreePieces) {
  TextStream ts({"END"});
  EXPECT_EQ(ts.push("hello E"), "hello ");
  EXPECT_EQ(ts.push("N"), "");
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(ts.push("D and more"), "");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.flush(), "");
  EXPECT_EQ(ts.push("later"), "");
}

TEST(TextStream, FalseStartIsReleased) {
  TextStream ts({"END"});
  EXPECT_EQ(ts.push("E"), "");
  EXPECT_EQ(ts.push("Nx"), "ENx");
  EXPECT_EQ(ts.push("EN"), "");
  EXPECT_EQ(ts.flush(), "EN");  // never completed: it is text after all
}

TEST(TextStream, EarliestOfSeveralStopsWins) {
  TextStream a({"cd", "bc", ""});  // the empty one is ignored, not a match everywhere
  EXPECT_EQ(a.push("abcd"), "a");
  EXPECT_TRUE(a.stopped());
  // Overlapping prefixes: "aa" may still become "aab" after one more 'a'.
  TextStream b({"aab"});
  EXPECT_EQ(b.push("aa"), "");
  EXPECT_EQ(b.push("a"), "a");
  EXPECT_EQ(b.push("b!"), "");
  EXPECT_TRUE(b.stopped());
}

struct Stories {
  std::unique_ptr<Model> model = Model::load(test::shared_dir() + "/models/stories260K.gguf");
  std::unique_ptr<Backend> be = make_backend("cpu", 2);
};

GenerateParams greedy(int n) {
  GenerateParams p;
  p.sampler.temp = 0;
  p.n_predict = n;
  return p;
}

struct Output {
  GenerationStats st;
  std::string text;
  std::vector<std::string> chunks;
};

Output generate(Stories& m, const GenerateParams& p, const std::string& prompt = "Once upon a time",
                int64_t n_ctx = 512, int stop_after_chunks = -1) {
  Session s(*m.model, *m.be, KvCacheOptions{.n_ctx = n_ctx});
  Output r;
  r.st = Generator(s).run(prompt, p, [&](std::string_view t) {
    r.text += t;
    r.chunks.emplace_back(t);
    return static_cast<int>(r.chunks.size()) != stop_after_chunks;
  });
  return r;
}

std::string pieces(const Model& m, const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += m.tokenizer().token_to_piece(id);
  return s;
}

// stories260K's SentencePiece vocab spells characters it lacks with byte-fallback tokens
// (<0xC3><0xBC> for ü; it has é and €), so one character's bytes come from two to four tokens.
TEST(Generator, TokenizerBytePiecesAreHeldUntilTheCharacterIsWhole) {
  SLUICE_REQUIRE_SHARED();
  Stories m;
  const Tokenizer& tok = m.model->tokenizer();
  const std::vector<int32_t> ids = tok.encode("\u4E2D \u00FC \U0001F600!", false);
  int n_byte = 0, n_held = 0;
  TextStream ts({});
  std::string out;
  for (int32_t id : ids) {
    n_byte += (tok.attr(id) & TOKEN_ATTR_BYTE) != 0;
    const std::string chunk = ts.push(tok.token_to_piece(id));
    n_held += chunk.empty();
    EXPECT_TRUE(complete_utf8(chunk)) << "token " << id;
    out += chunk;
  }
  out += ts.flush();
  EXPECT_EQ(n_byte, 3 + 2 + 4) << "中, ü and 😀 should be byte-fallback tokens";
  EXPECT_EQ(n_held, 2 + 1 + 3) << "every byte but a character's last must wait for the rest";
  EXPECT_EQ(out, pieces(*m.model, ids));
  EXPECT_EQ(out, " \xE4\xB8\xAD \xC3\xBC \xF0\x9F\x98\x80!");
}

// Hot sampling picks byte tokens (half of this vocab) all the time, lead bytes among them:
// every chunk streamed but the last ends on a whole character, and nothing is lost or reordered.
// Which samples come out moves with the ISA's float rounding, so seeds are tried until one has
// cut a character mid-stream (the case under test); each seed's run is checked.
TEST(Generator, SampledBytesNeverSplitACharacter) {
  SLUICE_REQUIRE_SHARED();
  Stories m;
  int n_held = 0, seeds = 0;
  for (uint32_t seed = 11; seed < 41 && n_held == 0; ++seed, ++seeds) {
    GenerateParams p;
    p.sampler = SamplerParams{.temp = 3.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = seed};
    p.n_predict = 300;
    p.ignore_eos = true;
    const Output r = generate(m, p);
    ASSERT_EQ(r.st.n_generated, 300);
    EXPECT_EQ(r.text, pieces(*m.model, r.st.tokens)) << "seed " << seed;
    for (size_t i = 0; i + 1 < r.chunks.size(); ++i)
      EXPECT_EQ(utf8_incomplete_tail(r.chunks[i]), 0u) << "seed " << seed << " chunk " << i;
    std::string so_far;
    for (int32_t id : r.st.tokens) {
      so_far += m.model->tokenizer().token_to_piece(id);
      n_held += utf8_incomplete_tail(so_far) > 0;
    }
  }
  EXPECT_GT(n_held, 0) << seeds << " seeds never cut a character: the test checks nothing";
}

TEST(Generator, StopStringSpanningTwoTokens) {
  SLUICE_REQUIRE_SHARED();
  Stories m;
  const Output g = generate(m, greedy(48));
  ASSERT_EQ(g.st.stop, StopReason::max_tokens);
  // Find a boundary between two tokens of >= 2 bytes each whose 4 bytes around it first occur
  // right there; the stop string is those 4 bytes.
  std::string stop;
  size_t at = 0, boundary = 0;
  int n_through = 0;
  for (size_t k = 0; k + 1 < g.st.tokens.size() && stop.empty(); ++k) {
    const std::string& a = m.model->tokenizer().token_to_piece(g.st.tokens[k]);
    const std::string& b = m.model->tokenizer().token_to_piece(g.st.tokens[k + 1]);
    boundary += a.size();
    if (a.size() < 2 || b.size() < 2) continue;
    const std::string cand = a.substr(a.size() - 2) + b.substr(0, 2);
    if (g.text.find(cand) == boundary - 2) {
      stop = cand;
      at = boundary - 2;
      n_through = static_cast<int>(k) + 2;
    }
  }
  ASSERT_FALSE(stop.empty()) << g.text;
  GenerateParams p = greedy(48);
  p.stop = {"no such text", stop};
  const Output r = generate(m, p);
  EXPECT_EQ(r.st.stop, StopReason::stop_string);
  EXPECT_EQ(r.text, g.text.substr(0, at)) << "stop string '" << stop << "'";
  EXPECT_EQ(r.st.n_generated, n_through);
}

TEST(Generator, MaxTokensEvaluatesEveryToken) {
  SLUICE_REQUIRE_SHARED();
  Stories m;
  Session s(*m.model, *m.be, KvCacheOptions{.n_ctx = 64});
  const GenerationStats st = Generator(s).run("Once upon a time", greedy(5));
  EXPECT_EQ(st.stop, StopReason::max_tokens);
  EXPECT_EQ(st.n_generated, 5);
  EXPECT_EQ(st.n_prompt, 5);
  EXPECT_EQ(s.n_past(), 10);
  EXPECT_EQ(pieces(*m.model, st.tokens), ", there was a little");
}

TEST(Generator, ContextFull) {
  SLUICE_REQUIRE_SHARED();
  Stories m;
  const Output full = generate(m, greedy(64), "Once upon a time", /*n_ctx=*/8);
  EXPECT_EQ(full.st.stop, StopReason::context_full);
  // 5 prompt tokens fill positions 0-4, three generated tokens 5-7; the fourth is sampled from
  // the last logits but has no position left.
  EXPECT_EQ(full.st.n_generated, 4);
  EXPECT_EQ(full.text, generate(m, greedy(4)).text);
  EXPECT_THROW(generate(m, greedy(4), "Once upon a time there was", /*n_ctx=*/4), Error);
}

TEST(Generator, CallbackStops) {
  SLUICE_REQUIRE_SHARED();
  Stories m;
  const Output r = generate(m, greedy(32), "Once upon a time", 512, /*stop_after_chunks=*/3);
  EXPECT_EQ(r.st.stop, StopReason::callback);
  EXPECT_EQ(r.chunks.size(), 3u) << "called again after it said stop";
  EXPECT_EQ(r.st.n_generated, 3);  // ASCII pieces and no stop strings: one chunk per token
  EXPECT_EQ(r.text, generate(m, greedy(3)).text);
}

// stories260K never ends a story with EOS (llama2.c separates its stories with BOS), so this
// uses a synthetic model, whose random weights make EOS as likely as any token: the first of
// these seeds to stop on EOS is the case (searched, so a numerically different forward pass
// still finds one).
TEST(Generator, EosStopsUnlessIgnored) {
  SLUICE_REQUIRE_SHARED();
  Stories m;
  m.model = Model::load(test::shared_dir() + "/golden/llama_dense/model.gguf");
  GenerateParams p;
  p.sampler = SamplerParams{.temp = 1.5f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
  p.n_predict = 200;
  Output r;
  for (uint64_t seed = 1; seed <= 32 && r.st.stop != StopReason::eos; ++seed) {
    p.sampler.seed = seed;
    r = generate(m, p, "Once upon a time");
  }
  ASSERT_EQ(r.st.stop, StopReason::eos) << "no seed in 1..32 sampled EOS within 200 tokens";
  EXPECT_LT(r.st.n_generated, 200);
  EXPECT_EQ(r.text, pieces(*m.model, r.st.tokens)) << "the EOS token is not part of the text";
  p.ignore_eos = true;
  const Output all = generate(m, p, "Once upon a time");
  EXPECT_EQ(all.st.stop, StopReason::max_tokens);
  EXPECT_EQ(all.st.n_generated, 200);
  // Same seed, same draws: the run goes on past the point where the first one stopped, with
  // the EOS token itself in between.
  ASSERT_GT(all.st.tokens.size(), r.st.tokens.size());
  EXPECT_TRUE(std::equal(r.st.tokens.begin(), r.st.tokens.end(), all.st.tokens.begin()));
  EXPECT_TRUE(m.model->tokenizer().is_eog(all.st.tokens[r.st.tokens.size()]));
}

}  // namespace
}  // namespace sluice::test_generator
