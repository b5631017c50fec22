// server/engine: the model thread's loop — admit queued jobs into free slots, drop cancelled
// ones, step, hand each job its new text and, once done, its end.
#include "server/engine.h"

#include <algorithm>

#include "core/error.h"

namespace sluice::server {

using Clock = std::chrono::steady_clock;

void Channel::push(JobUpdate u) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    q_.push_back(std::move(u));
  }
  cv_.notify_all();
}

bool Channel::pop(JobUpdate& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !q_.empty(); })) return false;
  out = std::move(q_.front());
  q_.pop_front();
  return true;
}

bool Channel::pop_all(JobUpdate& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !q_.empty(); })) return false;
  out = std::move(q_.front());
  q_.pop_front();
  for (; !q_.empty() && !out.end; q_.pop_front()) {
    JobUpdate& u = q_.front();
    out.text += u.text;
    out.logprobs.insert(out.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
    out.end = std::move(u.end);
  }
  return true;
}

// A job in the scheduler. Text arrives through the scheduler's callback during a step and is
// handed on once the step is over, with the logprobs of the tokens it came from.
struct Engine::Active {
  int64_t id = -1;
  std::shared_ptr<Channel> channel;
  std::string pending;
  size_t logprobs_sent = 0;
};

namespace {

void end_with_error(Channel& ch, int status, std::string message) {
  JobUpdate u;
  u.end.emplace();
  u.end->stop = StopReason::callback;
  u.end->error = std::move(message);
  u.end->error_status = status;
  ch.push(std::move(u));
}

}  // namespace

Engine::Engine(const Model& model, Backend& backend, const EngineOptions& opt)
    : model_(model),
      be_(backend),
      opt_(opt),
      sch_(model, backend, opt.memory, opt.max_batch_tokens, opt.prompt_cache ? opt.parallel : 0,
           opt.prompt_cache ? opt.cache_ram_bytes : 0) {
  if (opt_.parallel < 1) fail("engine: parallel must be >= 1, got ", opt_.parallel);
  if (opt_.max_queue < 0) fail("engine: max_queue must be >= 0, got ", opt_.max_queue);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { drain(std::chrono::milliseconds(0)); }

void Engine::debug_reuse_mismatched_prefix(bool on) {
  std::lock_guard<std::mutex> lk(mu_);  // the thread is idle until the first job
  sch_.debug_reuse_mismatched_prefix = on;
}

bool Engine::submit(Job job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (draining_ || static_cast<int>(queue_.size()) >= opt_.max_queue) return false;
    queue_.push_back(std::move(job));
    stats_.queue_length = static_cast<int>(queue_.size());
  }
  cv_.notify_all();
  return true;
}

void Engine::drain(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!draining_) {
      draining_ = true;
      deadline_ = Clock::now() + grace;
    } else {
      deadline_ = std::min(deadline_, Clock::now() + grace);
    }
    for (Job& j : queue_) end_with_error(*j.channel, 503, "the server is shutting down");
    queue_.clear();
    stats_.queue_length = 0;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Engine::admit(Job job) {
  if (job.channel->cancelled()) {
    JobUpdate u;
    u.end.emplace();
    u.end->stop = StopReason::callback;
    u.end->n_prompt = static_cast<int>(job.prompt.size());
    job.channel->push(std::move(u));
    return;
  }
  auto a = std::make_unique<Active>();
  a->channel = job.channel;
  Active* raw = a.get();
  try {
    a->id = sch_.submit(std::move(job.prompt), job.params, [raw](std::string_view t) {
      raw->pending += t;
      return true;
    });
  } catch (const std::exception& e) {
    // The handler checked the prompt's length; whatever is left is the client's input.
    end_with_error(*job.channel, 400, e.what());
    return;
  }
  active_.push_back(std::move(a));
}

