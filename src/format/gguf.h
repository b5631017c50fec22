// format/gguf: GGUF v2/v3 reader (mmap, every field bounds-checked) and writer.
// Spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md. The file is hostile input:
// every count, string length, dimension, offset and size is checked against the file size
// (overflow-safe) before use, and errors name the file, the field and its byte offset.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace sluice {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32

// GGUF metadata value types (gguf_type ids as stored in the file).
enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
std::string_view gguf_type_name(GgufType t);

struct GgufValue;
// An array value: element type plus the elements (nested arrays allowed).
struct GgufArray {
  GgufType elem_type = GgufType::UINT8;
  std::vector<GgufValue> items;
};
struct GgufValue {
  GgufType type = GgufType::UINT8;
  std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
               std::shared_ptr<GgufArray>, uint64_t, int64_t, double>
      v;
  // Human-readable rendering for `sluice inspect` (arrays shortened past `max_items`).
  std::string to_string(size_t max_items = 8) const;
};

class GgufFile {
 public:
  // How the bytes reach memory. map: a read-only file mapping (pages come and go with the
  // page cache: what larger-than-memory models need). read: the whole file read into private
  // anonymous memory with transparent huge pages requested, like llama.cpp's --no-mmap:
  // no page faults during inference and 2 MiB TLB entries (decode of a 12-layer
  // qwen3-30b-a3b Q4_K_M on 2 threads: 44 vs 35-38 tok/s), at the cost of reading it all
  // up front and of RSS = file size.
  enum class Load { map, read };
  // Bytes done and total, at most every 256 MiB while reading (Load::read only).
  using Progress = std::function<void(size_t done, size_t total)>;

