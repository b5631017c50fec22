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

// An MLX folder's affine matrices are read where the file keeps them (codes, scales and biases in
// their own arrays): --repack has no interleaved layout for them and leaves them, and the folder
// computes the same bits with it as without.
TEST(Repack, FolderAffineWeightsStayInPlace) {
  const auto cpu = make_backend("cpu", 1);
  if (!cpu_backend_reads_every_rows16(*cpu))
    GTEST_SKIP() << "the cpu backend reads no interleaved layout at this level";
  const std::string dir = synth_mlx_q4();
  ModelOptions here = repacked();
  here.repack_in_place = true;
  auto plain = Model::load(dir), with = Model::load(dir, here);
  EXPECT_EQ(repacked_tensors(*with), 0) << with->repack_summary();
  int affine = 0;
  for (const TensorView& t : with->file().tensors()) {
    if (!dtype_is_affine(t.type)) continue;
    ++affine;
    EXPECT_EQ(t.rows16, nullptr) << t.name;
    EXPECT_FALSE(t.rows_interleaved) << t.name;
  }
  // The attention projections, the gate/up/down experts of both layers, the output head and
  // token_embd are MLX 4-bit.
  EXPECT_EQ(affine, 16);
  const Outputs a = run(*plain), b = run(*with);
  EXPECT_EQ(a.prompt_logits, b.prompt_logits);
  EXPECT_EQ(a.decode_logits, b.decode_logits);
  EXPECT_EQ(a.greedy, b.greedy);
}

}  // namespace
}  // namespace sluice::test_repack
