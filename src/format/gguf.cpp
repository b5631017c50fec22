// format/gguf: the GGUF reader (mmap + bounds-checked parse), typed metadata getters and
// value rendering. The writer lives in gguf_writer.cpp.
//
// Layout (v2/v3, all little-endian; v1 used 32-bit counts and is rejected):
//   u32 magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
//   kv_count × { string key, u32 type, value },
//   tensor_count × { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset },
//   padding to general.alignment (default 32), then the data section; each tensor's offset is
//   relative to the data section start and a multiple of the alignment.
//   string = u64 length + bytes (no NUL); array = u32 elem type + u64 count + items.
//
// Invariant kept by the parser: no read, allocation or pointer is formed before the bytes it
// needs are known to lie inside the file, and every size computation is overflow-checked.
#include "format/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <functional>
#include <limits>

#include "core/error.h"
#include "format/mapped_file.h"

namespace sluice {

static_assert(std::endian::native == std::endian::little, "GGUF is read by memcpy; big-endian hosts need byte swaps");

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "uint8";
    case GgufType::INT8: return "int8";
    case GgufType::UINT16: return "uint16";
    case GgufType::INT16: return "int16";
    case GgufType::UINT32: return "uint32";
    case GgufType::INT32: return "int32";
    case GgufType::FLOAT32: return "float32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::UINT64: return "uint64";
    case GgufType::INT64: return "int64";
    case GgufType::FLOAT64: return "float64";
  }
  return "unknown";
}

namespace {

constexpr int kMaxArrayDepth = 16;                         // nested arrays: real files use 1 level; bounds recursion
constexpr size_t kMinKvBytes = 8 + 4 + 1;                  // empty key, type, smallest value
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, n_dims, 1 dim, type, offset
// Counts from the file are only trusted for reserve() up to this; beyond it containers grow
// as entries are actually read, so a corrupt count in a 10 GB file cannot allocate gigabytes.
constexpr uint64_t kMaxTrustedReserve = 1 << 16;
// Every metadata value becomes a ~48-byte GgufValue, so a multi-GB file of tiny array items
// could expand ~50x in memory. Real tokenizers hold < 1M items per array (262k vocab, ~500k
// merges); 32M items in total (~1.5 GB) is far above any real file and bounds the expansion.
constexpr uint64_t kMaxMetadataItems = uint64_t{32} << 20;
// Same reasoning for tensors (~100 bytes each in memory): the largest real files (per-expert
// tensors of big MoE models) have tens of thousands.
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;

// Keys and names come from the file: escape them so an error message stays one readable line.
std::string printable(std::string_view s, size_t max_len = 80) {
  std::string out;
  static const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > max_len) out += str_cat("...(", s.size(), " bytes)");
  return out;
}

// Smallest encoded size of one value of type t (as an array item: arrays carry no type tag).
size_t min_item_bytes(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL: return 1;
    case GgufType::UINT16:
    case GgufType::INT16: return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32: return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64: return 8;
    case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 4 + 8;
  }
  return 1;
}

bool valid_type_id(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::FLOAT64); }

std::string type_desc(const GgufValue& v) {
  if (v.type != GgufType::ARRAY) return std::string(gguf_type_name(v.type));
  const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v.v);
  if (!a || !*a) return "array";
  return str_cat("array of ", gguf_type_name((*a)->elem_type));
}

template <class T>
void append_number(std::string& out, T x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  out.append(buf, r.ptr);
}

void append_value(std::string& out, const GgufValue& v, size_t max_items) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          out += x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          out += '"';
          for (char ch : x) {
            unsigned char c = static_cast<unsigned char>(ch);
            if (c == '"' || c == '\\') {
              out += '\\';
              out += ch;
            } else if (c == '\n')
              out += "\\n";
            else if (c == '\t')
              out += "\\t";
            else if (c == '\r')
              out += "\\r";
            else if (c < 0x20 || c == 0x7f)
              out += str_cat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
            else
              out += ch;  // UTF-8 passes through unchanged
          }
          out += '"';
        } else if constexpr (std::is_same_v<T, std::shared_ptr<GgufArray>>) {
          if (!x) {
            out += "[]";
            return;
          }
          out += '[';
          size_t n = x->items.size();
          for (size_t i = 0; i < n && i < max_items; ++i) {
            if (i) out += ", ";
            append_value(out, x->items[i], max_items);
          }
          if (n > max_items) out += str_cat(", ... (", n, " items)");
          out += ']';
        } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
          append_number(out, static_cast<int>(x));  // not as a character
        } else {
          append_number(out, x);
        }
      },
      v.v);
}

}  // namespace