void Engine::finish_done() {
  for (auto it = active_.begin(); it != active_.end();) {
    Active& a = **it;
    const bool done = sch_.done(a.id);
    const GenerationStats& st = sch_.stats(a.id);
    if (!a.pending.empty() || done) {
      JobUpdate u;
      u.text.swap(a.pending);
      u.logprobs.assign(st.logprobs.begin() + static_cast<std::ptrdiff_t>(a.logprobs_sent), st.logprobs.end());
      a.logprobs_sent = st.logprobs.size();
      if (done) {
        JobResult& r = u.end.emplace();
        r.stop = st.stop;
        r.n_prompt = st.n_prompt;
        r.n_cached = static_cast<int>(sch_.cached_tokens(a.id));
        r.n_generated = st.n_generated;
        r.ttft_seconds = st.prompt_seconds;
        r.error = sch_.error(a.id);
        // Counted before the client hears of the end, so /metrics read after an answer has it.
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.requests;
        stats_.prompt_tokens += r.n_prompt;
        stats_.cached_tokens += r.n_cached;
        stats_.cache_hits += r.n_cached > 0;
        const int64_t host = sch_.host_cached_tokens(a.id);
        stats_.host_cached_tokens += host;
        stats_.host_cache_hits += host > 0;
        stats_.generated_tokens += r.n_generated;
        stats_.cancelled += st.stop == StopReason::callback;
        stats_.busy_slots = sch_.n_active();
        stats_.idle_cached = sch_.n_idle_slots();
        stats_.kv_bytes = sch_.memory().bytes_used();
      }
      a.channel->push(std::move(u));
    }
    if (done) {
      sch_.release(a.id);
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
}

void Engine::publish() {
  std::lock_guard<std::mutex> lk(mu_);
  stats_.busy_slots = sch_.n_active();
  stats_.queue_length = static_cast<int>(queue_.size());
  stats_.idle_cached = sch_.n_idle_slots();
  stats_.kv_bytes = sch_.memory().bytes_used();
  stats_.steps = sch_.steps();
  const Scheduler::HostCacheStats h = sch_.host_cache_stats();
  stats_.host_cache_entries = h.entries;
  stats_.host_cache_bytes = h.bytes;
  stats_.host_cache_budget = h.budget;
}

void Engine::loop() {
  for (;;) {
    std::vector<Job> admit_now;
    bool cancel_all = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return !active_.empty() || !queue_.empty() || draining_; });
      while (!queue_.empty() && static_cast<int>(active_.size() + admit_now.size()) < opt_.parallel) {
        admit_now.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      // The gauges move with the jobs, not a step later: a client that got its first token
      // must not read its own job as still queued.
      stats_.queue_length = static_cast<int>(queue_.size());
      stats_.busy_slots = static_cast<int>(active_.size() + admit_now.size());
      if (draining_) {
        if (active_.empty() && admit_now.empty()) break;
        cancel_all = Clock::now() >= deadline_;
      }
    }
    for (Job& j : admit_now) admit(std::move(j));
    // Cancelled before the step: a client that went away costs no further batch row.
    for (auto& a : active_)
      if (cancel_all || a->channel->cancelled()) sch_.cancel(a->id);
    if (sch_.n_active() > 0) {
      const auto t0 = Clock::now();
      try {
        sch_.step();
      } catch (const std::exception& e) {
        // The step left the memory as it was (Scheduler::step); the jobs in it cannot go on.
        for (auto& a : active_) {
          if (sch_.done(a->id)) continue;
          sch_.cancel(a->id);
          end_with_error(*a->channel, 500, std::string("generation failed: ") + e.what());
          sch_.release(a->id);
          a->id = -1;
        }
        std::erase_if(active_, [](const std::unique_ptr<Active>& a) { return a->id < 0; });
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.errors;
      }
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      std::lock_guard<std::mutex> lk(mu_);
      stats_.busy_seconds += dt;
    }
    finish_done();
    publish();
  }
  publish();
}

}  // namespace sluice::server
