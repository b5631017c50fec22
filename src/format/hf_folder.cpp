// format/hf_folder: config.json and safetensors as GGUF metadata and tensors (tokenizer.json:
// hf_tokenizer.cpp; tensor names: hf_names.cpp).
#include "format/hf_folder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <sstream>

#include "core/anon_map.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "format/hf_common.h"
#include "format/mapped_file.h"
#include "format/safetensors.h"
#include "quant/mlx_affine.h"

namespace sluice {
using namespace hf;  // format/hf_common.h: this folder reader's shared pieces
namespace {

struct Owned {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  // What loading converts or rearranges (repacked blocks, dequantized, stacked or split weights):
  // anonymous memory with huge pages asked for, as a GGUF read into memory has them, and no
  // zero-fill pass of its own before the conversion writes every byte (a std::vector wrote the
  // 4.8 GB of a 12-layer 30B-class folder's repacked experts twice).
  std::vector<AnonMap> converted;
  // Source tensors converted into memory of ours are not read again: their pages leave this
  // process (MLX 4-bit weights: the folder's bytes would otherwise stay resident beside their
  // converted copy, doubling what a load holds).
  void drop_sources(std::initializer_list<const StTensor*> sources) const {
    for (const StTensor* t : sources)
      for (const auto& f : files)
        if (t && f->drop_pages(*t) > 0) break;
  }
  template <class T = uint8_t>
  T* alloc(size_t count) {
    converted.emplace_back(count * sizeof(T), AnonMap::Pages::huge);
    return reinterpret_cast<T*>(converted.back().data());
  }

