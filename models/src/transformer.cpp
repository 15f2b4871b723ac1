// Config loading, weight files and the causal-LM graph shared by every family.
#include "luminal/models/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "luminal/error.hpp"
#include "luminal/safetensors.hpp"
#include "transformer_internal.hpp"

namespace luminal::models {
namespace fs = std::filesystem;
using nlohmann::json;

namespace detail {

bool ConfigReader::has(const char* key) const { return j.contains(key); }

int64_t ConfigReader::integer(const char* key) const {
  LUMINAL_CHECK(j.contains(key) && !j[key].is_null(), where, ": missing required field '", key, "'");
  const json& v = j[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  // A float holding an integer (1e3) is accepted; one past int64 (1e300) is not: the cast
  // would be undefined.
  if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::abs(v.get<double>()) < 9.2e18)
    return static_cast<int64_t>(v.get<double>());
  fail(where, ": field '", key, "' must be an integer, got ", v.dump());
}

int64_t ConfigReader::integer_or(const char* key, int64_t fallback) const {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return integer(key);
}

double ConfigReader::number_or(const char* key, double fallback) const {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  LUMINAL_CHECK(j[key].is_number(), where, ": field '", key, "' must be a number, got ", j[key].dump());
  return j[key].get<double>();
}

std::optional<double> ConfigReader::optional_number(const char* key) const {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return number_or(key, 0);
}

std::optional<int64_t> ConfigReader::optional_integer(const char* key) const {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return integer(key);
}

bool ConfigReader::boolean_or(const char* key, bool fallback) const {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  LUMINAL_CHECK(j[key].is_boolean(), where, ": field '", key, "' must be true or false, got ", j[key].dump());
  return j[key].get<bool>();
}

std::string ConfigReader::string_or(const char* key, const std::string& fallback) const {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  LUMINAL_CHECK(j[key].is_string(), where, ": field '", key, "' must be a string, got ", j[key].dump());
  return j[key].get<std::string>();
}

namespace {
// A token id: a non-negative integer that fits int32 (never silently truncated).
int32_t token_id(const json& x, const char* what, const char* field) {
  LUMINAL_CHECK(x.is_number_integer() && (x.is_number_unsigned() || x.get<int64_t>() >= 0) &&
                    x.get<uint64_t>() <= static_cast<uint64_t>(INT32_MAX),
                what, ": ", field, " entries must be token ids (integers in [0, 2^31)), got ", x.dump());
  return static_cast<int32_t>(x.get<int64_t>());
}

std::vector<int32_t> token_ids(const json& v, const char* what) {
  std::vector<int32_t> out;
  if (v.is_null()) return out;
  if (v.is_number_integer()) return {token_id(v, what, "eos_token_id")};
  LUMINAL_CHECK(v.is_array(), what, ": eos_token_id must be an integer or a list of integers, got ", v.dump());
  for (const auto& x : v) out.push_back(token_id(x, what, "eos_token_id"));
  return out;
}
}  // namespace

nn::RopeConfig parse_rope(const json& p, double default_theta, int64_t head_dim, const std::string& option) {
  LUMINAL_CHECK(p.is_object(), "config.json: ", option, " must be an object, got ", p.dump());
  ConfigReader r{p, "config.json: " + option};
  nn::RopeConfig c;
  c.head_dim = head_dim;
  c.type = r.string_or("rope_type", r.string_or("type", "default"));
  c.theta = r.number_or("rope_theta", default_theta);
  if (auto prf = r.optional_number("partial_rotary_factor"))
    LUMINAL_CHECK(*prf == 1.0, "config.json: ", option, ".partial_rotary_factor = ", *prf, " is not supported");
  if (c.type == "default") {
  } else if (c.type == "linear") {
    LUMINAL_CHECK(r.has("factor"), "config.json: ", option, " (linear) needs 'factor'");
    c.factor = r.number_or("factor", 1);
  } else if (c.type == "llama3") {
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      LUMINAL_CHECK(r.has(k) && !p[k].is_null(), "config.json: ", option, " (llama3) needs '", k, "'");
    c.factor = r.number_or("factor", 1);
    c.low_freq_factor = r.number_or("low_freq_factor", 1);
    c.high_freq_factor = r.number_or("high_freq_factor", 4);
    c.original_max_position_embeddings = r.integer("original_max_position_embeddings");
  } else {
    fail("config.json: unsupported ", option, " type '", c.type, "' (supported: default, linear, llama3)");
  }
  nn::rope_inv_freq(c);  // validate the values now, not at load time
  return c;
}

std::optional<std::vector<bool>> parse_layer_types(const ConfigReader& r, int64_t num_layers) {
  if (!r.has("layer_types") || r.j["layer_types"].is_null()) return std::nullopt;
  const json& t = r.j["layer_types"];
  LUMINAL_CHECK(t.is_array(), "config.json: layer_types must be a list, got ", t.dump());
  LUMINAL_CHECK(static_cast<int64_t>(t.size()) == num_layers, "config.json: layer_types has ", t.size(),
                " entries but num_hidden_layers is ", num_layers);
  std::vector<bool> out;
  for (const auto& e : t) {
    LUMINAL_CHECK(e.is_string(), "config.json: layer_types entries must be strings, got ", e.dump());
    const std::string s = e.get<std::string>();
    if (s == "sliding_attention") out.push_back(true);
    else if (s == "full_attention") out.push_back(false);
    else fail("config.json: unsupported layer type '", s, "' in layer_types (supported: full_attention, sliding_attention)");
  }
  return out;
}

void parse_common(const ConfigReader& r, TransformerConfig& c) {
  const json& j = r.j;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    c.architecture = j["architectures"][0].get<std::string>();
  LUMINAL_CHECK(!j.contains("quantization_config") || j["quantization_config"].is_null(),
                "config.json: quantization_config (quantized checkpoints) is not supported");
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_layers = r.integer("num_hidden_layers");
  c.num_heads = r.integer("num_attention_heads");
  c.num_kv_heads = r.integer_or("num_key_value_heads", c.num_heads);
  for (auto [name, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                         {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_layers},
                         {"num_attention_heads", c.num_heads}, {"num_key_value_heads", c.num_kv_heads}})
    LUMINAL_CHECK(v > 0 && v <= INT32_MAX, "config.json: ", name, " must be positive and below 2^31, got ", v);
  // Every layer is built into the graph: a count no model has would only exhaust memory.
  LUMINAL_CHECK(c.num_layers <= 4096, "config.json: num_hidden_layers must be at most 4096, got ", c.num_layers);
  LUMINAL_CHECK(c.num_heads % c.num_kv_heads == 0, "config.json: num_attention_heads (", c.num_heads,
                ") must be a multiple of num_key_value_heads (", c.num_kv_heads, ")");
  if (auto hd = r.optional_integer("head_dim")) {
    c.head_dim = *hd;
  } else {
    LUMINAL_CHECK(c.hidden_size % c.num_heads == 0, "config.json: hidden_size (", c.hidden_size,
                  ") is not a multiple of num_attention_heads (", c.num_heads, ") and head_dim is not set");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  LUMINAL_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0 && c.head_dim <= INT32_MAX,
                "config.json: head_dim must be a positive even number, got ", c.head_dim);
  c.max_position_embeddings = r.integer_or("max_position_embeddings", 2048);
  LUMINAL_CHECK(c.max_position_embeddings > 0, "config.json: max_position_embeddings must be positive, got ",
                c.max_position_embeddings);
  c.rms_norm_eps = r.number_or("rms_norm_eps", 1e-6);
  LUMINAL_CHECK(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps >= 0,
                "config.json: rms_norm_eps must be a finite number >= 0, got ", c.rms_norm_eps);
  c.attention_bias = r.boolean_or("attention_bias", false);
  c.tie_word_embeddings = r.boolean_or("tie_word_embeddings", c.tie_word_embeddings);
  if (j.contains("bos_token_id") && !j["bos_token_id"].is_null())
    c.bos_token_id = token_id(j["bos_token_id"], "config.json", "bos_token_id");
  if (j.contains("eos_token_id")) c.eos_token_ids = token_ids(j["eos_token_id"], "config.json");

  // One RoPE for every layer (Gemma overrides per layer type).
  nn::RopeConfig rope;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    json rp = j["rope_parameters"];
    if (rp.contains("full_attention")) rp = rp["full_attention"];
    rope = parse_rope(rp, r.number_or("rope_theta", 10000), c.head_dim, "rope_parameters");
  } else {
    json p = json::object();
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
      LUMINAL_CHECK(j["rope_scaling"].is_object(), "config.json: rope_scaling must be an object, got ",
                    j["rope_scaling"].dump());
      p = j["rope_scaling"];
    }
    if (!p.contains("rope_theta")) p["rope_theta"] = r.number_or("rope_theta", 10000);
    rope = parse_rope(p, 10000, c.head_dim, "rope_scaling");
  }
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerConfig{false, rope});
}

}  // namespace detail

