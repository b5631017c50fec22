// api/inspect: sluice/inspect.h over GgufFile and Model::load.
#include "sluice/inspect.h"

#include "api/engine_impl.h"
#include "format/gguf.h"
#include "format/hf_folder.h"

namespace sluice {

GgufInfo gguf_info(const std::string& path) {
  const bool folder = is_model_folder(path);
  const std::unique_ptr<GgufFile> file = folder ? open_model_folder(path) : std::make_unique<GgufFile>(path);
  const GgufFile& f = *file;
  GgufInfo g;
  g.folder = folder;
  g.version = f.version();
  g.alignment = f.alignment();
  g.data_offset = f.data_offset();
  for (const auto& [k, v] : f.metadata()) g.metadata.emplace_back(k, v.to_string());
  for (const auto& t : f.tensors()) {
    GgufTensorInfo& r = g.tensors.emplace_back();
    r.name = t.name;
    r.type = std::string(dtype_name(t.type));
    r.shape.assign(t.ne, t.ne + t.n_dims);
    r.nbytes = t.nbytes;
    r.n_elements = t.n_elements();
  }
  return g;
}

ModelInfo model_info(const std::string& path) { return model_info_of(*Model::load(path)); }

}  // namespace sluice
