// nn building blocks (see nn.hpp). Plain compositions of the tensor API.
#include "luminal/models/nn.hpp"

#include <cmath>
#include <numbers>

#include "luminal/error.hpp"

namespace luminal::models::nn {

GraphTensor Constants::add(Graph& g, const std::string& name, std::vector<float> values) {
  const auto n = static_cast<int64_t>(values.size());
  GraphTensor t = g.named_tensor(name, {n}, DType::F32).persist();
  items_.emplace_back(t, HostTensor::from<float>(values, DType::F32, {n}));
  return t;
}

void Constants::apply(Runtime& rt) const {
  for (const auto& [t, v] : items_) rt.set_data(t, v);
}

GraphTensor parameter(Graph& g, const std::string& name, const Shape& shape, DType dtype) {
  LUMINAL_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16, "parameter '", name,
                "': weights are F32, F16 or BF16, not ", dtype_name(dtype));
  return g.named_tensor(name, shape, dtype).persist();
}

GraphTensor as_f32(const GraphTensor& w) { return w.cast(DType::F32); }


Linear::Linear(Graph& g, const std::string& prefix, int64_t in_features, int64_t out_features, bool with_bias,
               DType weight_dtype, DType bias_dtype)
    : weight(parameter(g, prefix + ".weight", {out_features, in_features}, weight_dtype)) {
  if (with_bias) bias = parameter(g, prefix + ".bias", {out_features}, bias_dtype);
}

Embedding::Embedding(Graph& g, const std::string& prefix, int64_t vocab, int64_t dim, DType weight_dtype,
                     DType compute_dtype_)
    : weight(parameter(g, prefix + ".weight", {vocab, dim}, weight_dtype)), compute_dtype(compute_dtype_) {}

RMSNorm::RMSNorm(Graph& g, const std::string& prefix, int64_t dim, double eps_, bool unit_offset_,
                 DType weight_dtype)
    : weight(parameter(g, prefix + ".weight", {dim}, weight_dtype)), eps(eps_), unit_offset(unit_offset_) {}

GraphTensor RMSNorm::operator()(const GraphTensor& x) const {
  if (is_half_float(x.dtype())) {
    // transformers: the statistics in float32 (a sum of squares overflows F16).
    GraphTensor normed = x.cast(DType::F32).rms_norm(1, std::nullopt, eps);
    // Gemma: (x * (1 + w.float())).type_as(x); Llama/Qwen: w * x.to(input_dtype).
    if (unit_offset) return (normed * (weight.cast(DType::F32) + 1.0)).cast(x.dtype());
    return normed.cast(x.dtype()) * weight.cast(x.dtype());
  }
  if (!unit_offset) return x.rms_norm(1, weight, eps);
  // Gemma: normalise, then scale by (1 + w), all in float32 as transformers does.
  return x.rms_norm(1, std::nullopt, eps) * (weight + 1.0);
}

LayerNorm::LayerNorm(Graph& g, const std::string& prefix, int64_t dim, double eps_, bool with_bias)
    : weight(parameter(g, prefix + ".weight", {dim})), eps(eps_) {
  if (with_bias) bias = parameter(g, prefix + ".bias", {dim});
}

// ---- RoPE ------------------------------------------------------------------------------

