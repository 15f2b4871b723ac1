// The `luminal` command line. Each subcommand is one `add_*` function that registers its
// options and its run callback; add a new one next to the others and call it from main().
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#ifdef LUMINAL_HAVE_CPU  // set where the CPU backend is built (models/CMakeLists.txt)
#include "luminal/cpu/cpu_runtime.hpp"
#endif
#ifdef LUMINAL_HAVE_CUDA  // set where the CUDA backend is built (backends/cuda/CMakeLists.txt)
#include "luminal_cuda/cuda_runtime.hpp"
#endif

#include "luminal/error.hpp"
#include "luminal/models/generate.hpp"
#include "luminal/models/tokenizer.hpp"
#include "luminal/reference_runtime.hpp"

namespace {

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

nlohmann::json ids_to_json(const std::vector<int32_t>& ids) { return nlohmann::json(ids); }

std::vector<int32_t> json_to_ids(const nlohmann::json& j) {
  if (!j.is_array()) luminal::fail("decode: expected a JSON array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (const auto& v : j) {
    if (!v.is_number_integer()) luminal::fail("decode: token ids must be integers, got ", v.dump());
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

// ---- luminal tokenize ---------------------------------------------------------------
struct TokenizeOptions {
  std::string tokenizer;
  bool decode = false;
  bool lines = false;
  bool no_special = false;
  bool skip_special = false;
};

void run_tokenize(const TokenizeOptions& o) {
  const auto tok = luminal::models::Tokenizer::from_file(o.tokenizer);
  const std::string input = read_stdin();
  auto one = [&](const nlohmann::json& item) -> nlohmann::json {
    if (o.decode) {
      const auto ids = json_to_ids(item);
      return tok.decode(ids, o.skip_special);
    }
    if (!item.is_string()) luminal::fail("encode: expected a JSON string per line");
    return ids_to_json(tok.encode(item.get<std::string>(), !o.no_special));
  };
  if (o.lines) {  // batch mode: one JSON value per input line, one JSON result per output line
    size_t start = 0;
    while (start < input.size()) {
      size_t end = input.find('\n', start);
      if (end == std::string::npos) end = input.size();
      const std::string line = input.substr(start, end - start);
      start = end + 1;
      if (line.empty()) continue;
      nlohmann::json item;
      try {
        item = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        luminal::fail("tokenize --lines: malformed JSON line: ", e.what());
      }
      std::cout << one(item).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
    return;
  }
  if (o.decode) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(input);
    } catch (const nlohmann::json::exception& e) {
      luminal::fail("tokenize --decode: stdin is not a JSON array of ids: ", e.what());
    }
    std::cout << tok.decode(json_to_ids(j), o.skip_special);
  } else {
    std::cout << ids_to_json(tok.encode(input, !o.no_special)).dump() << '\n';
  }
}

void add_tokenize(CLI::App& app) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand(
      "tokenize", "Encode stdin text to a JSON array of token ids (or, with --decode, decode a JSON id array)");
  sub->add_option("--tokenizer,-t", opts->tokenizer, "tokenizer.json or a directory holding one")->required();
  sub->add_flag("--decode,-d", opts->decode, "read a JSON array of ids from stdin and print the text");
  sub->add_flag("--lines", opts->lines,
                "batch mode: each stdin line is a JSON string (or id array with --decode); "
                "prints one JSON result per line");
  sub->add_flag("--no-special", opts->no_special, "encode without the post-processor's special tokens (BOS...)");
  sub->add_flag("--skip-special", opts->skip_special, "decode: drop special tokens");
  sub->callback([opts] { run_tokenize(*opts); });
}


// ---- luminal generate -----------------------------------------------------------------
struct GenerateCliOptions {
  std::string model = luminal::models::default_model_dir();
  std::vector<std::string> prompts;
  int64_t max_tokens = 48;
  double temperature = 0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  bool chat = false;
  int64_t max_seq = 0;
  bool verbose = false;
  std::string device = "cpu";
  std::string dtype = "auto";
  double search_seconds = 5;
};

constexpr const char* kDtypeHelp =
    "compute dtype: f32, bf16, f16 or auto (the checkpoint's weight dtype on cuda, f32 elsewhere: the CPU "
    "backend's GEMMs are F32-only). bf16/f16 compute as transformers with that torch_dtype";

// The compute dtype named by --dtype for a model on `device`.
luminal::DType resolve_dtype(std::string name, const std::string& device, const std::string& model_dir) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (name == "f32" || name == "float32") return luminal::DType::F32;
  if (name == "bf16" || name == "bfloat16") return luminal::DType::BF16;
  if (name == "f16" || name == "float16") return luminal::DType::F16;
  if (name == "auto")
    return device == "cuda" ? luminal::models::checkpoint_matrix_dtype(model_dir) : luminal::DType::F32;
  luminal::fail("--dtype: unknown dtype '", name, "' (f32, bf16, f16 or auto)");
}

