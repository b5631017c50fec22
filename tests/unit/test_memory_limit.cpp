// tests/unit/test_memory_limit: the memory limit behind --expert-cache auto, read from fake
// /proc and /sys trees (cgroup v1 and v2, nested limits, no limit), and the budget arithmetic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "memory/memory_limit.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

class FakeRoot {
 public:
  FakeRoot() : root_(fs::temp_directory_path() / ("sluice_memlimit_" + std::to_string(::getpid()))) {
    fs::remove_all(root_);
    write("proc/meminfo", "MemTotal:       24000000 kB\nMemFree:  1000 kB\nMemAvailable:   20000000 kB\n");
    write("proc/self/status", "Name:\tsluice\nVmRSS:\t   1000000 kB\n");
  }
  ~FakeRoot() { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  std::string path() const { return root_.string(); }

 private:
  fs::path root_;
};

constexpr size_t kKiB = 1024, kGiB = size_t{1} << 30;

TEST(MemoryLimit, AvailableMemoryWithoutACgroupLimit) {
  FakeRoot r;
  r.write("proc/self/cgroup", "0::/user.slice/session-1.scope\n");
  r.write("sys/fs/cgroup/user.slice/session-1.scope/memory.max", "max\n");
  const MemoryLimit m = memory_limit(r.path());
  EXPECT_EQ(m.bytes, (20000000 + 1000000) * kKiB) << "MemAvailable plus what this process already holds";
  EXPECT_EQ(m.source, "MemAvailable");
}

TEST(MemoryLimit, CgroupV2TakesTheTightestLimitOnThePath) {
  FakeRoot r;
  r.write("proc/self/cgroup", "0::/a/b\n");
  r.write("sys/fs/cgroup/a/b/memory.max", "max\n");
  r.write("sys/fs/cgroup/a/memory.max", std::to_string(6 * kGiB) + "\n");
  const MemoryLimit m = memory_limit(r.path());
  EXPECT_EQ(m.bytes, 6 * kGiB);
  EXPECT_EQ(m.source, "cgroup v2 /a");
}

TEST(MemoryLimit, CgroupV1MemoryController) {
  FakeRoot r;
  r.write("proc/self/cgroup", "12:pids:/x\n7:cpu,cpuacct:/y\n4:memory:/sluice\n0::/\n");
  r.write("sys/fs/cgroup/memory/sluice/memory.limit_in_bytes", std::to_string(8 * kGiB) + "\n");
  r.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  const MemoryLimit m = memory_limit(r.path());
  EXPECT_EQ(m.bytes, 8 * kGiB);
  EXPECT_EQ(m.source, "cgroup v1 /sluice");
  // A limit above what is available: the available memory is the limit.
  r.write("sys/fs/cgroup/memory/sluice/memory.limit_in_bytes", std::to_string(64 * kGiB) + "\n");
  EXPECT_EQ(memory_limit(r.path()).source, "MemAvailable");
}

TEST(MemoryLimit, NothingToGoByIsAnError) {
  FakeRoot r;
  fs::remove(fs::path(r.path()) / "proc/meminfo");
  EXPECT_THROW(memory_limit(r.path()), Error);
}

TEST(MemoryLimit, AutoBudgetArithmetic) {
  const MemoryLimit lim{8 * kGiB, "cgroup v1 /sluice"};
  std::string why;
  // 90% of 8 GiB, less 1 GiB of dense weights and the reserve.
  const size_t want = static_cast<size_t>(0.9 * double(8 * kGiB)) - kGiB - kAutoReserve;
  const size_t b = auto_expert_cache_bytes(lim, kGiB, 100 * kGiB, 2 * (3 << 20), &why);
  EXPECT_NEAR(double(b), double(want), 1.0);
  EXPECT_NE(why.find("cgroup v1 /sluice"), std::string::npos) << why;
  // Memory the caller holds beside (sluice bench's bandwidth buffer) comes off too, and says so.
  std::string why2;
  const size_t b2 = auto_expert_cache_bytes(lim, kGiB, 100 * kGiB, 2 * (3 << 20), &why2, kGiB);
  EXPECT_NEAR(double(b2), double(want - kGiB), 1.0);
  EXPECT_NE(why2.find("the caller holds"), std::string::npos) << why2;
  // Never more than every expert.
  EXPECT_EQ(auto_expert_cache_bytes(lim, kGiB, 2 * kGiB, 1, nullptr), 2 * kGiB);
  // Too little left: an error that says what to do.
  try {
    auto_expert_cache_bytes(MemoryLimit{2 * kGiB, "cgroup v2 /tight"}, 2 * kGiB, 100 * kGiB, 6 << 20, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("give --expert-cache a size"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sluice
