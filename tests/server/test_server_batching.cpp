// tests/server/test_server_batching: continuous batching and the prompt cache give every
// request exactly what it gets alone. Scheduler level (ref backend, bitwise: a row's result
// does not depend on its batch): conversations sharing prefixes, continued and interleaved,
// on stories260K (KV rows, rewound anywhere) and on the qwen35moe golden (Gated DeltaNet
// states, rewound only to checkpoints); a negative control that shares a sequence wrongly
// and must differ; the host-RAM cache (more conversations than slots, each resumed from its
// copy in RAM, answering as alone) and its negative control. HTTP level (cpu backend): 8
// parallel greedy requests equal each alone, multi-turn chats reuse their prefix
// (usage.prompt_tokens_details.cached_tokens, /metrics) and answer what a server without the
// cache answers.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "runtime/generator.h"
#include "runtime/scheduler.h"
#include "runtime/session.h"
#include "server_test_util.h"

namespace sluice::test_server_batching {
namespace {

using nlohmann::json;

GenerateParams greedy(int n) {
  GenerateParams p;
  p.sampler.temp = 0;
  p.n_predict = n;
  p.ignore_eos = true;  // every request runs its full length, so the comparisons cover it all
  return p;
}

std::vector<int32_t> ids(int32_t n_vocab, int n, uint32_t seed) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v.push_back(static_cast<int32_t>(3 + (seed >> 8) % static_cast<uint32_t>(n_vocab - 3)));
  }
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

MemoryOptions mem(int64_t n_ctx) {
  MemoryOptions o;
  o.kv.n_ctx = n_ctx;
  return o;
}

struct CacheRun {
  std::vector<std::vector<int32_t>> tokens;  // per request of round 2
  std::vector<int64_t> cached;
};

// Round 1: two conversations sharing a prefix. Round 2, stepped together: one continues its
// conversation (prompt + answer + more), one shares only the common prefix, one is new, one
// repeats a round-1 prompt exactly.
class PromptCache : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_SHARED();
    m_ = Model::load(test::shared_dir() + "/" + GetParam());
    be_ = make_backend("ref");
    const auto V = static_cast<int32_t>(m_->hparams().n_vocab);
    const auto common = ids(V, 24, 1);
    a_ = cat(common, ids(V, 7, 2));
    b_ = cat(common, ids(V, 5, 3));
    more_ = ids(V, 6, 4);
    c_ = cat(common, ids(V, 9, 5));
    d_ = ids(V, 11, 6);
  }
  std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int n) {
    Scheduler s(*m_, *be_, mem(256));
    const int64_t id = s.submit(prompt, greedy(n));
    s.run();
    return s.stats(id).tokens;
  }
  CacheRun run(bool fault, std::vector<std::vector<int32_t>>* prompts) {
    Scheduler s(*m_, *be_, mem(256), /*max_batch_tokens=*/8, /*prompt_cache_slots=*/6);
    s.debug_reuse_mismatched_prefix = fault;
    const int64_t ra = s.submit(a_, greedy(6));
    s.submit(b_, greedy(5));
    s.run();
    const auto a_out = s.stats(ra).tokens;
    prompts->assign({cat(cat(a_, a_out), more_), c_, d_, b_});
    CacheRun out;
    std::vector<int64_t> r;
    for (const auto& p : *prompts) r.push_back(s.submit(p, greedy(7)));
    s.run();
    for (int64_t id : r) {
      out.tokens.push_back(s.stats(id).tokens);
      out.cached.push_back(s.cached_tokens(id));
    }
    EXPECT_LE(s.memory().sequences().size(), 6u) << "active + idle sequences stay within the slots";
    return out;
  }
  std::unique_ptr<Model> m_;
  std::unique_ptr<Backend> be_;
  std::vector<int32_t> a_, b_, more_, c_, d_;
};