std::string GgufValue::to_string(size_t max_items) const {
  std::string out;
  append_value(out, *this, max_items);
  return out;
}

// ---------------------------------------------------------------------------------------
// The parser: a cursor over [base, base+size) plus the context used to name fields in errors.

class GgufParser {
 public:
  explicit GgufParser(GgufFile& f) : f_(f), base_(f.base_), size_(f.size_) {}

  void run();

 private:
  GgufFile& f_;
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
  // What is being read, for error messages: "metadata key 'x'" and the index path inside
  // nested arrays. Built into a string only when an error is thrown.
  std::string ctx_;
  std::vector<uint64_t> idx_;
  uint64_t n_items_ = 0;  // metadata values read so far, against kMaxMetadataItems

  size_t remaining() const { return size_ - pos_; }

  std::string where() const {
    std::string s = ctx_;
    for (uint64_t i : idx_) s += str_cat(" item ", i);
    return s;
  }

  template <class... A>
  [[noreturn]] void fail_at(size_t off, const A&... a) const {
    fail(f_.path_, ": ", a..., " (at byte ", off, ")");
  }

  void need(size_t n, std::string_view field) const {
    if (n > remaining())
      fail_at(pos_, where(), field, ": file truncated, needs ", n, " bytes but only ", remaining(),
              " remain (file size ", size_, ")");
  }

