// runtime/scheduler: building each step's batch (decode tokens first, then prompt chunks in
// the room left), and per request: sampling, text, stop conditions, timing.
#include "runtime/scheduler.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace sluice {

using Clock = std::chrono::steady_clock;

struct Scheduler::Request {
  Request(const Tokenizer& tok, const GenerateParams& p, std::vector<int32_t> ids, TextFn fn)
      : prompt(std::move(ids)), gen(tok, p, prompt, std::move(fn)) {}
  std::vector<int32_t> prompt;
  Generation gen;  // sampling, text and stop rules (runtime/generator.h)
  int32_t seq = -1;
  size_t prompt_done = 0;  // prompt tokens evaluated
  int32_t next = -1;       // sampled, not yet evaluated (decode)
  bool logits_seen = false;
  Clock::time_point t_submit, t_first;
};

Scheduler::Scheduler(const Model& model, Backend& backend, const MemoryOptions& mem_opt, int64_t max_batch_tokens)
    : model_(model), be_(backend), mem_(model.memory_layout(), mem_opt), max_batch_(max_batch_tokens) {
  if (max_batch_ < 1) fail("scheduler: max_batch_tokens must be >= 1, got ", max_batch_);
}

Scheduler::~Scheduler() = default;

int64_t Scheduler::submit(std::string_view prompt, const GenerateParams& p, TextFn on_text) {
  std::vector<int32_t> ids = model_.tokenizer().encode(prompt, /*add_special=*/true, p.parse_special);
  if (ids.empty()) fail("scheduler: the prompt has no tokens");
  if (static_cast<int64_t>(ids.size()) > mem_.n_ctx())
    fail("scheduler: prompt of ", ids.size(), " tokens does not fit the context of ", mem_.n_ctx());
  auto r = std::make_unique<Request>(model_.tokenizer(), p, std::move(ids), std::move(on_text));
  r->seq = mem_.seq_new();
  r->t_submit = Clock::now();
  const int64_t id = next_id_++;
  reqs_.emplace(id, std::move(r));
  return id;
}

Scheduler::Request& Scheduler::req(int64_t id) {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) fail("scheduler: no request ", id);
  return *it->second;
}

const Scheduler::Request& Scheduler::req(int64_t id) const {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) fail("scheduler: no request ", id);
  return *it->second;
}

bool Scheduler::done(int64_t id) const { return req(id).gen.ended(); }
const GenerationStats& Scheduler::stats(int64_t id) const { return req(id).gen.stats(); }
const std::string& Scheduler::text(int64_t id) const { return req(id).gen.text(); }

int Scheduler::n_active() const {
  int n = 0;
  for (const auto& [id, r] : reqs_) n += r->gen.ended() ? 0 : 1;
  return n;
}

void Scheduler::finish(Request& r) {
  const auto now = Clock::now();
  r.gen.stats().generate_seconds = std::chrono::duration<double>(now - (r.logits_seen ? r.t_first : now)).count();
  mem_.seq_free(r.seq);
}

void Scheduler::cancel(int64_t id) {
  Request& r = req(id);
  if (r.gen.ended()) return;
  r.gen.end(StopReason::callback);
  finish(r);
}

bool Scheduler::step() {
  // Decode tokens first (one each, they keep their streams moving), then prompt chunks.
  batch_.clear();
  std::vector<Request*> out;  // the request of each logits row, in batch order
  for (auto& [id, r] : reqs_)
    if (!r->gen.ended() && r->next >= 0 && batch_.size() < max_batch_) {
      batch_.add(r->next, r->seq, static_cast<int32_t>(mem_.seq_len(r->seq)), true);
      out.push_back(r.get());
    }
  std::vector<std::pair<Request*, size_t>> chunks;  // prompt tokens each request adds this step
  for (auto& [id, r] : reqs_) {
    if (r->gen.ended() || r->prompt_done == r->prompt.size()) continue;
    const int64_t room = max_batch_ - batch_.size();
    if (room <= 0) break;
    const int64_t n = std::min<int64_t>(room, static_cast<int64_t>(r->prompt.size() - r->prompt_done));
    const int64_t pos0 = mem_.seq_len(r->seq);
    for (int64_t i = 0; i < n; ++i) {
      const bool last = r->prompt_done + static_cast<size_t>(i) + 1 == r->prompt.size();
      batch_.add(r->prompt[r->prompt_done + static_cast<size_t>(i)], r->seq, static_cast<int32_t>(pos0 + i), last);
      if (last) out.push_back(r.get());
    }
    chunks.emplace_back(r.get(), static_cast<size_t>(n));
  }
  if (batch_.empty()) return false;
  const int64_t V = model_.hparams().n_vocab;
  logits_.resize(static_cast<size_t>(batch_.n_outputs() * V));
  // Throws (memory budget, ...) with the memory and every request as they were.
  model_.forward(be_, mem_, batch_, logits_.data(), nullptr);
  ++steps_;
  for (auto& [r, n] : chunks) r->prompt_done += n;

  for (size_t o = 0; o < out.size(); ++o) {
    Request& r = *out[o];
    r.next = -1;
    if (!r.logits_seen) {
      r.logits_seen = true;
      r.t_first = Clock::now();
      r.gen.stats().prompt_seconds = std::chrono::duration<double>(r.t_first - r.t_submit).count();
    }
    const int32_t id = r.gen.next(logits_.data() + o * V, static_cast<int32_t>(V));
    if (!r.gen.ended() && mem_.seq_len(r.seq) >= mem_.n_ctx())
      r.gen.end(StopReason::context_full);  // the token was sampled from valid logits: it stays
    if (r.gen.ended())
      finish(r);
    else
      r.next = id;
  }
  return true;
}

void Scheduler::run() {
  while (step()) {
  }
}

}  // namespace sluice
