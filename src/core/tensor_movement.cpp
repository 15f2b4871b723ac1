// Movement ops: views where the ShapeTracker can express them, a copy otherwise.
#include <cmath>

#include "tensor_internal.hpp"

namespace luminal {
using namespace detail;

GraphTensor GraphTensor::reshape(const Shape& shape_in) const {
  UserOpScope user_op("reshape");
  Shape shape = shape_in;
  int infer = -1;
  Expression known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i].as_constant() == std::optional<int64_t>(-1)) {
      LUMINAL_CHECK(infer < 0, "reshape: only one dimension can be -1");
      infer = static_cast<int>(i);
    } else {
      known = known * shape[i];
    }
  }
  if (infer >= 0) shape[infer] = numel() / known;
  LUMINAL_CHECK(product(shape) == numel(), "reshape: cannot reshape ", to_string(this->shape()), " (", numel(),
                " elements) into ", to_string(shape_in), " (", product(shape), " elements)");
  if (auto v = view_.reshape(shape)) return GraphTensor(graph_, id_, *v, dtype_);
  // The copy is a row-major buffer of the same elements: any shape of that many elements
  // reads it contiguously (the view's own reshape may refuse, e.g. with a 0-sized dim).
  GraphTensor c = copy(*this);
  return GraphTensor(graph_, c.id(), ShapeTracker::contiguous(shape), dtype_);
}

GraphTensor GraphTensor::permute(std::vector<int> axes) const {
  UserOpScope user_op("permute");
  return GraphTensor(graph_, id_, view_.permute(axes), dtype_);
}

GraphTensor GraphTensor::transpose(int a, int b) const {
  UserOpScope user_op("transpose");
  a = normalize_axis(a, rank(), "transpose");
  b = normalize_axis(b, rank(), "transpose");
  std::vector<int> axes(rank());
  for (size_t i = 0; i < rank(); ++i) axes[i] = static_cast<int>(i);
  std::swap(axes[a], axes[b]);
  return permute(axes);
}

GraphTensor GraphTensor::t() const {
  UserOpScope user_op("t");
  LUMINAL_CHECK(rank() >= 2, "t: needs a tensor of rank >= 2, got rank ", rank());
  return transpose(-2, -1);
}

GraphTensor GraphTensor::expand(const Shape& shape) const {
  UserOpScope user_op("expand");
  LUMINAL_CHECK(shape.size() >= rank(), "expand: target ", to_string(shape), " has fewer dims than ",
                to_string(this->shape()));
  ShapeTracker v = view_;
  size_t lead = shape.size() - rank();
  for (size_t i = 0; i < lead; ++i) v = v.insert_broadcast(0, 1);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i].as_constant() == std::optional<int64_t>(-1)) continue;
    Expression have = v.dims()[i].size;
    if (have == shape[i]) continue;
    LUMINAL_CHECK(have == Expression(1), "expand: cannot expand dimension ", i, " of size ", have, " to ", shape[i],
                  " (", to_string(this->shape()), " -> ", to_string(shape), ")");
    v = v.expand_dim(static_cast<int>(i), shape[i]);
  }
  return GraphTensor(graph_, id_, v, dtype_);
}

GraphTensor GraphTensor::expand_dim(int axis, const Expression& size) const {
  UserOpScope user_op("expand_dim");
  return GraphTensor(graph_, id_, view_.insert_broadcast(axis, size), dtype_);
}

GraphTensor GraphTensor::unsqueeze(int axis) const {
  UserOpScope user_op("unsqueeze");
  return expand_dim(axis, 1);
}

GraphTensor GraphTensor::squeeze(int axis) const {
  UserOpScope user_op("squeeze");
  axis = normalize_axis(axis, rank(), "squeeze");
  if (!(dim(axis) == Expression(1))) return *this;  // torch: squeezing a non-1 dim is a no-op
  return GraphTensor(graph_, id_, view_.remove_dim(axis), dtype_);
}

GraphTensor GraphTensor::squeeze() const {
  UserOpScope user_op("squeeze");
  GraphTensor r = *this;
  for (int i = static_cast<int>(rank()) - 1; i >= 0; --i) r = r.squeeze(i);
  return r;
}