// Compile a model for the runtime named by --device.
luminal::models::Generator compile_for(luminal::models::CausalLM model, const std::string& device,
                                       luminal::CompileOptions options) {
  using luminal::models::Generator;
  // A decode plan (s = 1: GEMVs) and a prefill plan (s >= 2: GEMMs), each searched at its
  // own sizes; the reference interpreter has nothing to choose between.
  if (device != "reference") options = model.with_prefill_plan(std::move(options));
  if (device == "cpu") {
#ifdef LUMINAL_HAVE_CPU
    return Generator::compile(std::move(model), luminal::cpu::CpuRuntime{}, options);
#else
    luminal::fail("--device cpu: this build has no CPU backend (built with LUMINAL_BUILD_CPU=OFF)");
#endif
  }
  if (device == "reference") return Generator::compile(std::move(model), luminal::ReferenceRuntime{}, options);
#ifdef LUMINAL_HAVE_CUDA
  // Throws "CUDA backend unavailable: ..." where no GPU can be used.
  if (device == "cuda") return Generator::compile(std::move(model), luminal::cuda::CudaRuntime{}, options);
  luminal::fail("--device: unknown device '", device, "' (cpu, cuda, reference)");
#else
  if (device == "cuda") luminal::fail("--device cuda: this build has no CUDA backend");
  luminal::fail("--device: unknown device '", device, "' (cpu, reference)");
#endif
}

// Text of the generated ids, minus a trailing incomplete UTF-8 sequence (shown as U+FFFD
// by decode) that the next token may complete.
std::string stable_text(const luminal::models::Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string text = tok.decode(ids, /*skip_special_tokens=*/true);
  static const std::string kReplacement = "\xEF\xBF\xBD";
  while (text.size() >= 3 && text.compare(text.size() - 3, 3, kReplacement) == 0) text.resize(text.size() - 3);
  return text;
}

