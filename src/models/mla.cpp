// models/mla: the absorbed multi-head latent attention block (see mla.h), shared by deepseek2
// and kimi-linear.
#include "models/mla.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/error.h"
#include "models/arch.h"
#include "models/blocks.h"

namespace sluice {

MlaHparams mla_read_hparams(const GgufFile& f, const Hparams& hp) {
  const std::string a = hp.arch + ".";
  MlaHparams mla;
  mla.q_lora_rank = f.get_u32_or(a + "attention.q_lora_rank", 0);
  mla.kv_lora_rank = positive_key(f, a + "attention.kv_lora_rank", f.get_u32(a + "attention.kv_lora_rank"));
  if (!f.has(a + "attention.key_length_mla"))
    fail(f.path(), ": missing key '", a,
         "attention.key_length_mla' (files with the legacy unsplit attn_kv_b are not supported)");
  const int64_t k_mla = f.get_u32(a + "attention.key_length_mla");
  mla.qk_nope = k_mla - hp.n_rot;
  mla.v_head = positive_key(f, a + "attention.value_length_mla", f.get_u32(a + "attention.value_length_mla"));
  if (mla.qk_nope <= 0) fail(f.path(), ": key_length_mla ", k_mla, " must exceed rope.dimension_count ", hp.n_rot);
  if (hp.n_head_kv != 1 || hp.head_dim_k != mla.kv_lora_rank + hp.n_rot || hp.head_dim_v != mla.kv_lora_rank)
    fail(f.path(), ": MLA expects head_count_kv 1, key_length = kv_lora_rank + rope dims (",
         mla.kv_lora_rank + hp.n_rot, ") and value_length = kv_lora_rank (", mla.kv_lora_rank, "); got ", hp.n_head_kv,
         ", ", hp.head_dim_k, ", ", hp.head_dim_v);
  return mla;
}

void mla_bind(const GgufFile& f, const Hparams& hp, const MlaHparams& mla, int64_t l, LayerWeights& lw) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const int64_t E = hp.n_embd, H = hp.n_head, q_w = H * (mla.qk_nope + hp.n_rot);
  auto w = std::make_shared<MlaWeights>();
  if (mla.q_lora_rank > 0) {
    w->wq_a = bind_tensor(f, p + "attn_q_a.weight", {E, mla.q_lora_rank});
    w->q_a_norm = bind_tensor(f, p + "attn_q_a_norm.weight", {mla.q_lora_rank});
    w->wq_b = bind_tensor(f, p + "attn_q_b.weight", {mla.q_lora_rank, q_w});
  } else {
    w->wq = bind_tensor(f, p + "attn_q.weight", {E, q_w});
  }
  w->wkv_a = bind_tensor(f, p + "attn_kv_a_mqa.weight", {E, mla.kv_lora_rank + hp.n_rot});
  w->kv_a_norm = bind_tensor(f, p + "attn_kv_a_norm.weight", {mla.kv_lora_rank});
  w->wk_b = bind_tensor(f, p + "attn_k_b.weight", {mla.qk_nope, mla.kv_lora_rank, H});
  w->wv_b = bind_tensor(f, p + "attn_v_b.weight", {mla.kv_lora_rank, mla.v_head, H});
  lw.wo = bind_tensor(f, p + "attn_output.weight", {H * mla.v_head, E});
  lw.ext = std::move(w);
}

void MlaScratch::alloc(Backend& be, const Hparams& hp, const MlaHparams& mla, int64_t T) {
  const int64_t H = hp.n_head, N = mla.qk_nope, R = hp.n_rot, L = mla.kv_lora_rank, V = mla.v_head;
  auto a = [&](int64_t n) { return be.alloc<float>(n); };
  qa = a(T * std::max<int64_t>(mla.q_lora_rank, 1)), q = a(T * H * (N + R)), kv_a = a(T * (L + R));
  q_pe = a(T * H * R), k_pe = a(T * R), k_lat = a(T * (L + R)), c_kv = a(T * L);
  q_lat = a(T * H * (L + R)), head_in = a(T * std::max(N, L)), head_out = a(T * std::max(L, V));
  attn_lat = a(T * H * L);
}

