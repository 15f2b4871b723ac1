// Convolution and pooling (NCHW, as PyTorch). Both start from one windowed Gather
// ("unfold"): an Iota computes, for every (n, out position, channel, kernel offset),
// the flat input index, or a sentinel that reads the padding value. Convolution then
// contracts (channel, kernel) against the weight with Mul + SumReduce, the same
// pattern as matmul; pooling reduces the kernel axes with MaxReduce or a mean.
// Unbatched inputs ((C, L) / (C, H, W)) are accepted like PyTorch. Kernel sizes must be
// static; spatial sizes may be symbolic. avg_pool2d promotes ints to F32 (torch refuses
// them); ceil_mode is not supported.
#include <cmath>
#include <limits>

#include "tensor_internal.hpp"

namespace luminal {
using namespace detail;

namespace {
struct Window {
  int64_t kernel, stride, padding, dilation;
};

// Sliding windows over the trailing spatial dims of x = (N, C, S_1..S_s):
// (N, O_1..O_s, C, K_1..K_s), reading `fill` where a window hangs over the padding.
GraphTensor unfold(const GraphTensor& x, const std::vector<Window>& w, double fill, const char* op) {
  size_t s = w.size();
  Shape out = {x.dim(0)};
  for (size_t i = 0; i < s; ++i) {
    const Window& wi = w[i];
    LUMINAL_CHECK(wi.kernel > 0 && wi.stride > 0 && wi.dilation > 0 && wi.padding >= 0, op,
                  ": kernel, stride and dilation must be positive and padding non-negative");
    Expression size = x.dim(static_cast<int>(2 + i));
    Expression o = (size + 2 * wi.padding - wi.dilation * (wi.kernel - 1) - 1) / wi.stride + 1;
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
    if (w[i].padding > 0)
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
    GraphTensor cols = unfold(x, w, 0, op);
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

GraphTensor pool2d(const GraphTensor& x_in, std::pair<int, int> kernel, std::pair<int, int> stride,
                   std::pair<int, int> padding, bool is_max, const char* op) {
  return batched(x_in, 4, op, [&](const GraphTensor& x0) {
    std::vector<Window> w = {{kernel.first, stride.first ? stride.first : kernel.first, padding.first, 1},
                             {kernel.second, stride.second ? stride.second : kernel.second, padding.second, 1}};
    for (const auto& wi : w)
      LUMINAL_CHECK(wi.padding <= wi.kernel / 2, op, ": padding ", wi.padding,
                    " should be at most half the kernel size ", wi.kernel);
    // Max pooling pads with the dtype's lowest value (-inf for floats), as PyTorch.
    GraphTensor x = is_max ? x0 : to_float(x0);
    GraphTensor win = unfold(x, w, is_max ? lowest(x.dtype()) : 0, op);  // (N, OH, OW, C, KH, KW)
    GraphTensor r = is_max ? win.max({4, 5}) : win.mean({4, 5});        // count_include_pad
    return r.permute({0, 3, 1, 2});
  });
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
  return pool2d(*this, kernel, stride, padding, true, "max_pool2d");
}

GraphTensor GraphTensor::avg_pool2d(std::pair<int, int> kernel, std::pair<int, int> stride,
                                    std::pair<int, int> padding) const {
  UserOpScope user_op("avg_pool2d");
  return pool2d(*this, kernel, stride, padding, false, "avg_pool2d");
}

}  // namespace luminal
