// A Llama-3-shaped graph builder for benchmarks (weights are named inputs; nothing
// is allocated). Uses only the core tensor API so it runs before the model library.
#pragma once

#include <cmath>
#include <string>

#include "luminal/luminal.hpp"

namespace luminal::bench {

struct LlamaShape {
  int layers = 32, hidden = 4096, heads = 32, kv_heads = 8, intermediate = 14336, vocab = 128256;
};

inline GraphTensor build_llama_shaped(Graph& cx, const LlamaShape& c) {
  using luminal::Expression;
  Expression seq = Expression::var("seq");
  int head_dim = c.hidden / c.heads, group = c.heads / c.kv_heads;
  auto w = [&](const std::string& name, Shape s) { return cx.named_tensor(name, s, DType::F32).persist(); };
  auto ids = cx.named_tensor("ids", {seq}, DType::I32);
  GraphTensor x = w("embed", {c.vocab, c.hidden}).embedding(ids);
  for (int l = 0; l < c.layers; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    GraphTensor h = x.rms_norm(1, w(p + "ln1", {c.hidden}), 1e-5);
    auto q = h.linear(w(p + "q", {c.hidden, c.hidden})).reshape({seq, c.heads, head_dim}).transpose(0, 1);
    auto k = h.linear(w(p + "k", {c.kv_heads * head_dim, c.hidden})).reshape({seq, c.kv_heads, head_dim}).transpose(0, 1);
    auto v = h.linear(w(p + "v", {c.kv_heads * head_dim, c.hidden})).reshape({seq, c.kv_heads, head_dim}).transpose(0, 1);
    // Grouped-query attention: each KV head serves `group` query heads.
    k = k.unsqueeze(1).expand({c.kv_heads, group, seq, head_dim}).reshape({c.heads, seq, head_dim});
    v = v.unsqueeze(1).expand({c.kv_heads, group, seq, head_dim}).reshape({c.heads, seq, head_dim});
    auto scores = q.matmul(k.t()) * (1.0 / std::sqrt(double(head_dim)));
    auto causal = cx.constant(1.0).expand({seq, seq}).tril().cast(DType::Bool);
    scores = GraphTensor::where(causal, scores, cx.constant(-1e9));
    auto attn = scores.softmax(-1).matmul(v).transpose(0, 1).reshape({seq, c.hidden});
    x = x + attn.linear(w(p + "o", {c.hidden, c.hidden}));
    GraphTensor n = x.rms_norm(1, w(p + "ln2", {c.hidden}), 1e-5);
    auto mlp = (n.linear(w(p + "gate", {c.intermediate, c.hidden})).silu() *
                n.linear(w(p + "up", {c.intermediate, c.hidden})))
                   .linear(w(p + "down", {c.hidden, c.intermediate}));
    x = x + mlp;
  }
  x = x.rms_norm(1, w("norm", {c.hidden}), 1e-5);
  return x.linear(w("lm_head", {c.vocab, c.hidden})).output();
}

}  // namespace luminal::bench
