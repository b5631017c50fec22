// memory/expert_store: where expert weights live — the one interface model code uses to reach
// them. The forward asks for a layer's experts with acquire(layer, uses) and receives each
// one's three weight views from the returned batch as they become ready; the policy behind it
// is invisible to the model code:
//   resident: views into the GGUF mapping, all in RAM (the default; Model::load(path));
//   mmap:     the same views, pages brought in by the OS (madvise WILLNEED on the chosen and
//             predicted experts, MADV_RANDOM elsewhere so a fault does not drag in neighbours);
//   stream:   an explicit cache with a byte budget, filled by io_uring reads (expert_stream.h);
//             the expert byte ranges of the mapping are never touched, so RSS stays bounded.
// Dense weights stay in the mapping under every policy.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace sluice {

class GgufFile;
class IoEngine;

struct ExpertHandle {
  int32_t layer = 0;
  int32_t expert = 0;
};

// One expert's SwiGLU weights, ggml order [in, out]: gate/up [n_embd, n_ff_exp], down [n_ff_exp, n_embd].
struct ExpertWeights {
  TensorView gate, up, down;
};

// Where one expert's three matrices lie in the model file. The views' data point into the
// mapping; the stream policy uses only their shapes and the offsets.
struct ExpertLocation {
  ExpertWeights views;
  uint64_t offset[3] = {};  // file offsets of gate, up, down
  size_t bytes[3] = {};     // their sizes
};

// Every expert of a model: layers[l][e]; layers[l] is empty for dense layers.
struct ExpertLayout {
  std::vector<std::vector<ExpertLocation>> layers;
  bool bundled = false;  // a `sluice pack`ed file: each expert's three matrices adjacent
  size_t total_bytes() const;
  int64_t n_expert_max() const;
};

// True when `f` holds per-expert tensors (blk.N.ffn_gate.E.weight, written by `sluice pack`)
// rather than the stacked blk.N.ffn_gate_exps.weight.
bool gguf_has_bundled_experts(const GgufFile& f);
// Layer `layer`'s experts from `f`: slices of the stacked [in, out, n_expert] tensors, or the
// per-expert tensors of a packed file. Shapes are checked; errors name the file and tensor.
std::vector<ExpertLocation> expert_layer_from_gguf(const GgufFile& f, int64_t layer, int64_t n_embd, int64_t n_ff_exp,
                                                   int64_t n_expert);

enum class ExpertPolicy { resident, mmap, stream };
std::string_view expert_policy_name(ExpertPolicy p);
ExpertPolicy expert_policy_from_name(std::string_view name);  // throws Error naming the choices

struct ExpertStoreOptions {
  ExpertPolicy policy = ExpertPolicy::resident;
  size_t cache_bytes = size_t{4} << 30;  // stream: the cache budget, never exceeded (buffers counted as mapped)
  bool cache_auto = false;               // stream: size the budget to the memory limit instead (memory_limit.h)
  size_t auto_extra_bytes = 0;           // with cache_auto: memory the caller holds beside the model and KV cache
  int pin_per_layer = 0;                 // stream: the N most-routed experts of each layer stay cached for good
  std::string routing_counts_path;       // routing counts (a previous run's --routing-counts-out) choosing the pins
  bool prefetch = true;                  // mmap/stream: predict layer l+1's experts while l runs and stage them
  int prefetch_extra = -1;               // m: the predictor stages top-(k+m); -1 = max(1, k/4)
  bool prefetch_gate = true;             // stream: PrefetchPolicy decides each read (false: read every guess, evicting
      // any probationary expert — the behaviour before the gate, for A/B benchmarks)
  std::string io = "auto";  // stream: auto | uring | pread
  bool direct_io = true;    // stream: O_DIRECT (falls back to the page cache with a message)
  bool progress = false;    // stream: progress lines on stderr while pins load and the cache warms
  // Tests: builds the I/O engine instead of `io` (e.g. make_io_fault around make_io_uring).
  std::function<std::unique_ptr<IoEngine>()> io_factory;
};

