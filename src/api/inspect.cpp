// api/inspect: sluice/inspect.h over GgufFile and Model::load.
#include "sluice/inspect.h"

#include "api/engine_impl.h"
#include "format/gguf.h"

namespace sluice {

GgufInfo gguf_info(const std::string& path) {
  GgufFile f(path);
  GgufInfo g;
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
