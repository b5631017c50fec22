// memory/memory: what every layer keeps between forward steps, for every sequence — the one
// object a forward step reads and writes besides the weights.
//
// Per layer the model declares what it keeps (MemoryLayout): KV rows (attention layers, one
// row per position, in the codecs of memory/kv_cache.h), a fixed-size recurrent state
// (linear-attention layers: e.g. a short-convolution window and a delta-rule matrix; their
// size does not grow with the sequence), or nothing. Per sequence the Memory holds one
// KvCache over the attention layers and one float buffer per recurrent state.
//
// Sequences are created, forked (a full copy of the prefix: rows and states), rewound to a
// position and freed. KV rows can be rewound to any position; a recurrent state only to a
// checkpoint (a snapshot taken at a position), because the state after n tokens cannot be
// computed back from the state after n + k. So seq_rewind returns the position it reached:
// the requested one for pure attention, the latest checkpoint at or before it otherwise
// (position 0, the zero state, is always one); the caller evaluates the tokens from there.
//
// The forward step's protocol (models/model.cpp): check(batch) and prepare(batch) before
// any work — a bad batch or an exhausted budget throws and leaves everything as it was —
// then the layers write their rows and states, then commit(batch) advances the lengths.
//
// One byte budget covers all sequences: KV rows as allocated (KvCache grows in steps), states
// and checkpoints. A server sizes it from --ctx and --parallel.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "memory/batch.h"
#include "memory/kv_cache.h"

namespace sluice {

enum class LayerMemoryKind { none, kv, recurrent };

struct LayerMemorySpec {
  LayerMemoryKind kind = LayerMemoryKind::kv;
  std::vector<int64_t> state_floats;  // recurrent: the size of each state buffer, in floats
};

struct MemoryLayout {
  KvGeometry kv;                        // geometry of the attention layers (kv.n_layer: how many)
  std::vector<LayerMemorySpec> layers;  // one per model layer
  // Every layer an attention layer of geometry g (g.n_layer layers).
  static MemoryLayout all_attention(const KvGeometry& g);
};

struct MemoryOptions {
  KvCacheOptions kv;        // kv.n_ctx: the most positions one sequence may hold
  size_t budget_bytes = 0;  // all sequences together; 0: no limit beyond each sequence's n_ctx
  int max_checkpoints = 8;  // per sequence; the oldest is dropped beyond this
};

// A sequence copied out to plain host memory, compact (exactly its rows, no step rounding):
// the server's host-RAM prompt cache keeps recent conversations as these once their slot is
// reused (runtime/scheduler.h), and restores one into a new sequence when a request continues it.
struct SeqSnapshot {
  int64_t len = 0;
  std::vector<uint8_t> rows;                                        // KvCache::copy_out of rows 0..len-1
  std::vector<KvKFit> k_fit;                                        // the K fits those rows were encoded against
  std::vector<float> states;                                        // every recurrent buffer at len
  std::vector<std::pair<int64_t, std::vector<float>>> checkpoints;  // (position, states)
  size_t bytes() const;
  std::vector<int64_t> checkpoint_positions() const;
};

class Memory {
 public:
  // Resolves the KV types once (kv_cache_resolve; its notes go to stderr).
  Memory(const MemoryLayout& layout, const MemoryOptions& opt);
  ~Memory();

  int32_t seq_new();
  // A new sequence holding a copy of `src`'s rows, states and checkpoints.
  int32_t seq_fork(int32_t src);
  // Drops positions >= n; returns the position the sequence now ends at (see above).
  int64_t seq_rewind(int32_t s, int64_t n);
  void seq_free(int32_t s);
  bool seq_exists(int32_t s) const;
  int64_t seq_len(int32_t s) const;
  std::vector<int32_t> sequences() const;
  // Snapshots the recurrent states at the current length (a no-op without recurrent layers,
  // where every position can be rewound to).
  void seq_checkpoint(int32_t s);
  std::vector<int64_t> seq_checkpoints(int32_t s) const;
  // Copies a sequence out (rows, K means, states, checkpoints).
  SeqSnapshot seq_save(int32_t s) const;
  // A new sequence holding the snapshot's first n positions: rows 0..n-1, and for recurrent
  // layers the state of the latest checkpoint at or before n (so it may end earlier, as
  // seq_rewind does: read seq_len). Throws, creating nothing, when the budget cannot hold it.
  int32_t seq_restore(const SeqSnapshot& snap, int64_t n);
  // For benchmarks that wrote rows 0..n-1 through kv(s).store themselves (bench -d depth).
  void seq_set_len(int32_t s, int64_t n);

  // The forward step's protocol (see the top of this file).
  void check(const Batch& b) const;
  void prepare(const Batch& b);
  void commit(const Batch& b);

  // A sequence's KV rows: layer l of the model is row set kv_slot(l) of this cache.
  KvCache& kv(int32_t s);
  const KvCache& kv(int32_t s) const;
  int64_t kv_slot(int64_t layer) const { return kv_slot_[static_cast<size_t>(layer)]; }
  // Recurrent state buffer i of layer l for sequence s (state_floats[i] floats, zero at start).
  float* state(int32_t s, int64_t layer, int i);

  const MemoryLayout& layout() const { return layout_; }
  int64_t n_ctx() const { return opt_.kv.n_ctx; }
  DType type_k() const { return opt_.kv.type_k; }  // after the policy
  DType type_v() const { return opt_.kv.type_v; }
  size_t bytes_per_token() const;  // KV bytes per position over all attention layers
  size_t bytes_used() const;
  size_t budget() const { return opt_.budget_bytes; }

 private:
  struct Checkpoint {
    int64_t pos = 0;
    std::vector<float> states;
  };
  struct Sequence {
    int64_t len = 0;
    std::unique_ptr<KvCache> kv;
    std::vector<float> states;  // every recurrent buffer, back to back
    std::vector<Checkpoint> checkpoints;
  };
  Sequence& seq(int32_t s);
  const Sequence& seq(int32_t s) const;
  std::unique_ptr<KvCache> new_kv() const;
  size_t seq_bytes(const Sequence& q) const;

  MemoryLayout layout_;
  MemoryOptions opt_;
  std::vector<int64_t> kv_slot_;                // per layer: index in the KvCache, or -1
  std::vector<std::vector<size_t>> state_off_;  // per layer: offset of each buffer in Sequence::states
  size_t state_floats_ = 0;                     // per sequence
  std::map<int32_t, Sequence> seqs_;
  int32_t next_id_ = 0;
};

}  // namespace sluice
