// tests/models/test_scheduler: continuous batching. Requests with different prompts, lengths
// and stop rules, prompts chunked into the room decode tokens leave, each produce exactly the
// text and tokens the Generator produces alone (ref backend: a row's bits do not depend on its
// batch), in fewer forward steps than running them one after another. Stop strings, EOS,
// cancel and a full context end a request without disturbing the others.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/generator.h"
#include "runtime/scheduler.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_scheduler {
namespace {

GenerateParams greedy(int n, std::vector<std::string> stop = {}) {
  GenerateParams p;
  p.sampler.temp = 0;
  p.n_predict = n;
  p.stop = std::move(stop);
  return p;
}

struct Alone {
  std::string text;
  GenerationStats st;
};

Alone alone(const Model& m, Backend& be, const std::string& prompt, const GenerateParams& p, int64_t n_ctx = 256) {
  Session s(m, be, KvCacheOptions{.n_ctx = n_ctx});
  Alone a;
  a.st = Generator(s).run(prompt, p, [&](std::string_view t) {
    a.text += t;
    return true;
  });
  return a;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_SHARED();
    m_ = Model::load(test::shared_dir() + "/models/stories260K.gguf");
    be_ = make_backend("ref");
  }
  MemoryOptions mem(int64_t n_ctx = 256) {
    MemoryOptions o;
    o.kv.n_ctx = n_ctx;
    return o;
  }
  std::unique_ptr<Model> m_;
  std::unique_ptr<Backend> be_;
};

TEST_F(SchedulerTest, RequestsSteppedTogetherEqualEachAlone) {
  const std::vector<std::pair<std::string, GenerateParams>> reqs{
      {"Once upon a time", greedy(20)},
      {"Lily and Ben went to the park to play with their ball", greedy(14)},
      {"The cat", greedy(25)},
  };
  Scheduler sch(*m_, *be_, mem(), /*max_batch_tokens=*/6);  // prompts take several steps
  std::vector<int64_t> ids;
  std::vector<std::string> streamed(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i)
    ids.push_back(sch.submit(reqs[i].first, reqs[i].second, [&, i](std::string_view t) {
      streamed[i] += t;
      return true;
    }));
  sch.run();
  int64_t alone_steps = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Alone a = alone(*m_, *be_, reqs[i].first, reqs[i].second);
    EXPECT_TRUE(sch.done(ids[i]));
    EXPECT_EQ(sch.text(ids[i]), a.text) << reqs[i].first;
    EXPECT_EQ(streamed[i], a.text);
    EXPECT_EQ(sch.stats(ids[i]).tokens, a.st.tokens);
    EXPECT_EQ(sch.stats(ids[i]).stop, StopReason::max_tokens);
    alone_steps += (a.st.n_prompt + 5) / 6 + a.st.n_generated;
  }
  EXPECT_LT(sch.steps(), alone_steps * 2 / 3) << "the requests shared steps";
  EXPECT_EQ(sch.n_active(), 0);
  EXPECT_TRUE(sch.memory().sequences().empty());  // finished requests free their sequences
}

TEST_F(SchedulerTest, NoStepIsSpentAfterTheLastToken) {
  // The prompt step samples token 1, each later step one more: 5 tokens take 5 steps, and the
  // fifth is never evaluated (Generator evaluates it; a server would waste a batch row).
  Scheduler sch(*m_, *be_, mem(), 64);
  const int64_t a = sch.submit("Once upon a time", greedy(5));
  sch.run();
  EXPECT_EQ(sch.stats(a).n_generated, 5);
  EXPECT_EQ(sch.steps(), 5);
}

TEST_F(SchedulerTest, StopStringCancelAndContextFullEndOneRequestOnly) {
  const std::string p = "Once upon a time";
  const Alone full = alone(*m_, *be_, p, greedy(30));
  ASSERT_GT(full.text.size(), 20u);
  const std::string stop = full.text.substr(12, 5);  // somewhere in the middle of the greedy text
  Scheduler sch(*m_, *be_, mem(48), 8);
  const int64_t a = sch.submit(p, greedy(30, {stop}));
  const int64_t b = sch.submit(p, greedy(30));
  const int64_t c = sch.submit("Lily and Ben went to the park to play with their ball, and they", greedy(200));
  const int64_t d = sch.submit(p, greedy(30));
  for (int i = 0; i < 4; ++i) sch.step();
  sch.cancel(d);
  sch.run();
  EXPECT_EQ(sch.stats(a).stop, StopReason::stop_string);
  EXPECT_EQ(sch.text(a), full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(sch.text(b), full.text);  // untouched by its neighbours' ends
  // The context's 48 positions hold the prompt and every generated token but the last, which
  // was sampled from the last position's logits: the Generator's rule, and its tokens.
  const Alone c_alone = alone(*m_, *be_, "Lily and Ben went to the park to play with their ball, and they", greedy(200),
                              48);
  EXPECT_EQ(c_alone.st.stop, StopReason::context_full);
  EXPECT_EQ(sch.stats(c).stop, StopReason::context_full);
  EXPECT_EQ(sch.stats(c).n_prompt + sch.stats(c).n_generated, 49);
  EXPECT_EQ(sch.stats(c).tokens, c_alone.st.tokens);
  EXPECT_EQ(sch.stats(d).stop, StopReason::callback);
  EXPECT_LT(sch.stats(d).n_generated, 30);
  EXPECT_THROW(sch.submit(std::string(400, 'a'), greedy(1)), Error);  // does not fit the context
  EXPECT_THROW(sch.stats(99), Error);
}

TEST_F(SchedulerTest, ABudgetTooSmallForTheStepThrowsAndKeepsState) {
  MemoryOptions o = mem(512);
  o.budget_bytes = 1;  // not even one step of KV rows
  Scheduler sch(*m_, *be_, o, 8);
  const int64_t a = sch.submit("Once upon a time", greedy(4));
  EXPECT_THROW(sch.step(), Error);
  EXPECT_FALSE(sch.done(a));
  EXPECT_EQ(sch.n_active(), 1);
}

}  // namespace
}  // namespace sluice::test_scheduler
