// sluice/error.h: the one exception type of the library and a string builder for its messages.
// Every error the library reports for bad input or bad use is a sluice::Error (a
// std::runtime_error) whose message names what is wrong (file, field, byte offset, option), so
// a caller can tell them from its own bugs and a user can act on it without a debugger.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace sluice {

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

// Throws Error(str_cat(args...)).
template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(str_cat(args...));
}

}  // namespace sluice
