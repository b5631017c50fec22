// memory/pack: the packed (expert-bundled) GGUF layout and back (see pack.h).
#include "memory/pack.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "core/hash.h"
#include "format/gguf.h"
#include "format/hf_folder.h"
#include "memory/expert_store.h"

namespace sluice {
namespace {

constexpr uint32_t kPackAlignment = 4096;  // O_DIRECT's alignment: a bundle is one aligned read
const char* kKinds[3] = {"gate", "up", "down"};

std::vector<int64_t> shape_of(const TensorView& t) { return std::vector<int64_t>(t.ne, t.ne + t.n_dims); }

// The input pages of a tensor just written leave our page tables: packing a file larger than
// memory must not keep it all mapped in (the page cache may still hold it; that is reclaimable).
void drop_pages(const void* p, size_t n) {
  const uintptr_t pg = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE)), a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t b = (a + pg - 1) / pg * pg, e = (a + n) / pg * pg;
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// "blk.N." prefix of a tensor name, N >= 0; -1 when the name is not a block tensor.
int64_t block_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int64_t n = 0;
  size_t i = 4;
  if (i >= name.size() || !isdigit(static_cast<unsigned char>(name[i]))) return -1;
  for (; i < name.size() && isdigit(static_cast<unsigned char>(name[i])); ++i) n = n * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? n : -1;
}

void copy_metadata(const GgufFile& in, GgufWriter& w, bool skip_sluice_pack_keys) {
  for (const auto& [k, v] : in.metadata()) {
    if (k == "general.alignment") continue;  // set by the caller
    if (skip_sluice_pack_keys && (k == "sluice.expert_layout" || k == "sluice.pack.alignment")) continue;
    w.set(k, v);
  }
}

// The input as GGUF tensors: a GGUF file, or a model folder whose experts are converted as
// they are written (format/hf_folder.h), so a folder larger than memory packs too.
struct PackInput {
  FolderForRewrite folder;
  std::unique_ptr<GgufFile> gguf;
  uint64_t bytes = 0;  // on disk
  const GgufFile& file() const { return folder.file ? *folder.file : *gguf; }
};

uint64_t folder_bytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) n += e.file_size(ec);
  return n;
}

PackInput open_pack_input(const std::string& path) {
  PackInput in;
  if (is_model_folder(path)) {
    in.folder = open_model_folder_for_rewrite(path);
    in.bytes = folder_bytes(path);
  } else {
    in.gguf = std::make_unique<GgufFile>(path);
    in.bytes = in.gguf->file_size();
  }
  return in;
}

// pack_experts of an input already open (t0: when its opening began).
PackResult pack_input(const PackInput& input, const std::string& in_path, const std::string& out_path,
                      const PackProgress& progress, double t0) {
  const GgufFile& in = input.file();
  if (gguf_has_bundled_experts(in)) fail(in_path, ": already packed (sluice.expert_layout = bundled)");

  // The MoE layers: those with all three stacked tensors, agreeing on the expert count.
  std::map<int64_t, std::array<const TensorView*, 3>> layers;
  for (const TensorView& t : in.tensors()) {
    const int64_t b = block_of(t.name);
    if (b < 0) continue;
    for (int k = 0; k < 3; ++k)
      if (t.name == "blk." + std::to_string(b) + ".ffn_" + kKinds[k] + "_exps.weight") layers[b][k] = &t;
  }
  int64_t n_bundles = 0;
  for (auto& [b, ts] : layers) {
    for (int k = 0; k < 3; ++k)
      if (!ts[k])
        fail(in_path, ": layer ", b, " has stacked expert tensors but no 'blk.", b, ".ffn_", kKinds[k],
             "_exps.weight'");
    for (int k = 0; k < 3; ++k)
      if (ts[k]->n_dims != 3 || ts[k]->ne[2] != ts[0]->ne[2])
        fail(in_path, ": '", ts[k]->name, "' is not [in, out, n_expert] with the same n_expert as '", ts[0]->name, "'");
    n_bundles += ts[0]->ne[2];
  }
  if (layers.empty())
    fail(in_path, ": no stacked expert tensors (blk.N.ffn_gate_exps.weight): not a mixture-of-experts model");

  GgufWriter w;
  copy_metadata(in, w, false);
  w.set_u32("sluice.pack.alignment", static_cast<uint32_t>(in.alignment()));
  w.set_string("sluice.expert_layout", "bundled");
  w.set_alignment(kPackAlignment);

  // Declaration order is data order: dense tensors, then the bundles.
  struct Item {
    std::string name;
    const void* data;
    size_t nbytes;
  };
  std::vector<Item> items;
  for (const TensorView& t : in.tensors()) {
    const int64_t b = block_of(t.name);
    bool expert = false;
    if (auto it = layers.find(b); it != layers.end())
      for (const TensorView* s : it->second) expert = expert || s == &t;
    if (expert) continue;
    w.add_tensor_info(t.name, t.type, shape_of(t));
    items.push_back({t.name, t.data, t.nbytes});
  }
  for (auto& [b, ts] : layers)
    for (int64_t e = 0; e < ts[0]->ne[2]; ++e)
      for (int k = 0; k < 3; ++k) {
        const TensorView s = ts[k]->slice2d(e);
        const std::string name = "blk." + std::to_string(b) + ".ffn_" + kKinds[k] + "." + std::to_string(e) + ".weight";
        w.add_tensor_info(name, s.type, {s.ne[0], s.ne[1]});
        items.push_back({name, s.data, s.nbytes});
      }

  w.begin(out_path);
  for (size_t i = 0; i < items.size(); ++i) {
    if (input.folder.fill) input.folder.fill(items[i].data, items[i].nbytes);
    w.write_tensor_data(items[i].name, items[i].data, items[i].nbytes);
    if (input.folder.release) input.folder.release(items[i].data, items[i].nbytes);
    drop_pages(items[i].data, items[i].nbytes);
    if (progress) progress(i + 1, items.size());
  }
  w.finish();

  PackResult r;
  r.moe_layers = static_cast<int>(layers.size());
  r.experts = n_bundles;
  r.bytes_in = input.bytes;
  r.bytes_out = file_size(out_path);
  r.seconds = now_seconds() - t0;
  return r;
}

}  // namespace

