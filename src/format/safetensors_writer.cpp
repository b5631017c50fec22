// format/safetensors_writer: SafetensorsWriter (see safetensors.h): the header as the format's
// writers lay it out (8-byte length, JSON padded with spaces to a multiple of 8 so the data
// starts aligned), then the data straight to the file descriptor.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/mapped_file.h"
#include "format/safetensors.h"

namespace sluice {

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

void SafetensorsWriter::add(const std::string& name, StDtype dtype, std::vector<int64_t> shape) {
  if (fd_ >= 0) fail("SafetensorsWriter: tensor '", name, "' added after begin(", path_, ")");
  size_t n = st_dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) fail("SafetensorsWriter: tensor '", name, "' has a negative dimension");
    n *= static_cast<size_t>(d);
  }
  for (const Entry& e : entries_)
    if (e.name == name) fail("SafetensorsWriter: tensor '", name, "' added twice");
  entries_.push_back({name, dtype, std::move(shape), n});
  total_ += n;
}

void SafetensorsWriter::put(const void* data, size_t n) {
  if (const int err = write_fully(fd_, data, n)) fail(path_, ": write failed: ", std::strerror(err));
}

void SafetensorsWriter::begin(const std::string& path, const std::map<std::string, std::string>& metadata) {
  if (fd_ >= 0) fail("SafetensorsWriter: begin(", path, ") twice");
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  size_t off = 0;
  for (const Entry& e : entries_) {
    h[e.name] = {{"dtype", std::string(st_dtype_name(e.dtype))},
                 {"shape", e.shape},
                 {"data_offsets", {off, off + e.nbytes}}};
    off += e.nbytes;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path, ": cannot create: ", std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  put(len, 8);
  put(text.data(), text.size());
}

void SafetensorsWriter::write(const void* data, size_t n) {
  if (fd_ < 0) fail("SafetensorsWriter: write() without begin()");
  if (written_ + n > total_) fail(path_, ": ", written_ + n - total_, " bytes past the declared tensors");
  put(data, n);
  written_ += n;
}

void SafetensorsWriter::finish() {
  if (fd_ < 0) fail("SafetensorsWriter: finish() without begin()");
  if (written_ != total_) {
    size_t off = 0;
    std::string next;
    for (const Entry& e : entries_) {
      if (off + e.nbytes > written_) {
        next = e.name;
        break;
      }
      off += e.nbytes;
    }
    fail(path_, ": finish(): ", written_, " of ", total_, " data bytes written (tensor '", next, "' incomplete)");
  }
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(path_.c_str());
    fail(path_, ": close failed: ", std::strerror(errno));
  }
  fd_ = -1;
}

}  // namespace sluice
