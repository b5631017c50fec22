// format/gguf_writer: GGUF v3 writer. The header is built in memory (it is small); tensor
// data goes straight to the file descriptor, so streaming mode never holds more than the one
// tensor the caller passes in. Layout matches what gguf.cpp reads (see the comment there).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "format/gguf.h"
#include "format/mapped_file.h"

namespace sluice {

namespace {

constexpr uint32_t kGgufVersion = 3;

// A value built by hand can carry a type tag that disagrees with the variant; the variant's
// alternatives are declared in GgufType id order, so index() must equal the tag.
void check_value(std::string_view key, const GgufValue& v, int depth = 0) {
  if (static_cast<size_t>(v.type) != v.v.index())
    fail("GgufWriter: key '", key, "': value tagged ", gguf_type_name(v.type), " holds variant alternative ",
         v.v.index());
  if (v.type != GgufType::ARRAY) return;
  if (depth >= 16) fail("GgufWriter: key '", key, "': arrays nested deeper than 16 levels");  // the reader's limit
  const auto& a = std::get<std::shared_ptr<GgufArray>>(v.v);
  if (!a) fail("GgufWriter: key '", key, "': null array");
  for (const GgufValue& item : a->items) {
    if (item.type != a->elem_type)
      fail("GgufWriter: key '", key, "': array of ", gguf_type_name(a->elem_type), " holds an item of type ",
           gguf_type_name(item.type));
    check_value(key, item, depth + 1);
  }
}

struct Buf {
  std::vector<uint8_t> b;
  template <class T>
  void put(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  // Value payload without its type tag (array items carry none).
  void put_value(const GgufValue& v) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, bool>) {
            put<uint8_t>(x ? 1 : 0);
          } else if constexpr (std::is_same_v<T, std::string>) {
            put_string(x);
          } else if constexpr (std::is_same_v<T, std::shared_ptr<GgufArray>>) {
            put<uint32_t>(static_cast<uint32_t>(x->elem_type));
            put<uint64_t>(x->items.size());
            for (const GgufValue& item : x->items) put_value(item);
          } else {
            put<T>(x);
          }
        },
        v.v);
  }
};

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace

struct GgufWriter::Impl {
  struct Info {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    size_t nbytes = 0;
    uint64_t offset = 0;        // relative to the data section, set by begin()
    std::vector<uint8_t> data;  // add_tensor only; streaming tensors keep nothing
    bool has_data = false;
  };
  size_t alignment = 32;
  std::vector<std::pair<std::string, GgufValue>> kv;
  std::unordered_map<std::string, size_t> kv_index;
  std::vector<Info> tensors;
  std::unordered_map<std::string, size_t> tensor_index;

  // Streaming state.
  std::string path;
  int fd = -1;
  bool owns_file = false;  // regular file we created: removed if abandoned (never /dev/*)
  bool begun = false;
  size_t next = 0;          // index of the next tensor write_tensor_data expects
  uint64_t file_pos = 0;    // bytes written so far
  uint64_t data_start = 0;  // file offset of the data section

  ~Impl() { abandon(); }

  // A partly written GGUF is not a valid file; remove it so nothing later maps it.
  void abandon() {
    if (fd < 0) return;
    ::close(fd);
    fd = -1;
    if (owns_file) ::unlink(path.c_str());
    owns_file = false;
  }

  [[noreturn]] void io_fail(const char* what, int err) {
    std::string msg = str_cat(path, ": ", what, " failed at byte ", file_pos, ": ", std::strerror(err));
    abandon();
    throw Error(msg);
  }

  void write_all(const void* data, size_t n) {
    if (const int err = write_fully(fd, data, n)) io_fail("write", err);
    file_pos += n;
  }


  void pad_to(uint64_t target) {
    static const uint8_t zeros[256] = {};
    while (file_pos < target) write_all(zeros, std::min<uint64_t>(target - file_pos, sizeof zeros));
  }

  void check_not_begun(std::string_view what) const {
    if (begun) fail("GgufWriter: ", what, " after begin(", path, ")");
  }
};

GgufWriter::GgufWriter() : impl_(std::make_unique<Impl>()) {}
GgufWriter::~GgufWriter() = default;

void GgufWriter::set_alignment(size_t a) {
  if (a > std::numeric_limits<uint32_t>::max())
    fail("GgufWriter: alignment ", a, " does not fit general.alignment (uint32)");
  set_u32("general.alignment", static_cast<uint32_t>(a));
}

