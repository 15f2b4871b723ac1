// Convolution and pooling (NCHW, as PyTorch). Both start from one windowed Gather
// (sliding_windows): an Iota computes, for every (n, out position, channel, kernel offset),
// the flat input index, or a sentinel that reads the padding value. Convolution then
// contracts (channel, kernel) against the weight with Mul + SumReduce, the same
// pattern as matmul; pooling reduces the kernel axes with MaxReduce or a mean.
// Unbatched inputs ((C, L) / (C, H, W)) are accepted like PyTorch. Kernel sizes must be
// static; spatial sizes may be symbolic. avg_pool2d promotes ints to F32 (torch refuses
// them); ceil_mode is not supported.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor_internal.hpp"

namespace luminal {
using namespace detail;

namespace {
struct Window {
  int64_t kernel, stride, padding, dilation;
  bool ceil = false;  // pooling's ceil_mode: a last partial window that starts inside the input
};

// Output length of a window over `size` (PyTorch's pooling_output_shape).
Expression window_count(const Expression& size, const Window& w) {
  Expression span = size + 2 * w.padding - w.dilation * (w.kernel - 1) - 1;
  if (!w.ceil) return span / w.stride + 1;
  Expression o = (span + w.stride - 1) / w.stride + 1;
  return o - luminal::ge((o - 1) * w.stride, size + w.padding);
}

// Sliding windows over the trailing spatial dims of x = (N, C, S_1..S_s):
// (N, O_1..O_s, C, K_1..K_s), reading `fill` where a window hangs over the padding.
GraphTensor sliding_windows(const GraphTensor& x, const std::vector<Window>& w, double fill, const char* op) {
  size_t s = w.size();
  Shape out = {x.dim(0)};
  for (size_t i = 0; i < s; ++i) {
    const Window& wi = w[i];
    LUMINAL_CHECK(wi.kernel > 0 && wi.stride > 0 && wi.dilation > 0 && wi.padding >= 0, op,
                  ": kernel, stride and dilation must be positive and padding non-negative");
    Expression size = x.dim(static_cast<int>(2 + i));
    Expression o = window_count(size, wi);
    auto oc = o.as_constant();
    LUMINAL_CHECK(!oc || *oc >= 1, op, ": input ", to_string(x.shape()), " is too small for kernel ", wi.kernel,
                  " (dilation ", wi.dilation, ", padding ", wi.padding, ") in spatial dim ", i);
    out.push_back(o);
  }
  out.push_back(x.dim(1));
  for (const auto& wi : w) out.push_back(wi.kernel);
  auto c = index_coords(out);
  auto st = row_major_strides(x.shape());
  Expression flat = c[0] * st[0] + c[s + 1] * st[1];
  Expression valid = 1;
  for (size_t i = 0; i < s; ++i) {
    Expression p = c[1 + i] * w[i].stride + c[s + 2 + i] * w[i].dilation - w[i].padding;
    flat = flat + p * st[2 + i];
    if (w[i].padding > 0 || w[i].ceil)
      valid = logical_and(valid, logical_and(ge(p, 0), lt(p, x.dim(static_cast<int>(2 + i)))));
  }
  return gather_expr(x, out, flat, valid, fill);
}

// Unbatched input: add the batch dim, run, drop it again.
template <class F>
GraphTensor batched(const GraphTensor& x, size_t batched_rank, const char* op, F&& f) {
  LUMINAL_CHECK(x.rank() == batched_rank || x.rank() + 1 == batched_rank, op, ": expected an input of rank ",
                batched_rank, " (or ", batched_rank - 1, " unbatched), got ", to_string(x.shape()));
  if (x.rank() == batched_rank) return f(x);
  return f(x.unsqueeze(0)).squeeze(0);
}

GraphTensor conv(const GraphTensor& x_in, const GraphTensor& weight, const std::optional<GraphTensor>& bias,
                 std::vector<Window> w, int groups, const char* op) {
  size_t s = w.size();
  return batched(x_in, s + 2, op, [&](const GraphTensor& x) {
    LUMINAL_CHECK(weight.rank() == s + 2, op, ": weight must be (out, in/groups, kernel...) of rank ", s + 2,
                  ", got ", to_string(weight.shape()));
    LUMINAL_CHECK(groups >= 1, op, ": groups must be positive, got ", groups);
    Expression channels = x.dim(1), out_ch = weight.dim(0), group_ch = weight.dim(1);
    LUMINAL_CHECK(group_ch * groups == channels, op, ": input ", to_string(x.shape()), " has ", channels,
                  " channels but weight ", to_string(weight.shape()), " with groups=", groups, " expects ",
                  group_ch * groups);
    auto oc = out_ch.as_constant();
    LUMINAL_CHECK(oc && *oc % groups == 0, op, ": out channels ", out_ch, " not divisible by groups=", groups);
    Expression r = group_ch;
    for (size_t i = 0; i < s; ++i) {
      auto k = weight.dim(static_cast<int>(2 + i)).as_constant();
      LUMINAL_CHECK(k.has_value(), op, ": kernel sizes must be static, got ", to_string(weight.shape()));
      w[i].kernel = *k;
      r = r * *k;
    }
    // (N, O.., C, K..) -> (N, O.., G, 1, R) against weight (G, O/G, R), summed over R.
    GraphTensor cols = sliding_windows(x, w, 0, op);
    Shape cs = cols.shape();
    cs.resize(1 + s);
    cs.insert(cs.end(), {groups, 1, r});
    GraphTensor wt = weight.reshape({groups, *oc / groups, r});
    GraphTensor y = reduce(OpKind::SumReduce, cols.reshape(cs) * wt, -1);  // (N, O.., G, O/G)
    y = y.flatten(static_cast<int>(s + 1), static_cast<int>(s + 2));      // (N, O.., out)
    std::vector<int> perm = {0, static_cast<int>(s + 1)};
    for (size_t i = 0; i < s; ++i) perm.push_back(static_cast<int>(1 + i));
    y = y.permute(perm);
    if (bias) {
      LUMINAL_CHECK(bias->rank() == 1 && bias->dim(0) == out_ch, op, ": bias must be (", out_ch, "), got ",
                    to_string(bias->shape()));
      GraphTensor b = *bias;
      for (size_t i = 0; i < s; ++i) b = b.unsqueeze(-1);
      y = y + b;
    }
    return y;
  });
}

double lowest(DType dt) {
  switch (dt) {
    case DType::I8: return std::numeric_limits<int8_t>::lowest();
    case DType::I32: return std::numeric_limits<int32_t>::lowest();
    case DType::I64: return static_cast<double>(std::numeric_limits<int64_t>::lowest());
    case DType::U8:
    case DType::Bool: return 0;
    default: return -INFINITY;
  }
}

// One value per spatial dim: a list of 1 applies to every dim.
std::vector<int64_t> per_dim(const std::vector<int>& v, size_t dims, int64_t fallback, const char* what,
                             const char* op) {
  if (v.empty()) return std::vector<int64_t>(dims, fallback);
  LUMINAL_CHECK(v.size() == 1 || v.size() == dims, op, ": ", what, " needs 1 or ", dims, " values, got ", v.size());
  std::vector<int64_t> out(dims);
  for (size_t i = 0; i < dims; ++i) out[i] = v.size() == 1 ? v[0] : v[i];
  return out;
}

// Pooling over the trailing s = kernel.size() dims of (N, C, S..) or (C, S..).
GraphTensor pool(const GraphTensor& x_in, const std::vector<int>& kernel, const std::vector<int>& stride,
                 const std::vector<int>& padding, const std::vector<int>& dilation, bool ceil_mode,
                 bool count_include_pad, bool is_max, const char* op) {
  size_t s = kernel.size();
  LUMINAL_CHECK(s >= 1 && s <= 3, op, ": kernel needs 1 to 3 sizes, got ", s);
  auto k = per_dim(kernel, s, 1, "kernel", op);
  auto st = per_dim(stride, s, 0, "stride", op);
  auto pd = per_dim(padding, s, 0, "padding", op);
  auto dl = per_dim(dilation, s, 1, "dilation", op);
  return batched(x_in, s + 2, op, [&](const GraphTensor& x0) {
    std::vector<Window> w;
    for (size_t i = 0; i < s; ++i) {
      w.push_back({k[i], st[i] ? st[i] : k[i], pd[i], dl[i], ceil_mode});
      LUMINAL_CHECK(pd[i] <= k[i] / 2, op, ": padding ", pd[i], " should be at most half the kernel size ", k[i]);
    }
    // Max pooling pads with the dtype's lowest value (-inf for floats), as PyTorch. Averages
    // of F16/BF16 accumulate in F32.
    DType out_dtype = is_max ? x0.dtype() : to_float(x0).dtype();
    GraphTensor x = is_max ? x0 : (is_half_float(out_dtype) ? x0.cast(DType::F32) : to_float(x0));
    GraphTensor win = sliding_windows(x, w, is_max ? lowest(x.dtype()) : 0, op);  // (N, O.., C, K..)
    std::vector<int> kernel_axes, perm = {0, static_cast<int>(s + 1)};
    for (size_t i = 0; i < s; ++i) {
      kernel_axes.push_back(static_cast<int>(s + 2 + i));
      perm.push_back(static_cast<int>(1 + i));
    }
    if (is_max) return win.max(kernel_axes).permute(perm);
    // The divisor per output position (PyTorch's avg_pool): the window clipped to the padded
    // input, or to the input itself without count_include_pad.
    Shape out_shape;
    for (size_t i = 0; i < s; ++i) out_shape.push_back(win.dim(static_cast<int>(1 + i)));
    auto c = index_coords(out_shape);
    Expression count = 1;
    for (size_t i = 0; i < s; ++i) {
      Expression size = x.dim(static_cast<int>(2 + i));
      Expression start = c[i] * w[i].stride - w[i].padding;
      Expression end = luminal::min(start + w[i].kernel, size + w[i].padding);
      count = count_include_pad ? count * (end - start)
                                : count * (luminal::min(end, size) - luminal::max(start, Expression(0)));
    }
    GraphTensor divisor = x.graph().iota(count, out_shape, DType::I32).cast(x.dtype());
    divisor = divisor.unsqueeze(-1);  // against (N, O.., C)
    return (win.sum(kernel_axes) / divisor).permute(perm).cast(out_dtype);
  });
}

// Adaptive windows along each trailing dim: output o reads [floor(o L / O), ceil((o + 1) L / O)).
GraphTensor adaptive_pool(const GraphTensor& x, const std::vector<int64_t>& out_size, bool is_max, const char* op) {
  size_t s = out_size.size();
  LUMINAL_CHECK(s >= 1 && s <= 3 && x.rank() >= s + 1, op, ": expected (N, C, ", s, " spatial dims) or (C, ", s,
                " spatial dims) for output size of ", s, " dims, got ", to_string(x.shape()));
  Shape full_shape = x.shape();
  Shape lead(full_shape.begin(), full_shape.end() - static_cast<long>(s));
  Expression batch = product(lead);
  Shape flat = {batch};
  std::vector<int64_t> in(s), kmax(s);
  for (size_t i = 0; i < s; ++i) {
    auto n = x.dim(static_cast<int>(x.rank() - s + i)).as_constant();
    LUMINAL_CHECK(n && *n > 0 && out_size[i] > 0, op, ": spatial sizes must be static and output sizes positive, got ",
                  to_string(x.shape()), " -> ", out_size[i]);
    in[i] = *n;
    flat.push_back(*n);
    kmax[i] = 0;
    for (int64_t o = 0; o < out_size[i]; ++o) {
      int64_t a = o * in[i] / out_size[i], b = ((o + 1) * in[i] + out_size[i] - 1) / out_size[i];
      kmax[i] = std::max(kmax[i], b - a);
    }
  }
  GraphTensor xf = is_max ? x : to_float(x);
  xf = xf.reshape(flat);
  Shape out = {batch};
  for (auto o : out_size) out.push_back(o);
  for (auto k : kmax) out.push_back(k);
  auto c = index_coords(out);
  auto strides = row_major_strides(flat);
  auto start_of = [&](const Expression& o, size_t i) { return o * in[i] / out_size[i]; };
  auto end_of = [&](const Expression& o, size_t i) { return ((o + 1) * in[i] + out_size[i] - 1) / out_size[i]; };
  Expression index = c[0] * strides[0], valid = 1;
  for (size_t i = 0; i < s; ++i) {
    Expression start = start_of(c[1 + i], i);
    index = index + (start + c[1 + s + i]) * strides[1 + i];
    valid = luminal::logical_and(valid, luminal::lt(start + c[1 + s + i], end_of(c[1 + i], i)));
  }
  GraphTensor win = gather_expr(xf, out, index, valid, is_max ? lowest(xf.dtype()) : 0);
  std::vector<int> kernel_axes;
  for (size_t i = 0; i < s; ++i) kernel_axes.push_back(static_cast<int>(1 + s + i));
  GraphTensor r;
  if (is_max) {
    r = win.max(kernel_axes);
  } else {
    Shape counted(out.begin(), out.begin() + static_cast<long>(1 + s));
    auto oc = index_coords(counted);
    Expression count = 1;
    for (size_t i = 0; i < s; ++i) count = count * (end_of(oc[1 + i], i) - start_of(oc[1 + i], i));
    r = win.sum(kernel_axes) / x.graph().iota(count, counted, DType::I32).cast(xf.dtype());
  }
  Shape result = lead;
  for (auto o : out_size) result.push_back(o);
  return r.reshape(result);
}
}  // namespace

GraphTensor GraphTensor::conv1d(const GraphTensor& weight, const std::optional<GraphTensor>& bias, int stride,
                                int padding, int dilation, int groups) const {
  UserOpScope user_op("conv1d");
  return conv(*this, weight, bias, {{0, stride, padding, dilation}}, groups, "conv1d");
}

GraphTensor GraphTensor::conv2d(const GraphTensor& weight, const std::optional<GraphTensor>& bias,
                                std::pair<int, int> stride, std::pair<int, int> padding,
                                std::pair<int, int> dilation, int groups) const {
  UserOpScope user_op("conv2d");
  return conv(*this, weight, bias,
              {{0, stride.first, padding.first, dilation.first}, {0, stride.second, padding.second, dilation.second}},
              groups, "conv2d");
}

GraphTensor GraphTensor::max_pool2d(std::pair<int, int> kernel, std::pair<int, int> stride,
                                    std::pair<int, int> padding) const {
  UserOpScope user_op("max_pool2d");
  return pool(*this, {kernel.first, kernel.second}, {stride.first, stride.second}, {padding.first, padding.second},
              {1}, false, true, true, "max_pool2d");
}

GraphTensor GraphTensor::avg_pool2d(std::pair<int, int> kernel, std::pair<int, int> stride,
                                    std::pair<int, int> padding) const {
  UserOpScope user_op("avg_pool2d");
  return pool(*this, {kernel.first, kernel.second}, {stride.first, stride.second}, {padding.first, padding.second},
              {1}, false, true, false, "avg_pool2d");
}

GraphTensor GraphTensor::max_pool(std::vector<int> kernel, std::vector<int> stride, std::vector<int> padding,
                                  std::vector<int> dilation, bool ceil_mode) const {
  UserOpScope user_op("max_pool");
  return pool(*this, kernel, stride, padding, dilation, ceil_mode, true, true, "max_pool");
}
GraphTensor GraphTensor::avg_pool(std::vector<int> kernel, std::vector<int> stride, std::vector<int> padding,
                                  bool ceil_mode, bool count_include_pad) const {
  UserOpScope user_op("avg_pool");
  return pool(*this, kernel, stride, padding, {1}, ceil_mode, count_include_pad, false, "avg_pool");
}
GraphTensor GraphTensor::max_pool1d(int kernel, int stride, int padding) const {
  UserOpScope user_op("max_pool1d");
  return pool(*this, {kernel}, {stride}, {padding}, {1}, false, true, true, "max_pool1d");
}
GraphTensor GraphTensor::avg_pool1d(int kernel, int stride, int padding) const {
  UserOpScope user_op("avg_pool1d");
  return pool(*this, {kernel}, {stride}, {padding}, {1}, false, true, false, "avg_pool1d");
}
GraphTensor GraphTensor::adaptive_avg_pool(std::vector<int64_t> output_size) const {
  UserOpScope user_op("adaptive_avg_pool");
  return adaptive_pool(*this, output_size, false, "adaptive_avg_pool");
}
GraphTensor GraphTensor::adaptive_max_pool(std::vector<int64_t> output_size) const {
  UserOpScope user_op("adaptive_max_pool");
  return adaptive_pool(*this, output_size, true, "adaptive_max_pool");
}

GraphTensor GraphTensor::conv3d(const GraphTensor& weight, const std::optional<GraphTensor>& bias,
                                std::vector<int> stride, std::vector<int> padding, std::vector<int> dilation,
                                int groups) const {
  UserOpScope user_op("conv3d");
  auto st = per_dim(stride, 3, 1, "stride", "conv3d"), pd = per_dim(padding, 3, 0, "padding", "conv3d"),
       dl = per_dim(dilation, 3, 1, "dilation", "conv3d");
  std::vector<Window> w;
  for (size_t i = 0; i < 3; ++i) w.push_back({0, st[i], pd[i], dl[i]});
  return conv(*this, weight, bias, w, groups, "conv3d");
}

GraphTensor GraphTensor::conv_transpose(const GraphTensor& weight, const std::optional<GraphTensor>& bias,
                                        std::vector<int> stride, std::vector<int> padding,
                                        std::vector<int> output_padding, int groups,
                                        std::vector<int> dilation) const {
  UserOpScope user_op("conv_transpose");
  const char* op = "conv_transpose";
  LUMINAL_CHECK(weight.rank() >= 3 && weight.rank() <= 5, op, ": weight must be (in, out/groups, K..) with 1 to 3 ",
                "spatial dims, got ", to_string(weight.shape()));
  size_t s = weight.rank() - 2;
  auto st = per_dim(stride, s, 1, "stride", op), pd = per_dim(padding, s, 0, "padding", op),
       op_pad = per_dim(output_padding, s, 0, "output_padding", op), dl = per_dim(dilation, s, 1, "dilation", op);
  return batched(*this, s + 2, op, [&](const GraphTensor& x) {
    LUMINAL_CHECK(groups >= 1, op, ": groups must be positive, got ", groups);
    LUMINAL_CHECK(x.dim(1) == weight.dim(0), op, ": input ", to_string(x.shape()), " has ", x.dim(1),
                  " channels but weight ", to_string(weight.shape()), " expects ", weight.dim(0));
    auto in_ch = weight.dim(0).as_constant();
    LUMINAL_CHECK(in_ch && *in_ch % groups == 0, op, ": in channels ", weight.dim(0), " not divisible by groups=",
                  groups);
    std::vector<int64_t> k(s);
    for (size_t i = 0; i < s; ++i) {
      auto ki = weight.dim(static_cast<int>(2 + i)).as_constant();
      LUMINAL_CHECK(ki.has_value(), op, ": kernel sizes must be static, got ", to_string(weight.shape()));
      k[i] = *ki;
      LUMINAL_CHECK(st[i] > 0 && dl[i] > 0 && pd[i] >= 0, op, ": stride and dilation must be positive, padding ",
                    "non-negative");
      LUMINAL_CHECK(op_pad[i] >= 0 && op_pad[i] < std::max(st[i], dl[i]), op, ": output_padding ", op_pad[i],
                    " must be smaller than stride or dilation");
    }
    // The input spread out by the stride (zeros between), padded by dilation*(K-1) - padding
    // (a crop when negative) and output_padding on the far side, ...
    Shape spread = {x.dim(0), x.dim(1)};
    std::vector<int64_t> lead_pad(s);
    for (size_t i = 0; i < s; ++i) {
      lead_pad[i] = dl[i] * (k[i] - 1) - pd[i];
      spread.push_back((x.dim(static_cast<int>(2 + i)) - 1) * st[i] + 1 + 2 * lead_pad[i] + op_pad[i]);
    }
    auto c = index_coords(spread);
    auto strides = row_major_strides(x.shape());
    Expression flat = c[0] * strides[0] + c[1] * strides[1], valid = 1;
    for (size_t i = 0; i < s; ++i) {
      Expression r = c[2 + i] - lead_pad[i];
      flat = flat + (r / st[i]) * strides[2 + i];
      Expression on_grid = luminal::logical_and(luminal::ge(r, 0), luminal::eq(r % st[i], 0));
      valid = luminal::logical_and(valid, luminal::logical_and(on_grid, luminal::lt(r / st[i], x.dim(static_cast<int>(2 + i)))));
    }
    GraphTensor z = gather_expr(x, spread, flat, valid, 0);
    // ... convolved at stride 1 with the weight flipped and its in/out roles swapped per group.
    Expression out_per_group = weight.dim(1);
    Shape grouped = {groups, *in_ch / groups, out_per_group};
    for (auto ki : k) grouped.push_back(ki);
    std::vector<int> perm = {0, 2, 1}, spatial;
    for (size_t i = 0; i < s; ++i) {
      perm.push_back(static_cast<int>(3 + i));
      spatial.push_back(static_cast<int>(2 + i));
    }
    Shape swapped = {out_per_group * groups, *in_ch / groups};
    for (auto ki : k) swapped.push_back(ki);
    GraphTensor wt = weight.reshape(grouped).permute(perm).reshape(swapped).flip(spatial);
    std::vector<Window> w;
    for (size_t i = 0; i < s; ++i) w.push_back({0, 1, 0, dl[i]});
    return conv(z, wt, bias, w, groups, op);
  });
}

GraphTensor GraphTensor::interpolate(std::vector<int64_t> size, const std::string& mode, bool align_corners) const {
  UserOpScope user_op("interpolate");
  const char* op = "interpolate";
  size_t s = size.size();
  LUMINAL_CHECK(s >= 1 && s <= 3 && rank() >= s + 1, op, ": ", s, " output sizes for a tensor of shape ",
                to_string(shape()));
  bool nearest = mode == "nearest" || mode == "nearest-exact";
  bool linear = (mode == "linear" && s == 1) || (mode == "bilinear" && s == 2) || (mode == "trilinear" && s == 3);
  LUMINAL_CHECK(nearest || linear || mode == "area", op, ": mode '", mode, "' with ", s,
                " spatial dims is not supported (nearest, nearest-exact, linear/bilinear/trilinear, area)");
  if (mode == "area") return adaptive_avg_pool(size);
  GraphTensor x = *this;
  DType compute = dtype_ == DType::F64 ? DType::F64 : DType::F32;  // PyTorch's opmath type
  for (size_t i = 0; i < s; ++i) {
    int axis = static_cast<int>(rank() - s + i);
    auto in = dim(axis).as_constant();
    LUMINAL_CHECK(in && *in > 0 && size[i] > 0, op, ": spatial sizes must be static and positive, got ",
                  to_string(shape()), " -> ", size[i]);
    int64_t L = *in, O = size[i];
    GraphTensor o = graph_->arange(O, DType::I64);
    if (nearest) {
      // As PyTorch: floor(o * scale) (or (o + 0.5) * scale) in float, scale = in / out in float.
      float scale = static_cast<float>(L) / static_cast<float>(O);
      GraphTensor pos = o.cast(DType::F32);
      if (mode == "nearest-exact") pos = pos + 0.5;
      GraphTensor src = (pos * static_cast<double>(scale)).floor().cast(DType::I64).minimum(static_cast<double>(L - 1));
      x = x.index_select(axis, src);
      continue;
    }
    double scale = align_corners ? (O > 1 ? static_cast<double>(L - 1) / static_cast<double>(O - 1) : 0.0)
                                 : static_cast<double>(L) / static_cast<double>(O);
    if (compute == DType::F32) scale = static_cast<float>(scale);
    GraphTensor pos = o.cast(compute);
    GraphTensor src = align_corners ? pos * scale : ((pos + 0.5) * scale - 0.5).maximum(0.0);
    GraphTensor i0 = src.floor().cast(DType::I64);
    GraphTensor i1 = where(i0.lt(static_cast<double>(L - 1)), i0 + 1.0, i0);
    GraphTensor w1 = src - i0.cast(compute);
    GraphTensor w0 = 1.0 - w1;
    for (int d = axis + 1; d < static_cast<int>(rank()); ++d) {
      w0 = w0.unsqueeze(-1);
      w1 = w1.unsqueeze(-1);
    }
    GraphTensor xc = x.cast(compute);
    x = xc.index_select(axis, i0) * w0 + xc.index_select(axis, i1) * w1;
  }
  return nearest ? x : x.cast(to_float(*this).dtype());
}

GraphTensor GraphTensor::im2col(std::pair<int, int> kernel, std::pair<int, int> dilation, std::pair<int, int> padding,
                                std::pair<int, int> stride) const {
  UserOpScope user_op("im2col");
  return batched(*this, 4, "im2col", [&](const GraphTensor& x) {
    std::vector<Window> w = {{kernel.first, stride.first, padding.first, dilation.first},
                             {kernel.second, stride.second, padding.second, dilation.second}};
    GraphTensor cols = sliding_windows(x, w, 0, "im2col").permute({0, 3, 4, 5, 1, 2});  // (N, C, KH, KW, OH, OW)
    Shape cs = cols.shape();
    return cols.reshape({cs[0], cs[1] * cs[2] * cs[3], cs[4] * cs[5]});
  });
}

GraphTensor GraphTensor::col2im(std::pair<int64_t, int64_t> output_size, std::pair<int, int> kernel,
                                std::pair<int, int> dilation, std::pair<int, int> padding,
                                std::pair<int, int> stride) const {
  UserOpScope user_op("col2im");
  const char* op = "col2im";
  return batched(*this, 3, op, [&](const GraphTensor& x) {
    std::vector<Window> w = {{kernel.first, stride.first, padding.first, dilation.first},
                             {kernel.second, stride.second, padding.second, dilation.second}};
    std::vector<int64_t> size = {output_size.first, output_size.second}, count(2);
    for (size_t i = 0; i < 2; ++i) {
      LUMINAL_CHECK(w[i].kernel > 0 && w[i].stride > 0 && w[i].dilation > 0 && w[i].padding >= 0, op,
                    ": kernel, stride and dilation must be positive and padding non-negative");
      LUMINAL_CHECK(size[i] > 0, op, ": output_size must be positive, got (", size[0], ", ", size[1], ")");
      auto n = window_count(size[i], w[i]).as_constant();
      LUMINAL_ASSERT(n.has_value(), "col2im: static sizes give a static block count");
      count[i] = *n;
      LUMINAL_CHECK(count[i] >= 1, op, ": output_size (", size[0], ", ", size[1], ") is too small for kernel (",
                    kernel.first, ", ", kernel.second, ") with dilation (", dilation.first, ", ", dilation.second,
                    ") and padding (", padding.first, ", ", padding.second, ")");
    }
    int64_t blocks = count[0] * count[1];
    int64_t kernel_area = int64_t{kernel.first} * kernel.second;
    auto rows = x.dim(1).as_constant();
    LUMINAL_CHECK(!rows || *rows % kernel_area == 0, op, ": input ", to_string(x.shape()), " dim 1 (", x.dim(1),
                  ") is not divisible by the kernel area ", kernel_area);
    auto given = x.dim(2).as_constant();
    LUMINAL_CHECK(given && *given == blocks, op, ": input ", to_string(x.shape()), " has ", x.dim(2),
                  " blocks but output_size (", size[0], ", ", size[1], ") with these kernel, dilation, padding and ",
                  "stride gives ", blocks);
    // Every output pixel gathers the column entry of each kernel offset whose block covers
    // it (or 0), then the kernel axes are summed: (N, C, H, W, KH, KW) -> (N, C, H, W).
    Shape gathered = {x.dim(0), x.dim(1) / kernel_area, size[0], size[1], kernel.first, kernel.second};
    auto c = index_coords(gathered);
    auto st = row_major_strides(x.shape());
    Expression row = (c[1] * kernel.first + c[4]) * kernel.second + c[5];
    Expression valid = 1;
    std::vector<Expression> block(2);
    for (size_t i = 0; i < 2; ++i) {
      // The block whose kernel offset c[4 + i] lands on pixel c[2 + i] starts at r = block * stride.
      Expression r = c[2 + i] + w[i].padding - c[4 + i] * w[i].dilation;
      Expression on_grid = luminal::logical_and(luminal::ge(r, 0), luminal::eq(r % w[i].stride, 0));
      block[i] = r / w[i].stride;
      valid = luminal::logical_and(valid, luminal::logical_and(on_grid, luminal::lt(block[i], count[i])));
    }
    Expression flat = c[0] * st[0] + row * st[1] + (block[0] * count[1] + block[1]) * st[2];
    GraphTensor g = gather_expr(x, gathered, flat, valid, 0);
    // The kernel sum keeps the dtype (no integer promotion, unlike sum()).
    return reduce(OpKind::SumReduce, reduce(OpKind::SumReduce, g, 5), 4);
  });
}

}  // namespace luminal