  // Stacked experts left unconverted by a folder opened for rewriting (FolderForRewrite): their
  // memory is reserved, and rows are converted when asked for and given back after.
  struct Deferred {
    uint8_t* dst = nullptr;
    size_t row_bytes = 0;
    int64_t rows = 0;
    std::function<void(int64_t r0, int64_t r1)> convert;  // writes rows [r0, r1) at dst
    std::function<void(int64_t r0, int64_t r1)> drop;     // drops those rows' source pages
  };
  bool defer_experts = false;
  std::vector<Deferred> deferred;
  // MLX affine groups read in place (open_model_folder's affine_in_place) rather than converted.
  bool affine_in_place = false;
  // The deferred rows that hold bytes [p, p + n): their entry and [r0, r1), or nullptr.
  const Deferred* rows_of(const void* p, size_t n, int64_t* r0, int64_t* r1) const {
    const auto* q = static_cast<const uint8_t*>(p);
    for (const Deferred& d : deferred) {
      const size_t size = d.row_bytes * static_cast<size_t>(d.rows);
      if (q < d.dst || q >= d.dst + size) continue;
      const size_t off = static_cast<size_t>(q - d.dst), end = std::min(size, off + n);
      *r0 = static_cast<int64_t>(off / d.row_bytes);
      *r1 = static_cast<int64_t>((end + d.row_bytes - 1) / d.row_bytes);
      return &d;
    }
    return nullptr;
  }
};

// config.json's MLX "quantization" (or "quantization_config", which mlx-lm writes as a copy):
// the default bits and group size, and per-module entries keyed by the module's path (the
// tensor name without ".weight"): an object with its own bits/group_size, or false.
struct MlxQuantConfig {
  const json* j = nullptr;  // null: the config says nothing (scales' shapes decide)
  int bits = 0, group_size = 0;
};

void check_affine_mode(const json& q, const std::string& where, const fs::path& file) {
  if (q.contains("mode") && q["mode"] != "affine")
    fail(file.string(), ": ", where, ".mode ", q["mode"].dump(),
         " is not supported (MLX affine quantization only; mxfp4/nvfp4/mxfp8 are not yet)");
}

// bits (2, 3, 4, 5, 6, 8) or group_size (32, 64, 128) of a quantization entry.
int quant_int(const json& q, const char* key, const std::string& where, const fs::path& file) {
  const bool bits = std::string(key) == "bits";
  const std::set<int64_t> ok = bits ? std::set<int64_t>{2, 3, 4, 5, 6, 8} : std::set<int64_t>{32, 64, 128};
  if (!q.contains(key) || !q[key].is_number_integer() || !ok.count(q[key].get<int64_t>()))
    fail(file.string(), ": ", where, ".", key, " ", q.contains(key) ? q[key].dump() : "missing",
         " is not one MLX writes (", bits ? "2, 3, 4, 5, 6, 8" : "32, 64, 128", ")");
  return static_cast<int>(q[key].get<int64_t>());
}

MlxQuantConfig read_quant_config(const json& c, const fs::path& file) {
  MlxQuantConfig q;
  const char* key = c.contains("quantization") ? "quantization" : "quantization_config";
  if (!c.contains(key)) return q;
  const json& j = c[key];
  if (!j.is_object()) fail(file.string(), ": '", key, "' is not an object");
  if (j.contains("quant_method"))
    fail(file.string(), ": ", key, ".quant_method ", j["quant_method"].dump(),
         " is not supported (MLX affine quantization only: convert with mlx_lm.convert, or dequantize)");
  check_affine_mode(j, key, file);
  q.j = &j;
  q.bits = quant_int(j, "bits", key, file);
  q.group_size = quant_int(j, "group_size", key, file);
  return q;
}

// MoE routers (ffn_gate_inp) and shared-expert gates, which the ops read as f32 whatever the
// file stores.
bool is_router(const std::string& gguf) {
  return gguf.ends_with("ffn_gate_inp.weight") || gguf.ends_with("ffn_gate_inp_shexp.weight");
}

// The 3-D matrices: stacked experts (GGUF *_exps: [in, out, E], MLX [E, out, in]) and MLA's
// absorbed per-head matrices (attn_k_b / attn_v_b [in, out, H], MLX's MultiLinear [H, out, in]).
bool is_3d_matrix(const std::string& gguf) {
  return gguf.ends_with("_exps.weight") || gguf.ends_with("attn_k_b.weight") || gguf.ends_with("attn_v_b.weight");
}

// What was repacked or dequantized, for the load line: "4-bit g64 bf16 → q4_1" -> (tensors, bytes).
using QuantSummary = std::map<std::string, std::pair<int64_t, size_t>>;

// X.weight (uint32 codes [rows, in*bits/32]) with X.scales and X.biases ([rows, in/G]) as one
// GGUF tensor [in, rows]: Q4_1/Q5_1/Q8_A blocks when they hold the groups exactly, else float32
// (mlx_affine.h). Every shape and dtype is checked against the config first.
TensorView load_mlx_quantized(const StTensor& w, const StTensor* s, const StTensor* b, const std::string& module,
                              const std::string& gguf, int64_t in, const MlxQuantConfig& qc, const fs::path& file,
                              Owned& owned, QuantSummary& summary) {
  const std::string at = file.string() + ": tensor '" + w.name + "'";
  if (in <= 0)
    fail(at, ": quantized (it has ", module, ".scales), but MLX quantizes only linear and embedding matrices");
  if (!b) fail(file.string(), ": tensor '", module, ".biases' missing (", w.name, " has scales)");
  if (w.dtype != StDtype::U32)
    fail(at, ": dtype ", st_dtype_name(w.dtype), ", want U32 (MLX packed codes beside ", module, ".scales)");
  if (s->dtype != StDtype::F16 && s->dtype != StDtype::BF16 && s->dtype != StDtype::F32)
    fail(file.string(), ": tensor '", s->name, "': dtype ", st_dtype_name(s->dtype),
         ", want F16, BF16 or F32 (affine scales)");
  if (b->dtype != s->dtype)
    fail(file.string(), ": tensor '", b->name, "': dtype ", st_dtype_name(b->dtype), ", want ", st_dtype_name(s->dtype),
         " (as ", s->name, ")");
  // Stacked experts [E, out, ·] (or heads) are E·out rows of one matrix as far as the groups go.
  const size_t dims = is_3d_matrix(gguf) ? 3 : 2;
  if (w.shape.size() != dims || s->shape.size() != dims)
    fail(at, ": weight and scales must be ", dims, "-D (", w.shape.size(), "-D and ", s->shape.size(), "-D)");
  if (b->shape != s->shape) fail(file.string(), ": tensor '", b->name, "': shape differs from ", s->name, "'s");
  if (dims == 3 && (s->shape[0] != w.shape[0] || s->shape[1] != w.shape[1]))
    fail(file.string(), ": tensor '", s->name, "': experts and rows [", s->shape[0], ", ", s->shape[1],
         "] differ from ", w.name, "'s [", w.shape[0], ", ", w.shape[1], "]");
  const int64_t n_exp = dims == 3 ? w.shape[0] : 1;
  const int64_t rows = n_exp * w.shape[dims - 2], words = w.shape[dims - 1], n_groups = s->shape[dims - 1];

  // The module's own entry, else the default; where the config does not name the module, the
  // shapes decide (as mlx-lm's infer_quant_config does: some converters leave that implicit).
  MlxAffineFormat f;
  f.bits = qc.bits;
  f.group_size = qc.group_size;
  bool named = false;
  const std::string where = "quantization['" + module + "']";
  if (qc.j && qc.j->contains(module)) {
    const json& o = (*qc.j)[module];
    if (o.is_boolean() && !o.get<bool>())
      fail(at, ": has scales, but config.json's ", where, " is false (not quantized)");
    if (o.is_object()) {
      check_affine_mode(o, where, file);
      if (o.contains("bits")) f.bits = quant_int(o, "bits", where, file);
      if (o.contains("group_size")) f.group_size = quant_int(o, "group_size", where, file);
      named = true;
    }
  }
  const bool fits = f.bits > 0 && words * 32 == in * f.bits && n_groups * f.group_size == in;
  bool inferred = false;
  if (!fits && !named && s->shape[dims - 2] * n_exp == rows && n_groups > 0 && words * 32 % in == 0 &&
      in % n_groups == 0) {
    const int64_t bits = words * 32 / in, group = in / n_groups;
    if ((bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8) &&
        (group == 32 || group == 64 || group == 128)) {
      f.bits = static_cast<int>(bits);
      f.group_size = static_cast<int>(group);
      inferred = true;
    }
  }
  if (f.bits == 0)
    fail(at, ": has scales, but config.json has no 'quantization' and the shapes give no MLX format (", words,
         " words a row, ", n_groups, " groups, ", in, " inputs)");
  const std::string from = named ? " (config.json " + where + ")" : inferred ? " (inferred from the shapes)" : "";
  if (words * 32 != in * f.bits)
    fail(at, ": packed width ", words, " words, want ", in, " inputs x ", f.bits, " bits / 32 = ", in * f.bits / 32,
         from);
  if (s->shape[dims - 2] * n_exp != rows || n_groups * f.group_size != in) {
    const std::string lead = dims == 3 ? std::to_string(n_exp) + ", " : "";
    fail(file.string(), ": tensor '", s->name, "': shape [", lead, s->shape[dims - 2], ", ", n_groups, "], want [",
         lead, rows / n_exp, ", ", in / f.group_size, "] (", rows / n_exp, " rows, ", in, " inputs / group size ",
         f.group_size, from, ")");
  }
  f.scale_type = s->dtype == StDtype::F16 ? DType::F16 : s->dtype == StDtype::BF16 ? DType::BF16 : DType::F32;
  mlx_affine_check(f, in);  // holds after the checks above; a safety net

  TensorView v;
  v.name = gguf;
  v.n_dims = static_cast<int>(dims);
  v.ne[0] = in;
  v.ne[1] = rows / n_exp;
  if (dims == 3) v.ne[2] = n_exp;
  const size_t ss = st_dtype_size(s->dtype);
  if (owned.affine_in_place && !is_router(gguf)) {
    // Read where the file keeps it: the codes as the tensor's rows, the scales and biases as its
    // planes (DType::MLX_A*; the cpu backend's int8 kernels and every decoder take them as they
    // are). Routers stay float (below); a folder opened for `pack` converts, as GGUF has no such type.
    v.type = dtype_affine_of_bits(f.bits);
    v.data = w.data;
    v.nbytes = w.nbytes;
    v.affine.scales = s->data;
    v.affine.biases = b->data;
    v.affine.group_row_bytes = static_cast<size_t>(n_groups) * ss;
    v.affine.group_size = f.group_size;
    v.affine.scale_type = f.scale_type;
    auto& e = summary[std::to_string(f.bits) + "-bit g" + std::to_string(f.group_size) + " " +
                      std::string(dtype_name(f.scale_type)) + " → " + std::string(dtype_name(v.type)) + " (in place)"];
    e.first += 1;
    e.second += w.nbytes + s->nbytes + b->nbytes;
    return v;
  }
  // Q4_1/Q5_1/Q8_A blocks where they hold the groups exactly; else (scales that are not fp16
  // values, a group size that is not a multiple of 32) or for a router (kept in float: an int8
  // rounding would move expert choices) float32, the numbers quantized_matmul computes.
  std::optional<DType> type = is_router(gguf) ? std::nullopt : mlx_affine_repack_type(f);
  if (type && !mlx_affine_groups_fp16_exact(f, s->data, b->data, rows * n_groups)) type.reset();
  v.type = type.value_or(DType::F32);
  const size_t row_bytes = dtype_row_bytes(v.type, in);
  v.nbytes = row_bytes * static_cast<size_t>(rows);
  uint8_t* dst = owned.alloc(v.nbytes);
  v.data = dst;
  // Row r's codes, scales and biases: in the mapped shards, which must outlive the converter.
  const uint8_t *codes = w.data, *scales = s->data, *biases = b->data;
  const size_t code_row = static_cast<size_t>(words) * 4, group_row = static_cast<size_t>(n_groups) * ss;
  auto convert = [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const auto* c = reinterpret_cast<const uint32_t*>(codes + static_cast<size_t>(r) * code_row);
      const uint8_t *sc = scales + static_cast<size_t>(r) * group_row,
                    *bi = biases + static_cast<size_t>(r) * group_row;
      uint8_t* out = dst + static_cast<size_t>(r) * row_bytes;
      if (!type)
        mlx_affine_dequantize_row_f32(f, c, sc, bi, in, reinterpret_cast<float*>(out));
      else if (!mlx_affine_repack_row(f, *type, c, sc, bi, in, out))
        fail(at, ": row ", r, " has a scale or bias that is not an fp16 value after all (internal error)");
    }
  };
  if (owned.defer_experts && dims == 3 && gguf.ends_with("_exps.weight") && !gguf.ends_with("gate_up_exps.weight")) {
    const Owned* o = &owned;  // the converter lives in `owned`, as do the files
    auto drop = [=](int64_t r0, int64_t r1) {
      const size_t n = static_cast<size_t>(r1 - r0);
      for (const auto& file : o->files) {
        file->drop_range(codes + static_cast<size_t>(r0) * code_row, n * code_row);
        file->drop_range(scales + static_cast<size_t>(r0) * group_row, n * group_row);
        file->drop_range(biases + static_cast<size_t>(r0) * group_row, n * group_row);
      }
    };
    owned.deferred.push_back({dst, row_bytes, rows, convert, drop});
  } else {
    // Every core on the big tensors: a 30B-class folder is gigabytes of groups to convert.
    if (rows * in >= (int64_t{1} << 22))
      ThreadPool(0).parallel_for(rows, [&](int64_t r0, int64_t r1, int) { convert(r0, r1); });
    else
      convert(0, rows);
    owned.drop_sources({&w, s, b});
  }
  const std::string how = type ? std::string(dtype_name(*type)) + " (exact)" : "f32 (dequantized)";
  auto& e = summary[std::to_string(f.bits) + "-bit g" + std::to_string(f.group_size) + " " +
                    std::string(dtype_name(f.scale_type)) + " → " + how];
  e.first += 1;
  e.second += v.nbytes;
  return v;
}

// The experts of one stacked GGUF tensor ([in, out, E]: each expert's [out, in] matrix after
// the other), stored one by one as Hugging Face writes them: all E = num_experts present, float,
// of one dtype and of the shape the config gives, copied once into memory the file owns (GGUF
// tensors are contiguous; mlx_lm.convert writes them stacked, which maps in place).
TensorView stack_experts(const std::string& gguf, const std::map<int64_t, std::pair<const StTensor*, fs::path>>& parts,
                         int64_t n_expert, int64_t n_embd, int64_t n_ff_exp, const fs::path& cfg, Owned& owned) {
  const bool down = gguf.ends_with("ffn_down_exps.weight");
  const int64_t out = down ? n_embd : n_ff_exp, in = down ? n_ff_exp : n_embd;
  const std::string what = gguf.substr(0, gguf.size() - 7);  // without ".weight"
  if (n_expert <= 0 || n_ff_exp <= 0)
    fail(parts.begin()->second.second.string(), ": tensor '", parts.begin()->second.first->name,
         "' is an expert, but config.json's model_type has no experts");
  const StTensor* first = parts.begin()->second.first;
  for (int64_t e = 0; e < n_expert; ++e) {
    const auto it = parts.find(e);
    if (it == parts.end())
      fail(cfg.string(), ": expert ", e, " of ", what, " is missing (num_experts ", n_expert, "; ", parts.size(),
           " found)");
    const StTensor& t = *it->second.first;
    const auto dt = st_dtype_to_dtype(t.dtype);
    if (!dt || (*dt != DType::F32 && *dt != DType::F16 && *dt != DType::BF16))
      fail(it->second.second.string(), ": tensor '", t.name, "' has dtype ", st_dtype_name(t.dtype),
           " (experts stored one by one: F32, F16 or BF16)");
    if (t.dtype != first->dtype)
      fail(it->second.second.string(), ": tensor '", t.name, "' has dtype ", st_dtype_name(t.dtype), ", ", first->name,
           " ", st_dtype_name(first->dtype), " (one stacked tensor, one dtype)");
    if (t.shape != std::vector<int64_t>{out, in})
      fail(it->second.second.string(), ": tensor '", t.name, "' has shape ", json(t.shape).dump(), ", want [", out,
           ", ", in, "] (config.json's ",
           down ? "hidden_size, moe_intermediate_size" : "moe_intermediate_size, hidden_size", ")");
  }
  if (static_cast<int64_t>(parts.size()) != n_expert)
    fail(cfg.string(), ": ", what, " has ", parts.size(), " experts stored, num_experts is ", n_expert);
  const size_t bytes = first->nbytes;
  uint8_t* stacked = owned.alloc(bytes * static_cast<size_t>(n_expert));
  for (int64_t e = 0; e < n_expert; ++e)
    std::memcpy(stacked + static_cast<size_t>(e) * bytes, parts.at(e).first->data, bytes);
  TensorView v;
  v.name = gguf;
  v.type = *st_dtype_to_dtype(first->dtype);
  v.n_dims = 3;
  v.ne[0] = in;
  v.ne[1] = out;
  v.ne[2] = n_expert;
  v.nbytes = bytes * static_cast<size_t>(n_expert);
  v.data = stacked;
  return v;
}

// The rows of t in `order` (source row indices), copied once into memory `owned` keeps: the
// rows' bytes, and an MLX affine tensor's scale and bias rows with them. The view keeps t's name
// and shape but for its rows (ne[1] = order.size(), ne[2] = 1); callers reshape it.
TensorView copy_rows(const TensorView& t, const std::vector<int64_t>& order, Owned& owned) {
  const size_t rb = t.nbytes / static_cast<size_t>(t.n_rows()), n = order.size();
  const bool affine = dtype_is_affine(t.type);
  const size_t gb = affine ? t.affine.group_row_bytes : 0;
  uint8_t* dst = owned.alloc(n * (rb + 2 * gb));
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (size_t i = 0; i < n; ++i) {
    const size_t r = static_cast<size_t>(order[i]);
    std::memcpy(dst + i * rb, src + r * rb, rb);
    if (affine) {
      std::memcpy(dst + n * rb + i * gb, t.affine.scales + r * gb, gb);
      std::memcpy(dst + n * (rb + gb) + i * gb, t.affine.biases + r * gb, gb);
    }
  }
  TensorView v = t;
  v.ne[1] = static_cast<int64_t>(n);
  v.ne[2] = v.ne[3] = 1;
  v.nbytes = n * rb;
  v.data = dst;
  if (affine) {
    v.affine.scales = dst + n * rb;
    v.affine.biases = dst + n * (rb + gb);
  }
  return v;
}

// Rows [r0, r0 + n) of t as a view of its own (affine planes with them).
TensorView row_range(const TensorView& t, int64_t r0, int64_t n) {
  const size_t rb = t.nbytes / static_cast<size_t>(t.n_rows());
  TensorView v = t;
  v.ne[1] = n;
  v.ne[2] = v.ne[3] = 1;
  v.nbytes = static_cast<size_t>(n) * rb;
  v.data = static_cast<const uint8_t*>(t.data) + static_cast<size_t>(r0) * rb;
  if (dtype_is_affine(t.type)) {
    v.affine.scales += static_cast<size_t>(r0) * t.affine.group_row_bytes;
    v.affine.biases += static_cast<size_t>(r0) * t.affine.group_row_bytes;
  }
  return v;
}

// transformers' fused Qwen3.5-MoE experts (GGUF name ffn_gate_up_exps, [in, 2·n_ff_exp, E]):
// each expert's first n_ff_exp rows are its gate, the next its up; copied once into the two
// stacked tensors.
std::pair<TensorView, TensorView> split_gate_up(const TensorView& t, int64_t n_ff_exp, const fs::path& file,
                                                Owned& owned) {
  if (t.n_dims != 3 || t.ne[1] != 2 * n_ff_exp)
    fail(file.string(), ": tensor '", t.name, "' has ", t.ne[1], " rows per expert, want 2 x moe_intermediate_size ",
         n_ff_exp);
  const int64_t E = t.ne[2];
  std::vector<int64_t> order;  // every expert's gate rows, then every expert's up rows
  order.reserve(static_cast<size_t>(2 * E * n_ff_exp));
  for (int h = 0; h < 2; ++h)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t i = 0; i < n_ff_exp; ++i) order.push_back((2 * e + h) * n_ff_exp + i);
  const TensorView all = copy_rows(t, order, owned);
  const std::string blk = t.name.substr(0, t.name.size() - std::string("ffn_gate_up_exps.weight").size());
  TensorView gate = row_range(all, 0, E * n_ff_exp), up = row_range(all, E * n_ff_exp, E * n_ff_exp);
  gate.name = blk + "ffn_gate_exps.weight";
  up.name = blk + "ffn_up_exps.weight";
  for (TensorView* v : {&gate, &up}) {
    v->n_dims = 3;
    v->ne[1] = n_ff_exp;
    v->ne[2] = E;
  }
  return {gate, up};
}

}  // namespace

