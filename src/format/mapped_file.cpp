// format/mapped_file: open + fstat + mmap, shared by the format readers.
#include "format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace sluice
