// memory/memory_limit: how much memory this process may use — the tightest memory cgroup
// limit on its path (v1 memory.limit_in_bytes or v2 memory.max, walking up to the root), or
// what the machine has available — so a streaming expert cache can be sized to the machine
// (--expert-cache auto) instead of by hand.
#pragma once
#include <cstddef>
#include <string>

namespace sluice {

struct MemoryLimit {
  size_t bytes = 0;    // the limit
  std::string source;  // where it came from, for messages ("cgroup v1 /sluice", "MemAvailable")
};

// min(the process's memory cgroup limit, MemAvailable + this process's RSS). Reads /proc and
// /sys/fs/cgroup; `root` replaces "/" for tests (fake /proc and /sys trees).
MemoryLimit memory_limit(const std::string& root = "");

// The expert cache budget for --expert-cache auto: 90% of the limit, less the weights that stay
// in memory (dense_bytes) and a reserve for the KV cache, activations and the runtime
// (kAutoReserve), and no more than every expert (expert_bytes). `why` gets the arithmetic, for
// the user. `extra_bytes`: memory the caller will hold beside all that (sluice bench: its
// bandwidth-test buffer). Throws Error when that leaves less than `min_bytes` (two bundles).
constexpr size_t kAutoReserve = size_t{512} << 20;
size_t auto_expert_cache_bytes(const MemoryLimit& limit, size_t dense_bytes, size_t expert_bytes, size_t min_bytes,
                               std::string* why, size_t extra_bytes = 0);

}  // namespace sluice