void mla_attention(const Hparams& hp, const MlaHparams& mla, const MlaWeights& w, Backend& be, Memory& mem,
                   const Batch& b, const std::vector<BatchRun>& runs, int64_t l, const float* h, float* attn,
                   MlaScratch& s, const TensorHook* hook) {
  // Legend: T tokens, H heads, N qk_nope, R rope dims, L kv_lora, V v_head.
  const int64_t T = b.size(), H = hp.n_head, N = mla.qk_nope, R = hp.n_rot, L = mla.kv_lora_rank, V = mla.v_head;
  const int il = static_cast<int>(l);
  auto report = [&](std::string_view name, const float* data, int64_t rows, int64_t cols) {
    report_to(hook, be, name, il, data, rows, cols);
  };
  const int32_t* pos = b.pos.data();
  // The latent cache has one "head" per position: K row = [c_kv | k_rope], V row = c_kv.
  const AttendShape shape{H, 1, L + R, L, hp.kq_scale_mul / std::sqrt(static_cast<float>(N + R))};

  // Queries: low-rank (q_a -> norm -> q_b) or one matrix; each head is [nope | rope].
  if (w.wq_a) {
    be.matmul(*w.wq_a, h, s.qa.data(), T);
    be.rms_norm(s.qa.data(), static_cast<const float*>(w.q_a_norm->data), s.qa.data(), T, mla.q_lora_rank, hp.rms_eps);
    be.matmul(*w.wq_b, s.qa.data(), s.q.data(), T);
  } else {
    be.matmul(*w.wq, h, s.q.data(), T);
  }
  report("q", s.q.data(), T * H, N + R);

  // Latent kv: [c_kv | k_rope]; c_kv is normed, k_rope is one position head shared by all heads.
  be.matmul(*w.wkv_a, h, s.kv_a.data(), T);
  be.copy_2d(s.kv_a.data(), L + R, s.c_kv.data(), L, T, L);
  be.rms_norm(s.c_kv.data(), static_cast<const float*>(w.kv_a_norm->data), s.c_kv.data(), T, L, hp.rms_eps);
  be.copy_2d(s.kv_a.data() + L, L + R, s.k_pe.data(), R, T, R);
  if (mla.rope) be.rope(s.k_pe.data(), pos, T, 1, R, hp.rope());
  be.copy_2d(s.c_kv.data(), L, s.k_lat.data(), L + R, T, L);
  be.copy_2d(s.k_pe.data(), R, s.k_lat.data() + L, L + R, T, R);
  report("kv_cmpr", s.c_kv.data(), T, L);
  report("k_pe", s.k_pe.data(), T, R);

  // Per head: q_rope rotated; q_nope absorbed into the latent space through W_k_b.
  be.copy_2d(s.q.data() + N, N + R, s.q_pe.data(), R, T * H, R);
  if (mla.rope) be.rope(s.q_pe.data(), pos, T, H, R, hp.rope());
  report("q_pe", s.q_pe.data(), T * H, R);
  for (int64_t hh = 0; hh < H; ++hh) {
    be.copy_2d(s.q.data() + hh * (N + R), H * (N + R), s.head_in.data(), N, T, N);
    be.matmul(w.wk_b->slice2d(hh), s.head_in.data(), s.head_out.data(), T);  // [N] -> [L]
    be.copy_2d(s.head_out.data(), L, s.q_lat.data() + hh * (L + R), H * (L + R), T, L);
    be.copy_2d(s.q_pe.data() + hh * R, H * R, s.q_lat.data() + hh * (L + R) + L, H * (L + R), T, R);
  }
  report("q_absorbed", s.q_lat.data(), T * H, L + R);

  // Attention over the latent cache: K row = [c_kv | k_rope], V row = c_kv.
  attend_batch(be, mem, runs, l, shape, s.q_lat.data(), s.k_lat.data(), s.c_kv.data(), s.attn_lat.data());
  report("kqv_latent", s.attn_lat.data(), T * H, L);
  for (int64_t hh = 0; hh < H; ++hh) {
    be.copy_2d(s.attn_lat.data() + hh * L, H * L, s.head_in.data(), L, T, L);
    be.matmul(w.wv_b->slice2d(hh), s.head_in.data(), s.head_out.data(), T);  // [L] -> [V]
    be.copy_2d(s.head_out.data(), V, attn + hh * V, H * V, T, V);
  }
  report("kqv_out", attn, T, H * V);
}

}  // namespace sluice