GraphTensor GraphTensor::flatten(int start, int end) const {
  UserOpScope user_op("flatten");
  if (rank() == 0) return reshape({1});
  start = normalize_axis(start, rank(), "flatten");
  end = normalize_axis(end, rank(), "flatten");
  LUMINAL_CHECK(start <= end, "flatten: start ", start, " after end ", end);
  return GraphTensor(graph_, id_, view_.merge_dims(start, end), dtype_);
}

GraphTensor GraphTensor::slice(int axis, const Expression& start, const Expression& end, int64_t step) const {
  UserOpScope user_op("slice");
  axis = normalize_axis(axis, rank(), "slice");
  return GraphTensor(graph_, id_, view_.slice(axis, start, end, step), dtype_);
}

GraphTensor GraphTensor::slice(int axis, int64_t start, std::optional<int64_t> end, int64_t step) const {
  UserOpScope user_op("slice");
  axis = normalize_axis(axis, rank(), "slice");
  LUMINAL_CHECK(step > 0, "slice: step must be positive, got ", step);
  Expression n = dim(axis);
  auto clamp_index = [&](int64_t i) -> Expression {
    if (auto c = n.as_constant()) {
      if (i < 0) i += *c;
      return std::clamp<int64_t>(i, 0, *c);
    }
    return i < 0 ? luminal::max(n + i, 0) : luminal::min(Expression(i), n);
  };
  Expression s = clamp_index(start);
  Expression e = end ? clamp_index(*end) : n;
  return slice(axis, s, luminal::max(e, s), step);
}

GraphTensor GraphTensor::narrow(int axis, const Expression& start, const Expression& length) const {
  UserOpScope user_op("narrow");
  return slice(axis, start, start + length, 1);
}

GraphTensor GraphTensor::pad(int axis, const Expression& before, const Expression& after, double value) const {
  UserOpScope user_op("pad");
  axis = normalize_axis(axis, rank(), "pad");
  GraphTensor padded(graph_, id_, view_.pad(axis, before, after), dtype_);
  if (value == 0 && !std::signbit(value)) return padded;
  // Padding reads 0; add `value` where the mask of real elements is 0.
  GraphTensor ones = scalar_like(*this, 1).expand(shape());
  GraphTensor mask(graph_, ones.id(), ones.view().pad(axis, before, after), dtype_);
  return where(mask.cast(DType::Bool), padded, scalar_like(*this, value));
}

GraphTensor GraphTensor::concat(const std::vector<GraphTensor>& xs, int axis) {
  UserOpScope user_op("concat");
  LUMINAL_CHECK(!xs.empty(), "concat: no tensors");
  axis = normalize_axis(axis, xs[0].rank(), "concat");
  DType dt = xs[0].dtype();
  for (const auto& x : xs) {
    LUMINAL_CHECK(x.rank() == xs[0].rank(), "concat: rank mismatch (", to_string(x.shape()), " vs ",
                  to_string(xs[0].shape()), ")");
    for (size_t d = 0; d < x.rank(); ++d)
      LUMINAL_CHECK(static_cast<int>(d) == axis || x.dim(static_cast<int>(d)) == xs[0].dim(static_cast<int>(d)),
                    "concat: shapes ", to_string(x.shape()), " and ", to_string(xs[0].shape()),
                    " differ outside axis ", axis);
    dt = promote(dt, x.dtype());
  }
  if (xs.size() == 1) return xs[0].cast(dt);
  Expression total = 0;
  for (const auto& x : xs) total = total + x.dim(axis);
  // Each piece padded into place reads 0 elsewhere, so the sum is the concatenation.
  // For floats the padding must read -0.0, the one exact additive identity (-0.0 + +0.0
  // is +0.0, which would lose a -0.0 element): each piece is multiplied by a sign that
  // is 1 on its elements and -1 in its padding (0 * -1 = -0.0).
  GraphTensor acc;
  Expression offset = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    Expression len = xs[i].dim(axis);
    Expression after = total - offset - len;
    GraphTensor placed = xs[i].cast(dt).pad(axis, offset, after);
    if (is_float(dt)) {
      GraphTensor ones = xs[0].graph().constant(1, dt).expand(xs[i].shape());
      GraphTensor inside(&ones.graph(), ones.id(), ones.view().pad(axis, offset, after), dt);
      placed = binary(OpKind::Mul, placed, inside * 2.0 - 1.0);
    }
    offset = offset + len;
    acc = i == 0 ? placed : binary(OpKind::Add, acc, placed);  // Bool addition is logical or
  }
  return acc;
}

