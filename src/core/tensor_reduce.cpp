// Reductions and normalisations, built from SumReduce and MaxReduce.
#include <cmath>

#include "tensor_internal.hpp"

namespace luminal {
using namespace detail;

namespace {
// F16/BF16 statistics accumulate in F32 (as torch does): a sum of squares overflows F16 at 65504.

// Apply a single-axis reduction to each axis, highest first so indices stay valid,
// then restore size-1 dims when keepdim.
template <class F>
GraphTensor reduce_axes(const GraphTensor& x, std::vector<int> axes, bool keepdim, const char* op, F&& one) {
  axes = normalize_axes(std::move(axes), x.rank(), op);
  GraphTensor r = x;
  for (auto it = axes.rbegin(); it != axes.rend(); ++it) r = one(r, *it);
  if (keepdim)
    for (int a : axes) r = r.unsqueeze(a);
  return r;
}

Expression count(const GraphTensor& x, const std::vector<int>& axes_in) {
  auto axes = normalize_axes(axes_in, x.rank(), "reduce");
  Expression n = 1;
  for (int a : axes) n = n * x.dim(a);
  return n;
}
}  // namespace

GraphTensor GraphTensor::sum(std::vector<int> axes, bool keepdim) const {
  UserOpScope user_op("sum");
  GraphTensor x = dtype_ == DType::Bool || dtype_ == DType::I8 || dtype_ == DType::U8 || dtype_ == DType::I32
                      ? cast(DType::I64)  // torch sums integers in int64
                      : *this;
  return reduce_axes(x, std::move(axes), keepdim, "sum",
                     [](const GraphTensor& t, int a) { return reduce(OpKind::SumReduce, t, a); });
}

GraphTensor GraphTensor::sum_all() const {
  UserOpScope user_op("sum_all");
  return sum({}, false);
}

GraphTensor GraphTensor::max(std::vector<int> axes, bool keepdim) const {
  UserOpScope user_op("max");
  return reduce_axes(*this, std::move(axes), keepdim, "max",
                     [](const GraphTensor& t, int a) { return reduce(OpKind::MaxReduce, t, a); });
}

GraphTensor GraphTensor::min(std::vector<int> axes, bool keepdim) const {
  UserOpScope user_op("min");
  if (dtype_ == DType::Bool) return logical_not().max(std::move(axes), keepdim).logical_not();
  if (dtype_ == DType::U8) return (-((-cast(DType::I32)).max(std::move(axes), keepdim))).cast(DType::U8);
  return -((-*this).max(std::move(axes), keepdim));
}

GraphTensor GraphTensor::mean(std::vector<int> axes, bool keepdim) const {
  UserOpScope user_op("mean");
  LUMINAL_CHECK(is_float(dtype_), "mean: needs a float tensor, got ", dtype_name(dtype_));
  if (is_half_float(dtype_)) return cast(DType::F32).mean(std::move(axes), keepdim).cast(dtype_);
  Expression n = count(*this, axes);
  GraphTensor s = sum(axes, keepdim);
  return s / expr_scalar(*graph_, n).cast(dtype_);
}

GraphTensor GraphTensor::prod(std::vector<int> axes, bool keepdim) const {
  UserOpScope user_op("prod");
  if (!is_float(dtype_)) {
    // Integers (torch: I64 result, exact, wrapping): a chain of Muls over each static
    // reduced dim; a symbolic dim falls back to the F64 product (exact up to 2^53).
    return reduce_axes(cast(DType::I64), std::move(axes), keepdim, "prod", [](const GraphTensor& t, int a) {
      auto n = t.dim(a).as_constant();
      if (!n || *n > 256) return t.cast(DType::F64).prod({a}, false).round().cast(DType::I64);
      Shape out = t.shape();
      out.erase(out.begin() + a);
      GraphTensor acc = scalar_like(t, 1).expand(out);
      for (int64_t i = 0; i < *n; ++i) acc = acc * t.slice(a, Expression(i), Expression(i + 1)).squeeze(a);
      return acc;
    });
  }
  // Product = sign * 2^(sum log2|x|). A zero gives 2^-inf = 0, and a zero with an inf
  // gives 2^NaN = NaN, as 0 * inf in torch; NaN propagates.
  GraphTensor x = *this;
  GraphTensor mag = x.abs().log2().sum(axes, keepdim).exp2();
  GraphTensor negatives = x.lt(0.0).cast(DType::I64).sum(axes, keepdim);
  GraphTensor sign = 1.0 - 2.0 * (negatives % 2.0).cast(x.dtype());
  return sign * mag;
}

GraphTensor GraphTensor::var(std::vector<int> axes, bool keepdim, int correction) const {
  UserOpScope user_op("var");
  GraphTensor x = to_float(*this);
  if (is_half_float(x.dtype())) return x.cast(DType::F32).var(std::move(axes), keepdim, correction).cast(x.dtype());
  GraphTensor centered = x - x.mean(axes, true);
  Expression n = count(x, axes);
  GraphTensor ss = (centered * centered).sum(axes, keepdim);
  return ss / expr_scalar(*graph_, luminal::max(n - correction, 0)).cast(x.dtype());
}

GraphTensor GraphTensor::std(std::vector<int> axes, bool keepdim, int correction) const {
  UserOpScope user_op("std");
  if (is_half_float(dtype_)) return cast(DType::F32).std(std::move(axes), keepdim, correction).cast(dtype_);  // var may overflow F16
  return var(std::move(axes), keepdim, correction).sqrt();
}

GraphTensor GraphTensor::logsumexp(std::vector<int> axes, bool keepdim) const {
  UserOpScope user_op("logsumexp");
  GraphTensor x = to_float(*this);
  GraphTensor m = x.max(axes, true);
  // Rows that are entirely -inf would give NaN from (-inf) - (-inf); shift by 0 there.
  GraphTensor safe_m = where(m.eq(-INFINITY), scalar_like(m, 0), m);
  GraphTensor r = (x - safe_m).exp().sum(axes, true).log() + safe_m;
  if (!keepdim) {
    auto norm = normalize_axes(axes, rank(), "logsumexp");
    for (auto it = norm.rbegin(); it != norm.rend(); ++it) r = r.squeeze(*it);
  }
  return r;
}

namespace {
// Index (I64) of the first element along `axis` equal to the reduction `m` (keepdim).
// NaN counts as the extreme, as in PyTorch (max/min propagate it).
GraphTensor first_index_of(const GraphTensor& x, const GraphTensor& m, int axis, bool keepdim) {
  GraphTensor hit = x.eq(m);
  if (is_float(x.dtype())) hit = hit.logical_or(x.ne(x));
  // The first hit has the largest (n - i): max over hit * (n - i), subtracted from n.
  Expression n = x.dim(axis);
  Graph& g = x.graph();
  GraphTensor rev = g.iota(n - index_coords(x.shape())[axis], x.shape(), DType::I64);
  return int_scalar(g, n, DType::I64) - (hit.cast(DType::I64) * rev).max({axis}, keepdim);
}
}  // namespace

GraphTensor GraphTensor::argmax(int axis, bool keepdim) const {
  UserOpScope user_op("argmax");
  axis = normalize_axis(axis, rank(), "argmax");
  return first_index_of(*this, max({axis}, true), axis, keepdim);
}

GraphTensor GraphTensor::argmin(int axis, bool keepdim) const {
  UserOpScope user_op("argmin");
  axis = normalize_axis(axis, rank(), "argmin");
  return first_index_of(*this, min({axis}, true), axis, keepdim);
}

GraphTensor GraphTensor::cumsum(int axis) const {
  UserOpScope user_op("cumsum");
  axis = normalize_axis(axis, rank(), "cumsum");
  GraphTensor x = is_float(dtype_) ? *this : cast(DType::I64);  // torch accumulates integers in int64
  // (.., i, j, ..) holding x[.., j, ..] where j <= i and 0 elsewhere, summed over j.
  Shape full = shape();
  full.insert(full.begin() + axis + 1, dim(axis));
  auto c = index_coords(full);
  auto strides = row_major_strides(shape());
  Expression flat = 0;
  for (size_t d = 0; d < rank(); ++d) {
    size_t from = d < static_cast<size_t>(axis) ? d : d + 1;  // skip i; the source axis reads j
    flat = flat + c[from] * strides[d];
  }
  GraphTensor masked = gather_expr(x, full, flat, luminal::le(c[axis + 1], c[axis]));
  return reduce(OpKind::SumReduce, masked, axis + 1);
}

GraphTensor GraphTensor::softmax(int axis) const {
  UserOpScope user_op("softmax");
  GraphTensor x = to_float(*this);
  GraphTensor m = x.max({axis}, true);
  GraphTensor e = (x - m).exp();
  return e / e.sum({axis}, true);
}

GraphTensor GraphTensor::log_softmax(int axis) const {
  UserOpScope user_op("log_softmax");
  // (x - max) - log(sum(exp(x - max))), as torch: subtracting a rounded logsumexp from x
  // would lose the low bits of x - max when |max| is large.
  GraphTensor x = to_float(*this);
  GraphTensor m = x.max({axis}, true);
  GraphTensor safe_m = where(m.eq(-INFINITY), scalar_like(m, 0), m);
  GraphTensor shifted = x - safe_m;
  return shifted - shifted.exp().sum({axis}, true).log();
}

GraphTensor GraphTensor::layer_norm(size_t normalized_rank, const std::optional<GraphTensor>& weight,
                                    const std::optional<GraphTensor>& bias, double eps) const {
  UserOpScope user_op("layer_norm");
  LUMINAL_CHECK(normalized_rank >= 1 && normalized_rank <= rank(), "layer_norm: cannot normalise ",
                normalized_rank, " trailing dims of a rank-", rank(), " tensor");
  std::vector<int> axes;
  for (size_t i = rank() - normalized_rank; i < rank(); ++i) axes.push_back(static_cast<int>(i));
  GraphTensor x = to_float(*this);
  if (is_half_float(x.dtype())) {
    DType dt = x.dtype();
    auto up = [](const std::optional<GraphTensor>& t) {
      return t ? std::optional<GraphTensor>(t->cast(DType::F32)) : std::nullopt;
    };
    return x.cast(DType::F32).layer_norm(normalized_rank, up(weight), up(bias), eps).cast(dt);
  }
  GraphTensor centered = x - x.mean(axes, true);
  GraphTensor var = (centered * centered).mean(axes, true);
  GraphTensor y = centered * (var + eps).rsqrt();
  if (weight) y = y * *weight;
  if (bias) y = y + *bias;
  return y;
}

GraphTensor GraphTensor::rms_norm(size_t normalized_rank, const std::optional<GraphTensor>& weight,
                                  double eps) const {
  UserOpScope user_op("rms_norm");
  LUMINAL_CHECK(normalized_rank >= 1 && normalized_rank <= rank(), "rms_norm: cannot normalise ",
                normalized_rank, " trailing dims of a rank-", rank(), " tensor");
  std::vector<int> axes;
  for (size_t i = rank() - normalized_rank; i < rank(); ++i) axes.push_back(static_cast<int>(i));
  GraphTensor x = to_float(*this);
  if (is_half_float(x.dtype())) {
    std::optional<GraphTensor> w = weight ? std::optional<GraphTensor>(weight->cast(DType::F32)) : std::nullopt;
    return x.cast(DType::F32).rms_norm(normalized_rank, w, eps).cast(x.dtype());
  }
  GraphTensor y = x * ((x * x).mean(axes, true) + eps).rsqrt();
  if (weight) y = y * *weight;
  return y;
}

}  // namespace luminal
