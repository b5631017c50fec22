// memory/expert_stream: the `stream` expert policy — experts read from the model file into a
// bounded cache (expert_cache.h) with asynchronous reads (io_engine.h), O_DIRECT into
// page-aligned buffers, an expert's gate/up/down slices submitted together (one read when the
// file is packed), the current layer's misses read while its hits compute, and the predicted
// experts of the next layer read ahead. The expert byte ranges of the GGUF mapping are dropped
// (MADV_DONTNEED) and never touched, so the process RSS is the dense weights + KV + the budget.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/expert_cache.h"
#include "memory/expert_store.h"
#include "memory/io_engine.h"
#include "memory/prefetch_policy.h"

namespace sluice {

class StreamBatch;

class StreamingExperts final : public ExpertSource {
 public:
  // Opens `f`'s file for reading (O_DIRECT unless opt.direct_io is false or the filesystem
  // refuses it), loads the pinned set, and checks that the budget holds the pins plus two of
  // the largest bundles (one computing, one loading). Throws Error saying what to change.
  StreamingExperts(const GgufFile& f, ExpertLayout layout, const ExpertStoreOptions& opt);
  ~StreamingExperts() override;  // waits for reads in flight before freeing their buffers

  ExpertPolicy policy() const override { return ExpertPolicy::stream; }
  std::unique_ptr<ExpertBatch> acquire(int layer, std::span<const ExpertUse> uses) override;
  void prefetch(int layer, std::span<const int32_t> experts) override;
  bool wants_prefetch() const override { return prefetch_enabled_; }

  bool direct_io() const { return direct_; }
  // Tests: whether (layer, expert) is in the cache now (ready or loading).
  bool cached(int layer, int32_t expert) const;
  std::string_view io_name() const { return io_->name(); }

 private:
  friend class StreamBatch;
  using Entry = ExpertCache::Entry;

  // One read of a bundle: an aligned file range, where it lands in the buffer, and how many of
  // its bytes must arrive (the rest is alignment padding, possibly past the end of the file).
  struct Segment {
    uint64_t file_offset = 0;
    size_t len = 0;
    size_t buf_offset = 0;
    size_t need = 0;
    int slices = 0;  // bit k: holds slice k (0 gate, 1 up, 2 down), for error messages
  };
  struct Plan {
    std::vector<Segment> segments;
    size_t buf_bytes = 0;        // the reads' aligned bytes
    size_t slot_bytes = 0;       // the buffer asked of the cache: buf_bytes rounded up to whole pages
    size_t view_offset[3] = {};  // where gate/up/down start in the buffer
  };
  // Per entry with reads in flight.
  struct Load {
    int pending = 0;      // segments not yet completed
    std::string error;    // first failure, reported when the load settles
    bool demand = false;  // a batch waits for it (else a prefetch)
  };

  void fill_stats(ExpertStats& s) const override;
  const Plan& plan(int layer, int32_t expert) const { return plans_[layer][expert]; }
  ExpertWeights weights(const Entry* e) const;
  // Inserts and submits a bundle's reads; nullptr when the cache (or the queue) has no room now.
  // A prefetch passes the victims it may evict (PrefetchPolicy::may_evict); a demand load may
  // evict any evictable entry.
  Entry* start_load(int layer, int32_t expert, bool demand, const ExpertCache::VictimRule* rule = nullptr);
  void submit_segment(Entry* e, int seg, int attempt);
  // Handles completions: `wait` blocks for at least one (counted as stall time).
  void reap(bool wait);
  void complete(uint64_t tag, int64_t result);
  bool load_settled(const Entry* e) const;
  void issue_prefetch();
  void load_pins(const ExpertStoreOptions& opt);
  void warmup_progress(int layer);
  [[noreturn]] void fail_load(Entry* e);

  std::string path_;
  ExpertLayout layout_;
  std::vector<std::vector<Plan>> plans_;
  uint64_t file_size_ = 0;
  bool prefetch_enabled_ = true;
  bool prefetch_gate_ = true;
  bool progress_ = false;
  // Declaration order is destruction order reversed: the engine (which drains reads in
  // flight) goes first, then the files it reads, then the cache that owns the buffers.
  ExpertCache cache_;
  struct Fds {
    std::vector<int> all;  // every descriptor opened (an O_DIRECT one stays open after a fallback)
    ~Fds();
  } fds_;
  int fd_ = -1;
  bool direct_ = false;
  std::unique_ptr<IoEngine> io_;

  mutable std::mutex mu_;
  std::unordered_map<const Entry*, Load> loads_;
  struct InFlight {
    Entry* entry = nullptr;
    int segment = 0;
    int attempt = 0;      // resubmissions so far
    bool direct = false;  // issued on the O_DIRECT descriptor
  };
  std::unordered_map<uint64_t, InFlight> tags_;  // by read tag
  uint64_t next_tag_ = 1;
  StreamBatch* active_ = nullptr;  // the batch being served (one at a time)
  // Decode steps (forward passes), counted when a layer is acquired at or below the last one.
  // Starts at 2 so that Entry::last_step 0 is cold under PrefetchPolicy::may_evict.
  uint64_t step_ = 2;
  int last_acquired_ = -1;
  std::unique_ptr<PrefetchPolicy> gate_;  // decides every prefetch read (prefetch_policy.h)
  int prefetch_layer_ = -1;
  std::vector<std::pair<int32_t, int>> prefetch_decided_;  // (expert, rank) the gate read or declined
  std::vector<std::pair<int32_t, int>> prefetch_todo_;     // (expert, rank) predicted, not yet issued or declined
  std::vector<int32_t> prefetch_issued_;                   // ... and those whose reads were started
  // Stats (under mu_).
  uint64_t reads_ = 0, bytes_read_ = 0, hits_ = 0, prefetch_hits_ = 0, prefetch_failures_ = 0;
  uint64_t prefetch_reads_ = 0, prefetch_skipped_ = 0, prefetch_late_ = 0, cache_full_pass_ = 0;
  double io_seconds_ = 0, stall_seconds_ = 0, busy_since_ = 0;
  size_t max_bundle_ = 0;
  int pinned_ = 0;
  // Warm-up progress (first pass over the layers).
  bool warming_ = true;
  int last_layer_ = -1;
};

}  // namespace sluice
