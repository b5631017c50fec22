// core/error: the one exception type of the library and a string builder for its messages.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace sluice {

// Every error the library reports for bad input or bad use. The message names what is
// wrong (file, field, byte offset, key) so a user can act on it without a debugger.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// str_cat("tensor ", name, " at offset ", off) -> std::string (GCC 12 has no std::format).
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(str_cat(args...));
}

}  // namespace sluice
