// GraphTensor: the tensor API of include/luminal/tensor.hpp.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"

namespace luminal::python {
namespace {

using T = GraphTensor;
using OptT = std::optional<GraphTensor>;
constexpr auto tie = nb::call_policy<TiesToGraph>();

// Reduction axes from Python: None (every axis), an int or a sequence of ints.
std::vector<int> axes_of(const T& t, const nb::handle& axes) {
  std::vector<int> out;
  if (axes.is_none()) {
    for (size_t i = 0; i < t.rank(); ++i) out.push_back(static_cast<int>(i));
  } else if (nb::isinstance<nb::int_>(axes)) {
    out.push_back(nb::cast<int>(axes));
  } else {
    out = nb::cast<std::vector<int>>(axes);
  }
  return out;
}

template <class Method>
auto reduction(Method method) {
  return [method](const T& t, nb::handle axes, bool keepdim) { return (t.*method)(axes_of(t, axes), keepdim); };
}

}  // namespace

void bind_tensor(nb::module_& m) {
  nb::class_<T> c(m, "GraphTensor", "A lazy tensor of a Graph. Ops build nodes; nothing runs until execute.");
  c.def_prop_ro("id", &T::id)
      .def_prop_ro("dtype", &T::dtype)
      .def_prop_ro("shape", &T::shape)
      .def_prop_ro("rank", &T::rank)
      .def_prop_ro("ndim", &T::rank)
      .def("dim", &T::dim, "axis"_a)
      .def("numel", &T::numel)
      .def("__repr__", [](const T& t) {
        return "GraphTensor(id=" + std::to_string(t.id()) + ", shape=" + to_string(t.shape()) + ", dtype=" +
               std::string(dtype_name(t.dtype())) + ")";
      })
      // marking
      .def("output", nb::overload_cast<>(&T::output, nb::const_), tie, "Keep readable after execute.")
      .def("output", nb::overload_cast<std::string>(&T::output, nb::const_), "name"_a, tie)
      .def("persist", &T::persist, tie, "Input only: the buffer survives executions (weights, caches).")
      .def("contiguous", &T::contiguous, tie);

  // Arithmetic with a tensor or a Python number on either side.
#define LUMINAL_PY_BINARY(py, rpy, op)                                                          \
  c.def(py, [](const T& a, const T& b) { return a op b; }, tie)                                 \
      .def(py, [](const T& a, double b) { return a op b; }, tie)                                \
      .def(rpy, [](const T& a, double b) { return scalar_like(a, b) op a; }, tie);
  LUMINAL_PY_BINARY("__add__", "__radd__", +)
  LUMINAL_PY_BINARY("__sub__", "__rsub__", -)
  LUMINAL_PY_BINARY("__mul__", "__rmul__", *)
  LUMINAL_PY_BINARY("__truediv__", "__rtruediv__", /)
  LUMINAL_PY_BINARY("__mod__", "__rmod__", %)
#undef LUMINAL_PY_BINARY
  c.def("__neg__", [](const T& a) { return -a; }, tie)
      .def("__matmul__", &T::matmul, tie)
      .def("__floordiv__", &T::floor_div, tie)
      .def("__pow__", nb::overload_cast<const T&>(&T::pow, nb::const_), tie)
      .def("__pow__", nb::overload_cast<double>(&T::pow, nb::const_), tie)
      .def("floor_div", &T::floor_div, "other"_a, tie)
      .def("pow", nb::overload_cast<const T&>(&T::pow, nb::const_), "exponent"_a, tie)
      .def("pow", nb::overload_cast<double>(&T::pow, nb::const_), "exponent"_a, tie)
      .def("minimum", nb::overload_cast<const T&>(&T::minimum, nb::const_), "other"_a, tie)
      .def("minimum", nb::overload_cast<double>(&T::minimum, nb::const_), "other"_a, tie)
      .def("maximum", nb::overload_cast<const T&>(&T::maximum, nb::const_), "other"_a, tie)
      .def("maximum", nb::overload_cast<double>(&T::maximum, nb::const_), "other"_a, tie)
      .def("clamp", &T::clamp, "min"_a = nb::none(), "max"_a = nb::none(), tie);

  // Elementwise functions without arguments.
#define LUMINAL_PY_UNARY(name) c.def(#name, &T::name, tie);
  LUMINAL_PY_UNARY(abs) LUMINAL_PY_UNARY(sign) LUMINAL_PY_UNARY(exp) LUMINAL_PY_UNARY(exp2)
  LUMINAL_PY_UNARY(log) LUMINAL_PY_UNARY(log2) LUMINAL_PY_UNARY(sin) LUMINAL_PY_UNARY(cos)
  LUMINAL_PY_UNARY(tan) LUMINAL_PY_UNARY(sqrt) LUMINAL_PY_UNARY(rsqrt) LUMINAL_PY_UNARY(reciprocal)
  LUMINAL_PY_UNARY(floor) LUMINAL_PY_UNARY(ceil) LUMINAL_PY_UNARY(round) LUMINAL_PY_UNARY(erf)
  LUMINAL_PY_UNARY(tanh) LUMINAL_PY_UNARY(sigmoid) LUMINAL_PY_UNARY(relu) LUMINAL_PY_UNARY(gelu)
  LUMINAL_PY_UNARY(gelu_tanh) LUMINAL_PY_UNARY(silu) LUMINAL_PY_UNARY(logical_not) LUMINAL_PY_UNARY(t)
  LUMINAL_PY_UNARY(log1p) LUMINAL_PY_UNARY(expm1) LUMINAL_PY_UNARY(log10) LUMINAL_PY_UNARY(trunc)
  LUMINAL_PY_UNARY(asin) LUMINAL_PY_UNARY(acos) LUMINAL_PY_UNARY(atan) LUMINAL_PY_UNARY(sinh) LUMINAL_PY_UNARY(cosh)
  LUMINAL_PY_UNARY(asinh) LUMINAL_PY_UNARY(acosh) LUMINAL_PY_UNARY(atanh) LUMINAL_PY_UNARY(isnan)
  LUMINAL_PY_UNARY(isinf) LUMINAL_PY_UNARY(isfinite) LUMINAL_PY_UNARY(selu) LUMINAL_PY_UNARY(mish)
  LUMINAL_PY_UNARY(hardswish) LUMINAL_PY_UNARY(hardsigmoid) LUMINAL_PY_UNARY(relu6) LUMINAL_PY_UNARY(logsigmoid)
  LUMINAL_PY_UNARY(softsign) LUMINAL_PY_UNARY(bitwise_not) LUMINAL_PY_UNARY(trace)
#undef LUMINAL_PY_UNARY
  c.def("fmod", nb::overload_cast<const T&>(&T::fmod, nb::const_), "other"_a, tie)
      .def("fmod", nb::overload_cast<double>(&T::fmod, nb::const_), "other"_a, tie)
      .def("atan2", &T::atan2, "other"_a, tie, "atan2(self, other): self is y")
      .def("nan_to_num", &T::nan_to_num, "nan"_a = 0.0, "posinf"_a = nb::none(), "neginf"_a = nb::none(), tie)
      .def("elu", &T::elu, "alpha"_a = 1.0, tie)
      .def("celu", &T::celu, "alpha"_a = 1.0, tie)
      .def("hardtanh", &T::hardtanh, "min_val"_a = -1.0, "max_val"_a = 1.0, tie)
      .def("glu", &T::glu, "axis"_a = -1, tie)
      .def("logical_xor", &T::logical_xor, "other"_a, tie)
      .def("__invert__", &T::bitwise_not, tie)
      .def("masked_fill", nb::overload_cast<const T&, double>(&T::masked_fill, nb::const_), "mask"_a, "value"_a, tie)
      .def("masked_fill", nb::overload_cast<const T&, const T&>(&T::masked_fill, nb::const_), "mask"_a, "value"_a, tie);
  // Bitwise ops with a tensor or a Python int (bool) on either side.
#define LUMINAL_PY_BITWISE(name, dunder, rdunder)                                                    \
  c.def(#name, &T::name, "other"_a, tie)                                                            \
      .def(#name, [](const T& a, int64_t b) { return a.name(scalar_like(a, double(b))); }, "other"_a, tie) \
      .def(dunder, &T::name, tie)                                                                   \
      .def(dunder, [](const T& a, int64_t b) { return a.name(scalar_like(a, double(b))); }, tie)     \
      .def(rdunder, [](const T& a, int64_t b) { return scalar_like(a, double(b)).name(a); }, tie);
  LUMINAL_PY_BITWISE(bitwise_and, "__and__", "__rand__")
  LUMINAL_PY_BITWISE(bitwise_or, "__or__", "__ror__")
  LUMINAL_PY_BITWISE(bitwise_xor, "__xor__", "__rxor__")
#undef LUMINAL_PY_BITWISE
  c.def("leaky_relu", &T::leaky_relu, "negative_slope"_a = 0.01, tie)
      .def("softplus", &T::softplus, "beta"_a = 1.0, "threshold"_a = 20.0, tie)
      .def("cast", &T::cast, "dtype"_a, tie);

  // Comparisons and logic (Bool results).
#define LUMINAL_PY_COMPARE(name, dunder)                                                      \
  c.def(#name, nb::overload_cast<const T&>(&T::name, nb::const_), "other"_a, tie)            \
      .def(#name, nb::overload_cast<double>(&T::name, nb::const_), "other"_a, tie)          \
      .def(dunder, nb::overload_cast<const T&>(&T::name, nb::const_), tie)                  \
      .def(dunder, nb::overload_cast<double>(&T::name, nb::const_), tie);
  LUMINAL_PY_COMPARE(lt, "__lt__") LUMINAL_PY_COMPARE(le, "__le__") LUMINAL_PY_COMPARE(gt, "__gt__")
  LUMINAL_PY_COMPARE(ge, "__ge__")
#undef LUMINAL_PY_COMPARE
  // eq/ne stay methods: == on tensors keeps Python's identity meaning (hashing, `in`).
  c.def("eq", nb::overload_cast<const T&>(&T::eq, nb::const_), "other"_a, tie)
      .def("eq", nb::overload_cast<double>(&T::eq, nb::const_), "other"_a, tie)
      .def("ne", nb::overload_cast<const T&>(&T::ne, nb::const_), "other"_a, tie)
      .def("ne", nb::overload_cast<double>(&T::ne, nb::const_), "other"_a, tie)
      .def("logical_and", &T::logical_and, "other"_a, tie)
      .def("logical_or", &T::logical_or, "other"_a, tie)
      .def("where", nb::overload_cast<const T&, const T&>(&T::where, nb::const_), "a"_a, "b"_a, tie,
           "self ? a : b (self is the condition)")
      .def_static("select", nb::overload_cast<const T&, const T&, const T&>(&T::where), "cond"_a, "a"_a, "b"_a,
                  tie, "cond ? a : b, broadcasting all three");

  // Reductions: axes None (all), an int or a list.
#define LUMINAL_PY_REDUCE(name) \
  c.def(#name, reduction(&T::name), "axes"_a = nb::none(), "keepdim"_a = false, tie);
  LUMINAL_PY_REDUCE(sum) LUMINAL_PY_REDUCE(mean) LUMINAL_PY_REDUCE(max) LUMINAL_PY_REDUCE(min)
  LUMINAL_PY_REDUCE(prod) LUMINAL_PY_REDUCE(logsumexp) LUMINAL_PY_REDUCE(any) LUMINAL_PY_REDUCE(all)
#undef LUMINAL_PY_REDUCE
  c.def("var", [](const T& t, nb::handle axes, bool keepdim, int correction) {
         return t.var(axes_of(t, axes), keepdim, correction);
       }, "axes"_a = nb::none(), "keepdim"_a = false, "correction"_a = 1, tie)
      .def("std", [](const T& t, nb::handle axes, bool keepdim, int correction) {
             return t.std(axes_of(t, axes), keepdim, correction);
           }, "axes"_a = nb::none(), "keepdim"_a = false, "correction"_a = 1, tie)
      .def("argmax", &T::argmax, "axis"_a, "keepdim"_a = false, tie)
      .def("argmin", &T::argmin, "axis"_a, "keepdim"_a = false, tie)
      .def("cumsum", &T::cumsum, "axis"_a, tie)
      .def("cumprod", &T::cumprod, "axis"_a, tie)
      .def("cummax", &T::cummax, "axis"_a, tie, "(values, indices)")
      .def("cummin", &T::cummin, "axis"_a, tie, "(values, indices)")
      .def("logcumsumexp", &T::logcumsumexp, "axis"_a, tie)
      .def("norm", [](const T& t, double p, nb::handle axes, bool keepdim) { return t.norm(p, axes_of(t, axes), keepdim); },
           "p"_a = 2.0, "axes"_a = nb::none(), "keepdim"_a = false, tie, "vector p-norm (torch.linalg.vector_norm)")
      .def("median", &T::median, "axis"_a = -1, "keepdim"_a = false, tie, "(values, indices); lower median")
      .def("kthvalue", &T::kthvalue, "k"_a, "axis"_a = -1, "keepdim"_a = false, tie, "(values, indices)")
      .def("quantile", &T::quantile, "q"_a, "axis"_a = -1, "keepdim"_a = false, "interpolation"_a = "linear", tie)
      .def("group_norm", &T::group_norm, "num_groups"_a, "weight"_a = nb::none(), "bias"_a = nb::none(), "eps"_a = 1e-5,
           tie)
      .def("batch_norm", &T::batch_norm, "running_mean"_a = nb::none(), "running_var"_a = nb::none(),
           "weight"_a = nb::none(), "bias"_a = nb::none(), "eps"_a = 1e-5, tie,
           "with running stats: inference; without: batch statistics")
      .def("normalize", &T::normalize, "p"_a = 2.0, "axis"_a = 1, "eps"_a = 1e-12, tie)
      .def("cross_entropy", &T::cross_entropy, "target"_a, "weight"_a = nb::none(), "ignore_index"_a = -100,
           "reduction"_a = "mean", "label_smoothing"_a = 0.0, tie)
      .def("dropout", &T::dropout, "p"_a = 0.5, "training"_a = false, "seed"_a = 0, tie)
      .def("softmax", &T::softmax, "axis"_a, tie)
      .def("log_softmax", &T::log_softmax, "axis"_a, tie)
      .def("layer_norm", &T::layer_norm, "normalized_rank"_a, "weight"_a = nb::none(), "bias"_a = nb::none(),
           "eps"_a = 1e-5, tie)
      .def("rms_norm", &T::rms_norm, "normalized_rank"_a, "weight"_a = nb::none(), "eps"_a = 1e-6, tie);

  // Linear algebra, convolution, pooling.
  c.def("matmul", &T::matmul, "other"_a, tie)
      .def("linear", &T::linear, "weight"_a, "bias"_a = nb::none(), tie)
      .def("conv1d", &T::conv1d, "weight"_a, "bias"_a = nb::none(), "stride"_a = 1, "padding"_a = 0,
           "dilation"_a = 1, "groups"_a = 1, tie)
      .def("conv2d", &T::conv2d, "weight"_a, "bias"_a = nb::none(), "stride"_a = std::pair{1, 1},
           "padding"_a = std::pair{0, 0}, "dilation"_a = std::pair{1, 1}, "groups"_a = 1, tie)
      .def("outer", &T::outer, "other"_a, tie)
      .def("diag", &T::diag, "offset"_a = 0, tie)
      .def("diagonal", &T::diagonal, "offset"_a = 0, "axis1"_a = 0, "axis2"_a = 1, tie)
      .def_static("einsum", &T::einsum, "equation"_a, "operands"_a, tie)
      .def("conv3d", &T::conv3d, "weight"_a, "bias"_a = nb::none(), "stride"_a = std::vector<int>{1},
           "padding"_a = std::vector<int>{0}, "dilation"_a = std::vector<int>{1}, "groups"_a = 1, tie)
      .def("conv_transpose", &T::conv_transpose, "weight"_a, "bias"_a = nb::none(), "stride"_a = std::vector<int>{1},
           "padding"_a = std::vector<int>{0}, "output_padding"_a = std::vector<int>{0}, "groups"_a = 1,
           "dilation"_a = std::vector<int>{1}, tie, "weight (in, out/groups, K..); 1 to 3 spatial dims")
      .def("max_pool", &T::max_pool, "kernel"_a, "stride"_a = std::vector<int>{}, "padding"_a = std::vector<int>{0},
           "dilation"_a = std::vector<int>{1}, "ceil_mode"_a = false, tie, "over the trailing len(kernel) dims")
      .def("avg_pool", &T::avg_pool, "kernel"_a, "stride"_a = std::vector<int>{}, "padding"_a = std::vector<int>{0},
           "ceil_mode"_a = false, "count_include_pad"_a = true, tie, "over the trailing len(kernel) dims")
      .def("max_pool1d", &T::max_pool1d, "kernel"_a, "stride"_a = 0, "padding"_a = 0, tie)
      .def("avg_pool1d", &T::avg_pool1d, "kernel"_a, "stride"_a = 0, "padding"_a = 0, tie)
      .def("adaptive_avg_pool", &T::adaptive_avg_pool, "output_size"_a, tie)
      .def("adaptive_max_pool", &T::adaptive_max_pool, "output_size"_a, tie)
      .def("interpolate", &T::interpolate, "size"_a, "mode"_a = "nearest", "align_corners"_a = false, tie)
      .def("im2col", &T::im2col, "kernel"_a, "dilation"_a = std::pair{1, 1}, "padding"_a = std::pair{0, 0},
           "stride"_a = std::pair{1, 1}, tie, "F.unfold")
      .def("col2im", &T::col2im, "output_size"_a, "kernel"_a, "dilation"_a = std::pair{1, 1},
           "padding"_a = std::pair{0, 0}, "stride"_a = std::pair{1, 1}, tie, "F.fold: overlapping blocks summed")
      .def("pixel_shuffle", &T::pixel_shuffle, "upscale"_a, tie)
      .def("pixel_unshuffle", &T::pixel_unshuffle, "downscale"_a, tie)
      .def("max_pool2d", &T::max_pool2d, "kernel"_a, "stride"_a = std::pair{0, 0}, "padding"_a = std::pair{0, 0}, tie)
      .def("avg_pool2d", &T::avg_pool2d, "kernel"_a, "stride"_a = std::pair{0, 0}, "padding"_a = std::pair{0, 0}, tie);

  // Movement.
  c.def("reshape", &T::reshape, "shape"_a, tie)
      .def("permute", &T::permute, "axes"_a, tie)
      .def("transpose", &T::transpose, "a"_a, "b"_a, tie)
      .def("expand", &T::expand, "shape"_a, tie)
      .def("expand_dim", &T::expand_dim, "axis"_a, "size"_a, tie)
      .def("unsqueeze", &T::unsqueeze, "axis"_a, tie)
      .def("squeeze", nb::overload_cast<int>(&T::squeeze, nb::const_), "axis"_a, tie)
      .def("squeeze", nb::overload_cast<>(&T::squeeze, nb::const_), tie)
      .def("flatten", &T::flatten, "start"_a = 0, "end"_a = -1, tie)
      .def("slice", nb::overload_cast<int, int64_t, std::optional<int64_t>, int64_t>(&T::slice, nb::const_),
           "axis"_a, "start"_a, "end"_a = nb::none(), "step"_a = 1, tie)
      .def("slice", nb::overload_cast<int, const Expression&, const Expression&, int64_t>(&T::slice, nb::const_),
           "axis"_a, "start"_a, "end"_a, "step"_a = 1, tie)
      .def("narrow", &T::narrow, "axis"_a, "start"_a, "length"_a, tie)
      .def("pad", &T::pad, "axis"_a, "before"_a, "after"_a, "value"_a = 0.0, tie)
      .def_static("concat", &T::concat, "tensors"_a, "axis"_a, tie)
      .def_static("stack", &T::stack, "tensors"_a, "axis"_a, tie)
      .def("split", &T::split, "sizes"_a, "axis"_a, tie)
      .def("chunk", &T::chunk, "chunks"_a, "axis"_a, tie)
      .def("repeat", &T::repeat, "times"_a, tie)
      .def("flip", &T::flip, "axes"_a, tie)
      .def("tril", &T::tril, "diagonal"_a = 0, tie)
      .def("triu", &T::triu, "diagonal"_a = 0, tie)
      .def("roll", [](const T& t, nb::handle shifts, nb::handle axes) {
             std::vector<int64_t> s = nb::isinstance<nb::int_>(shifts) ? std::vector<int64_t>{nb::cast<int64_t>(shifts)}
                                                                        : nb::cast<std::vector<int64_t>>(shifts);
             std::vector<int> a;
             if (!axes.is_none()) a = nb::isinstance<nb::int_>(axes) ? std::vector<int>{nb::cast<int>(axes)}
                                                                     : nb::cast<std::vector<int>>(axes);
             return t.roll(s, a);
           }, "shifts"_a, "axes"_a = nb::none(), tie)
      .def("movedim", [](const T& t, nb::handle source, nb::handle destination) {
             auto ints = [](nb::handle h) {
               return nb::isinstance<nb::int_>(h) ? std::vector<int>{nb::cast<int>(h)} : nb::cast<std::vector<int>>(h);
             };
             return t.movedim(ints(source), ints(destination));
           }, "source"_a, "destination"_a, tie)
      .def("unbind", &T::unbind, "axis"_a = 0, tie)
      .def("repeat_interleave", &T::repeat_interleave, "repeats"_a, "axis"_a = nb::none(), tie)
      .def("unfold", &T::unfold, "axis"_a, "size"_a, "step"_a, tie, "Tensor.unfold: windows as a new last dim");

  // Indexing.
  c.def("gather", &T::gather, "axis"_a, "index"_a, tie)
      .def("scatter", &T::scatter, "axis"_a, "index"_a, "src"_a, tie)
      .def("index_select", &T::index_select, "axis"_a, "index"_a, tie)
      .def("scatter_add", &T::scatter_add, "axis"_a, "index"_a, "src"_a, tie)
      .def("index_add", &T::index_add, "axis"_a, "index"_a, "source"_a, "alpha"_a = 1.0, tie)
      .def("index_put", &T::index_put, "indices"_a, "values"_a, "accumulate"_a = false, tie)
      .def("embedding", &T::embedding, "ids"_a, tie, "self is the (vocab, dim) table")
      .def("one_hot", &T::one_hot, "num_classes"_a, tie)
      .def("topk", &T::topk, "k"_a, "axis"_a = -1, "largest"_a = true, tie)
      .def("argsort", &T::argsort, "axis"_a = -1, "descending"_a = false, tie)
      .def("sort", &T::sort, "axis"_a = -1, "descending"_a = false, tie);

  m.def("scalar_like", &scalar_like, "like"_a, "value"_a, tie,
        "A broadcast constant with the dtype of `like`.");
  m.def("broadcast_shapes", &broadcast_shapes, "a"_a, "b"_a);
}

}  // namespace luminal::python
