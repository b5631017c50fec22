// core/expert_cache: budgeted residency with SLRU eviction (see expert_cache.h).
#include "core/expert_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace sluice {
namespace {

size_t page_size() {
  static const size_t p = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

class HostSlotAllocator final : public ExpertSlotAllocator {
 public:
  size_t slot_bytes(size_t bytes) const override {
    const size_t pg = page_size();
    return (bytes + pg - 1) / pg * pg;
  }
  uint8_t* allocate(size_t bytes) override {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("expert cache: cannot map a ", bytes, "-byte buffer: ", std::strerror(errno));
    return static_cast<uint8_t*>(p);
  }
  void release(uint8_t* p, size_t bytes) override { ::munmap(p, bytes); }
  bool host_visible() const override { return true; }
};

// The registry of refillable host buffers: start -> (size, generation).
struct BufferRegistry {
  std::mutex mu;
  std::map<uintptr_t, std::pair<size_t, uint64_t>> bufs;
  uint64_t next_generation = 1;
};
BufferRegistry& registry() {
  static BufferRegistry r;
  return r;
}

}  // namespace

std::unique_ptr<ExpertSlotAllocator> make_host_slot_allocator() { return std::make_unique<HostSlotAllocator>(); }

uint64_t host_buffer_generation(const void* p) {
  BufferRegistry& r = registry();
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lock(r.mu);
  auto it = r.bufs.upper_bound(a);
  if (it == r.bufs.begin()) return 0;
  --it;
  return a < it->first + it->second.first ? it->second.second : 0;
}

void host_buffer_refilled(const void* p, size_t bytes) {
  BufferRegistry& r = registry();
  std::lock_guard lock(r.mu);
  r.bufs[reinterpret_cast<uintptr_t>(p)] = {bytes, r.next_generation++};
}

void host_buffer_released(const void* p) {
  BufferRegistry& r = registry();
  std::lock_guard lock(r.mu);
  r.bufs.erase(reinterpret_cast<uintptr_t>(p));
}

ExpertCache::ExpertCache(size_t budget_bytes, std::unique_ptr<ExpertSlotAllocator> alloc)
    : alloc_(alloc ? std::move(alloc) : make_host_slot_allocator()), budget_(budget_bytes) {}

ExpertCache::~ExpertCache() {
  for (auto& [k, e] : map_) {
    if (e->buf) {
      if (alloc_->host_visible()) host_buffer_released(e->buf);
      alloc_->release(e->buf, e->bytes);
    }
    delete e;
  }
}

size_t ExpertCache::slot_bytes(size_t bytes) { return HostSlotAllocator().slot_bytes(bytes); }

ExpertCache::Entry* ExpertCache::find(int32_t layer, int32_t expert) {
  auto it = map_.find(key(layer, expert));
  return it == map_.end() ? nullptr : it->second;
}

void ExpertCache::unlink(Entry* e) {
  if (e->in_protected) {
    protected_.erase(e->pos);
    protected_bytes_ -= e->bytes;
  } else {
    probation_.erase(e->pos);
  }
}

void ExpertCache::remove(Entry* e, bool unmap) {
  unlink(e);
  map_.erase(key(e->layer, e->expert));
  if (unmap && e->buf) {
    if (alloc_->host_visible()) host_buffer_released(e->buf);
    alloc_->release(e->buf, e->bytes);
  }
  used_ -= e->bytes;
  delete e;
}

bool ExpertCache::plan_eviction(size_t bytes, const VictimRule& rule, std::vector<Entry*>* victims) const {
  victims->clear();
  const size_t need = alloc_->slot_bytes(bytes);
  if (need > budget_) return false;
  auto allowed = [&](const Entry* e) { return evictable(e) && (!rule.may_evict || rule.may_evict(*e)); };
  // A victim whose buffer fits exactly is worth a small step away from LRU order: it lends its
  // buffer (see insert), where any other victim is unmapped and the newcomer's buffer mapped
  // afresh, and the kernel then zeroes every page of it when the O_DIRECT read pins them. With
  // two bundle sizes in a model (a Q4_K_M mix: ffn_down in Q6_K in some layers, Q4_K in others)
  // strict LRU order did that for about one eviction in six; clear_page was 10% of all CPU time.
  if (used_ + need > budget_) {
    // Within the oldest 1/16 of the entries (at most kSameSizeWindow): a small cache keeps LRU.
    const size_t window = std::min({kSameSizeWindow, rule.max_scan, map_.size() / 16});
    auto same_size = [&](const std::list<Entry*>& seg) -> Entry* {
      size_t seen = 0;
      for (Entry* e : seg) {
        if (seen++ == window) break;
        if (e->bytes == need && allowed(e) && used_ - e->bytes + need <= budget_) return e;
      }
      return nullptr;
    };
    Entry* v = same_size(probation_);
    if (!v && probation_.empty() && !rule.probationary_only) v = same_size(protected_);
    if (v) {
      victims->push_back(v);
      return true;
    }
  }
  size_t freed = 0;
  auto collect = [&](const std::list<Entry*>& seg) {
    size_t seen = 0;
    for (Entry* e : seg) {
      if (used_ - freed + need <= budget_ || seen++ == rule.max_scan) return;
      if (allowed(e)) {
        victims->push_back(e);
        freed += e->bytes;
      }
    }
  };
  collect(probation_);
  if (!rule.probationary_only) collect(protected_);
  return used_ - freed + need <= budget_;
}

ExpertCache::Entry* ExpertCache::insert(int32_t layer, int32_t expert, size_t bytes, bool probationary_only) {
  VictimRule rule;
  rule.probationary_only = probationary_only;
  return insert(layer, expert, bytes, rule);
}

ExpertCache::Entry* ExpertCache::insert(int32_t layer, int32_t expert, size_t bytes, const VictimRule& rule) {
  if (find(layer, expert)) fail("expert cache: layer ", layer, " expert ", expert, " inserted twice");
  const size_t need = alloc_->slot_bytes(bytes);
  // Choose the victims first, so that a request that cannot be met evicts nothing.
  std::vector<Entry*> victims;
  if (!plan_eviction(bytes, rule, &victims)) return nullptr;

  // A victim of exactly the needed size lends its buffer: no munmap/mmap, no fresh page faults.
  uint8_t* buf = nullptr;
  for (Entry* v : victims) {
    const bool reuse = !buf && v->bytes == need;
    if (reuse) buf = v->buf;
    remove(v, /*unmap=*/!reuse);
    ++evictions_;
  }
  if (!buf) buf = alloc_->allocate(need);
  // A new occupant: whatever was derived from this buffer's old contents is stale now.
  if (alloc_->host_visible()) host_buffer_refilled(buf, need);

  Entry* e = new Entry;
  e->layer = layer;
  e->expert = expert;
  e->buf = buf;
  e->bytes = need;
  e->pos = probation_.insert(probation_.end(), e);
  map_[key(layer, expert)] = e;
  used_ += need;
  peak_ = std::max(peak_, used_);
  return e;
}

void ExpertCache::mark_used(Entry* e) {
  ++e->uses;
  unlink(e);
  if (e->uses >= 2 || e->in_protected) {
    e->in_protected = true;
    e->pos = protected_.insert(protected_.end(), e);
    protected_bytes_ += e->bytes;
    // Keep a quarter of the budget probationary, so new experts are not evicted at once.
    while (protected_bytes_ > budget_ / 4 * 3 && protected_.size() > 1) {
      Entry* d = protected_.front();
      protected_.pop_front();
      protected_bytes_ -= d->bytes;
      d->in_protected = false;
      d->pos = probation_.insert(probation_.end(), d);
    }
  } else {
    e->pos = probation_.insert(probation_.end(), e);
  }
}

void ExpertCache::demote(Entry* e) {
  unlink(e);
  e->in_protected = false;
  e->pos = probation_.insert(probation_.begin(), e);
}

void ExpertCache::erase(Entry* e) {
  if (e->holds != 0) fail("expert cache: erasing layer ", e->layer, " expert ", e->expert, " while it is held");
  remove(e, /*unmap=*/true);
}

}  // namespace sluice