void GgufWriter::set(std::string_view key, GgufValue value) {
  impl_->check_not_begun("set");
  check_value(key, value);
  if (key == "general.alignment") {
    const uint32_t* a = std::get_if<uint32_t>(&value.v);
    if (value.type != GgufType::UINT32 || !a) fail("GgufWriter: general.alignment must be uint32");
    if (*a == 0 || !std::has_single_bit(*a)) fail("GgufWriter: alignment ", *a, " is not a nonzero power of two");
    impl_->alignment = *a;
  }
  std::string k(key);
  if (auto it = impl_->kv_index.find(k); it != impl_->kv_index.end()) {
    impl_->kv[it->second].second = std::move(value);  // setting a key twice replaces it, keeping its position
    return;
  }
  impl_->kv_index.emplace(k, impl_->kv.size());
  impl_->kv.emplace_back(std::move(k), std::move(value));
}

void GgufWriter::set_u32(std::string_view key, uint32_t v) { set(key, GgufValue{GgufType::UINT32, v}); }
void GgufWriter::set_i32(std::string_view key, int32_t v) { set(key, GgufValue{GgufType::INT32, v}); }
void GgufWriter::set_u64(std::string_view key, uint64_t v) { set(key, GgufValue{GgufType::UINT64, v}); }
void GgufWriter::set_f32(std::string_view key, float v) { set(key, GgufValue{GgufType::FLOAT32, v}); }
void GgufWriter::set_bool(std::string_view key, bool v) { set(key, GgufValue{GgufType::BOOL, v}); }
void GgufWriter::set_string(std::string_view key, std::string_view v) {
  set(key, GgufValue{GgufType::STRING, std::string(v)});
}

namespace {
template <class T>
GgufValue make_array(GgufType elem, const std::vector<T>& v) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = elem;
  a->items.reserve(v.size());
  for (const T& x : v) a->items.push_back(GgufValue{elem, x});
  return GgufValue{GgufType::ARRAY, std::move(a)};
}
}  // namespace

void GgufWriter::set_string_array(std::string_view key, const std::vector<std::string>& v) {
  set(key, make_array(GgufType::STRING, v));
}
void GgufWriter::set_f32_array(std::string_view key, const std::vector<float>& v) {
  set(key, make_array(GgufType::FLOAT32, v));
}
void GgufWriter::set_i32_array(std::string_view key, const std::vector<int32_t>& v) {
  set(key, make_array(GgufType::INT32, v));
}

void GgufWriter::add_tensor_info(std::string_view name, DType type, const std::vector<int64_t>& ne) {
  impl_->check_not_begun("add_tensor_info");
  std::string n(name);
  if (impl_->tensor_index.count(n)) fail("GgufWriter: tensor '", name, "' added twice");
  if (ne.empty() || ne.size() > 4) fail("GgufWriter: tensor '", name, "' has ", ne.size(), " dims (must be 1..4)");
  for (int64_t d : ne)
    if (d < 0) fail("GgufWriter: tensor '", name, "' has a negative dimension ", d);
  const DTypeTraits& tr = dtype_traits(type);
  if (!dtype_is_ggml(type))
    fail("GgufWriter: tensor '", name, "' has type ", tr.name, ", Sluice's own (no GGUF reader knows it)");
  if (ne[0] % tr.block_size != 0)
    fail("GgufWriter: tensor '", name, "' ne[0] = ", ne[0], " is not a multiple of the block size ", tr.block_size,
         " of ", tr.name);
  size_t nbytes = static_cast<size_t>(ne[0] / tr.block_size);
  bool overflow = __builtin_mul_overflow(nbytes, tr.block_bytes, &nbytes);
  for (size_t d = 1; d < ne.size(); ++d)
    overflow |= __builtin_mul_overflow(nbytes, static_cast<size_t>(ne[d]), &nbytes);
  if (overflow) fail("GgufWriter: tensor '", name, "' byte size overflows");
  Impl::Info info;
  info.name = n;
  info.type = type;
  info.ne = ne;
  info.nbytes = nbytes;
  impl_->tensor_index.emplace(std::move(n), impl_->tensors.size());
  impl_->tensors.push_back(std::move(info));
}