  template <class T>
  T read(std::string_view field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view field) {
    size_t at = pos_;
    uint64_t n = read<uint64_t>(str_cat(field, " string length"));
    if (n > remaining())
      fail_at(at, where(), field, " string length ", n, " exceeds the ", remaining(), " bytes left in the file (size ",
              size_, ")");
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

  GgufType read_type(std::string_view field) {
    size_t at = pos_;
    uint32_t t = read<uint32_t>(field);
    if (!valid_type_id(t)) fail_at(at, where(), field, " ", t, " is not a GGUF value type (0..12)");
    return static_cast<GgufType>(t);
  }

  GgufValue read_value(GgufType t, int depth);
  void read_header(uint64_t& n_tensors, uint64_t& n_kv);
  void read_metadata(uint64_t n_kv);
  void read_tensor_infos(uint64_t n_tensors);
};

GgufValue GgufParser::read_value(GgufType t, int depth) {
  GgufValue out;
  out.type = t;
  switch (t) {
    case GgufType::UINT8: out.v = read<uint8_t>(" value"); break;
    case GgufType::INT8: out.v = read<int8_t>(" value"); break;
    case GgufType::UINT16: out.v = read<uint16_t>(" value"); break;
    case GgufType::INT16: out.v = read<int16_t>(" value"); break;
    case GgufType::UINT32: out.v = read<uint32_t>(" value"); break;
    case GgufType::INT32: out.v = read<int32_t>(" value"); break;
    case GgufType::FLOAT32: out.v = read<float>(" value"); break;
    case GgufType::UINT64: out.v = read<uint64_t>(" value"); break;
    case GgufType::INT64: out.v = read<int64_t>(" value"); break;
    case GgufType::FLOAT64: out.v = read<double>(" value"); break;
    case GgufType::BOOL: {
      size_t at = pos_;
      uint8_t b = read<uint8_t>(" value");
      if (b > 1) fail_at(at, where(), " bool value ", static_cast<int>(b), " is neither 0 nor 1");
      out.v = b != 0;
      break;
    }
    case GgufType::STRING: out.v = read_string(""); break;
    case GgufType::ARRAY: {
      size_t at = pos_;
      if (depth >= kMaxArrayDepth) fail_at(at, where(), " arrays nested deeper than ", kMaxArrayDepth, " levels");
      auto arr = std::make_shared<GgufArray>();
      arr->elem_type = read_type(" array element type");
      size_t count_at = pos_;
      uint64_t n = read<uint64_t>(" array length");
      // Each item takes at least min_item_bytes: a count the rest of the file cannot hold is
      // rejected before reserving anything.
      size_t min_bytes = min_item_bytes(arr->elem_type);
      if (n > remaining() / min_bytes)
        fail_at(count_at, where(), " array length ", n, " of ", gguf_type_name(arr->elem_type), " cannot fit in the ",
                remaining(), " bytes left in the file (size ", size_, ")");
      if (n > kMaxMetadataItems - n_items_)
        fail_at(count_at, where(), " array length ", n, " exceeds the limit of ", kMaxMetadataItems,
                " metadata values per file (", n_items_, " read so far)");
      n_items_ += n;
      arr->items.reserve(static_cast<size_t>(std::min(n, kMaxTrustedReserve)));
      idx_.push_back(0);
      for (uint64_t i = 0; i < n; ++i) {
        idx_.back() = i;
        arr->items.push_back(read_value(arr->elem_type, depth + 1));
      }
      idx_.pop_back();
      out.v = std::move(arr);
      break;
    }
  }
  return out;
}

void GgufParser::read_header(uint64_t& n_tensors, uint64_t& n_kv) {
  ctx_.clear();
  uint32_t magic = read<uint32_t>("magic");
  if (magic != kGgufMagic)
    fail_at(0, "bad magic: expected \"GGUF\" but found \"",
            printable(std::string_view(reinterpret_cast<const char*>(base_), 4)), "\" (not a GGUF file)");
  size_t at = pos_;
  uint32_t version = read<uint32_t>("version");
  if (version != 2 && version != 3)
    fail_at(at, "unsupported GGUF version ", version, " (supported: 2 and 3",
            version == 1 ? "; version 1 used 32-bit counts, re-convert the model" : "", ")");
  f_.version_ = version;
  at = pos_;
  n_tensors = read<uint64_t>("tensor count");
  if (n_tensors > (size_ - pos_) / kMinTensorInfoBytes)
    fail_at(at, "tensor count ", n_tensors, " cannot fit in the ", size_ - pos_, " bytes left in the file (size ",
            size_, "; each tensor info takes at least ", kMinTensorInfoBytes, " bytes)");
  if (n_tensors > kMaxTensors) fail_at(at, "tensor count ", n_tensors, " exceeds the limit of ", kMaxTensors);
  at = pos_;
  n_kv = read<uint64_t>("metadata kv count");
  if (n_kv > remaining() / kMinKvBytes)
    fail_at(at, "metadata kv count ", n_kv, " cannot fit in the ", remaining(), " bytes left in the file (size ", size_,
            "; each kv takes at least ", kMinKvBytes, " bytes)");
  if (n_kv > kMaxMetadataItems) fail_at(at, "metadata kv count ", n_kv, " exceeds the limit of ", kMaxMetadataItems);
  n_items_ = n_kv;
}

void GgufParser::read_metadata(uint64_t n_kv) {
  std::vector<size_t> value_at;  // byte offset of each value, for the general.alignment errors
  f_.kv_.reserve(static_cast<size_t>(std::min(n_kv, kMaxTrustedReserve)));
  f_.kv_index_.reserve(static_cast<size_t>(std::min(n_kv, kMaxTrustedReserve)));
  for (uint64_t i = 0; i < n_kv; ++i) {
    size_t key_at = pos_;
    ctx_ = str_cat("metadata kv ", i, " key");
    std::string key = read_string("");
    ctx_ = str_cat("metadata key '", printable(key), "'");
    if (auto it = f_.kv_index_.find(key); it != f_.kv_index_.end())
      fail_at(key_at, ctx_, " is duplicated (kv ", it->second, " and kv ", i, ")");
    GgufType t = read_type(" value type");
    value_at.push_back(pos_);
    GgufValue v = read_value(t, 0);
    f_.kv_index_.emplace(key, f_.kv_.size());
    f_.kv_.emplace_back(std::move(key), std::move(v));
  }
  ctx_.clear();

  if (auto it = f_.kv_index_.find("general.alignment"); it != f_.kv_index_.end()) {
    const GgufValue& v = f_.kv_[it->second].second;
    size_t at = value_at[it->second];
    if (v.type != GgufType::UINT32)
      fail_at(at, "metadata key 'general.alignment' has type ", type_desc(v), ", expected uint32");
    uint32_t a = std::get<uint32_t>(v.v);
    if (a == 0 || !std::has_single_bit(a))
      fail_at(at, "metadata key 'general.alignment' value ", a, " is not a nonzero power of two");
    f_.alignment_ = a;
  }
}

void GgufParser::read_tensor_infos(uint64_t n_tensors) {
  struct Pending {
    size_t offset_at;  // byte of the offset field, named in bounds errors
    uint64_t offset;
  };
  std::vector<Pending> pending;
  size_t reserve = static_cast<size_t>(std::min(n_tensors, kMaxTrustedReserve));
  pending.reserve(reserve);
  f_.tensors_.reserve(reserve);
  f_.tensor_index_.reserve(reserve);

  for (uint64_t i = 0; i < n_tensors; ++i) {
    size_t name_at = pos_;
    ctx_ = str_cat("tensor ", i);
    std::string name = read_string(" name");
    ctx_ = str_cat("tensor ", i, " '", printable(name), "'");
    if (auto it = f_.tensor_index_.find(name); it != f_.tensor_index_.end())
      fail_at(name_at, ctx_, " name is duplicated (also tensor ", it->second, ")");

    size_t at = pos_;
    uint32_t n_dims = read<uint32_t>(" n_dims");
    if (n_dims < 1 || n_dims > 4) fail_at(at, ctx_, " n_dims ", n_dims, " is outside 1..4");
    TensorView tv;
    tv.n_dims = static_cast<int>(n_dims);
    size_t ne_at[4] = {0, 0, 0, 0};
    for (uint32_t d = 0; d < n_dims; ++d) {
      ne_at[d] = pos_;
      uint64_t ne = read<uint64_t>(str_cat(" ne[", d, "]"));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail_at(ne_at[d], ctx_, " ne[", d, "] = ", static_cast<int64_t>(ne), " is negative");
      tv.ne[d] = static_cast<int64_t>(ne);
    }
    size_t type_at = pos_;
    uint32_t type_id = read<uint32_t>(" type");
    auto traits = dtype_traits_of(type_id);
    if (!traits || !dtype_is_ggml(traits->type))
      fail_at(type_at, ctx_, " type id ", type_id, " is not a known ggml type");
    tv.type = traits->type;
    size_t offset_at = pos_;
    uint64_t offset = read<uint64_t>(" offset");

    if (tv.ne[0] % traits->block_size != 0)
      fail_at(ne_at[0], ctx_, " ne[0] = ", tv.ne[0], " is not a multiple of the block size ", traits->block_size,
              " of type ", traits->name);
    // Element count must fit in int64 (TensorView::n_elements), and the byte size in size_t.
    int64_t n_el = tv.ne[0];
    for (uint32_t d = 1; d < n_dims; ++d)
      if (__builtin_mul_overflow(n_el, tv.ne[d], &n_el))
        fail_at(ne_at[d], ctx_, " dimensions [", tv.ne[0], ", ", tv.ne[1], ", ", tv.ne[2], ", ", tv.ne[3],
                "] overflow: the element count does not fit in 64 bits");
    size_t nbytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(tv.ne[0] / traits->block_size), traits->block_bytes, &nbytes) ||
        __builtin_mul_overflow(nbytes, static_cast<uint64_t>(tv.ne[1]), &nbytes) ||
        __builtin_mul_overflow(nbytes, static_cast<uint64_t>(tv.ne[2]), &nbytes) ||
        __builtin_mul_overflow(nbytes, static_cast<uint64_t>(tv.ne[3]), &nbytes))
      fail_at(ne_at[0], ctx_, " dimensions [", tv.ne[0], ", ", tv.ne[1], ", ", tv.ne[2], ", ", tv.ne[3], "] of type ",
              traits->name, " overflow: the byte size does not fit in 64 bits");
    tv.nbytes = nbytes;
    if (offset % f_.alignment_ != 0)
      fail_at(offset_at, ctx_, " offset ", offset, " is not a multiple of the alignment ", f_.alignment_);