  // Maps (or reads) and parses `path`. Throws sluice::Error naming the file, field and offset
  // on any malformed content, and the offset of a failed read. The memory lives as long as
  // the GgufFile.
  explicit GgufFile(const std::string& path, Load load = Load::map, const Progress& progress = {});
  // Parses a GGUF image already in memory (fuzzers, tests). Nothing is copied: `data` must
  // outlive the returned file. `name` stands in for the path in error messages.
  static std::unique_ptr<GgufFile> from_memory(const void* data, size_t size, std::string name);
  // A file made from parts, for model formats that are not GGUF (format/hf_folder.h): GGUF
  // metadata and tensor views whose data lives in memory that `keepalive` owns (mappings of
  // other files, converted small tensors). `name` stands in for the path. Names must be unique.
  // `converted`: the parts of that memory no file keeps (weights converted at load), which
  // writable_bytes may hand out to be rewritten in place.
  static std::unique_ptr<GgufFile> synthetic(std::string name, std::vector<std::pair<std::string, GgufValue>> kv,
                                             std::vector<TensorView> tensors, std::shared_ptr<void> keepalive,
                                             std::vector<std::span<uint8_t>> converted = {});
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }  // start of the tensor data section
  size_t file_size() const { return size_; }
  const uint8_t* base() const { return base_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;

  // Typed getters check the stored type exactly (as llama.cpp does) and throw an Error
  // naming the file, the key, the expected and the actual type; a missing key throws
  // "missing key" with its name. The *_or forms return `def` when the key is absent
  // (a present key of the wrong type still throws).
  uint32_t get_u32(std::string_view key) const;
  uint32_t get_u32_or(std::string_view key, uint32_t def) const;
  int32_t get_i32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  float get_f32_or(std::string_view key, float def) const;
  bool get_bool(std::string_view key) const;
  bool get_bool_or(std::string_view key, bool def) const;
  std::string get_string(std::string_view key) const;
  std::string get_string_or(std::string_view key, std::string_view def) const;
  // Arrays: element type checked exactly (i32 array accepts INT32 only, etc.).
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::vector<int32_t> get_i32_array(std::string_view key) const;
  // A key that real files store either as one u32/i32 or as an array with one value per
  // layer (e.g. llama.feed_forward_length, head_count_kv). Returns n_layer values.
  std::vector<uint32_t> get_u32_per_layer(std::string_view key, size_t n_layer) const;

  // Tensors in file order; data points into the mapping, already bounds-checked.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find_tensor(std::string_view name) const;
  // Points tensor `name` at other bytes of the same shape (type `type`, nbytes long) that
  // `owner` keeps alive: how a LoRA adapter's merged weights (format/lora.h) take the place of
  // the file's. Call before anything binds the tensor. Throws when there is no such tensor or
  // nbytes does not fit the shape.
  void replace_tensor(std::string_view name, DType type, const void* data, size_t nbytes, std::shared_ptr<void> owner);
  // Adds a LoRA adapter's term to tensor `name` (tensor.lora: Backend::matmul applies it at run
  // time), its factors' bytes kept alive by owner. Call before anything binds the tensor.
  void add_lora(std::string_view name, const LoraTerm& term, std::shared_ptr<void> owner);
  // The same for expert `expert` of stacked experts `name` ([in, out, n_expert]; the term fits
  // one expert's [in, out]): tensor.expert_lora, which slice2d hands each expert's view.
  void add_expert_lora(std::string_view name, int64_t expert, const LoraTerm& term, std::shared_ptr<void> owner);
  // Gives tensor `name` an interleaved copy of its rows (TensorView::rows16, quant/rows16.h)
  // that `owner` keeps alive. Call before anything binds or slices the tensor. rows16 == the
  // tensor's data: its rows were interleaved in place (writable_bytes), and are gone
  // (TensorView::rows_interleaved).
  void set_rows16(std::string_view name, const void* rows16, std::shared_ptr<void> owner);
  // Tensor t's bytes, writable, where they lie in converted memory (synthetic()) that no other
  // tensor shares; else null (a file's pages, a mapped file's tensor, an alias).
  uint8_t* writable_bytes(const TensorView& t) const;
  // The bytes [data, data + n) of this file will seldom if ever be read again (an interleaved
  // copy took their place): gives back the memory of the whole pages inside them, which stay
  // readable, from the file. Load::read maps the file's pages over its copy (the same bytes),
  // Load::map drops them from the mapping (the page cache keeps them or reads them again).
  // Returns the bytes given back: 0 for memory-backed files, ranges outside the file, or a file
  // whose size changed since it was read.
  size_t release_pages(const void* data, size_t n);
  // Throws "missing tensor NAME in FILE".
  const TensorView& tensor(std::string_view name) const;
  // While a model binds its tensors (single-threaded, at load): track_lookups() starts noting
  // which tensors find_tensor() returns; untracked_tensors() stops and names the others, the
  // tensors no part of the model reads (a strict load refuses them).
  void track_lookups() const;
  std::vector<std::string> untracked_tensors() const;

 private:
  struct MemoryTag {};
  GgufFile(MemoryTag, const void* data, size_t size, std::string name, bool parse_now = true);
  void parse();    // fills everything below from base_/size_; throws Error
  void release();  // unmaps and closes (destructor, and a constructor that throws)
  friend class GgufParser;

  std::string path_;
  bool mapped_ = false;  // base_ is our mmap (false: caller-owned memory, or empty file)
  bool read_ = false;    // base_ is anonymous memory the file was read into (Load::read)
  int fd_ = -1;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  std::shared_ptr<void> keepalive_;                    // synthetic(): what owns the tensors' memory
  std::vector<std::span<uint8_t>> converted_;          // synthetic(): the part of it no file keeps
  std::vector<std::shared_ptr<void>> replaced_;        // replace_tensor() and add_lora(): the new bytes' owners
  std::map<std::string, std::vector<LoraTerm>> lora_;  // add_lora(), by tensor (map nodes: stable addresses)
  std::map<std::string, std::vector<std::vector<LoraTerm>>> expert_lora_;  // add_expert_lora(), likewise
  mutable std::vector<uint8_t> looked_up_;                                 // track_lookups(): per tensor, found since
};

// Writes GGUF v3. Two ways to use it:
//  - small files: set metadata, add_tensor(name, type, ne, bytes), write(path);
//  - large files (sluice synth): set metadata, declare every tensor with add_tensor_info,
//    then begin(path) writes the header and each write_tensor_data(name, bytes) streams one
//    tensor's data in declaration order (padding handled), and finish() closes the file.
class GgufWriter {
 public:
  GgufWriter();
  ~GgufWriter();
  void set_alignment(size_t a);  // also writes general.alignment
  void set(std::string_view key, GgufValue value);
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_f32(std::string_view key, float v);
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string_view v);
  void set_string_array(std::string_view key, const std::vector<std::string>& v);
  void set_f32_array(std::string_view key, const std::vector<float>& v);
  void set_i32_array(std::string_view key, const std::vector<int32_t>& v);
  // ne in ggml order (ne[0] contiguous), n_dims = ne.size().
  void add_tensor_info(std::string_view name, DType type, const std::vector<int64_t>& ne);
  void add_tensor(std::string_view name, DType type, const std::vector<int64_t>& ne, const void* data, size_t nbytes);
  void write(const std::string& path);  // for add_tensor users
  void begin(const std::string& path);
  void write_tensor_data(std::string_view name, const void* data, size_t nbytes);
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
