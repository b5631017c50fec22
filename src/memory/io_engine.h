// memory/io_engine: asynchronous file reads for expert streaming. An IoEngine takes batches
// of reads (fd, offset, length, destination) and hands back their results; the kernel does the
// work in between, so the caller computes while reads are in flight. Implementations:
// io_uring (liburing; the default), a pool of pread threads (fallback where io_uring is not
// allowed), and a fault-injecting wrapper for tests (io_fault.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace sluice {

struct IoRead {
  int fd = -1;
  uint64_t offset = 0;  // file offset (a multiple of the block size for O_DIRECT fds)
  size_t len = 0;       // bytes (likewise a multiple for O_DIRECT)
  void* buf = nullptr;  // destination (4 KiB-aligned for O_DIRECT fds)
  uint64_t tag = 0;     // caller's id, returned with the completion
};

struct IoCompletion {
  uint64_t tag = 0;
  int64_t result = 0;  // bytes read (may be short at end of file), or -errno
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual std::string_view name() const = 0;
  // Starts the reads; they are with the kernel (or a worker) when this returns. Never blocks
  // on the reads themselves. At most max_in_flight() reads may be outstanding at once: the
  // caller keeps count (in_flight()).
  virtual void submit(std::span<const IoRead> reads) = 0;
  // Writes up to out.size() completed reads to `out` and returns how many. Waits until at
  // least min_complete are available (0: never waits).
  virtual size_t reap(std::span<IoCompletion> out, size_t min_complete) = 0;
  virtual size_t in_flight() const = 0;
  virtual size_t max_in_flight() const = 0;
};

// io_uring with `depth` submission entries. Throws Error (with the reason, e.g. "io_uring is
// disabled by kernel.io_uring_disabled") when the kernel refuses a ring.
std::unique_ptr<IoEngine> make_io_uring(unsigned depth = 64);
// `threads` worker threads doing blocking pread(2): portable, still several reads in flight.
std::unique_ptr<IoEngine> make_io_pread(int threads = 4);
// "uring", "pread", or "auto" (io_uring, else pread with a note on stderr).
std::unique_ptr<IoEngine> make_io_engine(std::string_view kind);

}  // namespace sluice
