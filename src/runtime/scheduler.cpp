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
  size_t prompt_done = 0;   // prompt tokens evaluated (or taken from the prompt cache)
  int64_t cached = 0;       // prompt tokens taken from the prompt cache
  int64_t host_cached = 0;  // of them, restored from the host-RAM cache
  std::string error;        // see Scheduler::error
  int32_t next = -1;        // sampled, not yet evaluated (decode)
  bool logits_seen = false;
  Clock::time_point t_submit, t_first;
};

Scheduler::Scheduler(const Model& model, Backend& backend, const MemoryOptions& mem_opt, int64_t max_batch_tokens,
                     int prompt_cache_slots, size_t host_cache_bytes)
    : model_(model),
      be_(backend),
      mem_(model.memory_layout(), mem_opt),
      max_batch_(max_batch_tokens),
      cache_slots_(prompt_cache_slots),
      host_budget_(prompt_cache_slots > 0 ? host_cache_bytes : 0) {
  if (max_batch_ < 1) fail("scheduler: max_batch_tokens must be >= 1, got ", max_batch_);
  if (cache_slots_ < 0) fail("scheduler: prompt_cache_slots must be >= 0, got ", cache_slots_);
  for (const auto& l : mem_.layout().layers) recurrent_ = recurrent_ || l.kind == LayerMemoryKind::recurrent;
}

Scheduler::~Scheduler() = default;

int64_t Scheduler::submit(std::string_view prompt, const GenerateParams& p, TextFn on_text) {
  return submit(model_.tokenizer().encode(prompt, /*add_special=*/true, p.parse_special), p, std::move(on_text));
}

int64_t Scheduler::submit(std::vector<int32_t> ids, const GenerateParams& p, TextFn on_text) {
  if (ids.empty()) fail("scheduler: the prompt has no tokens");
  if (static_cast<int64_t>(ids.size()) > mem_.n_ctx())
    fail("scheduler: prompt of ", ids.size(), " tokens does not fit the context of ", mem_.n_ctx());
  const int32_t n_vocab = model_.tokenizer().n_vocab();
  for (int32_t t : ids)
    if (t < 0 || t >= n_vocab) fail("scheduler: token id ", t, " is outside the vocabulary of ", n_vocab);
  auto r = std::make_unique<Request>(model_.tokenizer(), p, std::move(ids), std::move(on_text));
  attach_sequence(*r);
  r->t_submit = Clock::now();
  const int64_t id = next_id_++;
  reqs_.emplace(id, std::move(r));
  return id;
}

std::pair<int64_t, int64_t> Scheduler::prefix_reach(const std::vector<int32_t>& tokens,
                                                    const std::vector<int32_t>& prompt, int64_t cap,
                                                    const std::vector<int64_t>& checkpoints) const {
  int64_t match = 0;
  const auto n = std::min<int64_t>(cap, static_cast<int64_t>(tokens.size()));
  while (match < n &&
         (debug_reuse_mismatched_prefix || tokens[static_cast<size_t>(match)] == prompt[static_cast<size_t>(match)]))
    ++match;
  int64_t reach = match;
  if (recurrent_) {
    // Recurrent states go back only to a checkpoint at or before the shared prefix.
    reach = 0;
    for (int64_t c : checkpoints)
      if (c <= match) reach = std::max(reach, c);
  }
  return {match, reach};
}

void Scheduler::attach_sequence(Request& r) {
  // The idle sequence that lets the most prompt tokens be skipped. At least the prompt's last
  // token is always evaluated: its logits pick the first generated token.
  const auto cap = static_cast<int64_t>(r.prompt.size()) - 1;
  Idle* best = nullptr;
  int64_t best_len = 0, best_match = 0;
  int64_t best_true = 0;  // the negative control's choice: see below
  for (Idle& e : idle_) {
    const auto [match, reach] = prefix_reach(e.tokens, r.prompt, cap, mem_.seq_checkpoints(e.seq));
    bool better = reach > best_len;
    if (debug_reuse_mismatched_prefix) {
      // Take the idle sequence whose tokens part from the prompt soonest (another
      // conversation's), so that the leak shows whatever order the requests arrive in.
      int64_t same = 0;
      while (same < reach && e.tokens[static_cast<size_t>(same)] == r.prompt[static_cast<size_t>(same)]) ++same;
      better = reach > 0 && (!best || same < best_true);
      if (better) best_true = same;
    }
    if (better) {
      best = &e;
      best_len = reach;
      best_match = match;
    }
  }
  // A conversation in host RAM that shares more than any slot: restored into a new sequence.
  HostEntry* host = nullptr;
  int64_t host_len = best_len;
  for (HostEntry& e : host_) {
    const auto [match, reach] = prefix_reach(e.tokens, r.prompt, cap, e.snap.checkpoint_positions());
    if (reach > host_len) {
      host = &e;
      host_len = reach;
    }
  }
  if (host) {
    try {
      r.seq = mem_.seq_restore(host->snap, host_len);
      host->last_used = ++use_clock_;
      r.cached = r.host_cached = mem_.seq_len(r.seq);
      r.prompt_done = static_cast<size_t>(r.cached);
      ++host_stats_.restored;
      trim_idle();
      return;
    } catch (const Error&) {
      // The memory budget cannot hold the copy now: take the best slot (or nothing) instead.
    }
  }
  const bool hit = best != nullptr;
  if (!hit) {
    r.seq = mem_.seq_new();
  } else if (best_match < static_cast<int64_t>(best->tokens.size()) &&
             n_active() + static_cast<int>(idle_.size()) < cache_slots_) {
    // That conversation went on past what this prompt shares: copy the prefix into a free
    // slot and leave the original for a request that continues it.
    r.seq = mem_.seq_fork(best->seq);
    best->last_used = ++use_clock_;
  } else {
    r.seq = best->seq;
    // The rewind below drops what this prompt does not share: keep the whole in host RAM.
    if (best_match < static_cast<int64_t>(best->tokens.size())) host_save(best->seq, best->tokens);
    idle_.erase(idle_.begin() + (best - idle_.data()));
  }
  r.cached = hit ? mem_.seq_rewind(r.seq, best_len) : 0;
  r.prompt_done = static_cast<size_t>(r.cached);
  trim_idle();
}