    tv.name = std::move(name);
    f_.tensor_index_.emplace(tv.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(tv));
    pending.push_back({offset_at, offset});
  }
  ctx_.clear();

  // The data section starts at the end of the tensor infos rounded up to the alignment.
  size_t a = f_.alignment_;
  size_t header_end = pos_;
  if (header_end > std::numeric_limits<size_t>::max() - (a - 1))
    fail_at(header_end, "data section start overflows");  // unreachable for real sizes; kept for the invariant
  f_.data_offset_ = (header_end + a - 1) / a * a;

  for (size_t i = 0; i < f_.tensors_.size(); ++i) {
    TensorView& tv = f_.tensors_[i];
    const Pending& p = pending[i];
    size_t ds = f_.data_offset_;
    bool inside = ds <= size_ && p.offset <= size_ - ds && tv.nbytes <= size_ - ds - p.offset;
    if (!inside)
      fail_at(p.offset_at, "tensor ", i, " '", printable(tv.name), "' data [offset ", p.offset, ", ", tv.nbytes,
              " bytes] ends past end of file (size ", size_, ", data section starts at ", ds, ")");
    tv.data = base_ + ds + p.offset;
  }
}

void GgufParser::run() {
  uint64_t n_tensors = 0, n_kv = 0;
  try {
    read_header(n_tensors, n_kv);
    read_metadata(n_kv);
    read_tensor_infos(n_tensors);
  } catch (const std::bad_alloc&) {
    // The limits above make this unlikely; if it happens, it is still reported as bad input.
    fail_at(pos_, where(), " out of memory while parsing the header");
  }
}

