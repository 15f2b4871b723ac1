// libFuzzer target: luminal::fuzz::tokenizer (harness.hpp). Run it with scripts/fuzz tokenizer SECONDS.
#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  luminal::fuzz::tokenizer(data, size);
  return 0;
}
