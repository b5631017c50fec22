// memory/expert_stream: the streaming expert store — read plans, the batch protocol (hits
// first, misses read meanwhile, bounded by the budget), prefetch, pins and error reporting.
#include "memory/expert_stream.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "format/gguf.h"

namespace sluice {
namespace {

// O_DIRECT needs file offsets, lengths and buffer addresses aligned to the device's logical
// block size. 4 KiB is a multiple of every common one (512, 4096); buffers are page-aligned
// mmaps. A device needing more fails the read with EINVAL, and we fall back to buffered reads.
constexpr uint64_t kDirectAlign = 4096;
// A read that fails with EAGAIN/EINTR is resubmitted this many times before it is an error.
constexpr int kMaxAttempts = 3;
// Prefetch loads in flight at once (see issue_prefetch).
constexpr int kPrefetchInFlight = 2;

std::string mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

const char* kSliceNames[3] = {"ffn_gate", "ffn_up", "ffn_down"};

}  // namespace

// ---------------------------------------------------------------------------------------------
// A layer's batch. Every item with an entry holds it (entry->holds), from reservation (a hit
// at acquire, a miss when its load starts) until the caller is done with it (the next call to
// next()) or the batch ends.

class StreamBatch final : public ExpertBatch {
 public:
  StreamBatch(StreamingExperts& s, int layer) : s_(s), layer_(layer) {}
  ~StreamBatch() override {
    std::lock_guard<std::mutex> lk(s_.mu_);
    for (Item& it : items_)
      if (it.entry) --it.entry->holds;
    s_.active_ = nullptr;
  }

  bool next(int32_t* expert, ExpertWeights* w) override {
    std::lock_guard<std::mutex> lk(s_.mu_);
    if (current_ >= 0) {  // the caller is done with the last one: it may be evicted now
      --items_[current_].entry->holds;
      items_[current_].entry = nullptr;
      current_ = -1;
    }
    for (;;) {
      s_.reap(/*wait=*/false);
      s_.issue_prefetch();  // as soon as this layer's reads have landed, while its experts compute
      for (Item& it : items_)
        if (!it.served && it.entry && s_.load_settled(it.entry)) {
          Entry* e = it.entry;
          it.entry = nullptr;
          --e->holds;
          s_.fail_load(e);
        }
      for (size_t i = 0; i < items_.size(); ++i) {
        Item& it = items_[i];
        if (it.served || !it.entry || it.entry->state != ExpertCache::State::ready) continue;
        it.served = true;
        ++served_;
        current_ = static_cast<int>(i);
        s_.cache_.mark_used(it.entry);
        it.entry->prefetched = false;
        it.entry->last_step = s_.step_;
        *expert = it.expert;
        *w = s_.weights(it.entry);
        return true;
      }
      if (served_ == items_.size()) return false;
      issue();
      s_.issue_prefetch();
      if (s_.io_->in_flight() > 0) {
        s_.reap(/*wait=*/true);
        continue;
      }
      // Nothing ready, nothing in flight, and a miss that cannot get a buffer: only pins can
      // leave so little room, and the constructor keeps one bundle free beside them.
      for (const Item& it : items_)
        if (!it.served && !it.entry)
          fail(s_.path_, ": the expert cache (", mb(double(s_.cache_.budget())), ", ", mb(double(s_.cache_.used())),
               " in use) has no room for layer ", layer_, " expert ", it.expert, " (",
               mb(double(s_.plan(layer_, it.expert).slot_bytes)), ")");
      fail(s_.path_, ": expert batch of layer ", layer_, " stalled with nothing in flight");
    }
  }

  using Entry = ExpertCache::Entry;
  struct Item {
    int32_t expert = 0;
    Entry* entry = nullptr;
    bool served = false;
  };

  // Starts the loads of misses, in request order, while the cache and the queue have room.
  void issue() {
    for (Item& it : items_) {
      if (it.served || it.entry) continue;
      Entry* e = s_.start_load(layer_, it.expert, /*demand=*/true);
      if (!e) return;
      ++e->holds;
      it.entry = e;
    }
  }
  bool has_unissued() const {
    for (const Item& it : items_)
      if (!it.served && !it.entry) return true;
    return false;
  }

  std::vector<Item> items_;