// ---------------------------------------------------------------------------------------

GgufFile::GgufFile(const std::string& path, Load load, const Progress& progress) : path_(path) {
  fd_ = open_regular_file(path, &size_);
  try {
    if (size_ > 0) {
      void* p = MAP_FAILED;
      if (load == Load::read) {
        p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
          fail(path, ": cannot allocate ", size_, " bytes to read the model into: ", std::strerror(errno));
        base_ = static_cast<const uint8_t*>(p);
        mapped_ = read_ = true;
        ::madvise(p, size_, MADV_HUGEPAGE);  // a hint: without THP the buffer keeps 4 KiB pages
        constexpr size_t kChunk = size_t{256} << 20;
        for (size_t done = 0; done < size_;) {
          const ssize_t r = ::pread(fd_, static_cast<uint8_t*>(p) + done, std::min(kChunk, size_ - done),
                                    static_cast<off_t>(done));
          if (r < 0 && errno == EINTR) continue;
          if (r < 0) fail(path, ": read failed at offset ", done, ": ", std::strerror(errno));
          if (r == 0)
            fail(path, ": file ended at offset ", done, " while reading ", size_, " bytes (truncated while loading?)");
          done += static_cast<size_t>(r);
          if (progress) progress(done, size_);
        }
        ::mprotect(p, size_, PROT_READ);  // as the mapping: weights are never written
      } else {
        base_ = map_file_readonly(fd_, size_, path);
        mapped_ = true;
      }
    }
    parse();
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws
    throw;
  }
}

GgufFile::GgufFile(MemoryTag, const void* data, size_t size, std::string name, bool parse_now)
    : path_(std::move(name)) {
  base_ = static_cast<const uint8_t*>(data);
  size_ = size;
  if (parse_now) parse();
}

std::unique_ptr<GgufFile> GgufFile::from_memory(const void* data, size_t size, std::string name) {
  return std::unique_ptr<GgufFile>(new GgufFile(MemoryTag{}, data, size, std::move(name)));
}