// What the store did; `sluice run` prints it, `sluice bench` reads it.
struct ExpertStats {
  std::string policy;
  uint64_t tokens = 0;                 // tokens evaluated by the model
  uint64_t requests = 0;               // (layer, expert) uses served
  uint64_t hits = 0;                   // stream: already cached or being read when asked for; mmap: all pages resident
  uint64_t prefetch_hits = 0;          // hits on experts a prefetch brought in
  uint64_t predicted = 0;              // experts predicted for layers that then ran
  uint64_t predicted_used = 0;         // ... that those layers used
  uint64_t used_with_prediction = 0;   // experts used by layers that had a prediction
  uint64_t reads = 0;                  // read requests completed
  uint64_t bytes_read = 0;             // stream: bytes read into the cache; mmap: the process's read_bytes since load
  uint64_t prefetch_failures = 0;      // prefetch reads that failed (dropped; a demand read retries)
  uint64_t prefetch_reads = 0;         // stream: bundles read ahead on a prediction
  uint64_t prefetch_skipped = 0;       // stream: predicted, not cached, and declined (prefetch_policy.h)
  uint64_t prefetch_late = 0;          // stream: prefetch hits whose read was still in flight when asked for
  uint64_t prefetch_regret_bytes = 0;  // stream: bytes a prefetch evicted that a demand miss then read again
  uint64_t cache_full_pass = 0;        // stream: the forward pass (1 = the prompt) in which the cache first filled
  double io_seconds = 0;               // stream: wall time with at least one read in flight
  double stall_seconds = 0;            // stream: time the forward waited for reads
  uint64_t major_faults = 0;           // mmap: major page faults since load (its stalls, which it cannot time)
  double wall_seconds = 0;             // since the store was made
  uint64_t evictions = 0;
  size_t cache_budget = 0;      // stream: bytes
  size_t cache_bytes = 0;       // stream: bytes held now (mapped buffers)
  size_t cache_peak_bytes = 0;  // stream: most ever held
  size_t expert_bytes = 0;      // all experts' bytes in the file
  size_t max_bundle_bytes = 0;  // stream: the largest buffer one expert needs
  int pinned = 0;               // stream: experts pinned

  double hit_rate() const { return requests ? double(hits) / double(requests) : 0.0; }
  double prefetch_recall() const {
    return used_with_prediction ? double(predicted_used) / double(used_with_prediction) : 0.0;
  }
  double prefetch_precision() const { return predicted ? double(predicted_used) / double(predicted) : 0.0; }
  // Achieved read bandwidth: bytes over the time reads were in flight (stream), else over wall time.
  double disk_mb_per_s() const;
  double stall_ms_per_token() const { return tokens ? 1e3 * stall_seconds / double(tokens) : 0.0; }
};

// One line for stderr ("experts: stream, cache 4.0 GiB ...") including the peak RSS.
std::string format_expert_stats(const ExpertStats& s);
// The decode's steady state for stderr: the store's figures between two snapshots `a` and `b`
// (taken by the caller, e.g. at the middle and the end of a decode) over `seconds` and
// `n_tokens` generated tokens: tok/s, bytes read per token, hit rate, disk MB/s, stall.
std::string format_expert_steady_state(const ExpertStats& a, const ExpertStats& b, double seconds, int64_t n_tokens);
// Peak resident set size of this process (VmHWM from /proc/self/status), 0 if unknown.
size_t peak_rss_bytes();

struct ExpertUse {
  int32_t expert = 0;
  int32_t n_tokens = 0;  // tokens of the batch routed to it (routing counts)
};

// The experts one layer asked for. next() hands them out as they become ready — hits first,
// then reads in completion order — so the caller computes while the rest load.
class ExpertBatch {
 public:
  virtual ~ExpertBatch() = default;  // releases whatever the batch still holds
  // Fills the next ready expert's id and weights and returns true; the weights stay valid until
  // the next call or the batch's end. False once every requested expert has been served.
  // Throws Error when a read fails (naming the file, layer, expert and offset).
  virtual bool next(int32_t* expert, ExpertWeights* w) = 0;
  // True when served weights stay valid until the batch ends, not just until the next call
  // (resident and mmap: views into the mapping), so a caller may collect every expert first
  // and run them in one pass.
  virtual bool views_outlive_next() const { return false; }
};

