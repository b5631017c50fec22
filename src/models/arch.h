// models/arch: the architecture registry. Each architecture family is one module, one file
// (models/<family>.cpp), that provides an Arch for every general.architecture name it runs:
// how it reads its own hyperparameters, binds its attention weights, lays out its memory per
// layer and runs its forward. It owns its extension structs (ArchHparams, ArchLayerWeights in
// models/model.h). Model::load reads the shared keys, then hands over to the module; nothing
// outside the registry tests architecture names.
//
// Adding an architecture: a new models/<family>.cpp defining its Arch entries, one line in
// models/registry.cpp naming them (an explicit list rather than static registration objects,
// which the linker drops from a static library when nothing else references their file).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"
#include "memory/batch.h"
#include "memory/memory.h"
#include "models/model.h"

namespace sluice {

struct Arch {
  std::string_view name;  // general.architecture
  // After the shared keys (models/model.cpp read_core_hparams): the family's own keys, into hp
  // (hp.ext for what only this family has). Throws Error naming the file and the key.
  void (*read_hparams)(const GgufFile& f, Hparams& hp) = nullptr;
  // The attention weights of layer l ("blk.<l>." tensors) into w (w.ext for the family's own).
  void (*bind_attention)(const GgufFile& f, const Hparams& hp, int64_t l, LayerWeights& w) = nullptr;
  // What each layer keeps between steps.
  MemoryLayout (*memory_layout)(const Hparams& hp) = nullptr;
  // One forward step (see Model::forward, which checks the batch and runs the memory protocol
  // around this). runs: the batch's runs, the unit attention works on.
  void (*forward)(const Model& m, Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs,
                  float* logits, const TensorHook* hook) = nullptr;
};

// The module for general.architecture `name`; throws Error naming the file and listing the
// supported names when there is none.
const Arch& find_arch(const std::string& path, std::string_view name);
// "llama, qwen3, ..." in registry order.
std::string supported_archs();

// Binds a tensor by name and checks its shape; throws naming the file, the tensor, the
// expected and the actual shape. Null for a missing tensor that is not required.
const TensorView* bind_tensor(const GgufFile& f, const std::string& name, std::initializer_list<int64_t> shape,
                              bool required = true);

// v when 1 <= v <= max; else throws naming the file and the key.
int64_t positive_key(const GgufFile& f, const std::string& key, int64_t v, int64_t max = int64_t{1} << 24);

// Group-limited routing ({arch}.expert_group_count / expert_group_used_count, default one
// group) into hp.moe, for the families that route so (deepseek2, kimi-linear, bailingmoe3);
// throws naming the file when the groups do not divide the experts.
void read_expert_groups(const GgufFile& f, Hparams& hp);

// Every layer an attention layer of the model's geometry (the default memory layout).
MemoryLayout attention_memory_layout(const Hparams& hp);

}  // namespace sluice