 private:
  StreamingExperts& s_;
  int layer_;
  int current_ = -1;
  size_t served_ = 0;
};

// ---------------------------------------------------------------------------------------------

StreamingExperts::Fds::~Fds() {
  for (int fd : all) ::close(fd);
}

StreamingExperts::StreamingExperts(const GgufFile& f, ExpertLayout layout, const ExpertStoreOptions& opt)
    : ExpertSource(layout),
      path_(f.path()),
      layout_(std::move(layout)),
      file_size_(f.file_size()),
      prefetch_enabled_(opt.prefetch),
      prefetch_gate_(opt.prefetch_gate),
      progress_(opt.progress),
      cache_(opt.cache_bytes) {
  // Read plans: each slice widened to aligned bounds; slices whose aligned ranges touch or
  // overlap (always, in a packed file) become one read.
  plans_.resize(layout_.layers.size());
  for (size_t l = 0; l < layout_.layers.size(); ++l) {
    for (const ExpertLocation& loc : layout_.layers[l]) {
      Plan p;
      int order[3] = {0, 1, 2};
      std::sort(order, order + 3, [&](int a, int b) { return loc.offset[a] < loc.offset[b]; });
      int seg_of[3] = {};
      for (int k : order) {
        const uint64_t a0 = loc.offset[k] / kDirectAlign * kDirectAlign;
        const uint64_t end = loc.offset[k] + loc.bytes[k];
        const uint64_t a1 = (end + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
        if (!p.segments.empty() && a0 <= p.segments.back().file_offset + p.segments.back().len) {
          Segment& s = p.segments.back();
          s.len = std::max<uint64_t>(s.file_offset + s.len, a1) - s.file_offset;
          s.need = std::max<size_t>(s.need, end - s.file_offset);
          s.slices |= 1 << k;
        } else {
          p.segments.push_back({a0, size_t(a1 - a0), 0, size_t(end - a0), 1 << k});
        }
        seg_of[k] = static_cast<int>(p.segments.size()) - 1;
      }
      for (Segment& s : p.segments) {
        s.buf_offset = p.buf_bytes;
        p.buf_bytes += s.len;
      }
      for (int k = 0; k < 3; ++k) {
        const Segment& s = p.segments[seg_of[k]];
        p.view_offset[k] = s.buf_offset + (loc.offset[k] - s.file_offset);
      }
      p.slot_bytes = ExpertCache::slot_bytes(p.buf_bytes);
      plans_[l].push_back(std::move(p));
    }
  }
  for (const auto& layer : plans_)
    for (const Plan& p : layer) max_bundle_ = std::max(max_bundle_, p.slot_bytes);
  gate_ = std::make_unique<PrefetchPolicy>(plans_.size(), max_bundle_);
  if (max_bundle_ > cache_.budget())
    fail(path_, ": --expert-cache ", mb(double(cache_.budget())), " cannot hold one expert (", mb(double(max_bundle_)),
         " with alignment); use at least twice that, so one expert loads while another computes");

  // Open for reads. O_DIRECT keeps the page cache (and the memory cgroup) out of it.
  if (opt.direct_io) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd_ >= 0) {
      direct_ = true;
      fds_.all.push_back(fd_);
    } else if (errno == EINVAL) {
      std::fprintf(stderr, "sluice: %s: the filesystem refuses O_DIRECT; expert reads go through the page cache\n",
                   path_.c_str());
    }
  }
  if (fd_ < 0) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(path_, ": cannot open for expert reads: ", std::strerror(errno));
    fds_.all.push_back(fd_);
  }
  io_ = opt.io_factory ? opt.io_factory() : make_io_engine(opt.io);

  // The mapping's expert pages are never read in this mode: drop any that parsing or
  // read-around brought in, and keep faults on neighbouring dense weights from reading them.
  madvise_expert_ranges(layout_, MADV_DONTNEED);
  madvise_expert_ranges(layout_, MADV_RANDOM);

  std::lock_guard<std::mutex> lk(mu_);
  load_pins(opt);
}

StreamingExperts::~StreamingExperts() {
  std::lock_guard<std::mutex> lk(mu_);
  // Buffers of reads in flight must outlive the reads: drain before the cache unmaps them.
  IoCompletion c[64];
  while (io_ && io_->in_flight() > 0) io_->reap(c, 1);
}

ExpertWeights StreamingExperts::weights(const Entry* e) const {
  const Plan& p = plan(e->layer, e->expert);
  ExpertWeights w = layout_.layers[e->layer][e->expert].views;
  w.gate.data = e->buf + p.view_offset[0];
  w.up.data = e->buf + p.view_offset[1];
  w.down.data = e->buf + p.view_offset[2];
  w.gate.rows16 = w.up.rows16 = w.down.rows16 = nullptr;  // the slot holds the file's layout only
  return w;
}

