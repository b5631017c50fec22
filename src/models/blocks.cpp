// models/blocks: building blocks shared by the forwards of several families.
#include "models/blocks.h"

namespace sluice {

void attend_batch(Backend& be, Memory& mem, const std::vector<BatchRun>& runs, int64_t layer, const AttendShape& sh,
                  const float* q, const float* k, const float* v, float* out) {
  const int64_t H = sh.n_head, Hkv = sh.n_head_kv, Dk = sh.head_dim_k, Dv = sh.head_dim_v;
  const int64_t slot = mem.kv_slot(layer);
  for (const BatchRun& r : runs) {
    KvCache& kv = mem.kv(r.seq);
    kv.store_run(be, slot, r.pos0, r.n, k + r.first * Hkv * Dk, v + r.first * Hkv * Dv, q + r.first * H * Dk);
    AttentionArgs aa = kv.attention_args(slot);  // cache pointers, types, strides, codecs
    // Queries into the K cache's rotated space, the output back from V's (memory/kv_cache.h).
    std::vector<float> q_rot;
    aa.q = kv.query_for_cache(be, slot, q + r.first * H * Dk, r.n * H * Dk, &q_rot);
    aa.out = out + r.first * H * Dv;
    aa.n_tok = r.n;
    aa.n_head = H;
    aa.n_head_kv = Hkv;
    aa.head_dim_k = Dk;
    aa.head_dim_v = Dv;
    aa.n_kv = r.pos0 + r.n;
    aa.pos0 = r.pos0;
    aa.scale = sh.scale;
    be.attention(aa);
    kv.output_from_cache(be, aa.out, r.n * H * Dv);
  }
}

}  // namespace sluice
