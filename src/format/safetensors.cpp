// format/safetensors: mapping and checking a safetensors file.
#include "format/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "format/mapped_file.h"

namespace sluice {
namespace {

struct DtypeInfo {
  StDtype t;
  std::string_view name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {StDtype::BOOL, "BOOL", 1}, {StDtype::U8, "U8", 1},           {StDtype::I8, "I8", 1},
    {StDtype::U16, "U16", 2},   {StDtype::I16, "I16", 2},         {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2}, {StDtype::U32, "U32", 4},         {StDtype::I32, "I32", 4},
    {StDtype::F32, "F32", 4},   {StDtype::U64, "U64", 8},         {StDtype::I64, "I64", 8},
    {StDtype::F64, "F64", 8},   {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E5M2, "F8_E5M2", 1},
};

// Dimensions beyond 2^40 elements, or element counts beyond 2^50, are not a model.
constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr int64_t kMaxElements = int64_t{1} << 50;

}  // namespace

std::string_view st_dtype_name(StDtype t) { return kDtypes[static_cast<size_t>(t)].name; }
size_t st_dtype_size(StDtype t) { return kDtypes[static_cast<size_t>(t)].size; }
std::optional<StDtype> st_dtype_from_name(std::string_view name) {
  for (const auto& d : kDtypes)
    if (d.name == name) return d.t;
  return std::nullopt;
}
std::optional<DType> st_dtype_to_dtype(StDtype t) {
  switch (t) {
    case StDtype::F32: return DType::F32;
    case StDtype::F16: return DType::F16;
    case StDtype::BF16: return DType::BF16;
    case StDtype::I8: return DType::I8;
    case StDtype::I16: return DType::I16;
    case StDtype::I32: return DType::I32;
    case StDtype::I64: return DType::I64;
    case StDtype::F64: return DType::F64;
    default: return std::nullopt;
  }
}

int64_t StTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = open_regular_file(path, &size_);
  try {
    if (size_ > 0) {
      base_ = map_file_readonly(fd_, size_, path);
      mapped_ = true;
    }
    parse();
  } catch (...) {
    release();
    throw;
  }
}

SafetensorsFile::SafetensorsFile(MemoryTag, const void* data, size_t size, std::string name) : path_(std::move(name)) {
  base_ = static_cast<const uint8_t*>(data);
  size_ = size;
  parse();
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::from_memory(const void* data, size_t size, std::string name) {
  return std::unique_ptr<SafetensorsFile>(new SafetensorsFile(MemoryTag{}, data, size, std::move(name)));
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() {
  if (mapped_ && base_) ::munmap(const_cast<uint8_t*>(base_), size_);
  mapped_ = false;
  base_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::parse() {
  const std::string& f = path_;
  if (size_ < 8) fail(f, ": ", size_, " bytes is too short for a safetensors file (8-byte header length)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base_[i];
  if (n > kMaxHeader) fail(f, ": header length ", n, " at offset 0 is above the limit of ", kMaxHeader, " bytes");
  if (n > size_ - 8) fail(f, ": header length ", n, " at offset 0 runs past the end of the file (", size_, " bytes)");
  if (n < 2) fail(f, ": header length ", n, " at offset 0 is too short for a JSON object");
  const std::string_view text(reinterpret_cast<const char*>(base_ + 8), static_cast<size_t>(n));
  const size_t data_start = 8 + static_cast<size_t>(n), data_size = size_ - data_start;

  // Duplicate names would let one entry hide another: the parser's callback refuses them.
  std::set<std::string> seen;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& key) {
      if (depth == 1 && ev == nlohmann::json::parse_event_t::key && !seen.insert(key.get<std::string>()).second)
        fail(f, ": the header names '", key.get<std::string>(), "' twice");
      return true;
    });
  } catch (const nlohmann::json::parse_error& e) {
    fail(f, ": the header (bytes 8..", data_start, ") is not valid JSON: ", e.what(), " (header byte ", e.byte, ")");
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number too large for a double
    fail(f, ": the header (bytes 8..", data_start, ") is not valid JSON: ", e.what());
  }
  if (!header.is_object()) fail(f, ": the header is JSON but not an object");

  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (entry.is_null()) continue;  // the format's Option: mx.save_safetensors writes null without metadata
      if (!entry.is_object()) fail(f, ": __metadata__ is not an object");
      for (auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail(f, ": __metadata__['", k, "'] is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = f + ": tensor '" + name + "'";
    if (!entry.is_object()) fail(where, ": its entry is not an object");
    for (auto& [k, v] : entry.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets") fail(where, ": unexpected field '", k, "'");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) fail(where, ": dtype missing or not a string");
    const auto dt = st_dtype_from_name(entry["dtype"].get<std::string>());
    if (!dt) fail(where, ": dtype '", entry["dtype"].get<std::string>(), "' is not a safetensors type");
    StTensor t;
    t.name = name;
    t.dtype = *dt;
    if (!entry.contains("shape") || !entry["shape"].is_array()) fail(where, ": shape missing or not an array");
    int64_t count = 1;
    for (size_t i = 0; i < entry["shape"].size(); ++i) {
      const auto& d = entry["shape"][i];
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxDim)
        fail(where, ": shape[", i, "] = ", d.dump(), " is not a dimension (0..2^40)");
      const int64_t v = d.get<int64_t>();
      if (v != 0 && count > kMaxElements / v) fail(where, ": shape ", entry["shape"].dump(), " has too many elements");
      count *= v;
      t.shape.push_back(v);
    }
    const auto& off = entry.contains("data_offsets") ? entry["data_offsets"] : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(where, ": data_offsets is not [begin, end] of non-negative integers");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end) fail(where, ": data_offsets [", begin, ", ", end, "] ends before it begins");
    if (end > data_size)
      fail(where, ": data_offsets [", begin, ", ", end, "] run past the data's ", data_size, " bytes (file offset ",
           data_start + end, " > ", size_, ")");
    const uint64_t want = static_cast<uint64_t>(count) * st_dtype_size(t.dtype);
    if (end - begin != want)
      fail(where, ": shape ", entry["shape"].dump(), " x ", st_dtype_name(t.dtype), " is ", want,
           " bytes but data_offsets [", begin, ", ", end, "] hold ", end - begin);
    t.offset = data_start + static_cast<size_t>(begin);
    t.nbytes = static_cast<size_t>(end - begin);
    t.data = base_ + t.offset;
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const StTensor& a, const StTensor& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
  });
  // In offset order, each tensor must start at or after the end of every earlier one (empty
  // tensors take no bytes and overlap nothing).
  const StTensor* last = nullptr;
  for (const StTensor& b : tensors_) {
    if (b.nbytes == 0) continue;
    if (last && b.offset < last->offset + last->nbytes)
      fail(f, ": tensors '", last->name, "' (bytes ", last->offset, "..", last->offset + last->nbytes, ") and '",
           b.name, "' (bytes ", b.offset, "..", b.offset + b.nbytes, ") overlap");
    if (!last || b.offset + b.nbytes > last->offset + last->nbytes) last = &b;
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

}  // namespace sluice
