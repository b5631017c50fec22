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
//
// Host-RAM cache (host_cache_bytes > 0, with the prompt cache): beyond the slots, recent
// conversations as compact copies (Memory::seq_save: their rows, K means, recurrent states and
// checkpoints) within a byte budget, least recently used dropped first. A sequence goes there
// when its idle slot is freed or taken over by a request that keeps only part of it, so a
// conversation whose slot another one took still resumes from its longest cached prefix: a
// request restores the entry (Memory::seq_restore) when it shares more with the prompt than any
// idle slot. The same prefix rule holds: only positions whose tokens equal the prompt's are
// reused, and an entry is a copy, never shared.
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
            int prompt_cache_slots = 0, size_t host_cache_bytes = 0);
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
  // Prompt tokens a request restored from the host-RAM cache (0: none, or from a slot).
  int64_t host_cached_tokens(int64_t id) const;
  struct HostCacheStats {
    int64_t entries = 0;
    size_t bytes = 0, budget = 0;
    int64_t saved = 0, restored = 0, evicted = 0;  // over the scheduler's life
  };
  HostCacheStats host_cache_stats() const;
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
  // Frees the least recently used idle sequences until active + idle fit the slots (each
  // copied to the host-RAM cache first).
  void trim_idle();
  struct HostEntry {
    std::vector<int32_t> tokens;  // what the snapshot's rows hold
    SeqSnapshot snap;
    int64_t last_used = 0;
  };
  // Copies a sequence holding `tokens` into the host-RAM cache (when it has one and the copy
  // fits its budget), dropping entries it holds a longer version of and then the least
  // recently used until it fits.
  void host_save(int32_t seq, const std::vector<int32_t>& tokens);
  // How many leading tokens of `prompt` (at most cap) equal `tokens` (the debug flag aside),
  // and the position a sequence holding them can be resumed from (a checkpoint on hybrids).
  std::pair<int64_t, int64_t> prefix_reach(const std::vector<int32_t>& tokens, const std::vector<int32_t>& prompt,
                                           int64_t cap, const std::vector<int64_t>& checkpoints) const;

  const Model& model_;
  Backend& be_;
  Memory mem_;
  int64_t max_batch_;
  int cache_slots_;
  bool recurrent_ = false;  // some layer keeps a recurrent state (rewinds land on checkpoints)
  std::vector<Idle> idle_;
  int64_t use_clock_ = 0;
  size_t host_budget_ = 0, host_bytes_ = 0;
  std::vector<HostEntry> host_;
  HostCacheStats host_stats_;
  std::map<int64_t, std::unique_ptr<Request>> reqs_;  // submission order
  int64_t next_id_ = 0, steps_ = 0;
  Batch batch_;
  std::vector<float> logits_;
};

}  // namespace sluice