std::unique_ptr<GgufFile> GgufFile::synthetic(std::string name, std::vector<std::pair<std::string, GgufValue>> kv,
                                              std::vector<TensorView> tensors, std::shared_ptr<void> keepalive,
                                              std::vector<std::span<uint8_t>> converted) {
  auto f = std::unique_ptr<GgufFile>(new GgufFile(MemoryTag{}, nullptr, 0, std::move(name), /*parse=*/false));
  f->version_ = 3;
  f->kv_ = std::move(kv);
  for (size_t i = 0; i < f->kv_.size(); ++i)
    if (!f->kv_index_.emplace(f->kv_[i].first, i).second) fail(f->path_, ": metadata key ", f->kv_[i].first, " twice");
  f->tensors_ = std::move(tensors);
  for (size_t i = 0; i < f->tensors_.size(); ++i) {
    f->size_ += f->tensors_[i].nbytes;
    if (!f->tensor_index_.emplace(f->tensors_[i].name, i).second)
      fail(f->path_, ": tensor ", f->tensors_[i].name, " twice");
  }
  f->keepalive_ = std::move(keepalive);
  f->converted_ = std::move(converted);
  return f;
}

void GgufFile::replace_tensor(std::string_view name, DType type, const void* data, size_t nbytes,
                              std::shared_ptr<void> owner) {
  const auto it = tensor_index_.find(std::string(name));
  if (it == tensor_index_.end()) fail(path_, ": no tensor '", name, "' to replace");
  TensorView& t = tensors_[it->second];
  if (dtype_row_bytes(type, t.ne[0]) * static_cast<size_t>(t.n_rows()) != nbytes)
    fail(path_, ": replacing tensor '", name, "': ", nbytes, " bytes do not fit its shape as ", dtype_name(type));
  t.type = type;
  t.data = data;
  t.nbytes = nbytes;
  replaced_.push_back(std::move(owner));
}

void GgufFile::add_lora(std::string_view name, const LoraTerm& term, std::shared_ptr<void> owner) {
  const auto it = tensor_index_.find(std::string(name));
  if (it == tensor_index_.end()) fail(path_, ": no tensor '", name, "' to adapt");
  TensorView& t = tensors_[it->second];
  if (t.n_dims != 2 || term.a.ne[0] != t.ne[0] || term.b.ne[1] != t.ne[1] || term.a.ne[1] != term.b.ne[0] ||
      term.a.type != DType::F32 || term.b.type != DType::F32)
    fail(path_, ": LoRA factors [", term.a.ne[0], ", ", term.a.ne[1], "] x [", term.b.ne[0], ", ", term.b.ne[1],
         "] do not fit tensor '", name, "' [", t.ne[0], ", ", t.ne[1], "]");
  std::vector<LoraTerm>& terms = lora_[t.name];
  terms.push_back(term);
  t.lora = &terms;
  replaced_.push_back(std::move(owner));
}

void GgufFile::set_rows16(std::string_view name, const void* rows16, std::shared_ptr<void> owner) {
  const auto it = tensor_index_.find(std::string(name));
  if (it == tensor_index_.end()) fail(path_, ": no tensor '", name, "' to interleave");
  TensorView& t = tensors_[it->second];
  if (rows16 == t.data && !writable_bytes(t))
    fail(path_, ": tensor '", name, "' is not converted memory of its own: its rows cannot be interleaved in place");
  t.rows16 = rows16;
  t.rows_interleaved = rows16 == t.data;
  if (owner) replaced_.push_back(std::move(owner));
}

uint8_t* GgufFile::writable_bytes(const TensorView& t) const {
  const std::less_equal<const uint8_t*> le;
  const auto* lo = static_cast<const uint8_t*>(t.data);
  const uint8_t* hi = lo + t.nbytes;
  const auto in = [&](std::span<uint8_t> r) { return le(r.data(), lo) && le(hi, r.data() + r.size()); };
  const auto part = std::find_if(converted_.begin(), converted_.end(), in);
  if (t.nbytes == 0 || part == converted_.end()) return nullptr;
  for (const TensorView& o : tensors_) {  // another tensor over any of these bytes: an alias
    const auto* olo = static_cast<const uint8_t*>(o.data);
    if (&o != &t && o.name != t.name && o.nbytes > 0 && std::less<const uint8_t*>()(olo, hi) &&
        std::less<const uint8_t*>()(lo, olo + o.nbytes))
      return nullptr;
  }
  return part->data() + (lo - part->data());
}