StreamingExperts::Entry* StreamingExperts::start_load(int layer, int32_t expert, bool demand,
                                                      const ExpertCache::VictimRule* rule) {
  const Plan& p = plan(layer, expert);
  if (io_->in_flight() + p.segments.size() > io_->max_in_flight()) return nullptr;
  Entry* e = rule ? cache_.insert(layer, expert, p.slot_bytes, *rule)
                  : cache_.insert(layer, expert, p.slot_bytes, /*probationary_only=*/false);
  if (!e) return nullptr;
  e->prefetched = !demand;
  // Recent until its layer runs: a prefetch for this step is not another prefetch's victim.
  e->last_step = step_;
  if (cache_full_pass_ == 0 && cache_.used() + max_bundle_ > cache_.budget()) cache_full_pass_ = step_ - 1;
  Load& ld = loads_[e];
  ld.pending = static_cast<int>(p.segments.size());
  ld.demand = demand;
  // The bundle's reads go to the kernel together.
  std::vector<IoRead> reads;
  for (size_t i = 0; i < p.segments.size(); ++i) {
    const Segment& s = p.segments[i];
    const uint64_t tag = next_tag_++;
    tags_[tag] = {e, static_cast<int>(i), 0, direct_};
    reads.push_back({fd_, s.file_offset, s.len, e->buf + s.buf_offset, tag});
  }
  if (io_->in_flight() == 0) busy_since_ = now_seconds();
  io_->submit(reads);
  return e;
}

void StreamingExperts::submit_segment(Entry* e, int seg, int attempt) {
  const Segment& s = plan(e->layer, e->expert).segments[seg];
  const uint64_t tag = next_tag_++;
  tags_[tag] = {e, seg, attempt, direct_};
  IoRead r{fd_, s.file_offset, s.len, e->buf + s.buf_offset, tag};
  if (io_->in_flight() == 0) busy_since_ = now_seconds();
  io_->submit({&r, 1});
}

void StreamingExperts::reap(bool wait) {
  IoCompletion c[64];
  const double t = now_seconds();
  const size_t n = io_->reap(c, wait ? 1 : 0);
  const double t1 = now_seconds();
  if (wait) stall_seconds_ += t1 - t;
  for (size_t i = 0; i < n; ++i) complete(c[i].tag, c[i].result);
  if (busy_since_ > 0 && io_->in_flight() == 0) {
    io_seconds_ += t1 - busy_since_;
    busy_since_ = 0;
  }
}

void StreamingExperts::complete(uint64_t tag, int64_t result) {
  auto it = tags_.find(tag);
  if (it == tags_.end()) return;  // not ours (cannot happen with our engines)
  const InFlight f = it->second;
  tags_.erase(it);
  Entry* e = f.entry;
  const int seg = f.segment, attempt = f.attempt;
  const Segment& s = plan(e->layer, e->expert).segments[seg];
  Load& ld = loads_[e];

  if ((result == -EAGAIN || result == -EINTR) && attempt + 1 < kMaxAttempts) {
    submit_segment(e, seg, attempt + 1);
    return;
  }
  if (result == -EINVAL && f.direct) {
    // The device wants a larger alignment than 4 KiB (or the filesystem only says so at
    // read time): switch to buffered reads for good and retry this one (and any other
    // O_DIRECT read still in flight, as it completes).
    if (direct_) {
      const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        std::fprintf(stderr, "sluice: %s: an O_DIRECT read was refused (%s); expert reads go through the page cache\n",
                     path_.c_str(), std::strerror(EINVAL));
        fds_.all.push_back(fd);
        fd_ = fd;
        direct_ = false;
      }
    }
    if (!direct_) {
      submit_segment(e, seg, attempt);
      return;
    }
  }

  auto what = [&] {
    std::string names;
    for (int k = 0; k < 3; ++k)
      if (s.slices & (1 << k)) names += (names.empty() ? "" : "+") + std::string(kSliceNames[k]);
    return str_cat(path_, ": layer ", e->layer, " expert ", e->expert, ": read of ", names, " (", s.len,
                   " bytes at file offset ", s.file_offset, ")");
  };
  if (result < 0) {
    if (ld.error.empty()) ld.error = str_cat(what(), " failed: ", std::strerror(static_cast<int>(-result)));
  } else {
    ++reads_;
    bytes_read_ += static_cast<uint64_t>(result);
    // A regular file reads short only at its end: the file is shorter than its header says.
    if (static_cast<size_t>(result) < s.need && ld.error.empty())
      ld.error = str_cat(what(), " returned ", result, " bytes, ", s.need,
                         " needed: short read (was the file truncated or replaced after it was opened?)");
    // Buffered fallback: the bytes are in our buffer now; do not keep a second copy cached.
    if (!direct_)
      ::posix_fadvise(fd_, static_cast<off_t>(s.file_offset), static_cast<off_t>(s.len), POSIX_FADV_DONTNEED);
  }
  if (--ld.pending > 0) return;
  if (ld.error.empty()) {
    e->state = ExpertCache::State::ready;
    loads_.erase(e);
  } else if (!ld.demand && e->holds == 0) {
    // Nobody waits for a failed prefetch: drop it. A demand read of the expert retries, and
    // reports the error if it persists.
    ++prefetch_failures_;
    loads_.erase(e);
    cache_.erase(e);
  }
  // A failed demand load stays (state loading, pending 0) until its batch reports it.
}