namespace {

json read_json(const fs::path& path, const std::string& what) {
  std::ifstream in(path);
  LUMINAL_CHECK(in.good(), "cannot open ", what, " '", path.string(), "'");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    fail(what, " '", path.string(), "' is not valid JSON: ", e.what());
  }
}

}  // namespace

TransformerConfig parse_config(const json& j) {
  LUMINAL_CHECK(j.is_object(), "config.json: expected a JSON object, got ", j.dump().substr(0, 80));
  std::string arch;
  if (j.contains("architectures")) {
    LUMINAL_CHECK(j["architectures"].is_array() && !j["architectures"].empty() && j["architectures"][0].is_string(),
                  "config.json: 'architectures' must be a non-empty list of names, got ", j["architectures"].dump());
    arch = j["architectures"][0].get<std::string>();
  }
  const std::string model_type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  try {
    TransformerConfig c;
    if (arch == "LlamaForCausalLM" || (arch.empty() && model_type == "llama")) c = parse_llama_config(j);
    else if (arch == "Qwen3ForCausalLM" || (arch.empty() && model_type == "qwen3")) c = parse_qwen3_config(j);
    else if (arch == "Gemma3ForCausalLM" || (arch.empty() && model_type == "gemma3_text")) c = parse_gemma3_config(j);
    else if (arch == "Gemma3ForConditionalGeneration" || (arch.empty() && model_type == "gemma3"))
      c = parse_gemma3_multimodal_config(j);
    else
      fail("config.json: unsupported architecture '", arch.empty() ? model_type : arch,
           "' (supported: LlamaForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration "
           "(text only))");
    if (c.architecture.empty()) c.architecture = arch.empty() ? model_type : arch;
    return c;
  } catch (const json::exception& e) {
    fail("config.json: malformed value: ", e.what());
  }
}

