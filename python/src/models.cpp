// Hugging Face models: tokenizer, causal LM loading and text generation.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "luminal/models/generate.hpp"
#include "luminal/models/tokenizer.hpp"
#include "luminal/models/transformer.hpp"

namespace luminal::python {

using models::CausalLM;
using models::GenerateOptions;
using models::GenerateResult;
using models::Generator;
using models::Tokenizer;

void bind_models(nb::module_& root) {
  nb::module_ m = root.def_submodule("models", "Hugging Face models: tokenizer, loading and generation.");
  m.def("default_model_dir", &models::default_model_dir,
        "The model that ships with luminal (models/default), or $LUMINAL_MODEL_DIR.");

  nb::class_<Tokenizer>(m, "Tokenizer", "A Hugging Face tokenizer.json (byte-level BPE).")
      .def_static("from_file", &Tokenizer::from_file, "path"_a, "A tokenizer.json, or a directory holding one.")
      .def("encode", &Tokenizer::encode, "text"_a, "add_special_tokens"_a = true)
      .def("decode", [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip) { return t.decode(ids, skip); },
           "ids"_a, "skip_special_tokens"_a = false)
      .def("token_id", &Tokenizer::token_id, "token"_a)
      .def_prop_ro("vocab_size", &Tokenizer::vocab_size)
      .def_prop_ro("bos_token_id", &Tokenizer::bos_token_id)
      .def_prop_ro("eos_token_id", &Tokenizer::eos_token_id)
      .def("apply_chat_template", [](const Tokenizer& t, const std::vector<std::pair<std::string, std::string>>& msgs,
                                     bool add_generation_prompt) {
             std::vector<models::ChatMessage> messages;
             for (const auto& [role, content] : msgs) messages.push_back({role, content});
             return t.apply_chat_template(messages, add_generation_prompt);
           }, "messages"_a, "add_generation_prompt"_a = true, "messages: [(role, content), ...]");

  nb::class_<GenerateResult>(m, "GenerateResult")
      .def_ro("tokens", &GenerateResult::tokens)
      .def_ro("stop_reason", &GenerateResult::stop_reason)
      .def_ro("prefill_seconds", &GenerateResult::prefill_seconds)
      .def_ro("ttft_seconds", &GenerateResult::ttft_seconds)
      .def_ro("tpot_seconds", &GenerateResult::tpot_seconds)
      .def_ro("decode_tokens_per_second", &GenerateResult::decode_tokens_per_second)
      .def_ro("total_seconds", &GenerateResult::total_seconds)
      .def_ro("logits", &GenerateResult::logits);

  nb::class_<Generator>(m, "Generator", "A causal LM compiled into a runtime, with its weights loaded.")
      .def_static("from_pretrained", [](const std::string& dir, const std::string& runtime,
                                        const std::optional<CompileOptions>& options, int64_t max_seq_len,
                                        bool all_logits, DType compute_dtype) {
             models::ModelOptions mo;
             mo.max_seq_len = max_seq_len;
             mo.all_logits = all_logits;
             mo.compute_dtype = compute_dtype;
             CausalLM model = CausalLM::from_pretrained(dir, mo);
             const RuntimeEntry& entry = find_runtime(runtime);
             std::unique_ptr<Runtime> rt = entry.make();
             // A decode plan and a prefill plan on a backend (as `luminal generate`).
             CompileOptions o = options.value_or(CompileOptions{});
             if (runtime != "reference") o = model.with_prefill_plan(std::move(o));
             {
               nb::gil_scoped_release release;
               model.graph().compile_into(*rt, o);
             }
             return std::make_unique<Generator>(std::move(model), std::move(rt));
           }, "dir"_a, "runtime"_a = "reference", "options"_a = nb::none(), "max_seq_len"_a = 0,
           "all_logits"_a = false, "compute_dtype"_a = DType::F32,
           "Load config.json + safetensors from `dir` (Llama 3, Qwen 3, Gemma 3), compile and load weights. "
           "compute_dtype: F32 (default), or BF16/F16 computed as transformers does with that torch_dtype "
           "(norms, softmax, RoPE tables and activations upcast to F32).")
      .def("generate", [](Generator& g, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                          double temperature, int64_t top_k, double top_p, uint64_t seed,
                          const std::vector<int32_t>& stop_tokens, bool stop_at_eos, bool record_logits,
                          std::function<bool(int32_t)> on_token) {
             GenerateOptions o;
             o.max_new_tokens = max_new_tokens;
             o.sampling = {temperature, top_k, top_p, seed};
             o.stop_tokens = stop_tokens;
             o.stop_at_eos = stop_at_eos;
             o.record_logits = record_logits;
             o.on_token = std::move(on_token);
             return g.generate(prompt, o);
           }, "prompt"_a, "max_new_tokens"_a = 48, "temperature"_a = 0.0, "top_k"_a = 0, "top_p"_a = 1.0,
           "seed"_a = 0, "stop_tokens"_a = std::vector<int32_t>{}, "stop_at_eos"_a = true,
           "record_logits"_a = false, "on_token"_a = nb::none(),
           "Greedy (temperature 0) or sampled generation after `prompt` (token ids).")
      .def("forward", &Generator::forward, "ids"_a,
           "Run ids as the next tokens of the current sequence; returns logits (last row, or all with all_logits).")
      .def("reset", &Generator::reset)
      .def_prop_ro("position", &Generator::position)
      .def_prop_ro("vocab_size", [](const Generator& g) { return g.model().config().vocab_size; })
      .def_prop_ro("architecture", [](const Generator& g) { return g.model().config().architecture; })
      .def_prop_ro("max_seq_len", [](const Generator& g) { return g.model().max_seq_len(); })
      .def_prop_ro("load_seconds", &Generator::load_seconds);
}

}  // namespace luminal::python