bool StreamingExperts::load_settled(const Entry* e) const {
  if (e->state != ExpertCache::State::loading) return false;
  auto it = loads_.find(e);
  return it != loads_.end() && it->second.pending == 0;
}

void StreamingExperts::fail_load(Entry* e) {
  std::string msg = loads_[e].error;
  loads_.erase(e);
  if (e->holds == 0) cache_.erase(e);
  throw Error(msg);
}

void StreamingExperts::issue_prefetch() {
  if (prefetch_todo_.empty() || (active_ && active_->has_unissued())) return;  // this layer's misses first
  // Only the disk's idle time: no read ahead while a read the forward waits for is in flight
  // (io_uring has no priorities, so a prefetch submitted beside a demand read shares the disk
  // with it and delays it), and at most kPrefetchInFlight bundles at once, which bounds how
  // long the next layer's demand reads can queue behind them. Without this rule (48-layer
  // synth model, 4 GB cgroup, 2 GB cache, 128 tokens) the gated prefetch stalled the forward
  // 188 ms/token against 161 with no prefetch at all.
  int ahead = 0;
  for (const auto& [e, ld] : loads_) {
    if (ld.pending == 0) continue;
    if (ld.demand && prefetch_gate_) return;
    ++ahead;
  }
  // Whether each guess is read, and what it may evict, is PrefetchPolicy's call (the reasons
  // are in prefetch_policy.h); a guess it declines is dropped for this step.
  const ExpertCache::VictimRule rule = PrefetchPolicy::victim_rule(step_);
  ExpertCache::VictimRule ungated;  // before the gate: any probationary expert
  ungated.probationary_only = true;
  std::vector<Entry*> victims;
  size_t i = 0;
  for (; i < prefetch_todo_.size(); ++i) {
    const auto [x, rank] = prefetch_todo_[i];
    if (cache_.find(prefetch_layer_, x)) continue;  // cached, or already being read
    const Plan& p = plan(prefetch_layer_, x);
    if (io_->in_flight() + p.segments.size() > io_->max_in_flight()) break;  // the queue is full: later
    if (prefetch_gate_ && ahead >= kPrefetchInFlight) break;                 // later
    if (!prefetch_gate_) {
      if (!start_load(prefetch_layer_, x, /*demand=*/false, &ungated)) break;
      prefetch_issued_.push_back(x);
      ++prefetch_reads_;
      continue;
    }
    const bool room = cache_.plan_eviction(p.slot_bytes, rule, &victims);
    size_t victim_bytes = 0;
    for (const Entry* v : victims) victim_bytes += v->bytes;
    prefetch_decided_.push_back({x, rank});  // scored when the layer runs
    if (!room || !gate_->worth_it(prefetch_layer_, rank, cache_.slot_size(p.slot_bytes), victim_bytes)) {
      ++prefetch_skipped_;
      continue;
    }
    for (const Entry* v : victims) gate_->note_prefetch_victim(*v, step_);
    if (!start_load(prefetch_layer_, x, /*demand=*/false, &rule)) break;  // (planned: cannot fail)
    prefetch_issued_.push_back(x);
    ++prefetch_reads_;
    ++ahead;
  }
  prefetch_todo_.erase(prefetch_todo_.begin(), prefetch_todo_.begin() + static_cast<std::ptrdiff_t>(i));
}