std::vector<float> rope_inv_freq(const RopeConfig& c) {
  LUMINAL_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, "rope: head_dim must be a positive even number, got ",
                c.head_dim);
  LUMINAL_CHECK(c.theta > 0, "rope: rope_theta must be positive, got ", c.theta);
  // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), in float32.
  const auto dim = static_cast<float>(c.head_dim);
  std::vector<float> inv;
  for (int64_t i = 0; i < c.head_dim; i += 2) {
    float e = static_cast<float>(i) / dim;
    float p = std::pow(static_cast<float>(c.theta), e);
    inv.push_back(1.0f / p);
  }
  if (c.type == "default") return inv;
  if (c.type == "linear") {
    LUMINAL_CHECK(c.factor > 0, "rope_scaling (linear): factor must be positive, got ", c.factor);
    for (auto& f : inv) f = f / static_cast<float>(c.factor);
    return inv;
  }
  if (c.type == "llama3") {
    LUMINAL_CHECK(c.factor > 0, "rope_scaling (llama3): factor must be positive, got ", c.factor);
    LUMINAL_CHECK(c.high_freq_factor != c.low_freq_factor,
                  "rope_scaling (llama3): high_freq_factor must differ from low_freq_factor");
    const double old_len = static_cast<double>(c.original_max_position_embeddings);
    const double low_wl = old_len / c.low_freq_factor, high_wl = old_len / c.high_freq_factor;
    const auto factor = static_cast<float>(c.factor);
    for (auto& f : inv) {
      float wavelen = static_cast<float>(2 * std::numbers::pi) / f;
      float scaled = wavelen > low_wl ? f / factor : f;
      float smooth = (static_cast<float>(old_len) / wavelen - static_cast<float>(c.low_freq_factor)) /
                     static_cast<float>(c.high_freq_factor - c.low_freq_factor);
      float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
      bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
      f = medium ? smoothed : scaled;
    }
    return inv;
  }
  fail("unsupported rope scaling type '", c.type, "' (supported: default, linear, llama3)");
}

RotaryEmbedding::RotaryEmbedding(Graph& g, Constants& constants, const std::string& name, const RopeConfig& config)
    : graph_(&g), config_(config) {
  inv_freq_ = constants.add(g, name, rope_inv_freq(config));
}

Rotary RotaryEmbedding::tables(const SeqDims& dims, DType dtype) const {
  LUMINAL_CHECK(graph_ != nullptr, "RotaryEmbedding used before construction");
  // Positions past .. past + seq - 1 (exact in float32 below 2^24).
  GraphTensor pos = graph_->iota(Expression::index() + dims.past, {dims.seq}, DType::I32).cast(DType::F32);
  GraphTensor freqs = pos.unsqueeze(1) * inv_freq_.unsqueeze(0);  // (seq, head_dim / 2)
  return {freqs.cos().cast(dtype), freqs.sin().cast(dtype)};
}

GraphTensor RotaryEmbedding::apply(const GraphTensor& x, const Rotary& r) {
  LUMINAL_CHECK(x.rank() == 3, "rope: expected (seq, heads, head_dim), got ", to_string(x.shape()));
  auto d = x.dim(-1).as_constant();
  LUMINAL_CHECK(d && *d % 2 == 0, "rope: head_dim must be a static even number, got ", x.dim(-1));
  const int64_t half = *d / 2;
  GraphTensor c = r.cos.unsqueeze(1), s = r.sin.unsqueeze(1);  // (seq, 1, half)
  GraphTensor x1 = x.slice(-1, 0, half), x2 = x.slice(-1, half, *d);
  // HF: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1).
  GraphTensor o1 = x1 * c + (-x2) * s;
  GraphTensor o2 = x2 * c + x1 * s;
  return GraphTensor::concat({o1, o2}, -1);
}

// ---- attention ---------------------------------------------------------------------------

KVCache::KVCache(Graph& g, const std::string& prefix, int64_t max_seq_, int64_t kv_heads_, int64_t head_dim_,
                 DType dtype)
    : max_seq(max_seq_), kv_heads(kv_heads_), head_dim(head_dim_) {
  LUMINAL_CHECK(dtype == DType::F32 || is_half_float(dtype), "KV cache '", prefix, "': F32, F16 or BF16, not ",
                dtype_name(dtype));
  k = g.named_tensor(prefix + ".k", {max_seq, kv_heads, head_dim}, dtype).persist();
  v = g.named_tensor(prefix + ".v", {max_seq, kv_heads, head_dim}, dtype).persist();
}

