// format/mapped_file: opening a model file and mapping it read-only, the same way for every
// format reader (gguf.cpp, safetensors.cpp), with errors that name the path; and the one
// write-everything loop of the format writers (gguf_writer.cpp, safetensors_writer.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice {

// Opens `path` read-only (close-on-exec) and checks it is a regular file; returns the fd and
// sets *size. Throws sluice::Error naming the path and the system's reason.
int open_regular_file(const std::string& path, size_t* size);
// Maps `size` bytes of `fd` read-only and private (the file is never written through the
// mapping). A file truncated by another process while mapped raises SIGBUS on a read past its
// new end; nothing in-process can guard against that. Throws sluice::Error naming the path.
const uint8_t* map_file_readonly(int fd, size_t size, const std::string& path);
// Gives back the pages wholly inside [p, p + n) of such a mapping [base, base + size): they leave
// this process's memory and come back from the file if read again. Nothing where the range is
// not inside the mapping. Returns the bytes given back.
size_t drop_mapped_pages(const uint8_t* base, size_t size, const void* p, size_t n);
// Writes all n bytes to fd, looping over partial writes (Linux caps one at ~2 GiB) and EINTR.
// Returns 0, or the errno of the failure (ENOSPC for a write that makes no progress).
int write_fully(int fd, const void* data, size_t n);

}  // namespace sluice
