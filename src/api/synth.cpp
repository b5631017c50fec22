// api/synth: sluice/synth.h over synth/.
#include "sluice/synth.h"

#include "core/error.h"
#include "synth/synth.h"

namespace sluice {

std::vector<SynthPreset> synth_preset_table() {
  std::vector<SynthPreset> out;
  for (SynthShape s : synth_presets()) {
    SynthPreset& p = out.emplace_back();
    p.arch = s.arch;
    p.preset = s.preset;
    p.note = s.note;
    p.n_vocab = s.n_vocab;
    p.n_embd = s.n_embd;
    p.n_layer = s.n_layer;
    p.n_head = s.n_head;
    p.n_head_kv = s.n_head_kv;
    p.kv_lora_rank = s.kv_lora_rank;
    p.n_expert = s.n_expert;
    p.n_expert_used = s.n_expert_used;
    p.n_expert_shared = s.n_expert_shared;
    if (s.n_vocab == 0) s.n_vocab = 512;  // stories260K's, for the parameter count
    p.n_params = synth_param_count(s);
  }
  return out;
}

std::vector<std::string> synth_types() { return synth_type_names(); }

SynthSummary synth(const SynthConfig& c, const std::string& path) {
  if (c.format != "gguf" && c.format != "mlx") fail("synth: format '", c.format, "' is not gguf or mlx");
  const SynthResult r = c.format == "mlx" ? synth_write_mlx(c, path) : synth_write(c, path);
  SynthSummary s;
  s.arch = r.shape.arch;
  s.preset = r.shape.preset;
  s.n_layer = r.shape.n_layer;
  s.n_vocab = r.shape.n_vocab;
  s.file_bytes = r.file_bytes;
  s.n_params = r.n_params;
  s.n_tensors = r.n_tensors;
  s.seconds = r.seconds;
  s.type_counts.assign(r.type_counts.begin(), r.type_counts.end());
  return s;
}

}  // namespace sluice
