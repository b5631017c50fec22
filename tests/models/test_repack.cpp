// tests/models/test_repack: Model::load with ModelOptions::repack (CLI --repack): interleaved
// copies of the Q4_K/Q6_K matrices (quant/rows16.h) that the cpu backend's int8 kernels read.
// The model's logits and greedy tokens against the same file loaded without it (the kernels'
// own parity and negative controls: tests/kernels/test_rows16.cpp); streamed experts keep the
// file's layout (a streamed expert's bytes move between cache slots); an MLX folder's converted
// Q4_1 weights are interleaved in place (repack_in_place), and their rows refuse to be read.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "core/cpu_features.h"
#include "kernels/kernel_test_util.h"
#include "models/model.h"
#include "runtime/session.h"
#include "synth/synth.h"
#include "test_util.h"

namespace sluice::test_repack {
namespace {

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 400, 428};

ModelOptions repacked(ExpertPolicy policy = ExpertPolicy::resident) {
  ModelOptions o;
  o.repack = true;
  o.experts.policy = policy;
  if (policy == ExpertPolicy::stream) {
    o.experts.cache_bytes = size_t{64} << 20;
    o.experts.direct_io = false;
  }
  return o;
}

std::string synth_mlx_q4() {
  SynthOptions o;
  o.arch = "qwen3moe";
  o.preset = "tiny";
  o.vocab = 512;
  o.type = "q4";
  o.format = "mlx";
  o.tokenizer = std::string(SLUICE_SOURCE_DIR) + "/tests/data/hf/qwen3";
  const std::string dir = (test::scratch_dir() / "repack-qwen3moe-tiny-mlx-q4").string();
  synth_write_mlx(o, dir);
  return dir;
}

std::string synth_q4_k_m() {
  SynthOptions o;
  o.arch = "qwen3moe";
  o.preset = "tiny";
  o.type = "q4_k_m";
  o.tokenizer = test::shared_dir() + "/models/stories260K.gguf";
  const std::string path = (test::scratch_dir() / "repack-qwen3moe-tiny-q4_k_m.gguf").string();
  synth_write(o, path);
  return path;
}

int repacked_tensors(const Model& m) {
  const std::string& s = m.repack_summary();
  return s.rfind("repack: ", 0) == 0 ? std::atoi(s.c_str() + 8) : -1;
}

struct Outputs {
  std::vector<float> prompt_logits, decode_logits;  // decode: the last one-token step's
  std::vector<int32_t> greedy;
};
Outputs run(const Model& m, const char* backend = "cpu") {
  auto be = make_backend(backend, 2);
  Session s(m, *be, KvCacheOptions{.n_ctx = 64});
  Outputs r;
  const auto l = s.eval(kPrompt, /*all_logits=*/true);
  r.prompt_logits.assign(l.begin(), l.end());
  int32_t next = argmax(s.eval(std::vector<int32_t>{kPrompt.back()}));
  for (int i = 0; i < 16; ++i) {
    r.greedy.push_back(next);
    const auto d = s.eval(std::vector<int32_t>{next});
    r.decode_logits.assign(d.begin(), d.end());
    next = argmax(d);
  }
  return r;
}

TEST(Repack, SameModelOutputsAsTheFile) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = synth_q4_k_m();
  auto plain = Model::load(path);
  auto packed = Model::load(path, repacked());
  EXPECT_TRUE(plain->repack_summary().empty());
  // 2 layers × (q, k, v, o, gate and up experts) + the Q6_K output head; not the Q5_0/Q8_0
  // down experts, nor token_embd (read by rows: get_rows keeps the file's layout).
  EXPECT_EQ(repacked_tensors(*packed), 13) << packed->repack_summary();
  // The copied rows went back to the file's pages (read into memory by default: the file mapped
  // over them, GgufFile::release_pages) and still read as the file's bytes, which the copy's
  // are not (it holds another layout: the comparison can fail).
  EXPECT_NE(packed->repack_summary().find("left to the file's pages"), std::string::npos) << packed->repack_summary();
  int compared = 0;
  for (const TensorView& t : packed->file().tensors()) {
    if (!t.rows16) continue;
    const TensorView& f = plain->file().tensor(t.name);
    EXPECT_EQ(std::memcmp(t.data, f.data, t.nbytes), 0) << t.name;
    EXPECT_NE(std::memcmp(t.rows16, f.data, t.nbytes), 0) << t.name;
    ++compared;
  }
  EXPECT_EQ(compared, 13);
  const Outputs a = run(*plain), b = run(*packed);
  // The interleaved kernels sum in the prefill tiles' order: the prompt's logits (12-token
  // batches) within float rounding of the row path's, decode's likewise.
  EXPECT_LT(test::nmse(a.prompt_logits, b.prompt_logits), 1e-9);
  EXPECT_EQ(a.greedy, b.greedy);
  // Sixteen one-token steps later the two paths' last-bit differences have flipped some int8
  // activation roundings (one rounding step is NMSE ~4e-5 per matmul: test_q8_matmul's
  // kTolQ8Loose, 3e-4); observed 1.3e-5. A path reading wrong bytes gives ~1 (test_rows16).
  EXPECT_LT(test::nmse(a.decode_logits, b.decode_logits), 3e-4);
  // The copies are read, not just made: one-token steps sum in the tiles' order instead of the
  // row dots', so where the int8 kernels read them (every SIMD level), some logit differs in its
  // last bits. (SLUICE_CPU_ISA=generic makes them go unread, and this check then sees equal logits.)
  const bool read = cpu_backend_reads_rows16(*make_backend("cpu", 1), DType::Q4_K);
  EXPECT_EQ(std::memcmp(a.decode_logits.data(), b.decode_logits.data(), a.decode_logits.size() * sizeof(float)) != 0,
            read);
}