TransformerConfig load_config(const std::string& dir) {
  const fs::path d(dir);
  LUMINAL_CHECK(fs::is_directory(d), "model directory '", dir, "' does not exist");
  LUMINAL_CHECK(fs::exists(d / "config.json"), "no config.json in model directory '", dir, "'");
  TransformerConfig c = parse_config(read_json(d / "config.json", "config.json"));
  if (fs::exists(d / "generation_config.json")) {
    json g = read_json(d / "generation_config.json", "generation_config.json");
    if (g.is_object() && g.contains("eos_token_id") && !g["eos_token_id"].is_null())
      c.eos_token_ids = detail::token_ids(g["eos_token_id"], "generation_config.json");
    if (g.is_object() && g.contains("bos_token_id") && g["bos_token_id"].is_number_integer())
      c.bos_token_id = detail::token_id(g["bos_token_id"], "generation_config.json", "bos_token_id");
  }
  return c;
}

std::vector<std::string> find_weight_files(const std::string& dir) {
  const fs::path d(dir);
  const fs::path index = d / "model.safetensors.index.json";
  std::vector<std::string> files;
  if (fs::exists(index)) {
    json j = read_json(index, "model.safetensors.index.json");
    LUMINAL_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), "'", index.string(),
                  "' has no weight_map object");
    std::set<std::string> seen;
    for (const auto& [name, file] : j["weight_map"].items()) {
      LUMINAL_CHECK(file.is_string(), "'", index.string(), "': weight_map entry '", name, "' is not a file name");
      const std::string f = file.get<std::string>();
      if (!seen.insert(f).second) continue;
      const fs::path p = d / f;
      LUMINAL_CHECK(fs::exists(p), "missing shard '", f, "' (listed in ", index.string(), " for '", name, "')");
      files.push_back(p.string());
    }
    std::sort(files.begin(), files.end());
  } else {
    LUMINAL_CHECK(fs::is_directory(d), "model directory '", dir, "' does not exist");
    for (const auto& e : fs::directory_iterator(d))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  }
  LUMINAL_CHECK(!files.empty(), "no *.safetensors weight files in model directory '", dir, "'");
  return files;
}

namespace {
// Tensor names of a model directory (the index's weight_map, else the files' headers).
std::vector<std::string> weight_names_in(const std::string& dir) {
  std::vector<std::string> names;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index)) {
    json j = read_json(index, "model.safetensors.index.json");
    if (j.is_object() && j.contains("weight_map") && j["weight_map"].is_object())
      for (const auto& [name, file] : j["weight_map"].items()) names.push_back(name);
    return names;
  }
  for (const auto& f : find_weight_files(dir)) {
    const SafetensorsFile file = SafetensorsFile::open(f);
    for (const auto& [name, entry] : file.entries()) names.push_back(name);
  }
  return names;
}
}  // namespace

