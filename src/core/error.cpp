#include "luminal/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace luminal::detail {

void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "luminal internal error: %s:%d: assertion `%s` failed%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}

}  // namespace luminal::detail