std::vector<int64_t> qkvz_split_rows(int64_t hk, int64_t hv, int64_t dk, int64_t dv) {
  const int64_t r = hv / hk, group = 2 * dk + 2 * r * dv;
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(hk * group));
  // (offset in a group, rows) of q, k, v, then z.
  const std::pair<int64_t, int64_t> parts[] = {{0, dk}, {dk, dk}, {2 * dk, r * dv}, {2 * dk + r * dv, r * dv}};
  for (const auto& [off, n] : parts)
    for (int64_t g = 0; g < hk; ++g)
      for (int64_t i = 0; i < n; ++i) order.push_back(g * group + off + i);
  return order;
}

namespace {

// Qwen3-Next's in_proj_qkvz (GGUF name attn_qkvz) split into attn_qkv (the DeltaNet's conv
// input) and attn_gate (qkvz_split_rows): the rows (float or repacked, whole rows either way)
// copied once in that order.
std::pair<TensorView, TensorView> split_qkvz(const TensorView& t, int64_t hk, int64_t hv, int64_t dk, int64_t dv,
                                             const fs::path& file, Owned& owned) {
  const int64_t r = hv / hk, group = 2 * dk + 2 * r * dv, rows = t.ne[1];
  if (t.n_dims != 2 || rows != hk * group)
    fail(file.string(), ": tensor '", t.name, "' has ", rows, " rows, want linear_num_key_heads ", hk, " x (2 x ", dk,
         " + 2 x ", r, " x ", dv, ") = ", hk * group);
  const TensorView all = copy_rows(t, qkvz_split_rows(hk, hv, dk, dv), owned);
  const std::string blk = t.name.substr(0, t.name.size() - std::string("attn_qkvz.weight").size());
  const int64_t n_qkv = 2 * hk * dk + hv * dv;
  TensorView qkv = row_range(all, 0, n_qkv), z = row_range(all, n_qkv, hv * dv);
  qkv.name = blk + "attn_qkv.weight";
  z.name = blk + "attn_gate.weight";
  return {qkv, z};
}

// MLA's kv_b_proj as transformers stores it ([H·(N+V), L]: per head N key rows, then V value
// rows, over the latent L), float: split once into the absorbed per-head matrices mlx-lm's
// sanitize and llama.cpp's converter make of it, attn_k_b [N, L, H] (each head's key rows
// transposed) and attn_v_b [L, V, H] (its value rows as they are).
std::pair<TensorView, TensorView> split_kv_b(const TensorView& t, int64_t H, int64_t N, int64_t V, int64_t L,
                                             const fs::path& file, Owned& owned) {
  if (t.type != DType::F32 && t.type != DType::F16 && t.type != DType::BF16)
    fail(file.string(), ": tensor '", t.name, "' (kv_b_proj) is ", dtype_name(t.type),
         ": a quantized kv_b_proj is not supported (mlx_lm.convert stores it split, as embed_q / unembed_out)");
  if (t.n_dims != 2 || t.ne[0] != L || t.ne[1] != H * (N + V))
    fail(file.string(), ": tensor '", t.name, "' (kv_b_proj) is [", t.ne[1], ", ", t.ne[0], "], want [", H * (N + V),
         ", ", L, "] (heads x (qk_nope_head_dim + v_head_dim), kv_lora_rank)");
  const size_t es = t.type == DType::F32 ? 4 : 2;
  const auto* src = static_cast<const uint8_t*>(t.data);
  uint8_t* k = owned.alloc(t.nbytes);
  uint8_t* v = k + static_cast<size_t>(H * N * L) * es;
  for (int64_t h = 0; h < H; ++h) {
    const uint8_t* head = src + static_cast<size_t>(h * (N + V) * L) * es;
    for (int64_t l = 0; l < L; ++l)
      for (int64_t n = 0; n < N; ++n)
        std::memcpy(k + static_cast<size_t>((h * L + l) * N + n) * es, head + static_cast<size_t>(n * L + l) * es, es);
    std::memcpy(v + static_cast<size_t>(h * V * L) * es, head + static_cast<size_t>(N * L) * es,
                static_cast<size_t>(V * L) * es);
  }
  const std::string blk = t.name.substr(0, t.name.size() - std::string("attn_kv_b.weight").size());
  TensorView kb = t, vb = t;
  kb.name = blk + "attn_k_b.weight";
  kb.n_dims = vb.n_dims = 3;
  kb.ne[0] = N, kb.ne[1] = L, kb.ne[2] = H;
  kb.nbytes = static_cast<size_t>(H * N * L) * es;
  kb.data = k;
  vb.name = blk + "attn_v_b.weight";
  vb.ne[0] = L, vb.ne[1] = V, vb.ne[2] = H;
  vb.nbytes = static_cast<size_t>(H * V * L) * es;
  vb.data = v;
  return {kb, vb};
}

}  // namespace