size_t GgufFile::release_pages(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  const std::less_equal<const uint8_t*> le;
  if (!mapped_ || fd_ < 0 || !le(base_, p) || !le(p + n, base_ + size_)) return 0;
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || static_cast<size_t>(st.st_size) != size_) return 0;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t off = static_cast<size_t>(p - base_);
  const size_t lo = (off + page - 1) / page * page, hi = (off + n) / page * page;
  if (hi <= lo) return 0;
  auto* at = const_cast<uint8_t*>(base_) + lo;
  if (read_) {
    // MAP_FIXED replaces the anonymous pages in one step. A failure may leave a hole where they
    // were (the kernel unmaps first), so it is an error, not a fallback.
    if (::mmap(at, hi - lo, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd_, static_cast<off_t>(lo)) == MAP_FAILED)
      fail(path_, ": cannot map the file's bytes [", lo, ", ", hi, ") over its copy: ", std::strerror(errno));
  } else if (::madvise(at, hi - lo, MADV_DONTNEED) != 0) {
    return 0;
  }
  return hi - lo;
}

void GgufFile::add_expert_lora(std::string_view name, int64_t expert, const LoraTerm& term,
                               std::shared_ptr<void> owner) {
  const auto it = tensor_index_.find(std::string(name));
  if (it == tensor_index_.end()) fail(path_, ": no tensor '", name, "' to adapt");
  TensorView& t = tensors_[it->second];
  if (t.n_dims != 3 || expert < 0 || expert >= t.ne[2] || term.a.ne[0] != t.ne[0] || term.b.ne[1] != t.ne[1] ||
      term.a.ne[1] != term.b.ne[0] || term.a.type != DType::F32 || term.b.type != DType::F32)
    fail(path_, ": LoRA factors [", term.a.ne[0], ", ", term.a.ne[1], "] x [", term.b.ne[0], ", ", term.b.ne[1],
         "] of expert ", expert, " do not fit tensor '", name, "' [", t.ne[0], ", ", t.ne[1], ", ", t.ne[2], "]");
  auto& per_expert = expert_lora_[t.name];
  per_expert.resize(static_cast<size_t>(t.ne[2]));  // sized once: the inner vectors' addresses are slice2d's
  per_expert[static_cast<size_t>(expert)].push_back(term);
  t.expert_lora = &per_expert;
  replaced_.push_back(std::move(owner));
}

GgufFile::~GgufFile() { release(); }

void GgufFile::release() {
  if (mapped_ && base_) ::munmap(const_cast<uint8_t*>(base_), size_);
  mapped_ = false;
  base_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void GgufFile::parse() {
  GgufParser p(*this);
  p.run();
}

// ---------------------------------------------------------------------------------------
// Lookup and typed getters.

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorView* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  if (it == tensor_index_.end()) return nullptr;
  if (!looked_up_.empty()) looked_up_[it->second] = 1;
  return &tensors_[it->second];
}

void GgufFile::track_lookups() const { looked_up_.assign(std::max<size_t>(tensors_.size(), 1), 0); }

std::vector<std::string> GgufFile::untracked_tensors() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < tensors_.size() && !looked_up_.empty(); ++i)
    if (!looked_up_[i]) out.push_back(tensors_[i].name);
  looked_up_.clear();
  return out;
}

const TensorView& GgufFile::tensor(std::string_view name) const {
  const TensorView* t = find_tensor(name);
  if (!t) fail("missing tensor ", name, " in ", path_);
  return *t;
}

namespace {

const GgufValue& require(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (!v) fail(f.path(), ": missing key '", key, "'");
  return *v;
}

[[noreturn]] void wrong_type(const GgufFile& f, std::string_view key, std::string_view expected, const GgufValue& v) {
  fail(f.path(), ": metadata key '", key, "' has type ", type_desc(v), ", expected ", expected);
}

template <class T>
T get_scalar(const GgufFile& f, std::string_view key, GgufType want, const GgufValue& v) {
  if (v.type != want) wrong_type(f, key, gguf_type_name(want), v);
  const T* p = std::get_if<T>(&v.v);
  if (!p) wrong_type(f, key, gguf_type_name(want), v);  // type tag and variant disagree (hand-built value)
  return *p;
}

template <class T>
std::vector<T> get_array(const GgufFile& f, std::string_view key, GgufType want) {
  const GgufValue& v = require(f, key);
  std::string expected = str_cat("array of ", gguf_type_name(want));
  const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v.v);
  if (v.type != GgufType::ARRAY || !a || !*a || (*a)->elem_type != want) wrong_type(f, key, expected, v);
  std::vector<T> out;
  out.reserve((*a)->items.size());
  for (const GgufValue& item : (*a)->items) {
    const T* p = std::get_if<T>(&item.v);
    if (!p) wrong_type(f, key, expected, v);
    out.push_back(*p);
  }
  return out;
}

}  // namespace

