// memory/memory_limit: the memory this process may use (see memory_limit.h).
#include "memory/memory_limit.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace sluice {
namespace {

// The first number in a file ("max" and missing files: none).
bool read_number(const std::string& path, size_t* out) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s == "max") return false;
  try {
    *out = static_cast<size_t>(std::stoull(s));
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// "Key:   1234 kB" from a /proc file, in bytes; false if absent.
bool proc_kb(const std::string& path, const std::string& key, size_t* out) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, key.size(), key) != 0) continue;
    std::istringstream is(line.substr(key.size()));
    size_t kb = 0;
    if (!(is >> kb)) return false;
    *out = kb * 1024;
    return true;
  }
  return false;
}

// The tightest limit in `file` from dir up to the hierarchy's root. v1 reports "no limit" as a
// huge number (PAGE_COUNTER_MAX pages), which the min below leaves alone.
void tightest(const std::string& mount, std::string dir, const char* file, size_t* best, std::string* where,
              const char* version) {
  for (;;) {
    size_t v = 0;
    if (read_number(mount + dir + "/" + file, &v) && v < *best) {
      *best = v;
      *where = std::string("cgroup ") + version + " " + (dir.empty() ? "/" : dir);
    }
    if (dir.empty() || dir == "/") return;
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos || slash == 0 ? std::string() : dir.substr(0, slash);
  }
}

}  // namespace

MemoryLimit memory_limit(const std::string& root) {
  MemoryLimit lim;
  lim.bytes = SIZE_MAX;
  size_t avail = 0, rss = 0;
  if (proc_kb(root + "/proc/meminfo", "MemAvailable:", &avail)) {
    proc_kb(root + "/proc/self/status", "VmRSS:", &rss);
    lim.bytes = avail + rss;
    lim.source = "MemAvailable";
  }
  // /proc/self/cgroup: "0::/path" (v2) or "N:controllers:/path" (v1, memory among them).
  std::ifstream in(root + "/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      tightest(root + "/sys/fs/cgroup", path, "memory.max", &lim.bytes, &lim.source, "v2");
    } else {
      std::istringstream cs(controllers);
      for (std::string c; std::getline(cs, c, ',');)
        if (c == "memory")
          tightest(root + "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", &lim.bytes, &lim.source, "v1");
    }
  }
  if (lim.bytes == SIZE_MAX)
    fail("cannot tell how much memory there is (no MemAvailable in /proc/meminfo, no cgroup limit)");
  return lim;
}

size_t auto_expert_cache_bytes(const MemoryLimit& limit, size_t dense_bytes, size_t expert_bytes, size_t min_bytes,
                               std::string* why, size_t extra_bytes) {
  const double gb = 1e9;
  const double usable = 0.9 * double(limit.bytes);
  const double left = usable - double(dense_bytes) - double(kAutoReserve) - double(extra_bytes);
  char buf[320];
  int n = std::snprintf(buf, sizeof buf,
                        "90%% of %.2f GB (%s) - %.2f GB of weights in memory - %.2f GB for the KV cache and buffers",
                        double(limit.bytes) / gb, limit.source.c_str(), double(dense_bytes) / gb,
                        double(kAutoReserve) / gb);
  if (extra_bytes > 0 && n > 0 && static_cast<size_t>(n) < sizeof buf)
    std::snprintf(buf + n, sizeof buf - n, " - %.2f GB the caller holds", double(extra_bytes) / gb);
  if (left < double(min_bytes))
    fail("--expert-cache auto: ", buf, " leaves ", left > 0 ? left / gb : 0.0, " GB, less than two experts (",
         double(min_bytes) / gb, " GB); free some memory or give --expert-cache a size");
  const size_t b = std::min(static_cast<size_t>(left), expert_bytes);
  if (why) *why = buf;
  return b;
}

}  // namespace sluice