TEST_P(PromptCache, ReusedPrefixesGiveWhatEachRequestGetsAlone) {
  std::vector<std::vector<int32_t>> prompts;
  const CacheRun got = run(false, &prompts);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got.tokens[i], alone(prompts[i], 7)) << "request " << i;
  const bool hybrid = GetParam().find("qwen35") != std::string::npos;
  // The continuation reuses its whole first turn: prompt and answer (the answer's last token
  // was never evaluated). Hybrid: the checkpoint taken where that request ended, the same place.
  EXPECT_EQ(got.cached[0], static_cast<int64_t>(a_.size()) + 5);
  // The common prefix (24 tokens) of another conversation; hybrid: no checkpoint inside it.
  EXPECT_EQ(got.cached[1], hybrid ? 0 : 24);
  EXPECT_EQ(got.cached[2], 0);
  // A repeated prompt re-evaluates its last token; hybrid: back to the checkpoint before it
  // is not there (its prompt-end checkpoint is at the full length), so from the start.
  EXPECT_EQ(got.cached[3], hybrid ? 0 : static_cast<int64_t>(b_.size()) - 1);
}

TEST_P(PromptCache, NegativeControlASequenceSharedWronglyChangesTheOutput) {
  std::vector<std::vector<int32_t>> prompts;
  const CacheRun got = run(true, &prompts);
  int differ = 0;
  for (size_t i = 0; i < prompts.size(); ++i) differ += got.tokens[i] != alone(prompts[i], 7);
  EXPECT_GT(differ, 0) << "reusing rows of another conversation must show in the comparison";
}

INSTANTIATE_TEST_SUITE_P(Models, PromptCache,
                         ::testing::Values("models/stories260K.gguf", "golden/qwen35moe/model.gguf"),
                         [](const auto& info) {
                           return info.param.find("qwen35") != std::string::npos ? std::string("qwen35moe")
                                                                                 : std::string("stories260K");
                         });

// The host-RAM cache: five conversations over two slots. Each first turn runs in turn, so the
// slots are taken over and freed again and again; the second turns then come two at a time in
// a shuffled order. Every second turn resumes from its whole first turn (prompt and answer;
// the hybrid from the checkpoint where that request ended), most of them restored from host
// RAM, and answers exactly what it answers alone. The negative control reuses entries whatever
// their tokens, and must differ.
class HostRamCache : public PromptCache {
 protected:
  struct Run {
    std::vector<std::vector<int32_t>> prompts, tokens;
    std::vector<int64_t> cached, host_cached;
    Scheduler::HostCacheStats stats;
  };
  Run run(bool fault, size_t host_bytes = size_t{64} << 20) {
    const auto V = static_cast<int32_t>(m_->hparams().n_vocab);
    Scheduler s(*m_, *be_, mem(256), /*max_batch_tokens=*/16, /*prompt_cache_slots=*/2, host_bytes);
    s.debug_reuse_mismatched_prefix = fault;
    const auto common = ids(V, 6, 11);  // a shared "system prompt"
    Run out;
    std::vector<std::vector<int32_t>> first;
    for (uint32_t c = 0; c < 5; ++c) {
      const auto p = cat(common, ids(V, 10 + static_cast<int>(c), 20 + c));
      const int64_t id = s.submit(p, greedy(5));
      s.run();
      first.push_back(cat(p, s.stats(id).tokens));
    }
    for (uint32_t c : {3u, 0u, 4u, 1u, 2u}) out.prompts.push_back(cat(first[c], ids(V, 4, 40 + c)));
    for (size_t i = 0; i < out.prompts.size(); i += 2) {
      std::vector<int64_t> r;
      for (size_t k = i; k < std::min(i + 2, out.prompts.size()); ++k) r.push_back(s.submit(out.prompts[k], greedy(6)));
      s.run();
      for (int64_t id : r) {
        out.tokens.push_back(s.stats(id).tokens);
        out.cached.push_back(s.cached_tokens(id));
        out.host_cached.push_back(s.host_cached_tokens(id));
      }
    }
    EXPECT_LE(s.memory().sequences().size(), 2u) << "the slots hold at most two sequences";
    out.stats = s.host_cache_stats();
    return out;
  }
};

TEST_P(HostRamCache, ConversationsResumeFromHostRamAndAnswerAsAlone) {
  const Run got = run(false);
  int from_host = 0;
  for (size_t i = 0; i < got.prompts.size(); ++i) {
    EXPECT_EQ(got.tokens[i], alone(got.prompts[i], 6)) << "conversation " << i;
    // The first turn's prompt and answer but its last token (never evaluated), and the 4 new.
    EXPECT_EQ(got.cached[i], static_cast<int64_t>(got.prompts[i].size()) - 5) << "conversation " << i;
    from_host += got.host_cached[i] > 0;
  }
  std::printf(
      "host-RAM cache: %d of 5 second turns restored from it; %lld entries, %zu bytes (%lld saved, %lld "
      "evicted)\n",
      from_host, static_cast<long long>(got.stats.entries), got.stats.bytes, static_cast<long long>(got.stats.saved),
      static_cast<long long>(got.stats.evicted));
  EXPECT_GE(from_host, 3) << "with two slots at least three of the five were only in host RAM";
}

