// The fuzzed entry points, one function per target: called by the libFuzzer targets
// (fuzz_*.cpp) and, on every seed and every crash found so far, by the regression test
// tests/verify/fuzz_regressions_test.cpp. Each must return normally or throw
// luminal::Error for any input; anything else (a crash, a sanitizer report, another
// exception, an abort on a broken promise below) is a bug.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "luminal/error.hpp"
#include "luminal/models/tokenizer.hpp"
#include "luminal/models/transformer.hpp"
#include "luminal/safetensors.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "luminal/tensor.hpp"

namespace luminal::fuzz {

// A scratch directory per process, for the readers that take paths.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  // Removed when the process exits.
  struct Scratch {
    std::filesystem::path dir;
    Scratch() {
      dir = std::filesystem::path(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") /
            ("luminal_fuzz_" + std::to_string(getpid()));
      std::filesystem::create_directories(dir);
    }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const Scratch scratch;
  std::string path = (scratch.dir / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// SafetensorsFile::open on arbitrary bytes: it opens (and every tensor reads back from
// inside the file) or throws.
inline void safetensors(const uint8_t* data, size_t size) {
  std::string path = write_scratch("f.safetensors", data, size);
  try {
    auto f = SafetensorsFile::open(path);
    for (const auto& [name, e] : f.entries()) {
      HostTensor t = f.read(name);
      if (t.bytes.size() != e.end - e.begin || e.end > size) std::abort();
    }
  } catch (const Error&) {
  }
}

// config.json: valid JSON goes through parse_config; a small config is built into the
// model graph too.
inline void config(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  try {
    models::TransformerConfig c = models::parse_config(j);
    bool small = c.num_layers <= 2 && c.hidden_size <= 64 && c.intermediate_size <= 128 && c.vocab_size <= 256 &&
                 c.num_heads <= 8 && c.head_dim <= 64;
    if (small) models::CausalLM::build(c);
  } catch (const Error&) {
  }
}

// tokenizer.json and the tokenizer on arbitrary bytes: split at the first 0xFF byte
// (never valid in JSON or UTF-8): tokenizer.json before, text after. The text is encoded
// (invalid UTF-8 throws), the ids decoded, and the text's bytes read as ids decoded too.
inline void tokenizer(const uint8_t* data, size_t size) {
  const auto* split = static_cast<const uint8_t*>(std::memchr(data, 0xFF, size));
  size_t json_size = split ? static_cast<size_t>(split - data) : size;
  std::string path = write_scratch("tokenizer.json", data, json_size);
  std::string_view text;
  if (split) text = std::string_view(reinterpret_cast<const char*>(split + 1), size - json_size - 1);
  try {
    auto tok = models::Tokenizer::from_file(path);
    try {
      auto ids = tok.encode(text, true);
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) std::abort();  // encode makes only known ids
      tok.decode(ids, false);
      tok.decode(ids, true);
    } catch (const Error&) {
    }
    std::vector<int32_t> raw;
    for (size_t i = 0; i + 1 < text.size() && raw.size() < 64; i += 2)
      raw.push_back(static_cast<int32_t>(static_cast<uint8_t>(text[i]) | (static_cast<uint8_t>(text[i + 1]) << 8)) - 8);
    try {
      tok.decode(raw, false);
    } catch (const Error&) {
    }
    for (int32_t id : raw) (void)tok.id_to_token(id);
  } catch (const Error&) {
  }
}

// The rule-file parser and rule validation, over the IR signature a compile declares.
// Fuzzed rules are not run: a rule that unions e-classes of different shapes trips an
// assertion in the IR analysis (docs/RELIABILITY.md).
inline void rules(const uint8_t* data, size_t size) {
  static const Graph graph = [] {
    Graph g;
    auto x = g.tensor({2, 3});
    ((x * 1.0 + 0.0).exp2().sum({1}) + x.t().sum({0})).output();
    return g;
  }();
  search::LoweredGraph lowered = search::lower_to_egraph(graph);
  try {
    lowered.egraph->load_string(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.egg");
  } catch (const Error&) {
  }
}

}  // namespace luminal::fuzz
