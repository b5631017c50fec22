// core/anon_map: an anonymous private mapping of n bytes, zero-filled, whose pages the kernel
// provides on first touch (MAP_NORESERVE): a buffer sized for the most it may hold that costs
// memory only for what is written, and never moves (no copy when the part in use grows).
// Pages::huge asks for transparent huge pages (a hint; the machine's THP setting decides): for
// weights read at random by row, where 4 KiB pages cost a TLB miss per row.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/error.h"

namespace sluice {

class AnonMap {
 public:
  enum class Pages { base, huge };
  AnonMap() = default;
  explicit AnonMap(size_t bytes, Pages pages = Pages::base) : n_(bytes) {
    if (n_ == 0) return;
    void* p = ::mmap(nullptr, n_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("cannot map ", n_, " bytes of anonymous memory");
    p_ = static_cast<uint8_t*>(p);
    if (pages == Pages::huge) ::madvise(p, n_, MADV_HUGEPAGE);
  }
  AnonMap(AnonMap&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  AnonMap& operator=(AnonMap&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  AnonMap(const AnonMap&) = delete;
  AnonMap& operator=(const AnonMap&) = delete;
  ~AnonMap() { release(); }

  uint8_t* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  void release() {
    if (p_) ::munmap(p_, n_);
    p_ = nullptr;
  }
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace sluice