std::unique_ptr<ExpertBatch> StreamingExperts::acquire(int layer, std::span<const ExpertUse> uses) {
  if (layer < 0 || static_cast<size_t>(layer) >= plans_.size() || plans_[layer].empty())
    fail("expert store: layer ", layer, " has no experts");
  for (const ExpertUse& u : uses)
    if (u.expert < 0 || static_cast<size_t>(u.expert) >= plans_[layer].size())
      fail("expert store: expert ", u.expert, " of layer ", layer, " is out of range (", plans_[layer].size(),
           " experts)");
  book_acquire(layer, uses);
  std::lock_guard<std::mutex> lk(mu_);
  if (active_) fail("expert store: layer ", layer, " acquired while another layer's batch is still open");
  warmup_progress(layer);
  if (last_acquired_ >= 0 && layer <= last_acquired_) gate_->new_step(++step_);
  last_acquired_ = layer;
  if (prefetch_layer_ == layer) {
    prefetch_todo_.clear();  // this layer runs now: a guess not yet issued is too late
    for (auto [x, rank] : prefetch_decided_) {
      const bool used = std::any_of(uses.begin(), uses.end(), [&](const ExpertUse& u) { return u.expert == x; });
      gate_->score(layer, rank, used);
    }
    prefetch_decided_.clear();
    // Wrong guesses go to the front of the eviction order: measured on a 48-layer
    // qwen3-30b-a3b-shaped model with a 1.5 GB budget, leaving them as ordinary probationary
    // entries let ~4 wasted bundles per layer push the reused experts out every token (31 GB
    // read in 16 tokens instead of 4.3 GB without prefetch).
    for (int32_t x : prefetch_issued_) {
      const bool used = std::any_of(uses.begin(), uses.end(), [&](const ExpertUse& u) { return u.expert == x; });
      Entry* e = used ? nullptr : cache_.find(layer, x);
      if (e && e->prefetched) {
        cache_.demote(e);
        e->last_step = 0;  // cold: the first slot a later prefetch may take
      }
    }
    prefetch_issued_.clear();
    prefetch_layer_ = -1;
  }
  reap(/*wait=*/false);
  auto b = std::make_unique<StreamBatch>(*this, layer);
  for (const ExpertUse& u : uses) {
    StreamBatch::Item it;
    it.expert = u.expert;
    if (Entry* e = cache_.find(layer, u.expert)) {
      ++hits_;
      if (e->prefetched) {
        ++prefetch_hits_;
        gate_->note_prefetch_use(e->state == ExpertCache::State::ready);
        if (e->state != ExpertCache::State::ready) ++prefetch_late_;
      }
      ++e->holds;
      it.entry = e;
      if (e->state == ExpertCache::State::loading) loads_[e].demand = true;  // a prefetch still in flight
    } else {
      gate_->note_demand_miss(layer, u.expert, step_);
    }
    b->items_.push_back(it);
  }
  active_ = b.get();
  b->issue();  // the misses start loading now; next() serves the hits meanwhile
  return b;
}

void StreamingExperts::prefetch(int layer, std::span<const int32_t> experts) {
  book_prediction(layer, experts);
  if (layer < 0 || static_cast<size_t>(layer) >= plans_.size() || plans_[layer].empty()) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (prefetch_layer_ != layer) prefetch_issued_.clear();
  prefetch_layer_ = layer;
  prefetch_todo_.clear();
  prefetch_decided_.clear();
  int rank = 0;
  for (int32_t x : experts)
    if (x >= 0 && static_cast<size_t>(x) < plans_[layer].size()) prefetch_todo_.push_back({x, rank++});
  issue_prefetch();
}

