// format/mapped_file: open + fstat + mmap, shared by the format readers.
#include "format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "core/error.h"

namespace sluice {

int open_regular_file(const std::string& path, size_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  *size = static_cast<size_t>(st.st_size);
  return fd;
}

const uint8_t* map_file_readonly(int fd, size_t size, const std::string& path) {
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) fail(path, ": cannot mmap ", size, " bytes: ", std::strerror(errno));
  return static_cast<const uint8_t*>(p);
}

int write_fully(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return ENOSPC;  // no progress: treat as a full device
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

size_t drop_mapped_pages(const uint8_t* base, size_t size, const void* p, size_t n) {
  const auto* q = static_cast<const uint8_t*>(p);
  const std::less_equal<const uint8_t*> le;
  if (!base || !le(base, q) || !le(q + n, base + size)) return 0;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t off = static_cast<size_t>(q - base), lo = (off + page - 1) / page * page, hi = (off + n) / page * page;
  if (hi <= lo) return 0;
  return ::madvise(const_cast<uint8_t*>(base) + lo, hi - lo, MADV_DONTNEED) == 0 ? hi - lo : 0;
}

}  // namespace sluice
