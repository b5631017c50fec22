// apps/cli/options: option parsers shared by the subcommands.
#include <cctype>
#include <exception>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "memory/expert_store.h"

namespace sluice::cli {

// "4G", "512M", "1.5GiB", "65536": bytes (K/M/G/T are powers of 1024).
size_t parse_byte_size(const std::string& opt, const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = s.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  const std::string units = "KMGT";
  double mul = 1;
  if (unit.size() == 1 && units.find(unit[0]) != std::string::npos)
    for (size_t i = 0; i <= units.find(unit[0]); ++i) mul *= 1024;
  else if (!unit.empty() && unit != "B")
    used = 0;
  if (used == 0 || !(v > 0) || v * mul > 1e18) fail(opt, ": '", s, "' is not a size (e.g. 4G, 512M, 65536)");
  return static_cast<size_t>(v * mul);
}

void set_expert_cache(ExpertStoreOptions& o, const std::string& s) {
  o.cache_auto = s == "auto";
  if (!o.cache_auto) o.cache_bytes = parse_byte_size("--expert-cache", s);
}

}  // namespace sluice::cli