PackResult pack_experts(const std::string& in_path, const std::string& out_path, const PackProgress& progress) {
  const double t0 = now_seconds();
  return pack_input(open_pack_input(in_path), in_path, out_path, progress, t0);
}

PackResult unpack_experts(const std::string& in_path, const std::string& out_path, const PackProgress& progress) {
  const double t0 = now_seconds();
  GgufFile in(in_path);
  if (!gguf_has_bundled_experts(in)) fail(in_path, ": not a packed file (no sluice.expert_layout = bundled)");

  // Per-expert tensors by layer: blk.N.ffn_{gate,up,down}.E.weight.
  std::map<int64_t, std::array<std::vector<const TensorView*>, 3>> layers;
  std::vector<const TensorView*> dense;
  for (const TensorView& t : in.tensors()) {
    const int64_t b = block_of(t.name);
    bool expert = false;
    if (b >= 0) {
      const std::string p = "blk." + std::to_string(b) + ".ffn_";
      for (int k = 0; k < 3 && !expert; ++k) {
        const std::string head = p + kKinds[k] + ".";
        if (t.name.rfind(head, 0) != 0 || t.name.size() <= head.size() + 7 ||
            t.name.compare(t.name.size() - 7, 7, ".weight") != 0)
          continue;
        const std::string idx = t.name.substr(head.size(), t.name.size() - 7 - head.size());
        if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos) continue;
        const size_t e = std::stoul(idx);
        auto& v = layers[b][k];
        if (v.size() <= e) v.resize(e + 1, nullptr);
        v[e] = &t;
        expert = true;
      }
    }
    if (!expert) dense.push_back(&t);
  }
  for (auto& [b, ks] : layers)
    for (int k = 0; k < 3; ++k) {
      if (ks[k].empty() || ks[k].size() != ks[0].size())
        fail(in_path, ": layer ", b, " has ", ks[k].size(), " ffn_", kKinds[k], " experts but ", ks[0].size(),
             " ffn_gate experts");
      for (size_t e = 0; e < ks[k].size(); ++e) {
        const TensorView* t = ks[k][e];
        if (!t) fail(in_path, ": missing tensor 'blk.", b, ".ffn_", kKinds[k], ".", e, ".weight'");
        if (t->n_dims != 2 || t->type != ks[k][0]->type || t->ne[0] != ks[k][0]->ne[0] || t->ne[1] != ks[k][0]->ne[1])
          fail(in_path, ": '", t->name, "' differs in type or shape from '", ks[k][0]->name, "': cannot stack");
      }
    }

  GgufWriter w;
  copy_metadata(in, w, true);
  const GgufValue* a = in.find("sluice.pack.alignment");
  const uint32_t* align = a ? std::get_if<uint32_t>(&a->v) : nullptr;
  w.set_alignment(align ? *align : 32);

  // A packed layer's stacked tensors go right after the layer's other tensors.
  std::vector<std::pair<const TensorView*, int64_t>> order;  // (dense tensor, -1) or (nullptr, layer): stacked group
  int64_t open_layer = -1;
  std::map<int64_t, bool> placed;
  auto close_layer = [&](int64_t b) {
    if (b >= 0 && layers.count(b) && !placed[b]) {
      order.push_back({nullptr, b});
      placed[b] = true;
    }
  };
  for (const TensorView* t : dense) {
    const int64_t b = block_of(t->name);
    if (b != open_layer) close_layer(open_layer);
    open_layer = b;
    order.push_back({t, -1});
  }
  close_layer(open_layer);
  for (auto& [b, ks] : layers) close_layer(b);

  size_t n_tensors = 0;
  for (auto& [t, b] : order) {
    if (t) {
      w.add_tensor_info(t->name, t->type, shape_of(*t));
      ++n_tensors;
      continue;
    }
    for (int k = 0; k < 3; ++k) {
      const TensorView* t0v = layers[b][k][0];
      w.add_tensor_info("blk." + std::to_string(b) + ".ffn_" + kKinds[k] + "_exps.weight", t0v->type,
                        {t0v->ne[0], t0v->ne[1], static_cast<int64_t>(layers[b][k].size())});
      ++n_tensors;
    }
  }
  w.begin(out_path);
  size_t done = 0;
  std::vector<uint8_t> stacked;
  int64_t n_bundles = 0;
  for (auto& [t, b] : order) {
    if (t) {
      w.write_tensor_data(t->name, t->data, t->nbytes);
      drop_pages(t->data, t->nbytes);
      if (progress) progress(++done, n_tensors);
      continue;
    }
    n_bundles += static_cast<int64_t>(layers[b][0].size());
    for (int k = 0; k < 3; ++k) {
      const auto& ts = layers[b][k];
      stacked.resize(ts[0]->nbytes * ts.size());
      for (size_t e = 0; e < ts.size(); ++e) {
        std::memcpy(stacked.data() + e * ts[0]->nbytes, ts[e]->data, ts[e]->nbytes);
        drop_pages(ts[e]->data, ts[e]->nbytes);
      }
      w.write_tensor_data("blk." + std::to_string(b) + ".ffn_" + kKinds[k] + "_exps.weight", stacked.data(),
                          stacked.size());
      if (progress) progress(++done, n_tensors);
    }
  }
  w.finish();

  PackResult r;
  r.moe_layers = static_cast<int>(layers.size());
  r.experts = n_bundles;
  r.bytes_in = in.file_size();
  r.bytes_out = file_size(out_path);
  r.seconds = now_seconds() - t0;
  return r;
}

