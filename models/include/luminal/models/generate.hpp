// Text generation with a compiled causal LM: compile once, then prefill + decode any
// number of prompts on the same compiled graph (the KV cache position is reset between
// prompts; decode steps reuse the graph through the dynamic dims "s" and "p").
//
//   auto model = CausalLM::from_pretrained(dir);
//   auto gen = Generator::compile(std::move(model), ReferenceRuntime{}, CompileOptions{});
//   GenerateResult r = gen.generate(prompt_ids, {.max_new_tokens = 32});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <span>
#include <vector>

#include "luminal/compile.hpp"
#include "luminal/models/transformer.hpp"
#include "luminal/runtime.hpp"

namespace luminal::models {

// The shipped default model (models/default of the source tree), or $LUMINAL_MODEL_DIR.
std::string default_model_dir();

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (argmax, first index on ties)
  int64_t top_k = 0;       // 0: no top-k filter
  double top_p = 1.0;      // 1: no nucleus filter
  uint64_t seed = 0;
};

// Pick the next token from one row of logits. `rng` is used only when sampling.
int32_t sample_token(const std::vector<float>& logits, const SamplingOptions& options, std::mt19937_64& rng);
// Greedy decoding's choice: the first maximum, a NaN counting as the maximum (torch.argmax).
int32_t greedy_token(std::span<const float> logits);

struct GenerateOptions {
  int64_t max_new_tokens = 48;
  SamplingOptions sampling;
  // Stop when one of these is generated (it is included in the result), or, with
  // stop_at_eos, one of the model's eos ids (config.json / generation_config.json).
  std::vector<int32_t> stop_tokens;
  bool stop_at_eos = true;
  // Called with each new token as soon as it is chosen; return false to stop early.
  std::function<bool(int32_t token)> on_token;
  // Keep every step's logits row in the result (for tests and debugging).
  bool record_logits = false;
};

struct GenerateResult {
  std::vector<int32_t> tokens;            // generated ids (not including the prompt)
  std::string stop_reason;                // "stop_token", "max_tokens", "context", "callback"
  double prefill_seconds = 0;             // the prefill execution alone
  double ttft_seconds = 0;                // start of generate() to the first token
  double tpot_seconds = 0;                // mean time per token after the first
  double decode_tokens_per_second = 0;    // tokens after the first / their time
  double total_seconds = 0;
  // Where a decode step's time goes (means over the steps after the first token): running
  // the model, reading its logits back, and the rest (sampling, the on_token callback).
  double step_execute_seconds = 0, step_read_seconds = 0, step_other_seconds = 0;
  std::vector<std::vector<float>> logits; // with record_logits: one row per generated token
};

class Generator {
 public:
  // Compile the model's graph into `runtime` (any Runtime type) and load its weights.
  template <class R>
  static Generator compile(CausalLM model, R runtime, const CompileOptions& options = {}) {
    auto rt = std::make_unique<R>(model.graph().compile(std::move(runtime), options));
    return Generator(std::move(model), std::move(rt));
  }
  Generator(CausalLM model, std::unique_ptr<Runtime> runtime);  // runtime already compiled
  Generator(Generator&&) noexcept;
  Generator& operator=(Generator&&) noexcept;
  ~Generator();

  // Greedy or sampled generation after `prompt`. Starts a fresh sequence (position 0).
  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& options = {});

  // Low level: run `ids` as the next tokens of the current sequence (s = ids.size(),
  // p = position()), advance the position and return the logits, (ids.size(), vocab)
  // row-major with all_logits, else the last row only.
  std::vector<float> forward(const std::vector<int32_t>& ids);
  void reset() { position_ = 0; }  // start a new sequence; the cache is overwritten
  int64_t position() const { return position_; }

  const CausalLM& model() const { return model_; }
  Runtime& runtime() { return *runtime_; }
  double load_seconds() const { return load_seconds_; }

 private:
  CausalLM model_;
  std::unique_ptr<Runtime> runtime_;
  int64_t position_ = 0;
  double load_seconds_ = 0;
  double execute_seconds_ = 0, read_seconds_ = 0;  // summed over forward() calls

  void run(const std::vector<int32_t>& ids);  // execute `ids`, advance the position
  std::vector<float> read_logits();
  // The graph's greedy choice (CausalLM::next_token).
  int32_t read_greedy_token();
};

}  // namespace luminal::models
