// memory/expert_store: expert layouts from GGUF (stacked or packed), the bookkeeping every
// policy shares (routing counts, prediction scoring, stats), and the resident and mmap policies.
#include "memory/expert_store.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/clock.h"
#include "core/error.h"
#include "format/gguf.h"
#include "memory/expert_stream.h"
#include "memory/memory_limit.h"

namespace sluice {
namespace {

size_t page_size() {
  static const size_t p = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

// A named counter from /proc/self/<file> ("VmHWM:   1234 kB", "read_bytes: 5678"); 0 if absent.
uint64_t proc_self_value(const char* file, const std::string& key) {
  std::ifstream in(std::string("/proc/self/") + file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    std::istringstream is(line.substr(key.size()));
    uint64_t v = 0;
    std::string unit;
    is >> v >> unit;
    return unit == "kB" ? v * 1024 : v;
  }
  return 0;
}

uint64_t major_faults() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_majflt);
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  return buf;
}

// Hands out a fixed list in order: the resident and mmap policies have nothing to wait for.
class InOrderBatch final : public ExpertBatch {
 public:
  explicit InOrderBatch(std::vector<std::pair<int32_t, ExpertWeights>> items) : items_(std::move(items)) {}
  bool next(int32_t* expert, ExpertWeights* w) override {
    if (i_ >= items_.size()) return false;
    *expert = items_[i_].first;
    *w = items_[i_].second;
    ++i_;
    return true;
  }
  bool views_outlive_next() const override { return true; }

