// format/safetensors: the safetensors reader (Hugging Face and MLX checkpoints), through mmap,
// as hostile-input safe as the GGUF reader. Layout: an 8-byte little-endian header length N,
// N bytes of JSON {"NAME": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}}, then the data; offsets are relative to the data's start.
// Everything is checked before any tensor is handed out, and every error names the file, the
// tensor and the field: the header length against the file, the JSON (parse errors with their
// byte offset, duplicate names), each dtype, each shape (non-negative, element count without
// overflow), shape x dtype size == end - begin, every range inside the data, and no two ranges
// overlapping. Holes between tensors are allowed (the format's writers leave none, the reader
// does not need that).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "format/mapped_file.h"

namespace sluice {

// The element types of the format ("F32", "BF16", "U32", ...).
enum class StDtype : uint8_t { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64, F8_E4M3, F8_E5M2 };
std::string_view st_dtype_name(StDtype t);
size_t st_dtype_size(StDtype t);
std::optional<StDtype> st_dtype_from_name(std::string_view name);
// The engine's type for one (F32, F16, BF16, I8, I16, I32, I64, F64), or nullopt.
std::optional<DType> st_dtype_to_dtype(StDtype t);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;  // outermost first, as written (row-major)
  size_t offset = 0;           // from the start of the file
  size_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; no alignment is promised (the format has none)
  int64_t n_elements() const;
};

class SafetensorsFile {
 public:
  // Maps and checks `path`; throws sluice::Error naming what is wrong.
  explicit SafetensorsFile(const std::string& path);
  // Checks a buffer the caller keeps alive (tests, the fuzzer).
  static std::unique_ptr<SafetensorsFile> from_memory(const void* data, size_t size, std::string name);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<StTensor>& tensors() const { return tensors_; }  // in file order (by offset)
  const StTensor* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t file_size() const { return size_; }

  // The header may not exceed this (the format's own reader takes 100 MB).
  static constexpr size_t kMaxHeader = size_t{100} << 20;
  // A tensor of this file that will not be read again (converted at load): its whole pages
  // leave this process's memory (still readable: they come back from the file). Nothing for a
  // tensor of another file or a file in memory (from_memory). Returns the bytes given back.
  size_t drop_pages(const StTensor& t) const { return drop_range(t.data, t.nbytes); }
  // The same for bytes [p, p + n) of a tensor (the rows of one expert).
  size_t drop_range(const void* p, size_t n) const { return mapped_ ? drop_mapped_pages(base_, size_, p, n) : 0; }

 private:
  struct MemoryTag {};
  SafetensorsFile(MemoryTag, const void* data, size_t size, std::string name);
  void parse();
  void release();

  std::string path_;
  int fd_ = -1;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::vector<StTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace sluice

namespace sluice {

// The writer (`sluice synth --format mlx`): every tensor declared first (name, dtype, shape, in
// file order), then begin() writes the header with the offsets, write() appends each tensor's
// bytes in declaration order (in as many pieces as the caller likes), and finish() checks that
// every byte was written and closes the file. A file not finished is removed (a partial
// safetensors is not a valid file). Errors name the file and the tensor.
class SafetensorsWriter {
 public:
  ~SafetensorsWriter();
  void add(const std::string& name, StDtype dtype, std::vector<int64_t> shape);
  void begin(const std::string& path, const std::map<std::string, std::string>& metadata = {});
  void write(const void* data, size_t n);  // the next bytes of the tensor being written
  void finish();

 private:
  struct Entry {
    std::string name;
    StDtype dtype;
    std::vector<int64_t> shape;
    size_t nbytes;
  };
  void put(const void* data, size_t n);
  std::vector<Entry> entries_;
  std::string path_;
  int fd_ = -1;
  size_t total_ = 0, written_ = 0;  // data bytes declared / written
};

}  // namespace sluice