// A half-precision copy of an F32 matrix would lose bits: mixed checkpoints are F32.
DType checkpoint_matrix_dtype(const std::string& dir) {
  std::optional<DType> found;
  for (const auto& f : find_weight_files(dir)) {
    const SafetensorsFile file = SafetensorsFile::open(f);
    for (const auto& [name, entry] : file.entries()) {
      if (entry.shape.size() < 2) continue;
      if (found && *found != entry.dtype) return DType::F32;
      found = entry.dtype;
    }
  }
  return found && is_half_float(*found) ? *found : DType::F32;
}

CausalLM CausalLM::from_pretrained(const std::string& dir, const ModelOptions& options) {
  TransformerConfig config = load_config(dir);
  if (config.architecture == "Gemma3ForConditionalGeneration") {
    // The text model's weights are "model.language_model.*" (transformers >= 4.52) or
    // "language_model.model.*" (earlier checkpoints); the vision tower is ignored.
    for (const auto& name : weight_names_in(dir))
      if (name.rfind("language_model.model.", 0) == 0) {
        config.weight_prefix = "language_model.model.";
        config.lm_head_name = "language_model.lm_head.weight";
        break;
      }
  }
  // A half compute dtype holds every weight in itself (build); F32 keeps the checkpoint's.
  if (options.keep_weight_dtype && !is_half_float(options.compute_dtype))
    config.weight_dtype = checkpoint_matrix_dtype(dir);
  CausalLM m = build(config, options);
  m.dir_ = dir;
  return m;
}

CausalLM CausalLM::build(const TransformerConfig& config, const ModelOptions& options) {
  LUMINAL_CHECK(options.compute_dtype == DType::F32 || is_half_float(options.compute_dtype),
                "ModelOptions::compute_dtype must be F32, BF16 or F16, got ", dtype_name(options.compute_dtype));
  CausalLM m;
  m.config_ = config;
  m.config_.compute_dtype = options.compute_dtype;
  if (is_half_float(options.compute_dtype)) m.config_.weight_dtype = options.compute_dtype;
  m.graph_ = std::make_unique<Graph>();
  m.all_logits_ = options.all_logits;
  const TransformerConfig& c = m.config_;
  Graph& g = *m.graph_;
  LUMINAL_CHECK(static_cast<int64_t>(c.layers.size()) == c.num_layers, "config: ", c.layers.size(),
                " layer entries for ", c.num_layers, " layers");
  m.max_seq_ = options.max_seq_len > 0 ? options.max_seq_len : std::min<int64_t>(c.max_position_embeddings, 4096);
  LUMINAL_CHECK(m.max_seq_ > 0, "max_seq_len must be positive");

  const nn::SeqDims dims;
  // Representative values for the compiler's search (execute passes the real ones).
  // A decode step with a partly filled cache: extraction costs and profiling see the
  // attention over past tokens at a realistic size (at p = 0 its product looks free).
  g.set_dim("s", 1);
  g.set_dim("p", std::min<int64_t>(m.max_seq_ / 2, 256));
  m.input_ids_ = g.named_tensor("input_ids", {dims.seq}, DType::I32);
  nn::Embedding embed(g, c.weight_prefix + "embed_tokens", c.vocab_size, c.hidden_size, c.weight_dtype,
                      c.compute_dtype);
  GraphTensor x = embed(m.input_ids_);
  // The scale is a constant of x's dtype: rounded to BF16/F16 there, as transformers
  // does (Gemma's sqrt(3072) = 55.43 becomes 55.5).
  if (c.embedding_scale != 1.0) x = x * c.embedding_scale;

  // One rotary table per distinct RoPE configuration, shared by the layers using it.
  std::vector<std::pair<nn::RopeConfig, nn::Rotary>> rotaries;
  auto rotary_for = [&](const nn::RopeConfig& rc) -> const nn::Rotary& {
    for (const auto& [cfg, rot] : rotaries)
      if (cfg == rc) return rot;
    nn::RotaryEmbedding re(g, m.constants_, "rope." + std::to_string(rotaries.size()) + ".inv_freq", rc);
    rotaries.emplace_back(rc, re.tables(dims, c.compute_dtype));
    return rotaries.back().second;
  };
  for (const auto& l : c.layers) rotary_for(l.rope);  // build all first: references stay valid

  for (int64_t i = 0; i < c.num_layers; ++i) {
    m.caches_.emplace_back(g, "cache.layers." + std::to_string(i), m.max_seq_, c.num_kv_heads, c.head_dim,
                           c.compute_dtype);
    detail::BlockContext ctx{g, c, i, c.weight_prefix + "layers." + std::to_string(i), dims,
                             rotary_for(c.layers[static_cast<size_t>(i)].rope), m.caches_.back()};
    x = c.family == Family::Gemma3 ? detail::gemma3_block(ctx, x) : detail::prenorm_block(ctx, x);
  }
  x = nn::RMSNorm(g, c.weight_prefix + "norm", c.hidden_size, c.rms_norm_eps, c.norm_unit_offset,
                  detail::param_dtype(c))(x);
  if (!m.all_logits_) x = x.slice(0, dims.seq - 1, dims.seq);
  GraphTensor head =
      c.tie_word_embeddings ? embed.weight
                            : nn::parameter(g, c.lm_head_name, {c.vocab_size, c.hidden_size}, c.weight_dtype);
  // lm_head and soft-capping in the compute dtype (transformers' logits are BF16 there),
  // handed out as F32 (exact).
  GraphTensor logits = x.linear(head.cast(x.dtype()));
  if (c.final_logit_softcapping) logits = nn::softcap(logits, *c.final_logit_softcapping);
  const GraphTensor logits_f32 = logits.cast(DType::F32);
  m.logits_ = logits_f32.output("logits");
  // The greedy choice, made where the logits are (Generator reads this one id instead of
  // the vocabulary's logits): the first maximum of the last row, as torch.argmax.
  GraphTensor last = m.all_logits_ ? logits_f32.slice(0, dims.seq - 1, dims.seq) : logits_f32;
  m.next_token_ = last.argmax(1).output("next_token");

  // Weights: every persisted input except the caches and the host constants.
  std::set<std::string> not_weights;
  for (const auto& kv : m.caches_) {
    not_weights.insert(g.node(kv.k.id()).label);
    not_weights.insert(g.node(kv.v.id()).label);
  }
  for (size_t i = 0; i < rotaries.size(); ++i) not_weights.insert("rope." + std::to_string(i) + ".inv_freq");
  for (NodeId id : g.inputs()) {
    const Node& n = g.node(id);
    if (n.persist && !not_weights.count(n.label)) m.weight_names_.push_back(n.label);
  }
  return m;
}