uint32_t GgufFile::get_u32(std::string_view key) const {
  return get_scalar<uint32_t>(*this, key, GgufType::UINT32, require(*this, key));
}
uint32_t GgufFile::get_u32_or(std::string_view key, uint32_t def) const {
  const GgufValue* v = find(key);
  return v ? get_scalar<uint32_t>(*this, key, GgufType::UINT32, *v) : def;
}
int32_t GgufFile::get_i32(std::string_view key) const {
  return get_scalar<int32_t>(*this, key, GgufType::INT32, require(*this, key));
}
uint64_t GgufFile::get_u64(std::string_view key) const {
  return get_scalar<uint64_t>(*this, key, GgufType::UINT64, require(*this, key));
}
float GgufFile::get_f32(std::string_view key) const {
  return get_scalar<float>(*this, key, GgufType::FLOAT32, require(*this, key));
}
float GgufFile::get_f32_or(std::string_view key, float def) const {
  const GgufValue* v = find(key);
  return v ? get_scalar<float>(*this, key, GgufType::FLOAT32, *v) : def;
}
bool GgufFile::get_bool(std::string_view key) const {
  return get_scalar<bool>(*this, key, GgufType::BOOL, require(*this, key));
}
bool GgufFile::get_bool_or(std::string_view key, bool def) const {
  const GgufValue* v = find(key);
  return v ? get_scalar<bool>(*this, key, GgufType::BOOL, *v) : def;
}
std::string GgufFile::get_string(std::string_view key) const {
  return get_scalar<std::string>(*this, key, GgufType::STRING, require(*this, key));
}
std::string GgufFile::get_string_or(std::string_view key, std::string_view def) const {
  const GgufValue* v = find(key);
  return v ? get_scalar<std::string>(*this, key, GgufType::STRING, *v) : std::string(def);
}
std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  return get_array<std::string>(*this, key, GgufType::STRING);
}
std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  return get_array<float>(*this, key, GgufType::FLOAT32);
}
std::vector<int32_t> GgufFile::get_i32_array(std::string_view key) const {
  return get_array<int32_t>(*this, key, GgufType::INT32);
}

std::vector<uint32_t> GgufFile::get_u32_per_layer(std::string_view key, size_t n_layer) const {
  const GgufValue& v = require(*this, key);
  // One value as u32 or non-negative i32; converters differ in which they write.
  auto one = [&](const GgufValue& x, std::string_view what) -> uint32_t {
    if (const auto* u = std::get_if<uint32_t>(&x.v); u && x.type == GgufType::UINT32) return *u;
    if (const auto* i = std::get_if<int32_t>(&x.v); i && x.type == GgufType::INT32) {
      if (*i < 0) fail(path_, ": metadata key '", key, "'", what, " value ", *i, " is negative");
      return static_cast<uint32_t>(*i);
    }
    wrong_type(*this, key, "uint32, int32 or an array of them with one value per layer", v);
  };
  if (v.type != GgufType::ARRAY) return std::vector<uint32_t>(n_layer, one(v, ""));
  const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v.v);
  if (!a || !*a || ((*a)->elem_type != GgufType::UINT32 && (*a)->elem_type != GgufType::INT32))
    wrong_type(*this, key, "uint32, int32 or an array of them with one value per layer", v);
  const auto& items = (*a)->items;
  if (items.size() != n_layer)
    fail(path_, ": metadata key '", key, "' is an array of ", items.size(), " values but the model has ", n_layer,
         " layers");
  std::vector<uint32_t> out;
  out.reserve(n_layer);
  for (size_t i = 0; i < items.size(); ++i) out.push_back(one(items[i], str_cat(" item ", i)));
  return out;
}

}  // namespace sluice