TEST(Repack, StreamedExpertsKeepTheFileLayout) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = synth_q4_k_m();
  const ModelOptions streamed = repacked(ExpertPolicy::stream);
  auto r = Model::load(path, repacked()), s = Model::load(path, streamed);
  // The gate and up experts of both layers are interleaved only where they stay put.
  EXPECT_EQ(repacked_tensors(*r) - repacked_tensors(*s), 4) << r->repack_summary() << " / " << s->repack_summary();
  ModelOptions plain_streamed = streamed;
  plain_streamed.repack = false;
  auto plain = Model::load(path, plain_streamed);
  EXPECT_LT(test::nmse(run(*plain).prompt_logits, run(*s).prompt_logits), 1e-9);
}

TEST(Repack, FolderWeightsInterleaveInPlace) {
  const auto cpu = make_backend("cpu", 1);
  if (!cpu_backend_reads_every_rows16(*cpu))
    GTEST_SKIP() << "the cpu backend reads no interleaved layout at this level";
  const std::string dir = synth_mlx_q4();
  ModelOptions here = repacked(), copied = repacked();
  here.repack_in_place = true;
  auto plain = Model::load(dir), in_place = Model::load(dir, here), copy = Model::load(dir, copied);
  // The attention projections and the gate/up/down experts of both layers and the output head
  // are MLX 4-bit (Q4_1 once converted); token_embd is not interleaved (get_rows reads its rows).
  EXPECT_EQ(repacked_tensors(*in_place), 15) << in_place->repack_summary();
  EXPECT_NE(in_place->repack_summary().find("in place of the converted rows"), std::string::npos)
      << in_place->repack_summary();
  EXPECT_EQ(copy->repack_summary().find("in place"), std::string::npos) << copy->repack_summary();
  int interleaved = 0;
  for (const TensorView& t : in_place->file().tensors()) {
    if (!t.rows16) continue;
    ++interleaved;
    EXPECT_EQ(t.type, DType::Q4_1) << t.name;
    EXPECT_TRUE(t.rows_interleaved) << t.name;
    EXPECT_EQ(t.rows16, t.data) << t.name;  // no second copy
    // The bytes are the copy's layout, which the plain load's rows are not.
    const TensorView& c = copy->file().tensor(t.name);
    EXPECT_FALSE(c.rows_interleaved) << t.name;
    EXPECT_NE(c.rows16, c.data) << t.name;
    EXPECT_EQ(std::memcmp(t.rows16, c.rows16, t.nbytes), 0) << t.name;
    EXPECT_NE(std::memcmp(t.data, plain->file().tensor(t.name).data, t.nbytes), 0) << t.name;
    // A reader of rows fails by the tensor's name instead of reading the other layout.
    try {
      (void)t.row(0);
      ADD_FAILURE() << t.name << ": row() read an interleaved tensor";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(t.name), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(interleaved, 15);
  EXPECT_FALSE(in_place->file().tensor("token_embd.weight").rows_interleaved);
  // The 32-block types' interleaved kernels keep the row dots' float order: the same bits at
  // the prompt's 12-token batches and at every one-token step.
  const Outputs a = run(*plain), b = run(*in_place);
  EXPECT_EQ(a.prompt_logits, b.prompt_logits);
  EXPECT_EQ(a.decode_logits, b.decode_logits);
  EXPECT_EQ(a.greedy, b.greedy);
  // A tied embedding (no output head of its own) is interleaved in place too: get_rows takes
  // each row from its group. tests/data/hf/qwen3moe-q4 (vocab 400) ties them.
  {
    const std::string tied = std::string(SLUICE_SOURCE_DIR) + "/tests/data/hf/qwen3moe-q4";
    auto p = Model::load(tied), q = Model::load(tied, here);
    ASSERT_EQ(p->file().find_tensor("output.weight"), nullptr);
    EXPECT_TRUE(q->file().tensor("token_embd.weight").rows_interleaved);
    auto be = make_backend("cpu", 2);
    Session sp(*p, *be, KvCacheOptions{.n_ctx = 32}), sq(*q, *be, KvCacheOptions{.n_ctx = 32});
    const std::vector<int32_t> prompt = {1, 23, 45, 67, 89, 111, 133, 155, 177, 199, 221, 399};
    const auto lp = sp.eval(prompt, /*all_logits=*/true);
    const auto lq = sq.eval(prompt, /*all_logits=*/true);
    EXPECT_EQ(std::vector<float>(lp.begin(), lp.end()), std::vector<float>(lq.begin(), lq.end()));
    const auto dp = sp.eval(std::vector<int32_t>{398}), dq = sq.eval(std::vector<int32_t>{398});
    EXPECT_EQ(std::vector<float>(dp.begin(), dp.end()), std::vector<float>(dq.begin(), dq.end()));
  }
  // A backend that reads rows (the reference) is refused by name, not fed the other layout.
  try {
    (void)run(*in_place, "ref");
    ADD_FAILURE() << "the ref backend ran on interleaved-only weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("interleaved copy"), std::string::npos) << e.what();
  }
}

// With --mlx-in-place the folder's affine matrices are read where the file keeps them (codes,
// scales and biases in their own arrays): --repack has no interleaved layout for them and leaves
// them, and the folder computes the same bits with it as without.
TEST(Repack, FolderAffineWeightsInPlaceStayAsTheyAre) {
  const std::string dir = synth_mlx_q4();
  ModelOptions plain_opt, with = repacked();
  plain_opt.mlx_in_place = with.mlx_in_place = true;
  with.repack_in_place = true;
  auto plain = Model::load(dir, plain_opt), r = Model::load(dir, with);
  EXPECT_EQ(repacked_tensors(*r), 0) << r->repack_summary();
  int affine = 0;
  for (const TensorView& t : r->file().tensors()) {
    if (!dtype_is_affine(t.type)) continue;
    ++affine;
    EXPECT_EQ(t.rows16, nullptr) << t.name;
    EXPECT_FALSE(t.rows_interleaved) << t.name;
  }
  // The attention projections, the gate/up/down experts of both layers, the output head and
  // token_embd are MLX 4-bit.
  EXPECT_EQ(affine, 16);
  const Outputs a = run(*plain), b = run(*r);
  EXPECT_EQ(a.prompt_logits, b.prompt_logits);
  EXPECT_EQ(a.decode_logits, b.decode_logits);
  EXPECT_EQ(a.greedy, b.greedy);
}

}  // namespace
}  // namespace sluice::test_repack
