// api/pack: sluice/pack.h over memory/pack.
#include "sluice/pack.h"

#include "memory/pack.h"

namespace sluice {

PackSummary pack_model(const std::string& in_path, const std::string& out_path, bool unpack,
                       const std::function<void(size_t done, size_t total)>& progress) {
  return unpack ? unpack_experts(in_path, out_path, progress) : pack_experts(in_path, out_path, progress);
}

}  // namespace sluice