// Eviction: a budget of about two and a half first-turn entries. Entries go (evicted > 0; the
// least recently used first, Scheduler::host_save: the order itself is not asserted here), the
// cache never holds more than its budget, fewer second turns come from host RAM than with
// room for all, and the conversations whose entries went are recomputed and still answer
// exactly as alone.
TEST_P(HostRamCache, EvictsWithinItsBudgetAndStillAnswersAsAlone) {
  const Run roomy = run(false);
  ASSERT_GT(roomy.stats.entries, 0);
  EXPECT_EQ(roomy.stats.evicted, 0) << "64 MiB holds every conversation";
  const size_t entry = roomy.stats.bytes / static_cast<size_t>(roomy.stats.entries);
  const size_t budget = entry * 5 / 2;
  const Run tight = run(false, budget);
  EXPECT_GT(tight.stats.evicted, 0);
  EXPECT_LE(tight.stats.bytes, budget);
  EXPECT_LE(tight.stats.entries, 2);
  int from_host_roomy = 0, from_host_tight = 0;
  for (size_t i = 0; i < tight.prompts.size(); ++i) {
    EXPECT_EQ(tight.tokens[i], alone(tight.prompts[i], 6)) << "conversation " << i;
    from_host_roomy += roomy.host_cached[i] > 0;
    from_host_tight += tight.host_cached[i] > 0;
  }
  EXPECT_LT(from_host_tight, from_host_roomy) << "evicted entries cannot be restored";
  std::printf(
      "host-RAM cache of %zu bytes (entries ~%zu): %d of 5 second turns from it (%d with 64 MiB), %lld evicted\n",
      budget, entry, from_host_tight, from_host_roomy, static_cast<long long>(tight.stats.evicted));
}

TEST_P(HostRamCache, NegativeControlEntriesReusedWhateverTheirTokensChangeTheOutput) {
  const Run got = run(true);
  int differ = 0;
  for (size_t i = 0; i < got.prompts.size(); ++i) differ += got.tokens[i] != alone(got.prompts[i], 6);
  EXPECT_GT(differ, 0) << "reusing another conversation's rows must show in the comparison";
}

INSTANTIATE_TEST_SUITE_P(Models, HostRamCache,
                         ::testing::Values("models/stories260K.gguf", "golden/qwen35moe/model.gguf"),
                         [](const auto& info) {
                           return info.param.find("qwen35") != std::string::npos ? std::string("qwen35moe")
                                                                                 : std::string("stories260K");
                         });

class ServerBatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_SHARED();
    m_ = Model::load(test::shared_dir() + "/models/stories260K.gguf");
    be_ = make_backend("cpu", 1);
  }
  std::unique_ptr<Model> m_;
  std::unique_ptr<Backend> be_;
};