void StreamingExperts::load_pins(const ExpertStoreOptions& opt) {
  if (opt.pin_per_layer <= 0) return;
  if (opt.routing_counts_path.empty())
    fail(
        "--pin-experts needs --routing-counts FILE to choose the hot set (write one with a previous run's "
        "--routing-counts-out FILE)");
  const auto counts = read_routing_counts(opt.routing_counts_path, layout_.layers.size());
  struct Pin {
    uint64_t count;
    int layer;
    int32_t expert;
  };
  std::vector<Pin> pins;
  for (size_t l = 0; l < counts.size(); ++l) {
    if (plans_[l].empty()) continue;
    if (counts[l].size() != plans_[l].size())
      fail(opt.routing_counts_path, ": layer ", l, " has counts for ", counts[l].size(), " experts, the model has ",
           plans_[l].size());
    std::vector<int32_t> order(counts[l].size());
    for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int32_t>(e);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return counts[l][a] > counts[l][b]; });
    for (int j = 0; j < opt.pin_per_layer && j < static_cast<int>(order.size()); ++j)
      if (counts[l][order[j]] > 0) pins.push_back({counts[l][order[j]], static_cast<int>(l), order[j]});
  }
  // The most routed first; keep room for two bundles beside the pins (one computes, one loads).
  std::stable_sort(pins.begin(), pins.end(), [](const Pin& a, const Pin& b) { return a.count > b.count; });
  size_t bytes = 0, n = 0;
  for (; n < pins.size(); ++n) {
    const size_t b = plan(pins[n].layer, pins[n].expert).slot_bytes;
    if (bytes + b + 2 * max_bundle_ > cache_.budget()) break;
    bytes += b;
  }
  if (n < pins.size())
    std::fprintf(stderr, "sluice: pinning %zu of %zu experts: the cache budget (%s) keeps room for two more\n", n,
                 pins.size(), mb(double(cache_.budget())).c_str());
  pins.resize(n);
  const double t0 = now_seconds();
  std::vector<Entry*> entries;
  for (size_t i = 0; i < pins.size(); ++i) {
    Entry* e = nullptr;
    while (!(e = start_load(pins[i].layer, pins[i].expert, /*demand=*/true))) {
      if (io_->in_flight() == 0) fail(path_, ": no room to pin layer ", pins[i].layer, " expert ", pins[i].expert);
      reap(/*wait=*/true);
    }
    e->pinned = true;  // from now on never a victim, so later pins cannot push it out
    entries.push_back(e);
    if (progress_ && (i + 1 == pins.size() || i % 16 == 0))
      std::fprintf(stderr, "\rpinning experts: %zu/%zu (%s)", i + 1, pins.size(), mb(double(bytes_read_)).c_str());
  }
  while (io_->in_flight() > 0) reap(/*wait=*/true);
  for (Entry* e : entries)
    if (load_settled(e)) fail_load(e);
  pinned_ = static_cast<int>(entries.size());
  if (progress_)
    std::fprintf(stderr, "\rpinned %d experts (%s) in %.2f s\n", pinned_, mb(double(bytes)).c_str(),
                 now_seconds() - t0);
  stall_seconds_ = 0;  // load time, not time a token waited
}

void StreamingExperts::warmup_progress(int layer) {
  if (!warming_) return;
  const bool tty = ::isatty(2);
  if (layer <= last_layer_) {  // the second token started: the first pass is over
    warming_ = false;
    if (progress_)
      std::fprintf(stderr, "%swarmed expert cache over %d layers: %s read, %.2f s stalled on I/O\n", tty ? "\r" : "",
                   last_layer_ + 1, mb(double(bytes_read_)).c_str(), stall_seconds_);
    return;
  }
  last_layer_ = layer;
  if (progress_ && tty)
    std::fprintf(stderr, "\rwarming expert cache: layer %d/%zu, %s read", layer + 1, plans_.size(),
                 mb(double(bytes_read_)).c_str());
}

bool StreamingExperts::cached(int layer, int32_t expert) const {
  std::lock_guard<std::mutex> lk(mu_);
  return cache_.contains(layer, expert);
}

void StreamingExperts::fill_stats(ExpertStats& s) const {
  std::lock_guard<std::mutex> lk(mu_);
  s.hits = hits_;
  s.prefetch_hits = prefetch_hits_;
  s.reads = reads_;
  s.bytes_read = bytes_read_;
  s.prefetch_failures = prefetch_failures_;
  s.prefetch_reads = prefetch_reads_;
  s.prefetch_skipped = prefetch_skipped_;
  s.prefetch_late = prefetch_late_;
  s.prefetch_regret_bytes = gate_->regretted_bytes();
  s.cache_full_pass = cache_full_pass_;
  s.io_seconds = io_seconds_ + (busy_since_ > 0 ? now_seconds() - busy_since_ : 0.0);
  s.stall_seconds = stall_seconds_;
  s.evictions = cache_.evictions();
  s.cache_budget = cache_.budget();
  s.cache_bytes = cache_.used();
  s.cache_peak_bytes = cache_.peak();
  s.max_bundle_bytes = max_bundle_;
  s.pinned = pinned_;
}

}  // namespace sluice
