// The two error channels.
//   * luminal::Error: bad user input (malformed files, wrong shapes, unknown ops or
//     dims). Thrown with a message that names the problem; callers may catch it.
//   * LUMINAL_ASSERT: a broken internal invariant. Aborts with file, line and context:
//     it is a bug in luminal, never the user's fault.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace luminal {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A device this process can no longer use: a kernel faulted (an illegal address, say) and
// the driver keeps failing every call on its context. Nothing in this process can bring it
// back, so compilation stops instead of rejecting the candidate and going on; the message
// says what faulted.
class DeviceLost : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const std::string& msg);

template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Throw a user-facing error: fail("shape mismatch: ", a, " vs ", b).
template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::concat(args...));
}

}  // namespace luminal

#define LUMINAL_ASSERT(cond, ...)                                                          \
  do {                                                                                     \
    if (!(cond)) ::luminal::detail::assert_fail(#cond, __FILE__, __LINE__,                 \
                                                ::luminal::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

// Validate user input: LUMINAL_CHECK(ok, "permute: axis ", a, " out of range").
#define LUMINAL_CHECK(cond, ...)                                                           \
  do {                                                                                     \
    if (!(cond)) ::luminal::fail(__VA_ARGS__);                                             \
  } while (0)
