// scripts/golden/llama_logits: makes a golden with llama.cpp's public C API, the way the
// goldens in ../shared/golden were made (their README): CPU only, 1 thread, flash attention
// off, an F16 KV cache, no weight repacking; the whole prompt in one llama_decode with logits
// for every position; then N greedy tokens (argmax, ties to the lowest id), each decoded alone.
// Not part of the build: scripts/golden/make_goldens.sh compiles it against a llama.cpp build.
//
// Usage: llama_logits MODEL.gguf OUT_DIR N_GEN ID,ID,... [LORA.gguf[:SCALE]]
// (with a LoRA adapter applied through llama_set_adapters_lora, scale 1 unless given)
// Writes OUT_DIR/logits.f32.bin ([n_prompt][n_vocab] float32) and OUT_DIR/greedy.json
// ({"prompt_tokens", "generated", "margins"}: the top1 - top2 logit gap of each step).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

namespace {

int argmax(const float* l, int n, float* margin) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (l[i] > l[best]) best = i;
  float second = -1e30f;
  for (int i = 0; i < n; ++i)
    if (i != best && l[i] > second) second = l[i];
  *margin = l[best] - second;
  return best;
}

bool decode(llama_context* ctx, const std::vector<llama_token>& ids, int pos0, bool all_logits) {
  llama_batch b = llama_batch_init(static_cast<int32_t>(ids.size()), 0, 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    b.token[i] = ids[i];
    b.pos[i] = pos0 + static_cast<int>(i);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = all_logits || i + 1 == ids.size();
  }
  b.n_tokens = static_cast<int32_t>(ids.size());
  const int rc = llama_decode(ctx, b);
  llama_batch_free(b);
  return rc == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: %s MODEL.gguf OUT_DIR N_GEN ID,ID,... [LORA.gguf[:SCALE]]\n", argv[0]);
    return 2;
  }
  const std::string out = argv[2];
  const int n_gen = std::atoi(argv[3]);
  std::vector<llama_token> prompt;
  for (const char* p = argv[4]; *p;) {
    char* end = nullptr;
    prompt.push_back(static_cast<llama_token>(std::strtol(p, &end, 10)));
    p = *end == ',' ? end + 1 : end;
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.use_extra_bufts = false;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = cp.n_ubatch = 512;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = cp.type_v = GGML_TYPE_F16;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  if (argc == 6) {
    std::string lora = argv[5];
    float scale = 1.0f;
    if (const size_t colon = lora.rfind(':'); colon != std::string::npos) {
      scale = std::strtof(lora.c_str() + colon + 1, nullptr);
      lora.resize(colon);
    }
    llama_adapter_lora* ad = llama_adapter_lora_init(model, lora.c_str());
    if (!ad || llama_set_adapters_lora(ctx, &ad, 1, &scale) != 0) return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  if (!decode(ctx, prompt, 0, true)) return 1;
  FILE* f = std::fopen((out + "/logits.f32.bin").c_str(), "wb");
  for (size_t i = 0; i < prompt.size(); ++i)
    std::fwrite(llama_get_logits_ith(ctx, static_cast<int32_t>(i)), sizeof(float), n_vocab, f);
  std::fclose(f);
  std::string gen, margins;
  float margin = 0;
  llama_token next = argmax(llama_get_logits_ith(ctx, -1), n_vocab, &margin);
  int pos = static_cast<int>(prompt.size());
  for (int i = 0; i < n_gen; ++i) {
    gen += (i ? "," : "") + std::to_string(next);
    margins += (i ? "," : "") + std::to_string(margin);
    if (!decode(ctx, {next}, pos++, false)) return 1;
    next = argmax(llama_get_logits_ith(ctx, -1), n_vocab, &margin);
  }
  std::string ids;
  for (size_t i = 0; i < prompt.size(); ++i) ids += (i ? "," : "") + std::to_string(prompt[i]);
  f = std::fopen((out + "/greedy.json").c_str(), "w");
  std::fprintf(f, "{\"prompt_tokens\": [%s], \"n_gen\": %d, \"generated\": [%s], \"margins\": [%s]}\n", ids.c_str(),
               n_gen, gen.c_str(), margins.c_str());
  std::fclose(f);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
