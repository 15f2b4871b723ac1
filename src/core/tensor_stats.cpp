// Scans (cumprod, cummax/cummin, logcumsumexp), boolean and norm reductions, order
// statistics (median, kthvalue, quantile), normalisations (group, batch, F.normalize) and
// cross entropy.
//
// Scans use the same (.., i, j, ..) window as cumsum: element (i, j) holds x[j] for j <= i
// and the scan's identity elsewhere, reduced over j. That is O(n^2) per scanned row but
// symbolic-size friendly and one Gather; order statistics sort (rank-based, O(n^2) too).
#include <cmath>
#include <limits>

#include "tensor_internal.hpp"

namespace luminal {
using namespace detail;

namespace {
GraphTensor working_float(const GraphTensor& x) {
  GraphTensor f = to_float(x);
  return is_half_float(f.dtype()) ? f.cast(DType::F32) : f;
}

// The smallest (or largest) value of a dtype: the identity of a running max (min).
double extreme(DType dt, bool highest) {
  switch (dt) {
    case DType::I8: return highest ? 127.0 : -128.0;
    case DType::U8: return highest ? 255.0 : 0.0;
    case DType::I32: return highest ? 2147483647.0 : -2147483648.0;
    // 2^63 - 1 is not a double; the largest double below it is exact as an I64.
    case DType::I64: return highest ? 9223372036854774784.0 : -9223372036854775808.0;
    case DType::Bool: return highest ? 1.0 : 0.0;
    default: return highest ? INFINITY : -INFINITY;
  }
}

// (.., i, j, ..) = x[.., j, ..] where j <= i along `axis`, `fill` elsewhere; j is axis + 1.
GraphTensor prefix_windows(const GraphTensor& x, int axis, double fill) {
  Shape full = x.shape();
  full.insert(full.begin() + axis + 1, x.dim(axis));
  auto c = index_coords(full);
  auto strides = row_major_strides(x.shape());
  Expression flat = 0;
  for (size_t d = 0; d < x.rank(); ++d) {
    size_t from = d < static_cast<size_t>(axis) ? d : d + 1;  // the source axis reads j
    flat = flat + c[from] * strides[d];
  }
  return gather_expr(x, full, flat, luminal::le(c[axis + 1], c[axis]), fill);
}
// Bool (.., i, j, ..): j <= i.
GraphTensor prefix_mask(const GraphTensor& x, int axis) {
  Shape full = x.shape();
  full.insert(full.begin() + axis + 1, x.dim(axis));
  auto c = index_coords(full);
  return x.graph().iota(luminal::le(c[axis + 1], c[axis]), full, DType::Bool);
}

std::pair<GraphTensor, GraphTensor> running_extreme(const GraphTensor& x, int axis, bool is_max, const char* op) {
  axis = normalize_axis(axis, x.rank(), op);
  GraphTensor w = prefix_windows(x, axis, extreme(x.dtype(), !is_max));
  GraphTensor m = is_max ? w.max({axis + 1}) : w.min({axis + 1});
  // Index: the last j <= i holding the extreme (NaN counts as the extreme, as in PyTorch).
  GraphTensor hit = w.eq(m.unsqueeze(axis + 1));
  if (is_float(x.dtype())) hit = hit.logical_or(w.ne(w));
  hit = hit.logical_and(prefix_mask(x, axis));
  Shape full = w.shape();
  GraphTensor j = x.graph().iota(index_coords(full)[axis + 1], full, DType::I64);
  return {m, (hit.cast(DType::I64) * j).max({axis + 1})};
}

// Sorted values (and indices) along axis, the element at static or symbolic position k kept (keepdim).
std::pair<GraphTensor, GraphTensor> sorted_at(const GraphTensor& x, int axis, const Expression& k) {
  auto [v, i] = x.sort(axis, false);
  return {v.slice(axis, k, k + 1), i.slice(axis, k, k + 1)};
}

GraphTensor keep_or_squeeze(const GraphTensor& t, int axis, bool keepdim) { return keepdim ? t : t.squeeze(axis); }
}  // namespace

GraphTensor GraphTensor::cumprod(int axis) const {
  UserOpScope user_op("cumprod");
  axis = normalize_axis(axis, rank(), "cumprod");
  if (!is_float(dtype_)) return prefix_windows(cast(DType::I64), axis, 1).prod({axis + 1});  // torch: int64
  return prefix_windows(working_float(*this), axis, 1).prod({axis + 1}).cast(dtype_);
}

std::pair<GraphTensor, GraphTensor> GraphTensor::cummax(int axis) const {
  UserOpScope user_op("cummax");
  return running_extreme(*this, axis, true, "cummax");
}
std::pair<GraphTensor, GraphTensor> GraphTensor::cummin(int axis) const {
  UserOpScope user_op("cummin");
  return running_extreme(*this, axis, false, "cummin");
}

GraphTensor GraphTensor::logcumsumexp(int axis) const {
  UserOpScope user_op("logcumsumexp");
  axis = normalize_axis(axis, rank(), "logcumsumexp");
  GraphTensor x = working_float(*this);
  GraphTensor w = prefix_windows(x, axis, -INFINITY);
  GraphTensor m = w.max({axis + 1}, true);
  // Shift by the running max; an infinite max shifts by 0 (inf - inf would be NaN).
  GraphTensor shift = where(m.abs().eq(INFINITY), scalar_like(m, 0), m);
  GraphTensor r = (w - shift).exp().sum({axis + 1}, true).log() + shift;
  return r.squeeze(axis + 1).cast(to_float(*this).dtype());
}

GraphTensor GraphTensor::any(std::vector<int> axes, bool keepdim) const {
  UserOpScope user_op("any");
  GraphTensor r = cast(DType::Bool).max(std::move(axes), keepdim);
  return dtype_ == DType::U8 ? r.cast(DType::U8) : r;  // torch keeps uint8 (legacy)
}
GraphTensor GraphTensor::all(std::vector<int> axes, bool keepdim) const {
  UserOpScope user_op("all");
  GraphTensor r = cast(DType::Bool).min(std::move(axes), keepdim);
  return dtype_ == DType::U8 ? r.cast(DType::U8) : r;
}

GraphTensor GraphTensor::norm(double p, std::vector<int> axes, bool keepdim) const {
  UserOpScope user_op("norm");
  LUMINAL_CHECK(is_float(dtype_), "norm: needs a float tensor, got ", dtype_name(dtype_));
  GraphTensor x = working_float(*this);
  GraphTensor r;
  if (p == 2) r = (x * x).sum(axes, keepdim).sqrt();
  else if (p == 1) r = x.abs().sum(axes, keepdim);
  else if (p == INFINITY) r = x.abs().max(axes, keepdim);
  else if (p == -INFINITY) r = x.abs().min(axes, keepdim);
  else if (p == 0) r = x.ne(0.0).cast(x.dtype()).sum(axes, keepdim);
  else r = x.abs().pow(p).sum(axes, keepdim).pow(1.0 / p);
  return r.cast(dtype_);
}

std::pair<GraphTensor, GraphTensor> GraphTensor::kthvalue(int64_t k, int axis, bool keepdim) const {
  UserOpScope user_op("kthvalue");
  axis = normalize_axis(axis, rank(), "kthvalue");
  auto n = dim(axis).as_constant();
  LUMINAL_CHECK(k >= 1 && (!n || k <= *n), "kthvalue: k = ", k, " is out of range for dimension ", axis,
                " of size ", dim(axis));
  auto [v, i] = sorted_at(*this, axis, k - 1);
  return {keep_or_squeeze(v, axis, keepdim), keep_or_squeeze(i, axis, keepdim)};
}

std::pair<GraphTensor, GraphTensor> GraphTensor::median(int axis, bool keepdim) const {
  UserOpScope user_op("median");
  axis = normalize_axis(axis, rank(), "median");
  auto [v, i] = sorted_at(*this, axis, (dim(axis) - 1) / 2);  // the lower median
  if (is_float(dtype_)) {
    // NaN propagates: the value is NaN and the index the first NaN's (as PyTorch).
    GraphTensor nan = isnan();
    GraphTensor has_nan = nan.any({axis}, true);
    v = where(has_nan, scalar_like(v, NAN), v);
    i = where(has_nan, nan.cast(DType::I32).argmax(axis, true), i);
  }
  return {keep_or_squeeze(v, axis, keepdim), keep_or_squeeze(i, axis, keepdim)};
}

GraphTensor GraphTensor::quantile(double q, int axis, bool keepdim, const std::string& interpolation) const {
  UserOpScope user_op("quantile");
  LUMINAL_CHECK(is_float(dtype_), "quantile: needs a float tensor, got ", dtype_name(dtype_));
  LUMINAL_CHECK(q >= 0 && q <= 1, "quantile: q must be in [0, 1], got ", q);
  axis = normalize_axis(axis, rank(), "quantile");
  auto n = dim(axis).as_constant();
  LUMINAL_CHECK(n.has_value() && *n > 0, "quantile: dimension ", axis, " must have a static nonzero size, got ",
                dim(axis));
  double pos = q * static_cast<double>(*n - 1);
  double lo = std::floor(pos), hi = std::ceil(pos), weight = pos - lo;
  if (interpolation == "lower") hi = lo;
  else if (interpolation == "higher") lo = hi;
  else if (interpolation == "nearest") lo = hi = std::nearbyint(pos);  // half to even, as torch.round
  else if (interpolation == "midpoint") weight = 0.5;
  else LUMINAL_CHECK(interpolation == "linear", "quantile: unknown interpolation '", interpolation,
                     "' (linear, lower, higher, midpoint or nearest)");
  GraphTensor v = sort(axis, false).first;
  GraphTensor a = v.slice(axis, static_cast<int64_t>(lo), static_cast<int64_t>(lo) + 1);
  GraphTensor b = v.slice(axis, static_cast<int64_t>(hi), static_cast<int64_t>(hi) + 1);
  GraphTensor r = a;
  if (hi != lo) {
    // torch.lerp's two forms, each exact at its end.
    r = weight < 0.5 ? a + (b - a) * weight : b - (b - a) * (1.0 - weight);
  }
  r = where(isnan().any({axis}, true), scalar_like(r, NAN), r);
  return keep_or_squeeze(r, axis, keepdim);
}

namespace {
// A per-channel (C) vector shaped (C, 1, ..) to broadcast against (N, C, spatial...).
GraphTensor per_channel(const GraphTensor& v, size_t rank, DType dtype) {
  GraphTensor t = v.cast(dtype);
  for (size_t d = 2; d < rank; ++d) t = t.unsqueeze(-1);
  return t;
}
}  // namespace

GraphTensor GraphTensor::group_norm(int num_groups, const std::optional<GraphTensor>& weight,
                                    const std::optional<GraphTensor>& bias, double eps) const {
  UserOpScope user_op("group_norm");
  LUMINAL_CHECK(rank() >= 2, "group_norm: expected an (N, C, *) input, got ", to_string(shape()));
  auto channels = dim(1).as_constant();
  LUMINAL_CHECK(num_groups > 0 && channels && *channels % num_groups == 0, "group_norm: ", dim(1),
                " channels cannot be split into ", num_groups, " groups");
  GraphTensor x = working_float(*this);
  GraphTensor g = x.reshape({dim(0), num_groups, -1});
  GraphTensor centered = g - g.mean({2}, true);
  GraphTensor var = (centered * centered).mean({2}, true);
  GraphTensor y = (centered * (var + eps).rsqrt()).reshape(shape());
  if (weight) y = y * per_channel(*weight, rank(), y.dtype());
  if (bias) y = y + per_channel(*bias, rank(), y.dtype());
  return y.cast(to_float(*this).dtype());
}

GraphTensor GraphTensor::batch_norm(const std::optional<GraphTensor>& running_mean,
                                    const std::optional<GraphTensor>& running_var,
                                    const std::optional<GraphTensor>& weight, const std::optional<GraphTensor>& bias,
                                    double eps) const {
  UserOpScope user_op("batch_norm");
  LUMINAL_CHECK(rank() >= 2, "batch_norm: expected an (N, C, *) input, got ", to_string(shape()));
  LUMINAL_CHECK(running_mean.has_value() == running_var.has_value(),
                "batch_norm: give both running_mean and running_var, or neither (batch statistics)");
  GraphTensor x = working_float(*this);
  GraphTensor mean, var;
  if (running_mean) {
    mean = per_channel(*running_mean, rank(), x.dtype());
    var = per_channel(*running_var, rank(), x.dtype());
  } else {
    std::vector<int> axes = {0};
    for (size_t d = 2; d < rank(); ++d) axes.push_back(static_cast<int>(d));
    mean = x.mean(axes, true);
    GraphTensor c = x - mean;
    var = (c * c).mean(axes, true);  // biased, as PyTorch normalises with
  }
  GraphTensor y = (x - mean) * (var + eps).rsqrt();
  if (weight) y = y * per_channel(*weight, rank(), y.dtype());
  if (bias) y = y + per_channel(*bias, rank(), y.dtype());
  return y.cast(to_float(*this).dtype());
}

GraphTensor GraphTensor::normalize(double p, int axis, double eps) const {
  UserOpScope user_op("normalize");
  GraphTensor x = to_float(*this);
  return x / x.norm(p, {axis}, true).maximum(eps);
}

GraphTensor GraphTensor::cross_entropy(const GraphTensor& target, const std::optional<GraphTensor>& weight,
                                       int64_t ignore_index, const std::string& reduction,
                                       double label_smoothing) const {
  UserOpScope user_op("cross_entropy");
  LUMINAL_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none",
                "cross_entropy: reduction must be 'mean', 'sum' or 'none', got '", reduction, "'");
  LUMINAL_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got ",
                label_smoothing);
  LUMINAL_CHECK(rank() >= 1, "cross_entropy: logits need rank >= 1");
  const int class_axis = rank() == 1 ? 0 : 1;
  auto classes = dim(class_axis).as_constant();
  LUMINAL_CHECK(classes.has_value(), "cross_entropy: the class dimension must be static, got ", dim(class_axis));
  DType out = to_float(*this).dtype();
  GraphTensor x = working_float(*this);
  GraphTensor logp = x.log_softmax(class_axis).movedim({class_axis}, {-1});  // (N, d.., C)
  std::optional<GraphTensor> w;
  if (weight) {
    LUMINAL_CHECK(weight->rank() == 1 && weight->dim(0) == dim(class_axis), "cross_entropy: weight must be (",
                  dim(class_axis), "), got ", to_string(weight->shape()));
    w = weight->cast(x.dtype());
  }
  const double smooth_share = label_smoothing / static_cast<double>(*classes);
  auto reduce_all = [](const GraphTensor& t) { return t.rank() == 0 ? t : t.sum({}); };

  if (is_float(target.dtype())) {  // class probabilities, the same shape as the logits
    LUMINAL_CHECK(target.shape() == shape(), "cross_entropy: probability target ", to_string(target.shape()),
                  " must have the logits' shape ", to_string(shape()));
    GraphTensor t = target.cast(x.dtype()).movedim({class_axis}, {-1});
    if (label_smoothing > 0) t = t * (1.0 - label_smoothing) + smooth_share;
    GraphTensor terms = logp * t;
    if (w) terms = terms * *w;
    GraphTensor loss = -terms.sum({-1});
    if (reduction == "none") return loss.cast(out);
    if (reduction == "sum") return reduce_all(loss).cast(out);
    return (loss.rank() == 0 ? loss : loss.mean({})).cast(out);
  }

  LUMINAL_CHECK(target.rank() + 1 == rank(), "cross_entropy: class-index target ", to_string(target.shape()),
                " must have one dim less than the logits ", to_string(shape()));
  GraphTensor tgt = target.cast(DType::I64);
  GraphTensor valid = tgt.ne(static_cast<double>(ignore_index));
  GraphTensor safe = where(valid, tgt, scalar_like(tgt, 0));  // ignored entries read class 0, then drop out
  GraphTensor picked = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1);
  GraphTensor zero = scalar_like(picked, 0);
  GraphTensor wt = w ? w->index_select(0, safe.reshape({safe.numel()})).reshape(safe.shape())
                     : scalar_like(picked, 1).expand(safe.shape());
  wt = where(valid, wt, zero);
  GraphTensor nll = where(valid, -(picked * wt), zero);
  GraphTensor smooth;
  if (label_smoothing > 0) smooth = where(valid, -(w ? (logp * *w).sum({-1}) : logp.sum({-1})), zero);
  GraphTensor r;
  if (reduction == "none") {
    r = nll;
    if (label_smoothing > 0) r = r * (1.0 - label_smoothing) + smooth * smooth_share;
  } else if (reduction == "sum") {
    r = reduce_all(nll);
    if (label_smoothing > 0) r = r * (1.0 - label_smoothing) + reduce_all(smooth) * smooth_share;
  } else {
    // Mean over the target weights of the kept entries (the count without weights).
    GraphTensor total = reduce_all(wt);
    r = reduce_all(nll) / total;
    if (label_smoothing > 0) {
      GraphTensor denom = w ? total : reduce_all(valid.cast(x.dtype()));
      r = r * (1.0 - label_smoothing) + reduce_all(smooth) / denom * smooth_share;
    }
  }
  return r.cast(out);
}

}  // namespace luminal
