#include "attention_op.hpp"

#include <cmath>
#include <cstdlib>
#include <numbers>
#include <string_view>

#include "luminal/error.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "luminal_cuda/kernels.hpp"

namespace luminal::cuda {
namespace {

// A tensor read through `view` with a linear stride per axis and no padding: the strides
// and the offset of element 0.
bool linear_view(const ShapeTracker& view, Expression& offset, std::vector<Expression>& strides) {
  if (!(view.base_valid() == Expression(1))) return false;
  offset = view.base_offset();
  strides.clear();
  for (const ViewDim& d : view.dims()) {
    if (!(d.valid == Expression(1))) return false;
    auto stride = search::view_axis_stride(d);
    if (!stride) return false;
    strides.push_back(*stride);
    offset = offset + d.offset.substitute(Expression::kIndexName, 0);
  }
  return true;
}

bool small_constant(const Expression& e) {
  auto c = e.as_constant();
  return c && *c >= 1 && *c <= kAttentionRowsMaxDepth;
}

// Do two views read the same elements? The same shape, no padding, the same offset and the
// same stride along every axis longer than 1. An axis of size 1 may be spelled any way (a
// decode step's one query position, after a reshape), which `view-identity`, comparing
// views with the contiguous one as written, does not allow.
bool same_reading(const ShapeTracker& a, const ShapeTracker& b) {
  Expression offset_a, offset_b;
  std::vector<Expression> strides_a, strides_b;
  if (a.rank() != b.rank() || !(a.shape() == b.shape()) || !linear_view(a, offset_a, strides_a) ||
      !linear_view(b, offset_b, strides_b) || !(offset_a == offset_b))
    return false;
  for (size_t d = 0; d < a.rank(); ++d)
    if (!(a.shape()[d] == Expression(1)) && !(strides_a[d] == strides_b[d])) return false;
  return true;
}

// The view of a reduction's result [a, b, c] read at [a, b, c, n]: contiguous, broadcast
// along the new last axis.
bool reduction_broadcast(const ShapeTracker& view, const Shape& reduced, const Expression& n) {
  return same_reading(view, ShapeTracker::contiguous(reduced).insert_broadcast(static_cast<int>(reduced.size()), n));
}

// A scalar (a rank-0 constant) read at every element: every axis of stride 0, no padding.
bool scalar_view(const ShapeTracker& view) {
  Expression offset;
  std::vector<Expression> strides;
  if (!linear_view(view, offset, strides) || !(offset == Expression(0))) return false;
  for (const auto& s : strides)
    if (!(s == Expression(0))) return false;
  return true;
}

}  // namespace

std::optional<AttentionLayout> attention_layout(const ShapeTracker& view_q, const ShapeTracker& view_k,
                                                const ShapeTracker& view_v, const ShapeTracker& view_mask,
                                                const ShapeTracker& view_scale) {
  if (view_mask.rank() != 4 || view_scale.rank() != 4 || view_q.rank() != 4) return std::nullopt;
  auto scores = cuda_gemm_layout(view_q, view_k);  // [batch, rows, keys, depth]
  if (!scores || scores->a.copy || scores->b.copy) return std::nullopt;
  AttentionLayout l;
  l.batch = scores->batch;
  l.rows = scores->m;
  l.keys = scores->n;
  l.depth = scores->k;
  l.group = view_mask.shape()[1];
  l.seq = view_mask.shape()[2];
  if (!(view_mask.shape()[0] == l.batch) || !(view_mask.shape()[3] == l.keys) || !(l.group * l.seq == l.rows) ||
      !(view_scale.shape() == view_mask.shape()))
    return std::nullopt;
  // v is the B operand of [batch, rows, width, keys] against a contiguous A (the
  // probabilities, [batch, rows, keys]).
  if (view_v.rank() != 4 || !(view_v.shape()[0] == l.batch) || !(view_v.shape()[1] == l.rows) ||
      !(view_v.shape()[3] == l.keys))
    return std::nullopt;
  l.width = view_v.shape()[2];
  const ShapeTracker probs = ShapeTracker::contiguous({l.batch, l.rows, l.keys}).insert_broadcast(2, l.width);
  auto out = cuda_gemm_layout(probs, view_v);
  if (!out || out->b.copy || !small_constant(l.depth) || !small_constant(l.width)) return std::nullopt;
  l.q = scores->a;
  l.k = scores->b;
  l.v = out->b;
  if (!linear_view(view_mask, l.mask_offset, l.mask_strides) ||
      !linear_view(view_scale, l.scale_offset, l.scale_strides))
    return std::nullopt;
  return l;
}

AttentionMode attention_mode() {
  const char* env = std::getenv("LUMINAL_CUDA_ATTENTION");
  if (!env || !*env) return AttentionMode::Off;
  const std::string_view v(env);
  LUMINAL_CHECK(v == "0" || v == "1" || v == "prefill",
                "LUMINAL_CUDA_ATTENTION must be 0 (no attention op), prefill (seeding prefills) or 1 (seeding "
                "decode steps too), got '",
                env, "'");
  return v == "0" ? AttentionMode::Off : v == "1" ? AttentionMode::Everywhere : AttentionMode::Prefill;
}

std::optional<double> attention_cost(std::span<const int64_t> shape) {
  constexpr double kNeverSeeds = 1e12;
  if (shape.size() != 3) return std::nullopt;
  if (shape[1] >= kAttentionFlashRows) return attention_flash_depth(shape[2]) ? std::nullopt : std::optional(kNeverSeeds);
  if (attention_mode() == AttentionMode::Everywhere) return std::nullopt;
  return kNeverSeeds;
}

void register_attention_primitives(egraph::EGraph& eg) {
  using egraph::Value;
  using egraph::ValueKind;
  // (reads-whole ?view ?shape): the view reads a contiguous buffer of exactly ?shape, its
  // axes of size 1 spelled any way (`view-identity` with same_reading's tolerance).
  eg.register_primitive("reads-whole", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 2 || a[0].kind() != ValueKind::ExprList || a[1].kind() != ValueKind::ExprList) return std::nullopt;
    const auto shape = a[1].as_expr_list();
    return Value::boolean(same_reading(search::decode_view(a[0]), ShapeTracker::contiguous(Shape(shape.begin(), shape.end()))));
  });
  // (cuda-attention ?scores-shape ?reduced-shape ?view-max ?view-sum ?minus-one ?log2e
  //                 ?view-minus-one ?view-log2e ?view-q ?view-k ?view-probs ?view-v ?view-mask ?view-scale)
  // The parts of rules/cuda_attention.egg's pattern that the rule language cannot say: the
  // softmax's constants (-1 and log2 e in F32) read as scalars, its max and sum read back
  // broadcast along the keys, the probabilities read contiguously as the product's A, and
  // an operand layout the kernel takes (attention_layout).
  eg.register_primitive("cuda-attention", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 14) return std::nullopt;
    for (size_t i : {0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13})
      if (a[i].kind() != ValueKind::ExprList) return std::nullopt;
    if (a[4].kind() != ValueKind::F64 || a[5].kind() != ValueKind::F64) return std::nullopt;
    const auto scores = a[0].as_expr_list();
    const auto reduced = a[1].as_expr_list();
    if (scores.size() != 4 || reduced.size() != 3 || !std::equal(reduced.begin(), reduced.end(), scores.begin()))
      return Value::boolean(false);
    const Shape reduced_shape(reduced.begin(), reduced.end());
    const bool constants = a[4].as_f64() == -1.0 &&
                           static_cast<float>(a[5].as_f64()) == static_cast<float>(std::numbers::log2e) &&
                           scalar_view(search::decode_view(a[6])) && scalar_view(search::decode_view(a[7]));
    if (!constants || !reduction_broadcast(search::decode_view(a[2]), reduced_shape, scores[3]) ||
        !reduction_broadcast(search::decode_view(a[3]), reduced_shape, scores[3]))
      return Value::boolean(false);
    const ShapeTracker view_probs = search::decode_view(a[10]), view_v = search::decode_view(a[11]);
    auto out = cuda_gemm_layout(view_probs, view_v);
    if (!out || out->a.copy || !out->a.copy_view.is_contiguous()) return Value::boolean(false);
    const ShapeTracker view_mask = search::decode_view(a[12]);
    if (view_mask.rank() != 4 || !std::equal(scores.begin(), scores.end(), view_mask.shape().begin()))
      return Value::boolean(false);
    return Value::boolean(attention_layout(search::decode_view(a[8]), search::decode_view(a[9]), view_v, view_mask,
                                           search::decode_view(a[13]))
                              .has_value());
  });
}

}  // namespace luminal::cuda
