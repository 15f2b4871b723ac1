// Every fuzz seed and every input a fuzzer ever crashed on (fuzz/corpus/TARGET and
// fuzz/regressions/TARGET) replayed through the same harness the libFuzzer targets use.
// Under the asan preset this is the sanitizer check too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "../../fuzz/harness.hpp"

namespace fs = std::filesystem;

namespace {
using Harness = void (*)(const uint8_t*, size_t);

size_t replay(const std::string& target, Harness harness) {
  size_t n = 0;
  for (const char* dir : {"corpus", "regressions"}) {
    fs::path d = fs::path(LUMINAL_SOURCE_DIR) / "fuzz" / dir / target;
    if (!fs::is_directory(d)) continue;
    for (const auto& f : fs::directory_iterator(d)) {
      std::ifstream in(f.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      SCOPED_TRACE(f.path().string());
      EXPECT_NO_THROW(harness(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      ++n;
    }
  }
  return n;
}
}  // namespace

TEST(FuzzRegressions, Safetensors) { EXPECT_GE(replay("safetensors", luminal::fuzz::safetensors), 4u); }
TEST(FuzzRegressions, Config) { EXPECT_GE(replay("config", luminal::fuzz::config), 5u); }
TEST(FuzzRegressions, Tokenizer) { EXPECT_GE(replay("tokenizer", luminal::fuzz::tokenizer), 2u); }
TEST(FuzzRegressions, Rules) { EXPECT_GE(replay("rules", luminal::fuzz::rules), 3u); }

// config.json values that used to be undefined behaviour, an out-of-memory, or a silent
// truncation are errors naming the field.
TEST(FuzzRegressions, ConfigValuesAreBounded) {
  auto error_of = [](const std::string& file) {
    std::ifstream in(fs::path(LUMINAL_SOURCE_DIR) / "fuzz" / "regressions" / "config" / file);
    nlohmann::json j = nlohmann::json::parse(in);
    try {
      luminal::models::parse_config(j);
    } catch (const luminal::Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(error_of("layers_1e300.json").find("field 'num_hidden_layers' must be an integer"), std::string::npos);
  EXPECT_NE(error_of("layers_huge.json").find("num_hidden_layers must be at most 4096"), std::string::npos);
  EXPECT_NE(error_of("eos_out_of_int32.json").find("eos_token_id entries must be token ids"), std::string::npos);
  EXPECT_NE(error_of("bos_negative.json").find("bos_token_id entries must be token ids"), std::string::npos);
  EXPECT_NE(error_of("vocab_uint64.json").find("vocab_size must be positive"), std::string::npos);
}