json ignore_eos_completion(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

// Posts every body at once, one thread each; returns the replies in order.
std::vector<test::HttpReply> post_all(int port, const std::string& path, const std::vector<json>& bodies) {
  std::vector<test::HttpReply> out(bodies.size());
  std::vector<std::thread> t;
  for (size_t i = 0; i < bodies.size(); ++i) t.emplace_back([&, i] { out[i] = test::post(port, path, bodies[i]); });
  for (auto& th : t) th.join();
  return out;
}

TEST_F(ServerBatchingTest, EightParallelGreedyRequestsEqualEachAlone) {
  const std::vector<std::string> prompts{"Once upon a time",
                                         "Lily and Ben went to the park",
                                         "The cat",
                                         "One day, a little boy named Tim",
                                         "The sun was",
                                         "Mom said",
                                         "There was a big dog",
                                         "A bird sat on a tree and"};
  std::vector<json> bodies;
  for (size_t i = 0; i < prompts.size(); ++i)
    bodies.push_back(ignore_eos_completion(prompts[i], 20 + 3 * static_cast<int>(i)));
  std::vector<std::string> alone;
  int64_t alone_steps = 0;
  {
    // Alone: one slot, no prompt cache, one request at a time.
    auto o = test::server_options(1, 256);
    o.engine.prompt_cache = false;
    test::TestServer s(*m_, *be_, o);
    for (const auto& b : bodies) {
      const int64_t before = s.server().engine().stats().steps;
      const auto r = test::post(s.port(), "/v1/completions", b);
      ASSERT_EQ(r.status, 200) << r.body;
      alone.push_back(r.json()["choices"][0]["text"]);
      alone_steps += s.server().engine().stats().steps - before;
    }
  }
  test::TestServer s(*m_, *be_, test::server_options(8, 256));
  const auto got = post_all(s.port(), "/v1/completions", bodies);
  for (size_t i = 0; i < bodies.size(); ++i) {
    ASSERT_EQ(got[i].status, 200) << got[i].body;
    EXPECT_EQ(got[i].json()["choices"][0]["text"], alone[i]) << prompts[i];
  }
  // They shared steps: far fewer than one after another.
  EXPECT_LT(s.server().engine().stats().steps, alone_steps / 2);
}

TEST_F(ServerBatchingTest, MultiTurnChatsReuseTheirPrefixAndAnswerAsWithoutTheCache) {
  // Four conversations with one system prompt, two turns each, all at once.
  const std::string sys = "You tell short stories about animals who live in a big forest near a river.";
  const std::vector<std::string> asks{"Lily had a red ball.", "Once there was a big fish named Bob",
                                      "Tom and Sue went to the shop to buy", "The little bird was sad because"};
  auto turn1 = [&](int i) {
    return json::array({{{"role", "system"}, {"content", sys}}, {{"role", "user"}, {"content", asks[i]}}});
  };
  auto run = [&](bool cache, std::vector<json>* usage2, bool fault = false) {
    auto o = test::server_options(4, 512);
    o.engine.prompt_cache = cache;
    // stories260K knows no chat markup: the turns as plain story text, so each conversation
    // continues its own story.
    o.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}";
    test::TestServer s(*m_, *be_, o);
    s.server().engine().debug_reuse_mismatched_prefix(fault);
    std::vector<json> b1, b2;
    for (int i = 0; i < 4; ++i) b1.push_back({{"messages", turn1(i)}, {"max_tokens", 12}, {"temperature", 0}});
    const auto r1 = post_all(s.port(), "/v1/chat/completions", b1);
    std::vector<std::string> out;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(r1[i].status, 200) << r1[i].body;
      const std::string a = r1[i].json()["choices"][0]["message"]["content"];
      out.push_back(a);
      json m = turn1(i);
      m.push_back({{"role", "assistant"}, {"content", a}});
      m.push_back({{"role", "user"}, {"content", "And then?"}});
      b2.push_back({{"messages", m}, {"max_tokens", 12}, {"temperature", 0}});
    }
    const auto r2 = post_all(s.port(), "/v1/chat/completions", b2);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(r2[i].status, 200) << r2[i].body;
      out.push_back(r2[i].json()["choices"][0]["message"]["content"]);
      if (usage2) usage2->push_back(r2[i].json()["usage"]);
    }
    if (cache && !fault) {
      const std::string m = test::http(s.port(), "GET", "/metrics").body;
      EXPECT_GT(test::metric(m, "sluice_prompt_tokens_cached_total"), 0);
      EXPECT_GT(test::metric(m, "sluice_prompt_cache_hit_ratio"), 0.3);
      EXPECT_EQ(test::metric(m, "sluice_slots_busy"), 0);
    }
    return out;
  };
  std::vector<json> usage;
  const auto cached = run(true, &usage);
  const auto plain = run(false, nullptr);
  EXPECT_EQ(cached, plain);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < i; ++j) EXPECT_NE(plain[i], plain[j]) << "the conversations must be told apart";
  for (const json& u : usage) {
    // The second turn holds the first (system, user, answer): most of it comes from the cache.
    const int n = u["prompt_tokens"], c = u["prompt_tokens_details"]["cached_tokens"];
    EXPECT_GT(c, n / 2) << u.dump();
    EXPECT_LT(c, n);
  }
  // Negative control: reusing a slot's rows without checking the tokens match (another
  // conversation's answer) shows in the comparison.
  EXPECT_NE(run(true, nullptr, /*fault=*/true), plain);
}

}  // namespace
}  // namespace sluice::test_server_batching
