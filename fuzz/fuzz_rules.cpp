// libFuzzer target: luminal::fuzz::rules (harness.hpp). Run it with scripts/fuzz rules SECONDS.
#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  luminal::fuzz::rules(data, size);
  return 0;
}