void Scheduler::host_save(int32_t seq, const std::vector<int32_t>& tokens) {
  if (host_budget_ == 0 || tokens.empty()) return;
  auto is_prefix = [](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {  // a of b
    return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
  };
  for (HostEntry& e : host_)
    if (is_prefix(tokens, e.tokens)) {  // a longer copy of this conversation is there already
      e.last_used = ++use_clock_;
      return;
    }
  SeqSnapshot snap = mem_.seq_save(seq);
  if (snap.bytes() > host_budget_) return;
  std::erase_if(host_, [&](const HostEntry& e) {
    if (!is_prefix(e.tokens, tokens)) return false;
    host_bytes_ -= e.snap.bytes();
    return true;
  });
  while (!host_.empty() && host_bytes_ + snap.bytes() > host_budget_) {
    auto lru = std::min_element(host_.begin(), host_.end(),
                                [](const HostEntry& a, const HostEntry& b) { return a.last_used < b.last_used; });
    host_bytes_ -= lru->snap.bytes();
    host_.erase(lru);
    ++host_stats_.evicted;
  }
  host_bytes_ += snap.bytes();
  host_.push_back({tokens, std::move(snap), ++use_clock_});
  ++host_stats_.saved;
}

void Scheduler::trim_idle() {
  // The request being attached is not in reqs_ yet; it counts as one active sequence.
  while (!idle_.empty() && n_active() + 1 + static_cast<int>(idle_.size()) > cache_slots_) {
    auto lru = std::min_element(idle_.begin(), idle_.end(),
                                [](const Idle& a, const Idle& b) { return a.last_used < b.last_used; });
    host_save(lru->seq, lru->tokens);
    mem_.seq_free(lru->seq);
    idle_.erase(lru);
  }
}

Scheduler::HostCacheStats Scheduler::host_cache_stats() const {
  HostCacheStats s = host_stats_;
  s.entries = static_cast<int64_t>(host_.size());
  s.bytes = host_bytes_;
  s.budget = host_budget_;
  return s;
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

void Scheduler::release(int64_t id) {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) fail("scheduler: no request ", id);
  if (!it->second->gen.ended()) fail("scheduler: request ", id, " is still running (cancel it first)");
  reqs_.erase(it);
}

bool Scheduler::done(int64_t id) const { return req(id).gen.ended(); }
int64_t Scheduler::cached_tokens(int64_t id) const { return req(id).cached; }
int64_t Scheduler::host_cached_tokens(int64_t id) const { return req(id).host_cached; }
const std::string& Scheduler::error(int64_t id) const { return req(id).error; }
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
  if (cache_slots_ == 0) {
    mem_.seq_free(r.seq);
    return;
  }
  // Keep it for the prompt cache. Its rows hold the evaluated prompt tokens and then the
  // generated ones that were fed back (the last sampled token never was).
  Idle e;
  e.seq = r.seq;
  const auto n = static_cast<size_t>(mem_.seq_len(r.seq));
  e.tokens.assign(r.prompt.begin(), r.prompt.begin() + static_cast<std::ptrdiff_t>(std::min(n, r.prompt.size())));
  const auto& gen = r.gen.stats().tokens;
  for (size_t i = 0; e.tokens.size() < n && i < gen.size(); ++i) e.tokens.push_back(gen[i]);
  if (e.tokens.size() != n) fail("scheduler: sequence ", r.seq, " holds ", n, " rows for ", e.tokens.size(), " tokens");
  // The next turn of a conversation starts with this one: its state is worth a checkpoint.
  mem_.seq_checkpoint(r.seq);
  e.last_used = ++use_clock_;
  idle_.push_back(std::move(e));
  r.seq = -1;
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
  for (auto& [r, n] : chunks) {
    r->prompt_done += n;
    // Where a prompt ends, a hybrid model's later request sharing the prompt can resume.
    if (cache_slots_ > 0 && r->prompt_done == r->prompt.size()) mem_.seq_checkpoint(r->seq);
  }

  for (size_t o = 0; o < out.size(); ++o) {
    Request& r = *out[o];
    r.next = -1;
    if (!r.logits_seen) {
      r.logits_seen = true;
      r.t_first = Clock::now();
      r.gen.stats().prompt_seconds = std::chrono::duration<double>(r.t_first - r.t_submit).count();
    }
    int32_t id = -1;
    try {
      id = r.gen.next(logits_.data() + o * V, static_cast<int32_t>(V));
    } catch (const std::exception& e) {
      // This request's own sampling failed; the step and the other requests stand.
      r.error = e.what();
      r.gen.end(StopReason::callback);
    }
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
