// libFuzzer target: luminal::fuzz::safetensors (harness.hpp). Run it with scripts/fuzz safetensors SECONDS.
#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  luminal::fuzz::safetensors(data, size);
  return 0;
}