std::string default_pack_dir() {
  if (const char* d = std::getenv("SLUICE_PACK_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/sluice/packed";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/sluice/packed";
  fail("--experts stream on a model folder: no directory for its packed copy (set SLUICE_PACK_DIR or HOME)");
}

std::string folder_pack_path(const std::string& folder, const std::string& pack_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path real = fs::canonical(folder, ec);
  if (ec) fail(folder, ": ", ec.message());
  // FNV-1a over the real path and every file's name, size and modification time, in name order.
  std::vector<std::string> parts{real.string()};
  for (const auto& e : fs::directory_iterator(real, ec)) {
    if (!e.is_regular_file()) continue;
    const auto mtime = e.last_write_time().time_since_epoch().count();
    parts.push_back(e.path().filename().string() + "\n" + std::to_string(e.file_size()) + "\n" + std::to_string(mtime));
  }
  if (ec) fail(folder, ": cannot list the folder: ", ec.message());
  std::sort(parts.begin() + 1, parts.end());
  uint64_t h = kFnv1aOffset;
  for (const std::string& part : parts) h = fnv1a64(part.c_str(), part.size() + 1, h);  // with its '\0'
  std::string name = real.filename().string();
  for (char& c : name)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(h));
  return (pack_dir.empty() ? default_pack_dir() : pack_dir) + "/" + name + "-" + key + ".gguf";
}

PackResult write_folder_pack(const std::string& folder, FolderForRewrite opened, const std::string& path,
                             const PackProgress& progress) {
  namespace fs = std::filesystem;
  const double t0 = now_seconds();
  PackInput input;
  input.folder = std::move(opened);
  input.bytes = folder_bytes(folder);
  std::error_code ec;
  const fs::path dir = fs::path(path).parent_path();
  fs::create_directories(dir, ec);
  if (ec) fail(folder, ": cannot create ", dir.string(), " for its packed copy (--experts stream): ", ec.message());
  const std::string tmp = path + ".part-" + std::to_string(::getpid());
  const PackResult r = pack_input(input, folder, tmp, progress, t0);  // removes its partial output when it fails
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, ": cannot rename the packed copy into place: ", std::strerror(err));
  }
  return r;
}

}  // namespace sluice