bool is_model_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

std::unique_ptr<GgufFile> open_folder_tokenizer(const std::string& dir_s) {
  const fs::path dir(dir_s);
  const json top = read_json(dir / "config.json", false);
  Kv kv;
  add_tokenizer(dir, top.is_object() ? top : json::object(), kv);
  return GgufFile::synthetic(dir.string(), std::move(kv), {}, nullptr);
}

namespace {

// The folder as a GGUF; with `defer_experts` the stacked experts that need converting are left
// to FolderForRewrite's fill (`owned_out` gets the memory that holds them).
std::unique_ptr<GgufFile> open_folder(const std::string& dir_s, bool defer_experts, std::shared_ptr<Owned>* owned_out,
                                      bool affine_in_place = false) {
  const fs::path dir(dir_s), cfg_path = dir / "config.json";
  json top = read_json(cfg_path, true);
  if (!top.is_object()) fail(cfg_path.string(), ": not a JSON object");
  json c = top;
  if (top.contains("text_config") && top["text_config"].is_object())
    for (const auto& [k, v] : top["text_config"].items()) c[k] = v;  // the language model's own settings win
  // A field of the wrong JSON type (a string where a number belongs) is named, not thrown raw.
  FolderConfig fc = [&] {
    try {
      return read_folder_config(dir, top, c);
    } catch (const json::exception& e) {
      fail(cfg_path.string(), ": a field has the wrong type: ", e.what());
    }
  }();
  const MlxQuantConfig quant = read_quant_config(c, cfg_path);
  const std::string& arch = fc.arch;
  Kv& kv = fc.kv;
  const bool tied = c.contains("tie_word_embeddings") && c["tie_word_embeddings"].is_boolean() &&
                    c["tie_word_embeddings"].get<bool>();
  add_tokenizer(dir, top, kv);
  if (c.contains("vocab_size") && c["vocab_size"].is_number_integer() && c["vocab_size"].get<int64_t>() > 0 &&
      c["vocab_size"].get<int64_t>() <= int64_t{1} << 24)
    pad_vocab(kv, c["vocab_size"].get<int64_t>());

  // The weights: one file, or the shards the index names.
  auto owned = std::make_shared<Owned>();
  owned->defer_experts = defer_experts;
  owned->affine_in_place = affine_in_place && !defer_experts;
  if (owned_out) *owned_out = owned;
  std::vector<fs::path> shards;
  if (fs::exists(dir / "model.safetensors")) {
    shards.push_back(dir / "model.safetensors");
  } else {
    const json idx = read_json(dir / "model.safetensors.index.json", false);
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      fail(dir.string(), ": no model.safetensors, and no model.safetensors.index.json with a weight_map");
    std::set<std::string> names;
    for (const auto& [t, f] : idx["weight_map"].items()) {
      const std::string shard = f.get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
        fail(dir.string(), ": weight_map names '", shard, "', which is not a file in the folder");
      names.insert(shard);
    }
    for (const auto& s : names) shards.push_back(dir / s);
  }
  // Every tensor of every shard by name: an MLX-quantized X.weight has its X.scales and
  // X.biases beside it (in any shard).
  std::map<std::string, std::pair<const StTensor*, fs::path>> by_name;
  for (const fs::path& p : shards) {
    owned->files.push_back(std::make_unique<SafetensorsFile>(p.string()));
    for (const StTensor& t : owned->files.back()->tensors())
      if (!by_name.emplace(t.name, std::make_pair(&t, p)).second)
        fail(p.string(), ": tensor '", t.name, "' is also in another shard");
  }
  auto find = [&](const std::string& n) -> const StTensor* {
    auto it = by_name.find(n);
    return it == by_name.end() ? nullptr : it->second.first;
  };
  auto ends_with = [](const std::string& n, const std::string& suffix) {
    return n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  // A Hugging Face checkpoint (not through mlx-lm) of Qwen3.5 stores conv1d as [C, 1, K] and
  // its RMSNorm weights as the offset from 1 (the model multiplies by 1 + w); mlx-lm's sanitize
  // moves the axis and adds the 1, and a folder it saved stores [C, K, 1] and the multiplier.
  // Told apart as mlx-lm tells them apart: by the conv1d's last axis.
  bool offset_norms = false;
  for (const auto& [tname, entry] : by_name)
    if (fc.hybrid && tname.ends_with("linear_attn.conv1d.weight") && entry.first->shape.size() == 3 &&
        entry.first->shape[2] != 1)
      offset_norms = true;
  QuantSummary summary;
  std::vector<TensorView> tensors;
  // Hugging Face's per-expert layout: each stacked tensor's experts by index, stacked below.
  std::map<std::string, std::map<int64_t, std::pair<const StTensor*, fs::path>>> per_expert_parts;
  for (const auto& [tname, entry] : by_name) {
    const StTensor& t = *entry.first;
    const fs::path& p = entry.second;
    if (ends_with(tname, ".scales") || ends_with(tname, ".biases")) {
      const std::string module = tname.substr(0, tname.size() - 7);
      if (!find(module + ".weight")) fail(p.string(), ": tensor '", tname, "' has no ", module, ".weight to belong to");
      if (!find(module + ".scales")) fail(p.string(), ": tensor '", module, ".scales' missing (", tname, " is there)");
      continue;  // read with its weight
    }
    if (const auto ex = per_expert(tname)) {
      if (find(tname.substr(0, tname.size() - 7) + ".scales"))
        fail(p.string(), ": tensor '", tname, "': quantized experts stored one by one are not supported ",
             "(mlx_lm.convert stacks them as switch_mlp)");
      auto& slot = per_expert_parts[ex->gguf];
      slot.emplace(ex->expert, std::make_pair(&t, p));
      continue;
    }
    const std::string name = gguf_name(t.name, p, arch, fc.mla_layer, fc.n_layer);
    if (name.empty() || (name == "output.weight" && tied)) continue;  // tied: mlx-lm drops lm_head too
    if (ends_with(tname, ".weight")) {
      const std::string module = tname.substr(0, tname.size() - 7);
      if (const StTensor* sc = find(module + ".scales")) {
        tensors.push_back(load_mlx_quantized(t, sc, find(module + ".biases"), module, name, matrix_in(name, fc.widths),
                                             quant, p, *owned, summary));
        continue;
      }
    }
    const auto dt = st_dtype_to_dtype(t.dtype);
    if (!dt || (*dt != DType::F32 && *dt != DType::F16 && *dt != DType::BF16))
      fail(p.string(), ": tensor '", t.name, "' has dtype ", st_dtype_name(t.dtype),
           " (float weights F32/F16/BF16, or MLX-quantized U32 codes with .scales and .biases beside them)");
    // The depthwise convs, [C, K, 1] (mlx-lm) or [C, 1, K] (HF): the same bytes as GGUF's [K, C]
    // (Qwen3.5's ssm_conv1d) or [K, 1, C] (Kimi's ssm_conv1d_q/k/v) either way. A_log: Kimi's
    // is [1, 1, H, 1]; dt_bias may be [H, D] (HF's Kimi): both are read flat.
    const bool conv = name.find(".ssm_conv1d") != std::string::npos;
    const bool flat = name.ends_with(".ssm_a") || name.ends_with(".ssm_dt.bias");
    if (conv                 ? t.shape.size() != 3 || (t.shape[1] != 1 && t.shape[2] != 1)
        : is_3d_matrix(name) ? t.shape.size() != 3
        : flat               ? t.shape.empty() || t.shape.size() > 4
                             : t.shape.empty() || t.shape.size() > 2)
      fail(p.string(), ": tensor '", t.name, "' is ", json(t.shape).dump(), " (",
           conv                 ? "a depthwise conv1d is [channels, kernel, 1] or [channels, 1, kernel]"
           : is_3d_matrix(name) ? "stacked experts and per-head matrices are [experts or heads, out, in]"
           : flat               ? "want 1-D to 4-D"
                                : "want 1-D or 2-D",
           ")");
    TensorView v;
    v.name = name;
    v.n_dims = static_cast<int>(t.shape.size());
    for (int d = 0; d < v.n_dims; ++d) v.ne[d] = t.shape[t.shape.size() - 1 - static_cast<size_t>(d)];
    if (conv) {
      const bool kda = name.find(".ssm_conv1d_") != std::string::npos;
      v.n_dims = kda ? 3 : 2;
      v.ne[0] = t.shape[1] * t.shape[2];
      v.ne[1] = kda ? 1 : t.shape[0];
      v.ne[2] = kda ? t.shape[0] : 1;
    }
    if (name.ends_with(".ssm_dt.bias")) {
      v.n_dims = 1;
      v.ne[0] = static_cast<int64_t>(t.nbytes / st_dtype_size(t.dtype));
      v.ne[1] = v.ne[2] = v.ne[3] = 1;
    }
    if (v.n_dims == 1 || is_router(name) || conv || flat) {
      // Norms, biases, routers, the convs and the decays: the ops read them as f32 arrays.
      const size_t count = t.nbytes / st_dtype_size(t.dtype);
      float* f = owned->alloc<float>(count);
      for (size_t i = 0; i < count; ++i) {
        uint16_t h = 0;
        if (*dt == DType::F32) {
          std::memcpy(&f[i], t.data + 4 * i, 4);
          continue;
        }
        std::memcpy(&h, t.data + 2 * i, 2);
        f[i] = *dt == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
      }
      // The decay: llama.cpp's ssm_a holds -exp(A_log), what the model multiplies by; Ling 3's
      // safe gate takes exp(A_log) inside a sigmoid (llama.cpp's bailingmoe3 converter).
      if (name.ends_with(".ssm_a"))
        for (float& x : std::span(f, count)) x = arch == "bailingmoe3" ? std::exp(x) : -std::exp(x);
      if (offset_norms && v.n_dims == 1 && !name.ends_with("ssm_norm.weight") && name.ends_with("norm.weight"))
        for (float& x : std::span(f, count)) x += 1.0f;
      v.type = DType::F32;
      v.data = f;
      v.nbytes = count * 4;
    } else if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) {
      // The format promises no alignment (a header of odd length shifts every tensor); the
      // kernels read 16/32-bit elements, so a misaligned tensor is copied once.
      uint8_t* copy = owned->alloc(t.nbytes);
      std::memcpy(copy, t.data, t.nbytes);
      v.type = *dt;
      v.data = copy;
      v.nbytes = t.nbytes;
    } else {
      v.type = *dt;
      v.data = t.data;
      v.nbytes = t.nbytes;
    }
    tensors.push_back(v);
  }
  // What the file stores fused or in another shape than the ops read: split or reshaped once.
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name.ends_with("ffn_gate_up_exps.weight")) {
      auto [gate, up] = split_gate_up(tensors[i], fc.n_ff_exp, cfg_path, *owned);
      tensors[i] = gate;
      tensors.push_back(up);
    } else if (tensors[i].name.ends_with("attn_kv_b.weight")) {
      auto [kb, vb] = split_kv_b(tensors[i], fc.mla_heads, fc.widths.mla_nope, fc.mla_v, fc.widths.kv_lora, cfg_path,
                                 *owned);
      tensors[i] = kb;
      tensors.push_back(vb);
    } else if (tensors[i].name.ends_with("attn_qkvz.weight")) {
      auto [qkv, z] = split_qkvz(tensors[i], fc.ssm_hk, fc.ssm_hv, fc.ssm_dk, fc.ssm_dv, cfg_path, *owned);
      tensors[i] = qkv;
      tensors.push_back(z);
    } else if (tensors[i].name.ends_with("ffn_gate_inp_shexp.weight")) {
      // [1, n_embd] in the file (float or quantized); a vector to the ops.
      if (tensors[i].n_dims != 2 || tensors[i].ne[1] != 1)
        fail(dir.string(), ": tensor '", tensors[i].name, "' (mlp.shared_expert_gate) must be [1, hidden_size]");
      tensors[i].n_dims = 1;
    }
  for (const auto& [gguf, parts] : per_expert_parts)
    tensors.push_back(stack_experts(gguf, parts, fc.n_expert, fc.n_embd, fc.n_ff_exp, cfg_path, *owned));
  if (!summary.empty()) {
    std::string line = "mlx affine";
    for (const auto& [what, n] : summary) {
      char buf[64];
      std::snprintf(buf, sizeof buf, ": %lld tensor%s, %.2f MiB;", static_cast<long long>(n.first),
                    n.first == 1 ? "" : "s", n.second / 1048576.0);
      line += " " + what + buf;
    }
    line.pop_back();
    kv.emplace_back("sluice.folder.quantization", str(line));
  }
  // The converted weights are this load's own copies: --repack may interleave them in place.
  std::vector<std::span<uint8_t>> converted;
  for (AnonMap& m : owned->converted) converted.emplace_back(m.data(), m.size());
  return GgufFile::synthetic(dir.string(), std::move(kv), std::move(tensors), owned, std::move(converted));
}

}  // namespace