 private:
  std::vector<std::pair<int32_t, ExpertWeights>> items_;
  size_t i_ = 0;
};

const ExpertLocation& location(const ExpertLayout& layout, int layer, int32_t expert) {
  if (layer < 0 || static_cast<size_t>(layer) >= layout.layers.size() || layout.layers[layer].empty())
    fail("expert store: layer ", layer, " has no experts");
  const auto& l = layout.layers[layer];
  if (expert < 0 || static_cast<size_t>(expert) >= l.size())
    fail("expert store: expert ", expert, " of layer ", layer, " is out of range (", l.size(), " experts)");
  return l[expert];
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Layouts

size_t ExpertLayout::total_bytes() const {
  size_t n = 0;
  for (const auto& l : layers)
    for (const auto& e : l) n += e.bytes[0] + e.bytes[1] + e.bytes[2];
  return n;
}

int64_t ExpertLayout::n_expert_max() const {
  size_t n = 0;
  for (const auto& l : layers) n = std::max(n, l.size());
  return static_cast<int64_t>(n);
}

bool gguf_has_bundled_experts(const GgufFile& f) {
  const GgufValue* v = f.find("sluice.expert_layout");
  const auto* s = v ? std::get_if<std::string>(&v->v) : nullptr;
  return s && *s == "bundled";
}

std::vector<ExpertLocation> expert_layer_from_gguf(const GgufFile& f, int64_t layer, int64_t n_embd, int64_t n_ff_exp,
                                                   int64_t n_expert) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const char* kinds[3] = {"gate", "up", "down"};
  const int64_t in[3] = {n_embd, n_embd, n_ff_exp}, out[3] = {n_ff_exp, n_ff_exp, n_embd};
  std::vector<ExpertLocation> locs(n_expert);
  auto offset_of = [&](const TensorView& v) {
    return static_cast<uint64_t>(static_cast<const uint8_t*>(v.data) - f.base());
  };
  for (int k = 0; k < 3; ++k) {
    const TensorView* st = f.find_tensor(p + "ffn_" + kinds[k] + "_exps.weight");
    if (st) {  // stacked [in, out, n_expert]: expert e is the e-th contiguous [in, out] matrix
      if (st->n_dims != 3 || st->ne[0] != in[k] || st->ne[1] != out[k] || st->ne[2] != n_expert)
        fail(f.path(), ": tensor '", st->name, "' has shape [", st->ne[0], ", ", st->ne[1], ", ", st->ne[2],
             "], expected [", in[k], ", ", out[k], ", ", n_expert, "]");
      for (int64_t e = 0; e < n_expert; ++e) {
        TensorView v = st->slice2d(e);
        ExpertLocation& loc = locs[e];
        (k == 0 ? loc.views.gate : k == 1 ? loc.views.up : loc.views.down) = v;
        loc.offset[k] = offset_of(v);
        loc.bytes[k] = v.nbytes;
      }
      continue;
    }
    // Packed by `sluice pack`: one 2-D tensor per expert, blk.N.ffn_gate.E.weight (the names
    // llama.cpp used for per-expert tensors in early Mixtral files).
    for (int64_t e = 0; e < n_expert; ++e) {
      const std::string name = p + "ffn_" + kinds[k] + "." + std::to_string(e) + ".weight";
      const TensorView* t = f.find_tensor(name);
      if (!t) {
        if (e == 0) fail(f.path(), ": missing tensor '", p, "ffn_", kinds[k], "_exps.weight'");
        fail(f.path(), ": missing tensor '", name, "' (a packed file needs all ", n_expert, " experts)");
      }
      if (t->n_dims != 2 || t->ne[0] != in[k] || t->ne[1] != out[k])
        fail(f.path(), ": tensor '", name, "' has shape [", t->ne[0], ", ", t->ne[1], "], expected [", in[k], ", ",
             out[k], "]");
      ExpertLocation& loc = locs[e];
      (k == 0 ? loc.views.gate : k == 1 ? loc.views.up : loc.views.down) = *t;
      loc.offset[k] = offset_of(*t);
      loc.bytes[k] = t->nbytes;
    }
  }
  return locs;
}

std::string_view expert_policy_name(ExpertPolicy p) {
  switch (p) {
    case ExpertPolicy::resident: return "resident";
    case ExpertPolicy::mmap: return "mmap";
    case ExpertPolicy::stream: return "stream";
  }
  return "?";
}

ExpertPolicy expert_policy_from_name(std::string_view name) {
  if (name == "resident") return ExpertPolicy::resident;
  if (name == "mmap") return ExpertPolicy::mmap;
  if (name == "stream") return ExpertPolicy::stream;
  fail("expert policy '", name, "' is not one of: resident, mmap, stream");
}

// ---------------------------------------------------------------------------------------------
// Stats

double ExpertStats::disk_mb_per_s() const {
  const double t = io_seconds > 0 ? io_seconds : wall_seconds;
  return t > 0 ? double(bytes_read) / t / 1e6 : 0.0;
}

size_t peak_rss_bytes() { return proc_self_value("status", "VmHWM:"); }

std::string format_expert_stats(const ExpertStats& s) {
  std::ostringstream os;
  char buf[256];
  os << "experts: " << s.policy;
  if (s.policy == "stream") {
    std::snprintf(buf, sizeof buf, ", cache %s (peak %s, %d pinned, %llu evictions)",
                  human_bytes(double(s.cache_budget)).c_str(), human_bytes(double(s.cache_peak_bytes)).c_str(),
                  s.pinned, static_cast<unsigned long long>(s.evictions));
    os << buf;
  }
  if (s.policy != "resident") {
    std::snprintf(buf, sizeof buf, "; hit rate %.1f%% of %llu uses", 100 * s.hit_rate(),
                  static_cast<unsigned long long>(s.requests));
    os << buf;
    if (s.policy == "stream" && s.requests) {
      std::snprintf(buf, sizeof buf, " (prefetched %.1f%%)", 100.0 * double(s.prefetch_hits) / double(s.requests));
      os << buf;
    }
    if (s.predicted) {
      std::snprintf(buf, sizeof buf, "; prefetch recall %.1f%%, precision %.1f%%", 100 * s.prefetch_recall(),
                    100 * s.prefetch_precision());
      os << buf;
      if (s.policy == "stream") {
        // Recall and precision score the predictor; these say what the prefetch gate made of it.
        std::snprintf(buf, sizeof buf,
                      " (%llu read ahead, %llu declined; %llu used, %llu of them late; %s of victims read again)",
                      static_cast<unsigned long long>(s.prefetch_reads),
                      static_cast<unsigned long long>(s.prefetch_skipped),
                      static_cast<unsigned long long>(s.prefetch_hits),
                      static_cast<unsigned long long>(s.prefetch_late),
                      human_bytes(double(s.prefetch_regret_bytes)).c_str());
        os << buf;
      }
    }
    std::snprintf(buf, sizeof buf, "; %s %s", s.policy == "stream" ? "read" : "process read",
                  human_bytes(double(s.bytes_read)).c_str());
    os << buf;
    if (s.policy == "stream") {
      std::snprintf(buf, sizeof buf, " in %llu reads", static_cast<unsigned long long>(s.reads));
      os << buf;
    }
    if (s.policy == "stream")
      std::snprintf(buf, sizeof buf, " at %.0f MB/s; I/O stall %.2f ms/token", s.disk_mb_per_s(),
                    s.stall_ms_per_token());
    else
      std::snprintf(buf, sizeof buf, " at %.0f MB/s over the run; %llu major page faults", s.disk_mb_per_s(),
                    static_cast<unsigned long long>(s.major_faults));
    os << buf;
  } else {
    os << " (" << human_bytes(double(s.expert_bytes)) << " of experts in the mapping)";
  }
  if (s.policy == "stream") {
    if (s.cache_full_pass)
      os << "; cache full from forward pass " << s.cache_full_pass << " (1 = the prompt)";
    else
      os << "; cache never full";
  }
  os << "; peak RSS " << human_bytes(double(peak_rss_bytes()));
  return os.str();
}

std::string format_expert_steady_state(const ExpertStats& a, const ExpertStats& b, double seconds, int64_t n_tokens) {
  auto d = [](uint64_t x, uint64_t y) { return y > x ? double(y - x) : 0.0; };
  const double n = double(std::max<int64_t>(n_tokens, 1)), t = std::max(seconds, 1e-9);
  const double requests = d(a.requests, b.requests), bytes = d(a.bytes_read, b.bytes_read);
  char buf[256];
  std::ostringstream os;
  std::snprintf(buf, sizeof buf, "%.2f tok/s", double(n_tokens) / t);
  os << buf;
  if (b.policy == "resident") return os.str();
  std::snprintf(buf, sizeof buf, "; hit rate %.1f%%", requests ? 100 * d(a.hits, b.hits) / requests : 0.0);
  os << buf;
  if (const double used = d(a.used_with_prediction, b.used_with_prediction), pred = d(a.predicted, b.predicted);
      pred > 0) {
    const double right = d(a.predicted_used, b.predicted_used);
    std::snprintf(buf, sizeof buf, ", prefetch recall %.1f%%, precision %.1f%%", used ? 100 * right / used : 0.0,
                  100 * right / pred);
    os << buf;
  }
  std::snprintf(buf, sizeof buf, "; read %s/token, %.0f MB/s over the decode", human_bytes(bytes / n).c_str(),
                bytes / t / 1e6);
  os << buf;
  if (b.policy == "stream") {
    const double io = b.io_seconds - a.io_seconds;
    if (io > 0) {
      std::snprintf(buf, sizeof buf, " (%.0f MB/s while reading)", bytes / io / 1e6);
      os << buf;
    }
    std::snprintf(buf, sizeof buf, "; I/O stall %.2f ms/token", 1e3 * (b.stall_seconds - a.stall_seconds) / n);
    os << buf;
  } else {
    std::snprintf(buf, sizeof buf, "; %.0f major page faults/token", d(a.major_faults, b.major_faults) / n);
    os << buf;
  }
  return os.str();
}

// ---------------------------------------------------------------------------------------------
// Shared bookkeeping

ExpertSource::ExpertSource(const ExpertLayout& layout) {
  counts_.resize(layout.layers.size());
  predicted_.resize(layout.layers.size());
  for (size_t l = 0; l < layout.layers.size(); ++l) counts_[l].assign(layout.layers[l].size(), 0);
  book_.expert_bytes = layout.total_bytes();
  t0_ = now_seconds();
}

void ExpertSource::prefetch(int layer, std::span<const int32_t> experts) { book_prediction(layer, experts); }

void ExpertSource::note_tokens(int64_t n) {
  std::lock_guard<std::mutex> lk(book_mu_);
  book_.tokens += static_cast<uint64_t>(n);
}

void ExpertSource::book_acquire(int layer, std::span<const ExpertUse> uses) {
  std::lock_guard<std::mutex> lk(book_mu_);
  if (layer < 0 || static_cast<size_t>(layer) >= counts_.size()) return;
  book_.requests += uses.size();
  if (tracing_) {
    trace_.push_back(layer);
    trace_.push_back(static_cast<int32_t>(uses.size()));
    for (const ExpertUse& u : uses) trace_.push_back(u.expert);
  }
  for (const ExpertUse& u : uses)
    if (u.expert >= 0 && static_cast<size_t>(u.expert) < counts_[layer].size()) counts_[layer][u.expert] += u.n_tokens;
  auto& pred = predicted_[layer];
  if (pred.empty()) return;
  book_.predicted += pred.size();
  book_.used_with_prediction += uses.size();
  for (const ExpertUse& u : uses)
    if (std::find(pred.begin(), pred.end(), u.expert) != pred.end()) ++book_.predicted_used;
  pred.clear();
}

void ExpertSource::book_prediction(int layer, std::span<const int32_t> experts) {
  std::lock_guard<std::mutex> lk(book_mu_);
  if (layer < 0 || static_cast<size_t>(layer) >= predicted_.size()) return;
  predicted_[layer].assign(experts.begin(), experts.end());
}

ExpertStats ExpertSource::stats() const {
  ExpertStats s;
  {
    std::lock_guard<std::mutex> lk(book_mu_);
    s = book_;
  }
  s.policy = std::string(expert_policy_name(policy()));
  s.wall_seconds = now_seconds() - t0_;
  fill_stats(s);
  return s;
}

std::vector<std::vector<uint64_t>> ExpertSource::routing_counts() const {
  std::lock_guard<std::mutex> lk(book_mu_);
  return counts_;
}

std::vector<std::vector<uint64_t>> read_routing_counts(const std::string& path, size_t n_layer) {
  std::ifstream in(path);
  if (!in) fail(path, ": cannot open routing counts (write them with a run's --routing-counts-out)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail(path, ": not valid routing-counts JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("counts") || !j["counts"].is_array())
    fail(path, ": routing counts need an object with a \"counts\" array ([layer][expert])");
  const auto& c = j["counts"];
  if (c.size() != n_layer) fail(path, ": routing counts have ", c.size(), " layers, the model has ", n_layer);
  std::vector<std::vector<uint64_t>> out(n_layer);
  for (size_t l = 0; l < n_layer; ++l) {
    if (!c[l].is_array()) fail(path, ": counts[", l, "] is not an array");
    for (const auto& v : c[l]) {
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
        fail(path, ": counts[", l, "] holds a value that is not a non-negative integer");
      out[l].push_back(v.get<uint64_t>());
    }
  }
  return out;
}

void ExpertSource::save_routing_counts(const std::string& path) const {
  auto counts = routing_counts();
  if (std::filesystem::exists(path)) {
    // Accumulate over calibration runs; a file for another model shape is an error, not lost.
    auto old = read_routing_counts(path, counts.size());
    for (size_t l = 0; l < counts.size(); ++l) {
      if (old[l].size() != counts[l].size())
        fail(path, ": routing counts of layer ", l, " have ", old[l].size(), " experts, the model has ",
             counts[l].size());
      for (size_t e = 0; e < counts[l].size(); ++e) counts[l][e] += old[l][e];
    }
  }
  nlohmann::json j;
  j["n_layer"] = counts.size();
  j["counts"] = counts;
  std::ofstream out(path);
  out << j.dump() << "\n";
  if (!out) fail(path, ": cannot write routing counts");
}

void ExpertSource::record_routing_trace() {
  std::lock_guard<std::mutex> lk(book_mu_);
  tracing_ = true;
}

void ExpertSource::save_routing_trace(const std::string& path) const {
  std::lock_guard<std::mutex> lk(book_mu_);
  std::ofstream out(path);
  for (size_t i = 0; i + 1 < trace_.size();) {
    const int32_t n = trace_[i + 1];
    out << trace_[i];
    for (int32_t j = 0; j < n; ++j) out << ' ' << trace_[i + 2 + j];
    out << '\n';
    i += 2 + static_cast<size_t>(n);
  }
  if (!out) fail(path, ": cannot write the routing trace");
}

// ---------------------------------------------------------------------------------------------
// resident and mmap

std::unique_ptr<ExpertBatch> ResidentExperts::acquire(int layer, std::span<const ExpertUse> uses) {
  book_acquire(layer, uses);
  std::vector<std::pair<int32_t, ExpertWeights>> items;
  items.reserve(uses.size());
  for (const ExpertUse& u : uses) items.push_back({u.expert, location(layout_, layer, u.expert).views});
  return std::make_unique<InOrderBatch>(std::move(items));
}

namespace {
// The whole pages inside [p, p + n): madvise ranges that never reach a neighbouring tensor.
std::pair<uint8_t*, size_t> inner_pages(const void* p, size_t n) {
  const uintptr_t pg = page_size(), a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t b = (a + pg - 1) / pg * pg, e = (a + n) / pg * pg;
  return e > b ? std::pair{reinterpret_cast<uint8_t*>(b), size_t(e - b)}
               : std::pair{static_cast<uint8_t*>(nullptr), size_t{0}};
}
// The pages that [p, p + n) touches.
std::pair<uint8_t*, size_t> outer_pages(const void* p, size_t n) {
  const uintptr_t pg = page_size(), a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t b = a / pg * pg, e = (a + n + pg - 1) / pg * pg;
  return {reinterpret_cast<uint8_t*>(b), size_t(e - b)};
}
}  // namespace

void madvise_expert_ranges(const ExpertLayout& layout, int advice) {
  for (const auto& l : layout.layers)
    for (const auto& e : l)
      for (const TensorView* v : {&e.views.gate, &e.views.up, &e.views.down}) {
        auto [p, n] = inner_pages(v->data, v->nbytes);
        if (n) ::madvise(p, n, advice);  // advice only: a failure changes speed, never results
      }
}

MmapExperts::MmapExperts(const GgufFile& f, ExpertLayout layout) : ResidentExperts(std::move(layout)) {
  (void)f;
  // Random access between experts: without this a fault on one expert reads ahead into the
  // next ones, which this token almost never needs. The chosen experts get WILLNEED instead.
  madvise_expert_ranges(layout_, MADV_RANDOM);
  read_bytes0_ = proc_self_value("io", "read_bytes:");
  majflt0_ = major_faults();
}

bool MmapExperts::resident(const ExpertLocation& loc) const {
  std::vector<unsigned char> vec;
  for (const TensorView* v : {&loc.views.gate, &loc.views.up, &loc.views.down}) {
    auto [p, n] = outer_pages(v->data, v->nbytes);
    vec.resize(n / page_size());
    if (::mincore(p, n, vec.data()) != 0) return false;
    for (unsigned char c : vec)
      if (!(c & 1)) return false;
  }
  return true;
}

void MmapExperts::willneed(const ExpertLocation& loc) const {
  for (const TensorView* v : {&loc.views.gate, &loc.views.up, &loc.views.down}) {
    auto [p, n] = outer_pages(v->data, v->nbytes);
    ::madvise(p, n, MADV_WILLNEED);
  }
}

std::unique_ptr<ExpertBatch> MmapExperts::acquire(int layer, std::span<const ExpertUse> uses) {
  book_acquire(layer, uses);
  std::vector<std::pair<int32_t, ExpertWeights>> items;
  uint64_t hits = 0;
  // Ask for every chosen expert first so the kernel reads them all while the first computes.
  for (const ExpertUse& u : uses) {
    const ExpertLocation& loc = location(layout_, layer, u.expert);
    if (resident(loc))
      ++hits;
    else
      willneed(loc);
    items.push_back({u.expert, loc.views});
  }
  {
    std::lock_guard<std::mutex> lk(book_mu_);
    book_.hits += hits;
  }
  return std::make_unique<InOrderBatch>(std::move(items));
}

void MmapExperts::prefetch(int layer, std::span<const int32_t> experts) {
  book_prediction(layer, experts);
  for (int32_t e : experts) willneed(location(layout_, layer, e));
}

void MmapExperts::fill_stats(ExpertStats& s) const {
  const uint64_t rb = proc_self_value("io", "read_bytes:");
  s.bytes_read = rb > read_bytes0_ ? rb - read_bytes0_ : 0;
  s.major_faults = major_faults() - majflt0_;
}

std::unique_ptr<ExpertSource> make_expert_store(const GgufFile& f, ExpertLayout layout, const ExpertStoreOptions& opt) {
  switch (opt.policy) {
    case ExpertPolicy::resident: return std::make_unique<ResidentExperts>(std::move(layout));
    case ExpertPolicy::mmap: return std::make_unique<MmapExperts>(f, std::move(layout));
    case ExpertPolicy::stream: {
      if (!opt.cache_auto) return std::make_unique<StreamingExperts>(f, std::move(layout), opt);
      // --expert-cache auto: what the memory limit leaves beside the weights that stay mapped.
      size_t all = 0, bundle = 0;
      for (const TensorView& t : f.tensors()) all += t.nbytes;
      for (const auto& l : layout.layers)
        for (const ExpertLocation& e : l)
          bundle = std::max(bundle, e.bytes[0] + e.bytes[1] + e.bytes[2] + 6 * page_size());
      const size_t experts = layout.total_bytes();
      std::string why;
      ExpertStoreOptions o = opt;
      o.cache_bytes = auto_expert_cache_bytes(memory_limit(), all - std::min(all, experts), experts, 2 * bundle, &why,
                                              opt.auto_extra_bytes);
      if (opt.progress)
        std::fprintf(stderr, "expert cache: auto, %s = %s\n", human_bytes(double(o.cache_bytes)).c_str(), why.c_str());
      return std::make_unique<StreamingExperts>(f, std::move(layout), o);
    }
  }
  fail("unknown expert policy");
}

}  // namespace sluice