GraphTensor cache_append(const GraphTensor& cache, const GraphTensor& rows, int64_t max_seq, const SeqDims& dims) {
  Graph& g = cache.graph();
  LUMINAL_CHECK(rows.rank() == cache.rank(), "cache_append: rows ", to_string(rows.shape()), " do not match cache ",
                to_string(cache.shape()));
  LUMINAL_CHECK(cache.dim(0) == Expression(max_seq), "cache_append: cache ", to_string(cache.shape()), " does not have ",
                max_seq, " rows");
  const Expression p = dims.past, s = dims.seq;
  // Every element of the new rows goes to cache row p + its row: a scatter writes them
  // and copies the other rows, instead of rewriting the whole cache with a mask.
  Expression row_elements = 1;
  for (size_t d = 1; d < rows.rank(); ++d) row_elements = row_elements * rows.dim(static_cast<int>(d));
  GraphTensor index = g.iota(p + Expression::index() / row_elements, rows.shape(), DType::I32);
  GraphTensor next = cache.scatter(0, index, rows);
  g.update(cache, next);
  return next.slice(0, Expression(0), p + s);
}

GraphTensor causal_mask(Graph& g, const SeqDims& dims, std::optional<int64_t> sliding_window) {
  const Expression z = Expression::index(), p = dims.past, s = dims.seq, t = p + s;
  const Expression i = z / t, j = z % t;  // query row, key column
  Expression allowed = le(j, p + i);
  if (sliding_window) {
    LUMINAL_CHECK(*sliding_window > 0, "sliding window must be positive, got ", *sliding_window);
    allowed = logical_and(allowed, gt(j, p + i - *sliding_window));
  }
  // 0 where allowed, -1e9 where masked: exp() of a masked score is exactly 0.
  return g.iota((allowed - 1) * 1000000000, {s, t}, DType::I32).cast(DType::F32);
}

GraphTensor softcap(const GraphTensor& x, double cap) {
  LUMINAL_CHECK(cap > 0, "soft-capping value must be positive, got ", cap);
  // F16/BF16: tanh in F32, rounded once (torch's kernel); the division and product stay
  // in x's dtype, as transformers writes them.
  const GraphTensor scaled = x / cap;
  return (is_half_float(x.dtype()) ? scaled.cast(DType::F32).tanh().cast(x.dtype()) : scaled.tanh()) * cap;
}

GraphTensor gqa_attention(const GraphTensor& q, const GraphTensor& k, const GraphTensor& v,
                          const std::optional<GraphTensor>& mask, const AttentionOptions& o) {
  LUMINAL_CHECK(q.rank() == 3 && k.rank() == 3 && v.rank() == 3, "attention: q, k, v must be (seq, heads, head_dim)");
  auto H = q.dim(1).as_constant(), KV = k.dim(1).as_constant(), D = q.dim(2).as_constant();
  LUMINAL_CHECK(H && KV && D, "attention: head counts and head_dim must be static");
  LUMINAL_CHECK(*KV > 0 && *H % *KV == 0, "attention: ", *H, " query heads are not a multiple of ", *KV, " kv heads");
  LUMINAL_CHECK(k.dim(2) == q.dim(2) && v.dim(1) == k.dim(1), "attention: q ", to_string(q.shape()), ", k ",
                to_string(k.shape()), ", v ", to_string(v.shape()), " do not fit together");
  const int64_t G = *H / *KV;
  const Expression sq = q.dim(0), sk = k.dim(0), dv = v.dim(2), rows = Expression(G) * sq;
  // Both products are batched matmuls over the KV heads with one batch stride: each KV
  // head's G query heads are stacked as rows, (KV, G*sq, D), a copy of q (small). Written
  // as (KV, G, sq, D) x (KV, 1, D, sk), a product with a broadcast batch axis, no matmul
  // implementation matched it, and attention ran as loop nests that computed q.k again
  // for every output element (a Llama-3-8B step spent most of its time there on CUDA).
  GraphTensor qh = q.reshape({sq, *KV, G, *D}).permute({1, 2, 0, 3}).contiguous().reshape({Expression(*KV), rows, *D});
  GraphTensor kt = k.permute({1, 2, 0});  // (KV, D, sk)
  GraphTensor vh = v.permute({1, 0, 2});  // (KV, sk, Dv)
  // F16/BF16: q.k is rounded to q's dtype by the matmul, then upcast for the rest
  // (transformers scales in float opmath and takes softmax(dtype=float32).to(q.dtype)).
  GraphTensor scores = qh.matmul(kt).reshape({Expression(*KV), Expression(G), sq, sk}).cast(DType::F32) * o.scale;
  if (o.softcap) scores = softcap(scores, *o.softcap);
  if (mask) scores = scores + *mask;  // (sq, sk), broadcast over the heads
  GraphTensor probs = scores.softmax(-1).cast(q.dtype()).reshape({Expression(*KV), rows, sk});
  GraphTensor out = probs.matmul(vh).reshape({Expression(*KV), Expression(G), sq, dv});
  return out.permute({2, 0, 1, 3}).reshape({sq, Expression(*H) * dv});
}