void GgufWriter::add_tensor(std::string_view name, DType type, const std::vector<int64_t>& ne, const void* data,
                            size_t nbytes) {
  add_tensor_info(name, type, ne);
  Impl::Info& info = impl_->tensors.back();
  if (nbytes != info.nbytes) {
    impl_->tensor_index.erase(info.name);
    impl_->tensors.pop_back();
    fail("GgufWriter: tensor '", name, "' given ", nbytes, " bytes but its shape and type need ", info.nbytes);
  }
  // Copied: the caller's buffer may be gone by write(). Small-file mode only.
  const auto* p = static_cast<const uint8_t*>(data);
  info.data.assign(p, p + nbytes);
  info.has_data = true;
}

void GgufWriter::write(const std::string& path) {
  for (const auto& t : impl_->tensors)
    if (!t.has_data)
      fail("GgufWriter::write(", path, "): tensor '", t.name,
           "' was declared with add_tensor_info and has no data; use begin/write_tensor_data/finish");
  begin(path);
  for (const auto& t : impl_->tensors) write_tensor_data(t.name, t.data.data(), t.data.size());
  finish();
}

void GgufWriter::begin(const std::string& path) {
  Impl& m = *impl_;
  m.check_not_begun("begin");
  // Offsets: each tensor starts at the next multiple of the alignment in the data section.
  uint64_t off = 0;
  for (auto& t : m.tensors) {
    t.offset = off;
    if (__builtin_add_overflow(off, t.nbytes, &off) || off > std::numeric_limits<uint64_t>::max() - m.alignment)
      fail("GgufWriter: data section size overflows");
    off = align_up(off, m.alignment);
  }

  Buf h;
  h.put<uint32_t>(kGgufMagic);
  h.put<uint32_t>(kGgufVersion);
  h.put<uint64_t>(m.tensors.size());
  h.put<uint64_t>(m.kv.size());
  for (const auto& [k, v] : m.kv) {
    h.put_string(k);
    h.put<uint32_t>(static_cast<uint32_t>(v.type));
    h.put_value(v);
  }
  for (const auto& t : m.tensors) {
    h.put_string(t.name);
    h.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) h.put<uint64_t>(static_cast<uint64_t>(d));
    h.put<uint32_t>(static_cast<uint32_t>(t.type));
    h.put<uint64_t>(t.offset);
  }

  m.path = path;
  m.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (m.fd < 0) fail(path, ": cannot create: ", std::strerror(errno));
  struct stat st;
  m.owns_file = ::fstat(m.fd, &st) == 0 && S_ISREG(st.st_mode);
  m.begun = true;
  m.next = 0;
  m.file_pos = 0;
  m.write_all(h.b.data(), h.b.size());
  m.data_start = align_up(m.file_pos, m.alignment);
  m.pad_to(m.data_start);
}

void GgufWriter::write_tensor_data(std::string_view name, const void* data, size_t nbytes) {
  Impl& m = *impl_;
  if (!m.begun || m.fd < 0) fail("GgufWriter: write_tensor_data('", name, "') without a successful begin()");
  if (m.next >= m.tensors.size())
    fail(m.path, ": write_tensor_data('", name, "'): all ", m.tensors.size(), " declared tensors are already written");
  const Impl::Info& t = m.tensors[m.next];
  if (name != t.name)
    fail(m.path, ": write_tensor_data('", name, "'): tensors must be written in declaration order; expected '", t.name,
         "'");
  if (nbytes != t.nbytes)
    fail(m.path, ": write_tensor_data('", name, "'): given ", nbytes, " bytes, expected ", t.nbytes);
  m.pad_to(m.data_start + t.offset);
  m.write_all(data, nbytes);
  ++m.next;
}

void GgufWriter::finish() {
  Impl& m = *impl_;
  if (!m.begun || m.fd < 0) fail("GgufWriter: finish() without a successful begin()");
  if (m.next != m.tensors.size())
    fail(m.path, ": finish(): only ", m.next, " of ", m.tensors.size(), " tensors written; next expected '",
         m.tensors[m.next].name, "'");
  m.pad_to(align_up(m.file_pos, m.alignment));  // ggml pads the last tensor too
  // close() can report deferred write errors (NFS, quota); a successful close is the commit.
  int fd = m.fd;
  m.fd = -1;
  bool owns = m.owns_file;
  m.owns_file = false;
  if (::close(fd) != 0) {
    int err = errno;
    if (owns) ::unlink(m.path.c_str());
    fail(m.path, ": close failed after writing ", m.file_pos, " bytes: ", std::strerror(err));
  }
  m.begun = false;  // the same metadata and tensors could be written again
}

}  // namespace sluice