std::unique_ptr<GgufFile> open_model_folder(const std::string& dir, bool affine_in_place) {
  return open_folder(dir, false, nullptr, affine_in_place);
}

FolderForRewrite open_model_folder_for_rewrite(const std::string& dir) {
  std::shared_ptr<Owned> owned;
  FolderForRewrite r;
  r.file = open_folder(dir, true, &owned);
  // Every core on each expert's rows: converting is most of a pack's CPU time (a 12-layer
  // 30B-class 4-bit folder: 12 s of one core, the write itself ~6 s).
  auto pool = std::make_shared<ThreadPool>(0);
  r.fill = [owned, pool](const void* p, size_t n) {
    int64_t r0 = 0, r1 = 0;
    if (const Owned::Deferred* d = owned->rows_of(p, n, &r0, &r1))
      pool->parallel_for(r1 - r0, [&](int64_t a, int64_t b, int) { d->convert(r0 + a, r0 + b); });
  };
  r.release = [owned](const void* p, size_t n) {
    int64_t r0 = 0, r1 = 0;
    if (const Owned::Deferred* d = owned->rows_of(p, n, &r0, &r1)) {
      // The converted rows' whole pages go back (a row shared with the next expert's stays).
      drop_mapped_pages(d->dst, d->row_bytes * static_cast<size_t>(d->rows), p, n);
      d->drop(r0, r1);
    }
  };
  return r;
}

}  // namespace sluice