GraphTensor cached_attention(const GraphTensor& q, const GraphTensor& k, const GraphTensor& v, const KVCache& cache,
                             const SeqDims& dims, const AttentionOptions& o) {
  GraphTensor keys = cache_append(cache.k, k, cache.max_seq, dims);
  GraphTensor values = cache_append(cache.v, v, cache.max_seq, dims);
  GraphTensor mask = causal_mask(q.graph(), dims, o.sliding_window);
  return gqa_attention(q, keys, values, mask, o);
}

// ---- feed-forward ---------------------------------------------------------------------------

Activation parse_activation(const std::string& name, const std::string& option) {
  if (name == "silu" || name == "swish") return Activation::SiLU;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_tanh") return Activation::GeluTanh;
  if (name == "gelu") return Activation::Gelu;
  if (name == "relu") return Activation::Relu;
  fail("unsupported ", option, " '", name, "' (supported: silu, gelu_pytorch_tanh, gelu_new, gelu, relu)");
}

GraphTensor activate(const GraphTensor& x, Activation act) {
  // torch computes these in float and rounds once; composing them in F16/BF16 would
  // round every intermediate.
  if (is_half_float(x.dtype())) return activate(x.cast(DType::F32), act).cast(x.dtype());
  switch (act) {
    case Activation::SiLU: return x.silu();
    case Activation::GeluTanh: return x.gelu_tanh();
    case Activation::Gelu: return x.gelu();
    case Activation::Relu: return x.relu();
  }
  return x;
}

GatedMLP::GatedMLP(Graph& g, const std::string& prefix, int64_t hidden, int64_t intermediate, Activation act_,
                   bool with_bias, DType weight_dtype, DType bias_dtype)
    : gate(g, prefix + ".gate_proj", hidden, intermediate, with_bias, weight_dtype, bias_dtype),
      up(g, prefix + ".up_proj", hidden, intermediate, with_bias, weight_dtype, bias_dtype),
      down(g, prefix + ".down_proj", intermediate, hidden, with_bias, weight_dtype, bias_dtype),
      act(act_) {}

MLP::MLP(Graph& g, const std::string& fc1_prefix, const std::string& fc2_prefix, int64_t hidden,
         int64_t intermediate, Activation act_, bool with_bias, DType weight_dtype, DType bias_dtype)
    : fc1(g, fc1_prefix, hidden, intermediate, with_bias, weight_dtype, bias_dtype),
      fc2(g, fc2_prefix, intermediate, hidden, with_bias, weight_dtype, bias_dtype),
      act(act_) {}

}  // namespace luminal::models::nn
