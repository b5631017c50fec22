// server/engine: the one thread that owns the model. It steps a Scheduler (continuous
// batching over one Memory, with the prompt cache) and talks to the HTTP handler threads
// through a bounded queue of jobs and one Channel per job. A handler submits a job and reads
// its Channel (text as it is made, then the end); it cancels by setting the channel's flag,
// which the engine reads before every step, so a cancelled request leaves the batch at the
// next step and its slot is free for the one after.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "memory/memory.h"
#include "models/model.h"
#include "runtime/generator.h"
#include "runtime/scheduler.h"

namespace sluice::server {

// What a job ended with.
struct JobResult {
  StopReason stop = StopReason::none;
  int n_prompt = 0, n_cached = 0, n_generated = 0;
  double ttft_seconds = 0;  // submit to first token
  std::string error;        // non-empty: the job failed, answered with error_status
  int error_status = 500;
};

// One piece of a job's output: final text and the logprobs of the tokens it came from.
struct JobUpdate {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::optional<JobResult> end;  // set on the job's last update
};

// The engine -> handler stream of one job. Thread-safe.
class Channel {
 public:
  void push(JobUpdate u);
  // Waits up to `timeout` for the next update; false when none came.
  bool pop(JobUpdate& out, std::chrono::milliseconds timeout);
  // Waits up to `timeout` for updates, then takes all there are, merged into one (text and
  // logprobs appended; the end, if it came). A stream writes them with one write: it keeps
  // up with a fast engine, and a client that left is noticed after fewer steps.
  bool pop_all(JobUpdate& out, std::chrono::milliseconds timeout);
  void cancel() { cancelled_.store(true); }
  // Cancelled, or the client is gone (the check below says so). The engine asks before every
  // step, so a client that left frees its slot at the next step.
  bool cancelled() const { return cancelled_.load() || (client_gone_ && client_gone_()); }
  // Set once, before the job is submitted: a cheap test that the client went away (the HTTP
  // side peeks at the connection's socket).
  void set_client_gone_check(std::function<bool()> f) { client_gone_ = std::move(f); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<JobUpdate> q_;
  std::atomic<bool> cancelled_{false};
  std::function<bool()> client_gone_;
};

struct Job {
  std::vector<int32_t> prompt;
  GenerateParams params;
  std::shared_ptr<Channel> channel;
};

struct EngineOptions {
  int parallel = 4;                // requests decoding together (the slots)
  int max_queue = 64;              // jobs waiting for a slot; more are refused (503)
  int64_t max_batch_tokens = 512;  // tokens per forward step (decode rows + prompt chunks)
  bool prompt_cache = true;        // keep each slot's last sequence for prefix reuse
  // Host-RAM cache beyond the slots (--cache-ram; runtime/scheduler.h): recent conversations'
  // rows and states within this many bytes, LRU. 0: off.
  size_t cache_ram_bytes = 0;
  MemoryOptions memory;  // memory.kv.n_ctx: each request's context
};

// Counters and gauges for /metrics, read by any thread.
struct EngineStats {
  int64_t requests = 0, errors = 0, cancelled = 0;
  int64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  int64_t cache_hits = 0;  // requests that reused at least one cached token
  // The host-RAM cache: prompt tokens and requests it gave, what it holds now.
  int64_t host_cached_tokens = 0, host_cache_hits = 0, host_cache_entries = 0;
  size_t host_cache_bytes = 0, host_cache_budget = 0;
  int64_t steps = 0;
  double busy_seconds = 0;  // time spent in forward steps
  int busy_slots = 0, queue_length = 0, idle_cached = 0;
  size_t kv_bytes = 0;
};

class Engine {
 public:
  Engine(const Model& model, Backend& backend, const EngineOptions& opt);
  ~Engine();  // stops the thread, cancelling what is left

  // Queues a job. Returns false (and queues nothing) when the queue is full or the engine is
  // draining: the caller answers 503.
  bool submit(Job job);
  // Stops admitting jobs (queued ones end at once with an error), lets running ones finish
  // until `grace` has passed, cancels the rest and ends the thread.
  void drain(std::chrono::milliseconds grace);

  EngineStats stats() const;
  int64_t n_ctx() const { return opt_.memory.kv.n_ctx; }
  const EngineOptions& options() const { return opt_; }
  // Negative control for the tests (Scheduler::debug_reuse_mismatched_prefix); call before
  // the first job.
  void debug_reuse_mismatched_prefix(bool on);

 private:
  struct Active;
  void loop();
  void admit(Job job);
  void finish_done();
  void publish();

  const Model& model_;
  Backend& be_;
  EngineOptions opt_;
  Scheduler sch_;  // touched by the engine thread only (after construction)
  std::vector<std::unique_ptr<Active>> active_;

  mutable std::mutex mu_;  // guards queue_, draining_, deadline_, stats_
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool draining_ = false, stop_ = false;
  std::chrono::steady_clock::time_point deadline_;
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace sluice::server
