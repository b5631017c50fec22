// runtime/scheduler: continuous batching — many generation requests over one Memory, stepped
// together. Each step is one forward over a batch holding every decoding request's next
// token and, in the room left (max_batch_tokens), chunks of prompts still to evaluate; so a
// new request starts while others keep decoding, and the weights (and each chosen expert)
// are read once per step for all of them. Sampling, UTF-8-safe text and stop conditions are
// the Generator's (runtime/generator.h: TextStream, StopReason), per request. What a server
// drives; single-threaded (call it from one thread).
//
// Prompt cache (prompt_cache_slots > 0): a finished request's sequence is kept, with the
// tokens its rows hold, as an idle slot. A new request starts from the idle sequence that
// shares the longest token prefix with its prompt: it takes the sequence over (or forks it,
// when that conversation went elsewhere and a slot is free, so its owner can still continue
// it), rewinds it to the shared prefix and evaluates only the rest. Memory::seq_rewind decides
// where a hybrid model's recurrent state can go back to (a checkpoint): checkpoints are taken
// where each prompt ends and where each request ends. Active plus idle sequences never exceed
// the slot count: the least recently used idle one is freed first.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memory/batch.h"
#include "memory/memory.h"
#include "models/model.h"
#include "runtime/generator.h"

namespace sluice {

class Scheduler {
 public:
  using TextFn = Generation::TextFn;
  // mem_opt: each sequence's context and the budget of all of them (memory/memory.h).
  Scheduler(const Model& model, Backend& backend, const MemoryOptions& mem_opt, int64_t max_batch_tokens = 512,
            int prompt_cache_slots = 0);
  ~Scheduler();

  // Queues a request; it joins the next step. Throws Error (before queuing) for a prompt that
  // tokenizes to nothing or does not fit the context.
  int64_t submit(std::string_view prompt, const GenerateParams& p, TextFn on_text = {});
  // The same for a prompt already tokenized (a chat template's tokens, a token-id prompt).
  int64_t submit(std::vector<int32_t> prompt, const GenerateParams& p, TextFn on_text = {});
  // One forward step over the active requests; false when there was nothing to do. Requests
  // that finish in it free their sequences. Throws Error when the memory budget cannot hold
  // the step, leaving the memory and every request as they were (free or cancel some first).
  bool step();
  // Steps until every request is done.
  void run();
  // Ends a request now (StopReason::callback); its text so far stays.
  void cancel(int64_t id);

  // Forgets a finished request (its stats and text); a server calls it once it has answered.
  void release(int64_t id);

  bool done(int64_t id) const;
  const GenerationStats& stats(int64_t id) const;
  const std::string& text(int64_t id) const;  // everything streamed to on_text
  // Why a request failed on its own (sampling threw, e.g. a constraint that allows no token);
  // empty otherwise. Such a request ends with StopReason::callback and the others go on.
  const std::string& error(int64_t id) const;
  // Prompt tokens taken from the prompt cache instead of evaluated (0 without a cache hit).
  int64_t cached_tokens(int64_t id) const;
  int n_active() const;
  int n_idle_slots() const { return static_cast<int>(idle_.size()); }  // cached sequences
  // Negative control for the tests only: reuse an idle sequence's rows even where its tokens
  // differ from the new prompt (the leak the prefix match exists to prevent).
  bool debug_reuse_mismatched_prefix = false;
  const Memory& memory() const { return mem_; }
  int64_t steps() const { return steps_; }

 private:
  struct Request;
  Request& req(int64_t id);
  const Request& req(int64_t id) const;
  struct Idle {
    int32_t seq = -1;
    std::vector<int32_t> tokens;  // what its rows hold, position by position
    int64_t last_used = 0;
  };
  // Frees (or, with the prompt cache, keeps) the sequence of a request whose generation
  // ended, and times it.
  void finish(Request& r);
  // Picks the request's sequence: from the prompt cache or new; sets its prompt_done.
  void attach_sequence(Request& r);
  // Frees the least recently used idle sequences until active + idle fit the slots.
  void trim_idle();

  const Model& model_;
  Backend& be_;
  Memory mem_;
  int64_t max_batch_;
  int cache_slots_;
  bool recurrent_ = false;  // some layer keeps a recurrent state (rewinds land on checkpoints)
  std::vector<Idle> idle_;
  int64_t use_clock_ = 0;
  std::map<int64_t, std::unique_ptr<Request>> reqs_;  // submission order
  int64_t next_id_ = 0, steps_ = 0;
  Batch batch_;
  std::vector<float> logits_;
};

}  // namespace sluice