class ExpertSource {
 public:
  explicit ExpertSource(const ExpertLayout& layout);
  virtual ~ExpertSource() = default;
  virtual ExpertPolicy policy() const = 0;
  // Layer `layer` needs these distinct experts now; the reads of misses are issued before
  // this returns. One batch per store at a time (Sessions on one Model run one at a time).
  virtual std::unique_ptr<ExpertBatch> acquire(int layer, std::span<const ExpertUse> uses) = 0;
  // The predictor's guess (best first) for a layer about to run: stage what is cheap to stage.
  virtual void prefetch(int layer, std::span<const int32_t> experts);
  virtual bool wants_prefetch() const { return false; }
  // Counts tokens for the per-token figures (called by Model::forward).
  void note_tokens(int64_t n);
  ExpertStats stats() const;
  // Tokens routed to each expert so far: [layer][expert] (dense layers empty).
  std::vector<std::vector<uint64_t>> routing_counts() const;
  // Writes routing_counts() as JSON, added to the counts already in `path` when its shape
  // matches (so calibration runs accumulate). See read_routing_counts.
  void save_routing_counts(const std::string& path) const;
  // Routing trace: from this call on, every acquire is recorded (layer and the experts asked
  // for, in order); save_routing_trace writes them, one acquire per line, "layer e1 e2 ...".
  // The input of cache-policy simulations (bench/stream/cache_sim.py) and of learned
  // predictors: it is the exact sequence of bundle requests a store sees.
  void record_routing_trace();
  void save_routing_trace(const std::string& path) const;

 protected:
  // Bookkeeping shared by the policies: routing counts and prediction scoring.
  void book_acquire(int layer, std::span<const ExpertUse> uses);
  void book_prediction(int layer, std::span<const int32_t> experts);
  virtual void fill_stats(ExpertStats& s) const { (void)s; }

  mutable std::mutex book_mu_;
  ExpertStats book_;
  std::vector<std::vector<uint64_t>> counts_;
  std::vector<std::vector<int32_t>> predicted_;  // [layer]: the latest prediction not yet scored
  bool tracing_ = false;
  std::vector<int32_t> trace_;  // per acquire: layer, count, experts
  double t0_ = 0;               // monotonic seconds at construction
};

// {"n_layer": L, "counts": [[...], ...]} as written by save_routing_counts. Throws Error naming
// the file when it is missing, malformed, or has another shape than `n_layer` layers.
std::vector<std::vector<uint64_t>> read_routing_counts(const std::string& path, size_t n_layer);

// resident: every expert is a view into the mapping.
class ResidentExperts : public ExpertSource {
 public:
  explicit ResidentExperts(ExpertLayout layout) : ExpertSource(layout), layout_(std::move(layout)) {}
  ExpertPolicy policy() const override { return ExpertPolicy::resident; }
  std::unique_ptr<ExpertBatch> acquire(int layer, std::span<const ExpertUse> uses) override;
  const ExpertLayout& layout() const { return layout_; }

 protected:
  ExpertLayout layout_;
};

// mmap: views into the mapping, paged in by the kernel; WILLNEED for chosen and predicted experts.
class MmapExperts final : public ResidentExperts {
 public:
  MmapExperts(const GgufFile& f, ExpertLayout layout);
  ExpertPolicy policy() const override { return ExpertPolicy::mmap; }
  std::unique_ptr<ExpertBatch> acquire(int layer, std::span<const ExpertUse> uses) override;
  void prefetch(int layer, std::span<const int32_t> experts) override;
  bool wants_prefetch() const override { return true; }

 private:
  void fill_stats(ExpertStats& s) const override;
  bool resident(const ExpertLocation& loc) const;  // every page in the page cache (mincore)
  void willneed(const ExpertLocation& loc) const;
  uint64_t read_bytes0_ = 0;  // /proc/self/io read_bytes at construction
  uint64_t majflt0_ = 0;      // getrusage major faults at construction
};

// madvise(advice) on the whole pages inside every expert matrix of the mapping (pages shared
// with a neighbouring tensor are left alone). Advice only: failures are ignored.
void madvise_expert_ranges(const ExpertLayout& layout, int advice);

// The policy chosen in `opt` over `f` (stream: StreamingExperts, expert_stream.h).
std::unique_ptr<ExpertSource> make_expert_store(const GgufFile& f, ExpertLayout layout, const ExpertStoreOptions& opt);

}  // namespace sluice
