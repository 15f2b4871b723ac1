// libFuzzer target: luminal::fuzz::config (harness.hpp). Run it with scripts/fuzz config SECONDS.
#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  luminal::fuzz::config(data, size);
  return 0;
}
