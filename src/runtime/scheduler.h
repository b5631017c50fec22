// runtime/scheduler: continuous batching — many generation requests over one Memory, stepped
// together. Each step is one forward over a batch holding every decoding request's next
// token and, in the room left (max_batch_tokens), chunks of prompts still to evaluate; so a
// new request starts while others keep decoding, and the weights (and each chosen expert)
// are read once per step for all of them. Sampling, UTF-8-safe text and stop conditions are
// the Generator's (runtime/generator.h: TextStream, StopReason), per request. What a server
// drives; single-threaded (call it from one thread).
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
  Scheduler(const Model& model, Backend& backend, const MemoryOptions& mem_opt, int64_t max_batch_tokens = 512);
  ~Scheduler();

  // Queues a request; it joins the next step. Throws Error (before queuing) for a prompt that
  // tokenizes to nothing or does not fit the context.
  int64_t submit(std::string_view prompt, const GenerateParams& p, TextFn on_text = {});
  // One forward step over the active requests; false when there was nothing to do. Requests
  // that finish in it free their sequences. Throws Error when the memory budget cannot hold
  // the step, leaving the memory and every request as they were (free or cancel some first).
  bool step();
  // Steps until every request is done.
  void run();
  // Ends a request now (StopReason::callback); its text so far stays.
  void cancel(int64_t id);

  bool done(int64_t id) const;
  const GenerationStats& stats(int64_t id) const;
  const std::string& text(int64_t id) const;  // everything streamed to on_text
  int n_active() const;
  const Memory& memory() const { return mem_; }
  int64_t steps() const { return steps_; }

 private:
  struct Request;
  Request& req(int64_t id);
  const Request& req(int64_t id) const;
  // Frees the sequence of a request whose generation ended, and times it.
  void finish(Request& r);

  const Model& model_;
  Backend& be_;
  Memory mem_;
  int64_t max_batch_;
  std::map<int64_t, std::unique_ptr<Request>> reqs_;  // submission order
  int64_t next_id_ = 0, steps_ = 0;
  Batch batch_;
  std::vector<float> logits_;
};

}  // namespace sluice