void run_generate(const GenerateCliOptions& o) {
  using namespace luminal::models;
  const TransformerConfig config = load_config(o.model);  // a bad directory is reported first
  const luminal::DType dtype = resolve_dtype(o.dtype, o.device, o.model);
  const auto tok = Tokenizer::from_file(o.model);
  // Several --prompt options run one after the other on the same compiled model.
  std::vector<std::vector<int32_t>> prompts;
  int64_t longest = 0;
  for (const auto& text : o.prompts) {
    std::vector<int32_t> ids =
        o.chat ? tok.encode(tok.apply_chat_template({{"user", text}}, /*add_generation_prompt=*/true),
                            /*add_special_tokens=*/false)
               : tok.encode(text, /*add_special_tokens=*/true);
    if (ids.empty()) luminal::fail("generate: the prompt '", text, "' encodes to no tokens");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
    prompts.push_back(std::move(ids));
  }
  auto t0 = std::chrono::steady_clock::now();
  ModelOptions mo;
  mo.compute_dtype = dtype;
  mo.max_seq_len = o.max_seq;
  if (mo.max_seq_len == 0) {  // keep the cache small: enough for the prompts and their generation
    const int64_t need = longest + std::max<int64_t>(o.max_tokens, 1);
    mo.max_seq_len = std::min<int64_t>(config.max_position_embeddings, need);
  }
  luminal::CompileReport report;
  Generator gen = compile_for(CausalLM::from_pretrained(o.model, mo), o.device,
                              luminal::CompileOptions{}
                                  .verbose(o.verbose)
                                  .report(&report)
                                  .search_time_limit(std::chrono::duration<double>(o.search_seconds)));
  double setup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateOptions go;
    go.max_new_tokens = o.max_tokens;
    go.sampling = {o.temperature, o.top_k, o.top_p, o.seed};
    std::vector<int32_t> out;
    size_t printed = 0;
    if (i > 0) std::cout << "---\n";
    if (!o.chat) {
      std::cout << o.prompts[i];
      std::cout.flush();
    }
    go.on_token = [&](int32_t id) {
      out.push_back(id);
      std::string text = stable_text(tok, out);
      if (text.size() > printed) {
        std::cout << text.substr(printed);
        std::cout.flush();
        printed = text.size();
      }
      return true;
    };
    GenerateResult r = gen.generate(prompts[i], go);
    std::string text = tok.decode(out, true);
    if (text.size() > printed) std::cout << text.substr(printed);
    std::cout << "\n\n";
    std::ostringstream stats;
    stats.setf(std::ios::fixed);
    stats.precision(1);
    stats << "prompt tokens: " << prompts[i].size() << ", generated: " << r.tokens.size() << " ("
          << r.stop_reason << ")\n";
    stats.precision(2);  // a GPU's decode step is a few ms: 0.1 ms is a few percent
    stats << "TTFT: " << r.ttft_seconds * 1e3 << " ms\n";
    stats << "TPOT: " << r.tpot_seconds * 1e3 << " ms\n";
    stats.precision(1);
    if (o.verbose) {
      stats.precision(3);
      stats << "TPOT split: execute " << r.step_execute_seconds * 1e3 << " ms, read logits "
            << r.step_read_seconds * 1e3 << " ms, sampling and printing " << r.step_other_seconds * 1e3 << " ms\n";
      stats.precision(1);
    }
    stats.precision(2);
    stats << "tokens/s: " << r.decode_tokens_per_second << "\n";
    stats.precision(1);
    if (i == 0)
      stats << "compile: " << report.total_s * 1e3 << " ms, load+compile: " << setup * 1e3 << " ms (" << o.device
            << " backend, " << luminal::dtype_name(dtype) << " compute)\n";
    std::cout << stats.str();
  }
}

void add_generate(CLI::App& app) {
  auto opts = std::make_shared<GenerateCliOptions>();
  CLI::App* sub = app.add_subcommand("generate", "Generate text with a Hugging Face causal LM directory");
  sub->add_option("--model,-m", opts->model,
                  "model directory (config.json, *.safetensors, tokenizer.json); default: the shipped model")
      ->capture_default_str();
  sub->add_option("--prompt,-p", opts->prompts, "prompt text (repeat to run several prompts on one compiled model)")
      ->required()
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--max-tokens,-n", opts->max_tokens, "maximum new tokens")->capture_default_str();
  sub->add_option("--temperature,-t", opts->temperature, "sampling temperature (0: greedy)")->capture_default_str();
  sub->add_option("--top-k", opts->top_k, "keep the k most likely tokens (0: all)")->capture_default_str();
  sub->add_option("--top-p", opts->top_p, "nucleus sampling threshold")->capture_default_str();
  sub->add_option("--seed", opts->seed, "sampling seed")->capture_default_str();
  sub->add_flag("--chat", opts->chat, "wrap the prompt in the tokenizer's chat template");
  sub->add_option("--max-seq", opts->max_seq, "KV-cache length (default: prompt + max tokens)");
  sub->add_flag("--verbose,-v", opts->verbose, "print the compiler's report on stderr");
  sub->add_option("--device,-d", opts->device, "where to run: cpu (compiled kernels), cuda (the GPU) or reference (the interpreter)")
      ->capture_default_str();
  sub->add_option("--dtype", opts->dtype, kDtypeHelp)->capture_default_str();
  sub->add_option("--search-seconds", opts->search_seconds,
                  "compile-time budget of the search (measuring candidate programs on this machine)")
      ->capture_default_str();
  sub->callback([opts] { run_generate(*opts); });
}

