// memory/io_fault: an IoEngine wrapper that breaks reads on purpose, so tests can check that
// every way a read goes wrong (EIO, a short read, a file truncated after it was opened) ends
// in a clear sluice::Error and never in a crash or in logits computed from garbage.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>

#include "memory/io_engine.h"

namespace sluice {

enum class IoFaultKind {
  eio,         // the read fails with -EIO
  short_read,  // the read returns half of what it got
  truncated,   // the file seems to end at truncate_at: reads past it come back short (or 0)
};

struct IoFaultPlan {
  IoFaultKind kind = IoFaultKind::eio;
  uint64_t skip = 0;                                      // reads that succeed before faults start (eio, short_read)
  uint64_t count = std::numeric_limits<uint64_t>::max();  // faulty reads after those; later ones succeed again
  uint64_t truncate_at = 0;                               // truncated: the apparent file size
};

// Reads go to `inner` unchanged; their completions are altered according to `plan`.
std::unique_ptr<IoEngine> make_io_fault(std::unique_ptr<IoEngine> inner, IoFaultPlan plan);

}  // namespace sluice