GraphTensor GraphTensor::stack(const std::vector<GraphTensor>& xs, int axis) {
  UserOpScope user_op("stack");
  LUMINAL_CHECK(!xs.empty(), "stack: no tensors");
  int r = static_cast<int>(xs[0].rank()) + 1;
  LUMINAL_CHECK(axis >= -r && axis < r, "stack: axis ", axis, " out of range");
  if (axis < 0) axis += r;
  std::vector<GraphTensor> parts;
  for (const auto& x : xs) parts.push_back(x.unsqueeze(axis));
  return concat(parts, axis);
}

std::vector<GraphTensor> GraphTensor::split(const std::vector<Expression>& sizes, int axis) const {
  UserOpScope user_op("split");
  axis = normalize_axis(axis, rank(), "split");
  std::vector<GraphTensor> out;
  Expression start = 0;
  for (const auto& s : sizes) {
    out.push_back(slice(axis, start, start + s, 1));
    start = start + s;
  }
  LUMINAL_CHECK(start == dim(axis), "split: sizes add up to ", start, " but dimension ", axis, " is ", dim(axis));
  return out;
}

std::vector<GraphTensor> GraphTensor::chunk(int chunks, int axis) const {
  UserOpScope user_op("chunk");
  axis = normalize_axis(axis, rank(), "chunk");
  LUMINAL_CHECK(chunks > 0, "chunk: chunks must be positive");
  auto n = dim(axis).as_constant();
  LUMINAL_CHECK(n.has_value(), "chunk: dimension ", axis, " must be static");
  int64_t each = (*n + chunks - 1) / chunks;
  std::vector<Expression> sizes;
  for (int64_t s = 0; s < *n; s += each) sizes.push_back(std::min(each, *n - s));
  return split(sizes, axis);
}

GraphTensor GraphTensor::repeat(const std::vector<Expression>& times) const {
  UserOpScope user_op("repeat");
  LUMINAL_CHECK(times.size() >= rank(), "repeat: needs at least ", rank(), " repeat counts, got ", times.size());
  GraphTensor x = *this;
  while (x.rank() < times.size()) x = x.unsqueeze(0);
  // Each dim d becomes (times_d, size_d): broadcast a new outer dim, then merge.
  for (size_t d = 0; d < times.size(); ++d) {
    if (times[d] == Expression(1)) continue;
    int axis = static_cast<int>(d);
    x = x.expand_dim(axis, times[d]);
    x = GraphTensor(x.graph_, x.id_, x.view_.merge_dims(axis, axis + 1), x.dtype_);
  }
  return x;
}

GraphTensor GraphTensor::flip(std::vector<int> axes) const {
  UserOpScope user_op("flip");
  ShapeTracker v = view_;
  for (int a : normalize_axes(axes, rank(), "flip")) v = v.flip(a);
  return GraphTensor(graph_, id_, v, dtype_);
}

namespace {
// Bool mask of shape (rows, cols): col - row >= diagonal (upper) or <= diagonal (lower).
GraphTensor triangle_mask(Graph& g, const Expression& rows, const Expression& cols, int64_t diagonal, bool upper) {
  GraphTensor r = g.arange(rows, DType::I64).unsqueeze(1).expand({rows, cols});
  GraphTensor c = g.arange(cols, DType::I64).unsqueeze(0).expand({rows, cols});
  GraphTensor diff = c - r;
  return upper ? diff.ge(static_cast<double>(diagonal)) : diff.le(static_cast<double>(diagonal));
}
}  // namespace

GraphTensor GraphTensor::tril(int64_t diagonal) const {
  UserOpScope user_op("tril");
  LUMINAL_CHECK(rank() >= 2, "tril: needs rank >= 2");
  GraphTensor m = triangle_mask(*graph_, dim(-2), dim(-1), diagonal, false);
  return where(m, *this, scalar_like(*this, 0));
}

GraphTensor GraphTensor::triu(int64_t diagonal) const {
  UserOpScope user_op("triu");
  LUMINAL_CHECK(rank() >= 2, "triu: needs rank >= 2");
  GraphTensor m = triangle_mask(*graph_, dim(-2), dim(-1), diagonal, true);
  return where(m, *this, scalar_like(*this, 0));
}

}  // namespace luminal