// ---- luminal debug-logits (hidden; used by tests/python/test_models.py) ------------------
struct DebugLogitsOptions {
  std::string model;
  std::string ids;
  int64_t steps = 10;
  int64_t max_seq = 0;
  bool verbose = false;
  std::string device = "cpu";
  std::string dtype = "auto";
  double search_seconds = 5;
};

void run_debug_logits(const DebugLogitsOptions& o) {
  using namespace luminal::models;
  std::vector<int32_t> ids;
  {
    std::stringstream ss(o.ids);
    std::string item;
    while (std::getline(ss, item, ',')) {
      try {
        ids.push_back(static_cast<int32_t>(std::stoll(item)));
      } catch (const std::exception&) {
        luminal::fail("debug-logits: --ids must be comma-separated integers, got '", item, "'");
      }
    }
  }
  if (ids.empty()) luminal::fail("debug-logits: --ids is empty");
  ModelOptions mo;
  mo.compute_dtype = resolve_dtype(o.dtype, o.device, o.model);
  mo.all_logits = true;
  mo.max_seq_len = o.max_seq > 0 ? o.max_seq : static_cast<int64_t>(ids.size()) + o.steps + 1;
  auto t0 = std::chrono::steady_clock::now();
  Generator gen = compile_for(CausalLM::from_pretrained(o.model, mo), o.device,
                              luminal::CompileOptions{}.verbose(o.verbose).search_time_limit(
                                  std::chrono::duration<double>(o.search_seconds)));
  const double load = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t vocab = gen.model().config().vocab_size;
  auto rows = [&](const std::vector<float>& flat) {
    nlohmann::json j = nlohmann::json::array();
    for (size_t r = 0; r * vocab < flat.size(); ++r)
      j.push_back(std::vector<float>(flat.begin() + r * vocab, flat.begin() + (r + 1) * vocab));
    return j;
  };
  nlohmann::json out;
  auto t1 = std::chrono::steady_clock::now();
  std::vector<float> prefill = gen.forward(ids);
  const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  out["prefill_logits"] = rows(prefill);
  std::vector<float> last(prefill.end() - vocab, prefill.end());
  std::vector<int32_t> generated;
  nlohmann::json steps = nlohmann::json::array();
  std::mt19937_64 rng(0);
  auto t2 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.steps; ++i) {
    int32_t next = sample_token(last, {}, rng);
    generated.push_back(next);
    last = gen.forward({next});
    steps.push_back(last);
  }
  const double decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
  generated.push_back(sample_token(last, {}, rng));
  out["step_logits"] = steps;
  out["generated"] = generated;
  out["compute_dtype"] = std::string(luminal::dtype_name(mo.compute_dtype));
  out["timing"] = {{"load_s", load}, {"prefill_s", prefill_s}, {"decode_s", decode_s}};
  std::cout << out.dump() << '\n';
}

void add_debug_logits(CLI::App& app) {
  auto opts = std::make_shared<DebugLogitsOptions>();
  CLI::App* sub = app.add_subcommand("debug-logits", "Print prefill and greedy-decode logits as JSON");
  sub->group("");  // hidden from --help
  sub->add_option("--model,-m", opts->model, "model directory")->required();
  sub->add_option("--ids", opts->ids, "comma-separated prompt token ids")->required();
  sub->add_option("--steps", opts->steps, "greedy decode steps after the prefill");
  sub->add_option("--max-seq", opts->max_seq, "KV-cache length (default: ids + steps + 1)");
  sub->add_flag("--verbose,-v", opts->verbose, "print the compiler's report on stderr");
  sub->add_option("--device,-d", opts->device, "cpu, cuda or reference");
  sub->add_option("--dtype", opts->dtype, kDtypeHelp);
  sub->add_option("--search-seconds", opts->search_seconds, "compile-time budget of the search");
  sub->callback([opts] { run_debug_logits(*opts); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"luminal: a search-based deep-learning compiler"};
  app.require_subcommand(1);
  add_tokenize(app);
  add_generate(app);
  add_debug_logits(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const luminal::Error& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
  std::cout.flush();
  return 0;
}
