// memory/pack: `sluice pack` — rewrites a GGUF so each (layer, expert) bundle (gate, up, down)
// is one contiguous, 4 KiB-aligned region, which a streaming miss reads with a single O_DIRECT
// read instead of three; and `--unpack`, the exact reverse.
//
// The trade-off, honestly: ggml requires each tensor's data to be contiguous, and the stacked
// tensors llama.cpp loads (blk.N.ffn_gate_exps.weight = [in, out, n_expert]) put expert e's
// gate matrix next to expert e+1's gate matrix, never next to its own up and down. No byte
// order of a stacked tensor can interleave three tensors, and aligning slices inside a stacked
// tensor is impossible too (its slices are back to back). So a bundle-contiguous file must hold
// one tensor per (layer, expert, matrix). Pack writes them under the per-expert names early
// Mixtral GGUFs used (blk.N.ffn_gate.E.weight); llama.cpp of 2024 merged those at load for the
// llama architecture only (with mmap off), and current llama.cpp and every other architecture
// (qwen3moe, olmoe, deepseek2) expect the stacked tensors. Treat a packed file as Sluice-only:
// it is marked `sluice.expert_layout = "bundled"`, and `sluice pack --unpack` restores a
// llama.cpp-loadable file with the original tensor bytes.
//
// The input may be a model folder (format/hf_folder.h): the packed file then holds the
// tensors a load of the folder makes (MLX groups as Q4_1/Q5_1/Q8_A blocks, GGUF names and
// metadata), the experts converted one at a time as they are written, so a folder larger than
// memory packs in bounded memory; it is how a folder's experts stream. --unpack of such a file
// gives a stacked GGUF of the same tensors (Sluice's reading of the folder; not claimed loadable
// by llama.cpp, whose converters reorder some of them).
//
// Layout of a packed file: every non-expert tensor first, in the input's order (so the dense
// weights are one contiguous region for the mapping), then layer by layer, expert by expert,
// gate, up, down. general.alignment becomes 4096, so every tensor (hence every bundle) starts
// on a 4 KiB boundary; the original alignment is kept in sluice.pack.alignment for --unpack.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "format/hf_folder.h"
#include "sluice/pack.h"

namespace sluice {

// What a pack or unpack did: the public API's PackSummary (sluice/pack.h).
using PackResult = PackSummary;

// progress(done, total): tensors written so far, called after each tensor.
using PackProgress = std::function<void(size_t done, size_t total)>;

// Throws Error naming the file and the problem (not an MoE model, already packed, I/O errors;
// a partly written output is removed).
PackResult pack_experts(const std::string& in_path, const std::string& out_path, const PackProgress& progress = {});
PackResult unpack_experts(const std::string& in_path, const std::string& out_path, const PackProgress& progress = {});

// `--experts stream` on a model folder: streaming reads each expert by file offset from one
// packed GGUF, so an MoE folder's experts are packed once (pack_experts, bounded memory) into
// pack_dir and read from there on every later run (models/model.cpp Model::load).
// folder_pack_path: the copy's path, pack_dir/NAME-KEY.gguf, NAME the folder's, KEY a hash of
// its real path and of each file's name, size and modification time, so an edited or replaced
// folder gets a new copy (an old one stays until removed by hand). pack_dir empty:
// default_pack_dir(). Nothing is created.
std::string folder_pack_path(const std::string& folder, const std::string& pack_dir);
// Packs `folder`, `opened` by open_model_folder_for_rewrite (the caller looked into it: its dense
// tensors are not converted twice), into `path` (created with its directory) under a temporary
// name renamed at the end, so an interrupted or failed pack leaves no copy that looks whole.
PackResult write_folder_pack(const std::string& folder, FolderForRewrite opened, const std::string& path,
                             const PackProgress& progress = {});
// $SLUICE_PACK_DIR, else $XDG_CACHE_HOME/sluice/packed, else $HOME/.cache/sluice/packed.
std::string default_pack_dir();

}  // namespace sluice