void CausalLM::load_weights(Runtime& rt) const {
  LUMINAL_CHECK(!dir_.empty(), "load_weights: this model was not created from a directory");
  const auto files = find_weight_files(dir_);
  std::set<std::string> loaded;
  for (const auto& f : files)
    for (auto& name : rt.load_safetensors(*graph_, f, /*allow_missing=*/true)) loaded.insert(std::move(name));
  std::vector<std::string> missing;
  for (const auto& w : weight_names_)
    if (!loaded.count(w)) missing.push_back(w);
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 5; ++i) list += (i ? ", '" : "'") + missing[i] + "'";
    if (missing.size() > 5) list += " and " + std::to_string(missing.size() - 5) + " more";
    fail("model directory '", dir_, "': missing weight ", list, " (searched ", files.size(), " safetensors file",
         files.size() == 1 ? "" : "s", ")");
  }
  constants_.apply(rt);
  clear_caches(rt);
}

CompileOptions CausalLM::with_prefill_plan(CompileOptions options) const {
  if (options.dim_buckets_.count("s") || max_seq_ < 2) return options;
  // The prefill plan is profiled at 64 new tokens after the graph's representative past
  // (within the cache).
  const int64_t past = graph_->dim_map().count("p") ? graph_->dim_map().at("p") : 0;
  const int64_t prompt = std::clamp<int64_t>(max_seq_ - past, 2, 64);
  return options.dim_buckets("s", {DimBucket(1, 1), DimBucket(2, max_seq_).representative(prompt)});
}

void CausalLM::clear_caches(Runtime& rt) const {
  for (const auto& kv : caches_) {
    const auto n = static_cast<size_t>(kv.max_seq * kv.kv_heads * kv.head_dim);
    HostTensor zeros = HostTensor::zeros(kv.k.dtype(), n, {kv.max_seq, kv.kv_heads, kv.head_dim});
    rt.set_data(kv.k, zeros);
    rt.set_data(kv.v, zeros);
  }
}

}  // namespace luminal::models
