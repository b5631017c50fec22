// tests/unit/test_expert_io: the I/O engines read the right bytes with many reads in flight
// (io_uring and pread threads, O_DIRECT into aligned buffers), and the fault injector turns
// completions into EIO, short reads and end-of-file exactly as planned.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "core/error.h"
#include "memory/io_engine.h"
#include "memory/io_fault.h"

namespace sluice {
namespace {

constexpr size_t kBlock = 4096;

struct TempFile {
  std::string path;
  std::vector<uint8_t> bytes;
  explicit TempFile(size_t n) {
    path =
        (std::filesystem::temp_directory_path() / ("sluice_io_test_" + std::to_string(::getpid()) + ".bin")).string();
    std::mt19937 rng(1);
    bytes.resize(n);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
  }
  ~TempFile() { std::filesystem::remove(path); }
};

struct AlignedBuf {
  uint8_t* p;
  size_t n;
  explicit AlignedBuf(size_t bytes) : n(bytes) {
    p = static_cast<uint8_t*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  }
  ~AlignedBuf() { ::munmap(p, n); }
};

int open_direct(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // a filesystem without O_DIRECT
  return fd;
}

// 32 aligned reads in flight at once; every byte checked against the file.
void check_engine(IoEngine& io) {
  TempFile f(64 * kBlock + 1000);  // ends mid-block: the last read comes back short
  const int fd = open_direct(f.path);
  ASSERT_GE(fd, 0);
  const int n = 32;
  AlignedBuf buf(n * 4 * kBlock);
  std::vector<IoRead> reads;
  for (int i = 0; i < n; ++i) {
    const uint64_t off = static_cast<uint64_t>((i * 7) % 62) * kBlock;
    reads.push_back({fd, off, (i % 3 + 1) * kBlock, buf.p + i * 4 * kBlock, static_cast<uint64_t>(100 + i)});
  }
  io.submit(reads);
  EXPECT_EQ(io.in_flight(), reads.size());
  std::vector<IoCompletion> done(8);
  size_t got = 0;
  while (got < reads.size()) {
    const size_t k = io.reap(done, 1);
    ASSERT_GT(k, 0u);
    for (size_t j = 0; j < k; ++j) {
      const int i = static_cast<int>(done[j].tag) - 100;
      ASSERT_GE(i, 0);
      ASSERT_LT(i, n);
      ASSERT_EQ(done[j].result, static_cast<int64_t>(reads[i].len)) << "read " << i;
      EXPECT_EQ(std::memcmp(reads[i].buf, f.bytes.data() + reads[i].offset, reads[i].len), 0) << "read " << i;
    }
    got += k;
  }
  EXPECT_EQ(io.in_flight(), 0u);
  EXPECT_EQ(io.reap(done, 0), 0u);  // nothing left, and no wait

  // At the end of the file the read is short: 1000 of 4096 bytes.
  IoRead tail{fd, 64 * kBlock, kBlock, buf.p, 7};
  io.submit({&tail, 1});
  ASSERT_EQ(io.reap(done, 1), 1u);
  EXPECT_EQ(done[0].result, 1000);
  EXPECT_EQ(std::memcmp(buf.p, f.bytes.data() + 64 * kBlock, 1000), 0);
  ::close(fd);
}

TEST(ExpertIo, UringReadsManyInFlight) {
  std::unique_ptr<IoEngine> io;
  try {
    io = make_io_uring(64);
  } catch (const Error& e) {
    GTEST_SKIP() << "io_uring unavailable here: " << e.what();
  }
  check_engine(*io);
}

TEST(ExpertIo, PreadThreadsReadManyInFlight) { check_engine(*make_io_pread(4)); }

TEST(ExpertIo, UnknownEngineIsAnError) { EXPECT_THROW(make_io_engine("aio"), Error); }

TEST(ExpertIo, FaultInjectorFailsExactlyThePlannedReads) {
  TempFile f(16 * kBlock);
  const int fd = open_direct(f.path);
  ASSERT_GE(fd, 0);
  AlignedBuf buf(8 * kBlock);
  auto run = [&](IoFaultPlan plan) {
    auto io = make_io_fault(make_io_pread(2), plan);
    std::vector<IoRead> reads;
    for (int i = 0; i < 8; ++i)
      reads.push_back({fd, static_cast<uint64_t>(i) * 2 * kBlock, kBlock, buf.p + i * kBlock, uint64_t(i)});
    io->submit(reads);
    std::vector<int64_t> res(8, 12345);
    std::vector<IoCompletion> done(8);
    size_t got = 0;
    while (got < 8) {
      const size_t k = io->reap(done, 1);
      for (size_t j = 0; j < k; ++j) res[done[j].tag] = done[j].result;
      got += k;
    }
    return res;
  };
  IoFaultPlan eio;
  eio.kind = IoFaultKind::eio;
  eio.skip = 2;
  eio.count = 3;
  auto r = run(eio);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(r[i], i >= 2 && i < 5 ? -EIO : int64_t(kBlock)) << i;

  IoFaultPlan sh;
  sh.kind = IoFaultKind::short_read;
  sh.skip = 7;
  r = run(sh);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(r[i], i == 7 ? int64_t(kBlock / 2) : int64_t(kBlock)) << i;

  IoFaultPlan tr;
  tr.kind = IoFaultKind::truncated;
  tr.truncate_at = 5 * kBlock + 100;  // read 2 starts at 4 blocks: 1 block + 100 bytes left
  r = run(tr);
  for (int i = 0; i < 8; ++i) {
    const int64_t want = i < 2 ? int64_t(kBlock) : i == 2 ? int64_t(kBlock) : 0;
    EXPECT_EQ(r[i], want) << i;
  }
  tr.truncate_at = 4 * kBlock + 100;
  r = run(tr);
  EXPECT_EQ(r[2], 100);
  ::close(fd);
}

}  // namespace
}  // namespace sluice
