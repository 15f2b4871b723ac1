// Small real architectures for search tests: an MLP, an attention block and a
// transformer block, with deterministic random weights.
#pragma once

#include <map>
#include <random>
#include <string>

#include "luminal/luminal.hpp"

namespace luminal::testing {

struct TestModel {
  Graph cx;
  std::vector<GraphTensor> inputs;  // all inputs, weights included
  std::vector<GraphTensor> outputs;
};

inline GraphTensor weight(TestModel& m, const std::string& name, Shape shape) {
  auto w = m.cx.named_tensor(name, shape).persist();
  m.inputs.push_back(w);
  return w;
}

inline void build_mlp(TestModel& m, int layers = 2) {
  auto x = m.cx.named_tensor("x", {4, 16});
  m.inputs.push_back(x);
  GraphTensor h = x;
  for (int l = 0; l < layers; ++l) {
    auto w = weight(m, "mlp." + std::to_string(l) + ".w", {16, 16});
    auto b = weight(m, "mlp." + std::to_string(l) + ".b", {16});
    h = h.linear(w, b).gelu_tanh() * 1.0 + 0.0;
  }
  m.outputs.push_back(h.output());
}

inline GraphTensor attention(TestModel& m, const GraphTensor& x, const std::string& p, int heads, int head_dim) {
  Expression seq = x.dim(0);
  int hidden = heads * head_dim;
  auto q = x.linear(weight(m, p + ".q", {hidden, hidden})).reshape({seq, heads, head_dim}).transpose(0, 1);
  auto k = x.linear(weight(m, p + ".k", {hidden, hidden})).reshape({seq, heads, head_dim}).transpose(0, 1);
  auto v = x.linear(weight(m, p + ".v", {hidden, hidden})).reshape({seq, heads, head_dim}).transpose(0, 1);
  auto scores = q.matmul(k.t()) * (1.0 / std::sqrt(double(head_dim)));
  auto mask = m.cx.constant(1.0).expand({seq, seq}).tril();
  scores = GraphTensor::where(mask.cast(DType::Bool), scores, m.cx.constant(-1e9));
  auto out = scores.softmax(-1).matmul(v).transpose(0, 1).reshape({seq, hidden});
  return out.linear(weight(m, p + ".o", {hidden, hidden}));
}

inline void build_attention(TestModel& m) {
  auto x = m.cx.named_tensor("x", {5, 16});
  m.inputs.push_back(x);
  m.outputs.push_back(attention(m, x, "attn", 2, 8).output());
}

inline void build_transformer_block(TestModel& m) {
  auto x = m.cx.named_tensor("x", {5, 16});
  m.inputs.push_back(x);
  auto h = x + attention(m, x.rms_norm(1, weight(m, "ln1", {16})), "attn", 2, 8);
  auto n = h.rms_norm(1, weight(m, "ln2", {16}));
  auto mlp = (n.linear(weight(m, "gate", {32, 16})).silu() * n.linear(weight(m, "up", {32, 16})))
                 .linear(weight(m, "down", {16, 32}));
  m.outputs.push_back((h + mlp).output());
}

inline void fill_random(Runtime& rt, TestModel& m, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 0.5f);
  for (auto& t : m.inputs) {
    std::vector<float> v(static_cast<size_t>(t.numel().eval(m.cx.dim_map())));
    for (auto& f : v) f = dist(rng);
    rt.set_data(t, v);
  }
}

// A KV-cache append as the models write it: rows [s, heads, dim] scattered at row p of a
// persisted cache [max_seq, heads, dim] (Graph::update), and the cache's first p + s rows
// read back. With `second_reader`, another output reads the old cache (so the update
// cannot run in place).
struct CacheAppendGraph {
  GraphTensor cache, rows;
  std::vector<GraphTensor> outputs;
  GraphTensor update;  // the cache's update Output (readable after a run: the new cache)
};
// computed_rows: the rows written are computed (RoPE of the rows for an even dim, else
// rows * 1.5 - 0.25), so a runtime may fuse their producer into the scatter.
inline CacheAppendGraph build_cache_append(Graph& cx, int64_t max_seq, int64_t heads, int64_t dim, bool second_reader,
                                           bool computed_rows = false) {
  const Expression p = Expression::var("p"), s = Expression::var("s");
  CacheAppendGraph c;
  c.cache = cx.named_tensor("cache", {max_seq, heads, dim}).persist();
  c.rows = cx.named_tensor("rows", {s, heads, dim});
  GraphTensor index = cx.iota(p + Expression::index() / (heads * dim), {s, heads, dim}, DType::I32);
  GraphTensor written = c.rows;
  if (computed_rows && dim % 2 != 0) {
    written = c.rows * 1.5 - 0.25;
  } else if (computed_rows) {
    // RoPE's shape: the two halves of each row rotated by tables of the position,
    // broadcast over the heads, and joined again.
    const int64_t half = dim / 2;
    GraphTensor angle = cx.iota(p + Expression::index() / half, {s, 1, half}, DType::I32).cast(DType::F32) * 0.37;
    GraphTensor cos = angle.cos().expand({s, heads, half}), sin = angle.sin().expand({s, heads, half});
    GraphTensor x1 = c.rows.slice(2, 0, half), x2 = c.rows.slice(2, half, dim);
    GraphTensor rotated = GraphTensor::concat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, 2);
    written = rotated;
  }
  GraphTensor next = c.cache.scatter(0, index, written);
  c.update = cx.update(c.cache, next);
  c.outputs = {(next.slice(0, Expression(0), p + s) * 3.0 - 1.0).sum({0}).output()};
  if (second_reader) c.outputs.push_back(c.cache.slice(0, 0, 4).sum({1}).output());
  cx.set_dim("p", 0);
  cx.set_dim("s", 1);
  return c;
}

}  // namespace luminal::testing
