// tests/unit/test_memory: the per-layer memory without a model — a test-double layout with
// attention layers, a recurrent layer of two state buffers and a layer that keeps nothing,
// driven through the forward protocol (check, prepare, write, commit) as a model would drive
// it. Rewinding a recurrent state lands on a checkpoint (or the zero state), KV-only memory
// rewinds anywhere, forks are copies, and the byte budget refuses growth before any change.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "memory/batch.h"
#include "memory/memory.h"

namespace sluice {
namespace {

constexpr int64_t kHkv = 2, kD = 32;

MemoryLayout hybrid_layout() {
  MemoryLayout m;
  m.kv = KvGeometry{2, 4, kHkv, kD, kD};
  m.layers = {{LayerMemoryKind::kv, {}},
              {LayerMemoryKind::recurrent, {4, 6}},
              {LayerMemoryKind::kv, {}},
              {LayerMemoryKind::none, {}}};
  return m;
}

MemoryOptions options(int64_t n_ctx, size_t budget = 0) {
  MemoryOptions o;
  o.kv.n_ctx = n_ctx;
  o.kv.type_k = o.kv.type_v = DType::F32;  // exact rows: the test compares them bytewise
  o.budget_bytes = budget;
  return o;
}

// One token per position for sequence s, as a model would: KV rows hold the position's
// value, the recurrent state accumulates it (so every state differs from every other).
void step(Memory& mem, Backend& be, int32_t s, int n_tok) {
  Batch b;
  for (int i = 0; i < n_tok; ++i) b.add(0, s, static_cast<int32_t>(mem.seq_len(s) + i), false);
  mem.check(b);
  mem.prepare(b);
  for (int i = 0; i < n_tok; ++i) {
    const float p = static_cast<float>(b.pos[static_cast<size_t>(i)]);
    std::vector<float> row(kHkv * kD, p + 1000.0f * static_cast<float>(s));
    const auto& layers = mem.layout().layers;
    for (size_t l = 0; l < layers.size(); ++l) {
      if (mem.kv_slot(static_cast<int64_t>(l)) >= 0)
        mem.kv(s).store(be, mem.kv_slot(static_cast<int64_t>(l)), static_cast<int64_t>(p), row.data(), row.data());
    }
    for (int buf = 0; layers.size() > 1 && layers[1].kind == LayerMemoryKind::recurrent && buf < 2; ++buf) {
      float* st = mem.state(s, 1, buf);
      for (int j = 0; j < (buf ? 6 : 4); ++j) st[j] = st[j] * 0.5f + p + static_cast<float>(j);
    }
  }
  mem.commit(b);
}

std::vector<float> state_of(Memory& mem, int32_t s) {
  std::vector<float> v(mem.state(s, 1, 0), mem.state(s, 1, 0) + 4);
  v.insert(v.end(), mem.state(s, 1, 1), mem.state(s, 1, 1) + 6);
  return v;
}

TEST(Memory, LayoutMapsLayersToKvSlotsAndStates) {
  Memory mem(hybrid_layout(), options(64));
  EXPECT_EQ(mem.kv_slot(0), 0);
  EXPECT_EQ(mem.kv_slot(1), -1);
  EXPECT_EQ(mem.kv_slot(2), 1);
  EXPECT_EQ(mem.kv_slot(3), -1);
  const int32_t s = mem.seq_new();
  EXPECT_EQ(state_of(mem, s), std::vector<float>(10, 0.0f));
  EXPECT_THROW(mem.state(s, 0, 0), Error);  // an attention layer has no state
  EXPECT_THROW(mem.state(s, 1, 2), Error);
  // States (10 floats) count from the start; KV rows once positions are reached.
  EXPECT_EQ(mem.bytes_used(), 10 * sizeof(float));
  auto be = make_backend("ref");
  step(mem, *be, s, 3);
  EXPECT_EQ(mem.bytes_used(), 10 * sizeof(float) + mem.kv(s).bytes());
  EXPECT_EQ(mem.bytes_per_token(), 2u * 2 * kHkv * kD * sizeof(float));
}

TEST(Memory, RecurrentRewindLandsOnACheckpoint) {
  auto be = make_backend("ref");
  Memory mem(hybrid_layout(), options(64));
  const int32_t s = mem.seq_new();
  step(mem, *be, s, 5);
  mem.seq_checkpoint(s);
  const auto at5 = state_of(mem, s);
  step(mem, *be, s, 4);
  mem.seq_checkpoint(s);
  const auto at9 = state_of(mem, s);
  step(mem, *be, s, 3);
  EXPECT_EQ(mem.seq_checkpoints(s), (std::vector<int64_t>{5, 9}));
  // Between checkpoints: back to the earlier one, its state restored.
  EXPECT_EQ(mem.seq_rewind(s, 8), 5);
  EXPECT_EQ(mem.seq_len(s), 5);
  EXPECT_EQ(state_of(mem, s), at5);
  EXPECT_EQ(mem.seq_checkpoints(s), (std::vector<int64_t>{5}));  // the later one is gone
  // Re-decoding from there reaches the same state again (the double is deterministic).
  step(mem, *be, s, 4);
  EXPECT_EQ(state_of(mem, s), at9);
  // Before every checkpoint: the zero state at position 0.
  EXPECT_EQ(mem.seq_rewind(s, 3), 0);
  EXPECT_EQ(state_of(mem, s), std::vector<float>(10, 0.0f));
  // Negative control: without the restore the state would not be at5 (the check has teeth).
  step(mem, *be, s, 7);
  EXPECT_NE(state_of(mem, s), at5);
}

TEST(Memory, KvOnlyRewindsToAnyPosition) {
  auto be = make_backend("ref");
  MemoryLayout kv_only = MemoryLayout::all_attention(KvGeometry{2, 4, kHkv, kD, kD});
  Memory mem(kv_only, options(64));
  const int32_t s = mem.seq_new();
  step(mem, *be, s, 10);
  EXPECT_EQ(mem.seq_rewind(s, 7), 7);
  EXPECT_EQ(mem.seq_len(s), 7);
  EXPECT_EQ(mem.seq_rewind(s, 20), 7);  // past the end: nothing to drop
  Batch gap;
  gap.add(0, s, 8, false);  // position 7 is next
  EXPECT_THROW(mem.check(gap), Error);
}

TEST(Memory, ForkCopiesRowsStatesAndCheckpoints) {
  auto be = make_backend("ref");
  Memory mem(hybrid_layout(), options(64));
  const int32_t a = mem.seq_new();
  step(mem, *be, a, 6);
  mem.seq_checkpoint(a);
  step(mem, *be, a, 2);
  const int32_t b = mem.seq_fork(a);
  EXPECT_EQ(mem.seq_len(b), 8);
  EXPECT_EQ(state_of(mem, b), state_of(mem, a));
  EXPECT_EQ(mem.seq_checkpoints(b), (std::vector<int64_t>{6}));
  const size_t row = mem.kv(a).k_row_bytes();
  for (int64_t l = 0; l < 2; ++l) EXPECT_EQ(std::memcmp(mem.kv(a).k_data(l), mem.kv(b).k_data(l), row * 8), 0);
  // A copy, not an alias: the branches move apart.
  step(mem, *be, b, 3);
  EXPECT_EQ(mem.seq_len(a), 8);
  EXPECT_NE(state_of(mem, b), state_of(mem, a));
  mem.seq_free(a);
  EXPECT_FALSE(mem.seq_exists(a));
  EXPECT_TRUE(mem.seq_exists(b));
  EXPECT_THROW(mem.seq_len(a), Error);
  EXPECT_THROW(mem.seq_free(a), Error);
}

TEST(Memory, BudgetRefusesGrowthBeforeAnyChange) {
  auto be = make_backend("ref");
  MemoryLayout kv_only = MemoryLayout::all_attention(KvGeometry{2, 4, kHkv, kD, kD});
  const size_t per_step = 2 * 2 * kHkv * kD * sizeof(float) * KvCache::kRowStep;  // 256 rows, K+V, 2 layers
  Memory mem(kv_only, options(4096, per_step * 2));
  const int32_t a = mem.seq_new(), b = mem.seq_new();
  step(mem, *be, a, 10);
  step(mem, *be, b, 10);
  EXPECT_EQ(mem.bytes_used(), per_step * 2);
  Batch more;
  more.add(0, a, 10, false);  // fits in a's allocated rows
  mem.check(more);
  EXPECT_NO_THROW(mem.prepare(more));
  Batch grow;
  for (int i = 0; i < 300; ++i) grow.add(0, b, 10 + i, false);  // needs a second step of rows
  EXPECT_THROW(mem.prepare(grow), Error);
  EXPECT_EQ(mem.bytes_used(), per_step * 2);
  EXPECT_EQ(mem.seq_len(b), 10);
  EXPECT_THROW(mem.seq_fork(a), Error);  // a copy of a would exceed it too
  mem.seq_free(a);
  EXPECT_NO_THROW(mem.prepare(grow));
}

TEST(Memory, CheckpointsAreBoundedOldestFirst) {
  auto be = make_backend("ref");
  MemoryOptions o = options(64);
  o.max_checkpoints = 2;
  Memory mem(hybrid_layout(), o);
  const int32_t s = mem.seq_new();
  for (int i = 0; i < 3; ++i) {
    step(mem, *be, s, 2);
    mem.seq_checkpoint(s);
  }
  EXPECT_EQ(mem.seq_checkpoints(s), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(mem.bytes_used(), 3 * 10 * sizeof(float) + mem.kv(s).bytes());
}

TEST(Memory, BadLayoutsAreRefused) {
  MemoryLayout m = hybrid_layout();
  m.kv.n_layer = 3;  // two layers are attention layers
  EXPECT_THROW(Memory(m, options(64)), Error);
  m = hybrid_layout();
  m.layers[1].state_floats = {};
  EXPECT_THROW(Memory(m, options(64)), Error);
  EXPECT_THROW(Memory(hybrid_layout(), options(0)), Error);
}

}  // namespace
}  // namespace sluice
