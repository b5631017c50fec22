// runtime/expert_cache: budgeted residency with SLRU eviction (see expert_cache.h).
#include "runtime/expert_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace sluice {
namespace {

size_t page_size() {
  static const size_t p = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

uint8_t* map_buffer(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("expert cache: cannot map a ", bytes, "-byte buffer: ", std::strerror(errno));
  return static_cast<uint8_t*>(p);
}

}  // namespace

ExpertCache::ExpertCache(size_t budget_bytes) : budget_(budget_bytes) {}

ExpertCache::~ExpertCache() {
  for (auto& [k, e] : map_) {
    if (e->buf) ::munmap(e->buf, e->bytes);
    delete e;
  }
}

size_t ExpertCache::slot_bytes(size_t bytes) {
  const size_t pg = page_size();
  return (bytes + pg - 1) / pg * pg;
}

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
  if (unmap && e->buf) ::munmap(e->buf, e->bytes);
  used_ -= e->bytes;
  delete e;
}

ExpertCache::Entry* ExpertCache::insert(int32_t layer, int32_t expert, size_t bytes, bool probationary_only) {
  if (find(layer, expert)) fail("expert cache: layer ", layer, " expert ", expert, " inserted twice");
  const size_t need = slot_bytes(bytes);
  if (need > budget_) return nullptr;
  // Choose the victims first, so that a request that cannot be met evicts nothing.
  std::vector<Entry*> victims;
  size_t freed = 0;
  auto collect = [&](std::list<Entry*>& seg) {
    for (Entry* e : seg) {
      if (used_ - freed + need <= budget_) return;
      if (evictable(e)) {
        victims.push_back(e);
        freed += e->bytes;
      }
    }
  };
  collect(probation_);
  if (!probationary_only) collect(protected_);
  if (used_ - freed + need > budget_) return nullptr;

  // A victim of exactly the needed size lends its buffer: no munmap/mmap, no fresh page faults.
  uint8_t* buf = nullptr;
  for (Entry* v : victims) {
    const bool reuse = !buf && v->bytes == need;
    if (reuse) buf = v->buf;
    remove(v, /*unmap=*/!reuse);
    ++evictions_;
  }
  if (!buf) buf = map_buffer(need);

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
