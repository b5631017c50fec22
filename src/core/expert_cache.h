// core/expert_cache: residency bookkeeping for streamed experts — which (layer, expert)
// bundles are in memory, their buffers, the byte budget and who may be evicted. No I/O here:
// expert_stream fills the buffers.
//
// Invariants:
//  * used() <= budget() at every moment. A buffer is counted by its mapped size (the bundle's
//    aligned read length rounded up to whole pages), which is exactly what it costs in RSS:
//    buffers are anonymous mmaps, never malloc, so no allocator slack hides beside them.
//  * An entry is evicted only when it is ready (no read in flight into it), unheld (nobody
//    computes with it or has reserved it) and not pinned.
//
// Eviction is segmented LRU (SLRU; Karedla et al., "Caching strategies to improve disk system
// performance", 1994), a small step from LRU towards frequency: a bundle enters the
// probationary segment and moves to the protected one on its second use; victims come from the
// probationary LRU end first. Under the cyclic layer-by-layer sweep of MoE decode this keeps
// experts that tokens keep returning to, while one-off experts churn through probation. The
// protected segment is capped at 3/4 of the budget; its LRU entries are demoted beyond that.
//
// The policy is shared by two tiers, which differ only in where slot buffers come from
// (ExpertSlotAllocator): the host streaming tier (anonymous mmap, page-rounded; the default)
// and the VRAM expert tier of the cuda backend (device memory; backends/cuda/expert_tier.h).
// Entries are keyed by (layer, expert), never by buffer address: a slot is reused for other
// experts over time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

namespace sluice {

// Where an ExpertCache's slot buffers come from. slot_bytes() is what a buffer of `bytes`
// costs (the budget counts it), allocate() returns a buffer of exactly that size or throws
// Error, release() gives it back. host_visible(): the CPU may read the buffer (host memory).
class ExpertSlotAllocator {
 public:
  virtual ~ExpertSlotAllocator() = default;
  virtual size_t slot_bytes(size_t bytes) const = 0;
  virtual uint8_t* allocate(size_t slot_bytes) = 0;
  virtual void release(uint8_t* p, size_t slot_bytes) = 0;
  virtual bool host_visible() const = 0;
};
// Anonymous private mmaps rounded up to whole pages: RSS is exactly what the budget counts.
std::unique_ptr<ExpertSlotAllocator> make_host_slot_allocator();

// Host buffers whose contents change while their address stays (a cache slot refilled with
// another expert). A consumer that caches something derived from host memory by address (the
// cuda backend's VRAM copy of a weight) asks for the generation of the address: 0 for memory
// never registered (a read-only model mapping: stable), otherwise a number that changes every
// time the buffer holding it is handed to a new expert. Thread-safe.
uint64_t host_buffer_generation(const void* p);
// Registers [p, p + bytes) with a fresh generation (called when a slot gets a new occupant).
void host_buffer_refilled(const void* p, size_t bytes);
// Forgets the buffer starting at p (called when it is unmapped).
void host_buffer_released(const void* p);

class ExpertCache {
 public:
  enum class State { loading, ready };
  struct Entry {
    int32_t layer = 0, expert = 0;
    State state = State::loading;
    uint8_t* buf = nullptr;
    size_t bytes = 0;         // mapped size of buf: what the budget counts
    int holds = 0;            // computing with it or reserved by a batch: not evictable
    bool pinned = false;      // the hot set: never evicted
    bool prefetched = false;  // brought in by a prefetch and not used since
    uint32_t uses = 0;        // times served
    uint64_t last_step = 0;   // the owner's decode step of the last use (0: cold; see prefetch_policy.h)
    bool in_protected = false;
    std::list<Entry*>::iterator pos;  // in its segment's list (front = least recently used)
  };

  // `alloc` null: host slots (make_host_slot_allocator()).
  explicit ExpertCache(size_t budget_bytes, std::unique_ptr<ExpertSlotAllocator> alloc = nullptr);
  ~ExpertCache();  // releases everything; the owner must have no read/copy in flight
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // Bytes a bundle of `bytes` occupies in a host slot: rounded up to whole pages.
  static size_t slot_bytes(size_t bytes);
  // The same for this cache's allocator.
  size_t slot_size(size_t bytes) const { return alloc_->slot_bytes(bytes); }

  Entry* find(int32_t layer, int32_t expert);
  bool contains(int32_t layer, int32_t expert) const { return map_.count(key(layer, expert)) != 0; }
  // A new entry in state loading with a buffer of slot_bytes(bytes), evicting evictable
  // entries as needed (probationary LRU first, then protected unless `probationary_only`).
  // Evicts nothing and returns nullptr when that cannot make enough room now.
  Entry* insert(int32_t layer, int32_t expert, size_t bytes, bool probationary_only);
  // Victims restricted further, in the same order (probationary LRU first, then protected):
  // only evictable entries that `may_evict` accepts (any when empty), only probationary ones if
  // `probationary_only`, and only among the first `max_scan` entries of each segment's LRU end
  // (a bound on the cost of a request that cannot be met: the lists are walked node by node).
  struct VictimRule {
    std::function<bool(const Entry&)> may_evict;
    bool probationary_only = false;
    size_t max_scan = SIZE_MAX;
  };
  Entry* insert(int32_t layer, int32_t expert, size_t bytes, const VictimRule& rule);
  // What insert(..., rule) would evict now to make room for `bytes`, in order, without evicting
  // anything; false when it could not make room. One exception to the LRU order: an allowed
  // entry of exactly the needed slot size among the oldest min(kSameSizeWindow, size()/16) of
  // the segment's LRU end is taken alone when it makes room (its buffer is reused; see the .cpp).
  bool plan_eviction(size_t bytes, const VictimRule& rule, std::vector<Entry*>* victims) const;
  // A use of `e`: most recently used, promoted to protected on its second use.
  void mark_used(Entry* e);
  // Drops `e` (a failed read); it must be unheld and have no read in flight.
  void erase(Entry* e);
  // Makes `e` the first victim (least recently used, probationary): a prefetch that turned out
  // wrong should give its buffer back before anything that was actually used.
  void demote(Entry* e);

  size_t budget() const { return budget_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  uint64_t evictions() const { return evictions_; }
  size_t size() const { return map_.size(); }

 private:
  static uint64_t key(int32_t layer, int32_t expert) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) | static_cast<uint32_t>(expert);
  }
  // How far from the LRU end plan_eviction looks for a victim of exactly the needed size (at
  // most; also at most 1/16 of the entries).
  static constexpr size_t kSameSizeWindow = 64;
  static bool evictable(const Entry* e) { return e->state == State::ready && e->holds == 0 && !e->pinned; }
  void unlink(Entry* e);
  void remove(Entry* e, bool unmap);

  std::unique_ptr<ExpertSlotAllocator> alloc_;
  size_t budget_;
  size_t used_ = 0, peak_ = 0, protected_bytes_ = 0;
  uint64_t evictions_ = 0;
  std::unordered_map<uint64_t, Entry*> map_;
  std::list<Entry*> probation_, protected_;
};

}  // namespace sluice
