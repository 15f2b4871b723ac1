// GraphTensor: the lazy tensor API models are written with. Every op decomposes into
// the primitives of ops.def; movement ops only change the view. Binary ops broadcast
// like numpy/PyTorch and promote dtypes like PyTorch.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "luminal/graph.hpp"

namespace luminal {

class GraphTensor {
 public:
  GraphTensor() = default;
  GraphTensor(Graph* graph, NodeId id, ShapeTracker view, DType dtype)
      : graph_(graph), id_(id), view_(std::move(view)), dtype_(dtype) {}

  Graph& graph() const { return *graph_; }
  NodeId id() const { return id_; }
  const ShapeTracker& view() const { return view_; }
  DType dtype() const { return dtype_; }
  Shape shape() const { return view_.shape(); }
  size_t rank() const { return view_.rank(); }
  Expression dim(int axis) const;  // negative axes count from the end
  Expression numel() const { return view_.n_elements(); }

  // ---- marking ----
  GraphTensor output() const;         // keep readable after execute (returns the Output tensor)
  GraphTensor output(std::string name) const;
  GraphTensor persist() const;        // Input only: buffer survives executions (weights, caches)
  // Materialise into a fresh contiguous buffer (no-op view change when already contiguous).
  GraphTensor contiguous() const;

  // ---- elementwise arithmetic (broadcasting, PyTorch dtype promotion) ----
  friend GraphTensor operator+(const GraphTensor& a, const GraphTensor& b);
  friend GraphTensor operator-(const GraphTensor& a, const GraphTensor& b);
  friend GraphTensor operator*(const GraphTensor& a, const GraphTensor& b);
  friend GraphTensor operator/(const GraphTensor& a, const GraphTensor& b);  // true division; ints -> F32
  friend GraphTensor operator%(const GraphTensor& a, const GraphTensor& b);  // floor modulo
  friend GraphTensor operator-(const GraphTensor& a);
  friend GraphTensor operator+(const GraphTensor& a, double b);
  friend GraphTensor operator-(const GraphTensor& a, double b);
  friend GraphTensor operator*(const GraphTensor& a, double b);
  friend GraphTensor operator/(const GraphTensor& a, double b);
  friend GraphTensor operator%(const GraphTensor& a, double b);
  friend GraphTensor operator+(double a, const GraphTensor& b);
  friend GraphTensor operator-(double a, const GraphTensor& b);
  friend GraphTensor operator*(double a, const GraphTensor& b);
  friend GraphTensor operator/(double a, const GraphTensor& b);
  GraphTensor floor_div(const GraphTensor& b) const;
  GraphTensor abs() const;
  GraphTensor sign() const;
  GraphTensor pow(const GraphTensor& e) const;
  GraphTensor pow(double e) const;
  GraphTensor minimum(const GraphTensor& b) const;
  GraphTensor maximum(const GraphTensor& b) const;
  GraphTensor minimum(double b) const;
  GraphTensor maximum(double b) const;
  GraphTensor clamp(std::optional<double> lo, std::optional<double> hi) const;

  // ---- elementwise functions (ints are promoted to F32 first, as in PyTorch) ----
  GraphTensor exp() const;
  GraphTensor exp2() const;
  GraphTensor log() const;
  GraphTensor log2() const;
  GraphTensor sin() const;
  GraphTensor cos() const;
  GraphTensor tan() const;
  GraphTensor sqrt() const;
  GraphTensor rsqrt() const;
  GraphTensor reciprocal() const;
  GraphTensor floor() const;
  GraphTensor ceil() const;
  GraphTensor round() const;  // half to even, as torch.round
  GraphTensor erf() const;
  GraphTensor tanh() const;
  GraphTensor sigmoid() const;
  GraphTensor relu() const;
  GraphTensor leaky_relu(double slope = 0.01) const;
  GraphTensor gelu() const;       // exact (erf)
  GraphTensor gelu_tanh() const;  // tanh approximation
  GraphTensor silu() const;
  GraphTensor softplus(double beta = 1, double threshold = 20) const;
  GraphTensor log1p() const;  // log(1 + x), accurate near 0
  GraphTensor expm1() const;  // exp(x) - 1, accurate near 0
  GraphTensor log10() const;
  GraphTensor trunc() const;  // toward zero; trunc(-0.5) is -0.0
  GraphTensor fmod(const GraphTensor& b) const;  // C fmod: the sign follows the dividend
  GraphTensor fmod(double b) const;
  GraphTensor asin() const;
  GraphTensor acos() const;
  GraphTensor atan() const;
  GraphTensor atan2(const GraphTensor& x) const;  // this is y; C atan2 quadrants and signed zeros
  GraphTensor sinh() const;
  GraphTensor cosh() const;
  GraphTensor asinh() const;
  GraphTensor acosh() const;
  GraphTensor atanh() const;
  GraphTensor isnan() const;     // Bool
  GraphTensor isinf() const;     // Bool
  GraphTensor isfinite() const;  // Bool
  // NaN -> nan, +inf -> posinf, -inf -> neginf (defaults: the dtype's largest/lowest finite).
  GraphTensor nan_to_num(double nan = 0, std::optional<double> posinf = std::nullopt,
                         std::optional<double> neginf = std::nullopt) const;
  GraphTensor elu(double alpha = 1) const;
  GraphTensor selu() const;
  GraphTensor celu(double alpha = 1) const;
  GraphTensor mish() const;
  GraphTensor hardswish() const;
  GraphTensor hardsigmoid() const;
  GraphTensor hardtanh(double min_val = -1, double max_val = 1) const;
  GraphTensor relu6() const;
  GraphTensor logsigmoid() const;
  GraphTensor softsign() const;
  GraphTensor glu(int axis = -1) const;  // first half * sigmoid(second half) along axis

  // ---- comparisons and logic (results are Bool) ----
  GraphTensor lt(const GraphTensor& b) const;
  GraphTensor le(const GraphTensor& b) const;
  GraphTensor gt(const GraphTensor& b) const;
  GraphTensor ge(const GraphTensor& b) const;
  GraphTensor eq(const GraphTensor& b) const;
  GraphTensor ne(const GraphTensor& b) const;
  GraphTensor lt(double b) const;
  GraphTensor le(double b) const;
  GraphTensor gt(double b) const;
  GraphTensor ge(double b) const;
  GraphTensor eq(double b) const;
  GraphTensor ne(double b) const;
  GraphTensor logical_and(const GraphTensor& b) const;
  GraphTensor logical_or(const GraphTensor& b) const;
  GraphTensor logical_not() const;
  GraphTensor logical_xor(const GraphTensor& b) const;
  // Bitwise ops on integer and Bool tensors (two's complement, as PyTorch).
  GraphTensor bitwise_and(const GraphTensor& b) const;
  GraphTensor bitwise_or(const GraphTensor& b) const;
  GraphTensor bitwise_xor(const GraphTensor& b) const;
  GraphTensor bitwise_not() const;
  // self where mask is false, value where it is true (mask broadcasts to self).
  GraphTensor masked_fill(const GraphTensor& mask, double value) const;
  GraphTensor masked_fill(const GraphTensor& mask, const GraphTensor& value) const;
  // cond ? a : b, broadcasting all three.
  static GraphTensor where(const GraphTensor& cond, const GraphTensor& a, const GraphTensor& b);
  GraphTensor where(const GraphTensor& a, const GraphTensor& b) const;  // this is the condition

  // ---- reductions (axes may be negative; keepdim as in PyTorch) ----
  GraphTensor sum(std::vector<int> axes, bool keepdim = false) const;
  GraphTensor mean(std::vector<int> axes, bool keepdim = false) const;
  GraphTensor max(std::vector<int> axes, bool keepdim = false) const;
  GraphTensor min(std::vector<int> axes, bool keepdim = false) const;
  GraphTensor prod(std::vector<int> axes, bool keepdim = false) const;
  GraphTensor var(std::vector<int> axes, bool keepdim = false, int correction = 1) const;
  GraphTensor std(std::vector<int> axes, bool keepdim = false, int correction = 1) const;
  GraphTensor logsumexp(std::vector<int> axes, bool keepdim = false) const;
  GraphTensor argmax(int axis, bool keepdim = false) const;  // I64, first occurrence
  GraphTensor argmin(int axis, bool keepdim = false) const;
  GraphTensor sum_all() const;
  GraphTensor cumsum(int axis) const;
  GraphTensor cumprod(int axis) const;
  // Running max/min along axis: values and I64 indices (the last occurrence, as PyTorch).
  std::pair<GraphTensor, GraphTensor> cummax(int axis) const;
  std::pair<GraphTensor, GraphTensor> cummin(int axis) const;
  GraphTensor logcumsumexp(int axis) const;
  GraphTensor any(std::vector<int> axes, bool keepdim = false) const;  // Bool
  GraphTensor all(std::vector<int> axes, bool keepdim = false) const;  // Bool
  // Vector p-norm over axes (p may be +-inf or 0), as torch.linalg.vector_norm.
  GraphTensor norm(double p = 2, std::vector<int> axes = {}, bool keepdim = false) const;
  // Lower median / k-th smallest (k from 1) along axis: values and I64 indices. NaN propagates (median).
  std::pair<GraphTensor, GraphTensor> median(int axis, bool keepdim = false) const;
  std::pair<GraphTensor, GraphTensor> kthvalue(int64_t k, int axis, bool keepdim = false) const;
  // interpolation: "linear", "lower", "higher", "midpoint" or "nearest" (as torch.quantile).
  GraphTensor quantile(double q, int axis, bool keepdim = false, const std::string& interpolation = "linear") const;
  GraphTensor softmax(int axis) const;
  GraphTensor log_softmax(int axis) const;
  // Normalise over the trailing dims of `normalized_shape` rank; weight/bias optional.
  GraphTensor layer_norm(size_t normalized_rank, const std::optional<GraphTensor>& weight,
                         const std::optional<GraphTensor>& bias, double eps = 1e-5) const;
  GraphTensor rms_norm(size_t normalized_rank, const std::optional<GraphTensor>& weight, double eps = 1e-6) const;
  // (N, C, *): normalise each group of C/num_groups channels; weight/bias are (C).
  GraphTensor group_norm(int num_groups, const std::optional<GraphTensor>& weight,
                         const std::optional<GraphTensor>& bias, double eps = 1e-5) const;
  // (N, C, *) over channel axis 1. With running stats: inference; without: batch statistics.
  GraphTensor batch_norm(const std::optional<GraphTensor>& running_mean, const std::optional<GraphTensor>& running_var,
                         const std::optional<GraphTensor>& weight, const std::optional<GraphTensor>& bias,
                         double eps = 1e-5) const;
  // x / max(||x||_p, eps) along axis (F.normalize).
  GraphTensor normalize(double p = 2, int axis = 1, double eps = 1e-12) const;
  // F.cross_entropy with class-index targets: this is (N, C, d...) or (C) logits, target
  // integer (N, d...) or (); reduction "mean", "sum" or "none".
  GraphTensor cross_entropy(const GraphTensor& target, const std::optional<GraphTensor>& weight = std::nullopt,
                            int64_t ignore_index = -100, const std::string& reduction = "mean",
                            double label_smoothing = 0) const;
  // Identity unless training; training zeroes elements with probability p (seeded) and scales by 1/(1-p).
  GraphTensor dropout(double p = 0.5, bool training = false, uint64_t seed = 0) const;

  // ---- linear algebra and convolution ----
  GraphTensor matmul(const GraphTensor& b) const;  // torch.matmul semantics, batched + broadcast
  // x @ weight^T + bias; weight is (out, in) as in PyTorch.
  GraphTensor linear(const GraphTensor& weight, const std::optional<GraphTensor>& bias = std::nullopt) const;
  GraphTensor outer(const GraphTensor& b) const;
  // 1-D: a square matrix with this on the `offset` diagonal; 2-D: that diagonal as 1-D.
  GraphTensor diag(int64_t offset = 0) const;
  GraphTensor diagonal(int64_t offset = 0, int axis1 = 0, int axis2 = 1) const;  // moved to the last axis
  GraphTensor trace() const;
  // torch.einsum: "ij,jk->ik"; repeated subscripts take diagonals; "..." broadcasts.
  static GraphTensor einsum(const std::string& equation, const std::vector<GraphTensor>& operands);
  // Input (N, C, L) / (N, C, H, W); weight (O, C/groups, K...) as in PyTorch.
  GraphTensor conv1d(const GraphTensor& weight, const std::optional<GraphTensor>& bias, int stride = 1,
                     int padding = 0, int dilation = 1, int groups = 1) const;
  GraphTensor conv2d(const GraphTensor& weight, const std::optional<GraphTensor>& bias,
                     std::pair<int, int> stride = {1, 1}, std::pair<int, int> padding = {0, 0},
                     std::pair<int, int> dilation = {1, 1}, int groups = 1) const;
  GraphTensor conv3d(const GraphTensor& weight, const std::optional<GraphTensor>& bias, std::vector<int> stride = {1},
                     std::vector<int> padding = {0}, std::vector<int> dilation = {1}, int groups = 1) const;
  // Transposed convolution over the trailing weight.rank()-2 spatial dims; weight is
  // (in, out/groups, K...) as in PyTorch. Per-dim lists of length 1 apply to every dim.
  GraphTensor conv_transpose(const GraphTensor& weight, const std::optional<GraphTensor>& bias,
                             std::vector<int> stride = {1}, std::vector<int> padding = {0},
                             std::vector<int> output_padding = {0}, int groups = 1,
                             std::vector<int> dilation = {1}) const;
  // Pooling over the trailing `kernel.size()` dims (1, 2 or 3); stride empty or 0: = kernel.
  GraphTensor max_pool(std::vector<int> kernel, std::vector<int> stride = {}, std::vector<int> padding = {0},
                       std::vector<int> dilation = {1}, bool ceil_mode = false) const;
  GraphTensor avg_pool(std::vector<int> kernel, std::vector<int> stride = {}, std::vector<int> padding = {0},
                       bool ceil_mode = false, bool count_include_pad = true) const;
  GraphTensor max_pool1d(int kernel, int stride = 0, int padding = 0) const;
  GraphTensor avg_pool1d(int kernel, int stride = 0, int padding = 0) const;
  // Adaptive pooling to `output_size` over the trailing output_size.size() dims (static sizes).
  GraphTensor adaptive_avg_pool(std::vector<int64_t> output_size) const;
  GraphTensor adaptive_max_pool(std::vector<int64_t> output_size) const;
  // Resize the trailing size.size() spatial dims: mode "nearest", "nearest-exact",
  // "linear"/"bilinear"/"trilinear" (align_corners as PyTorch).
  GraphTensor interpolate(std::vector<int64_t> size, const std::string& mode = "nearest",
                          bool align_corners = false) const;
  // F.unfold (im2col): (N, C, H, W) -> (N, C*kh*kw, L).
  GraphTensor im2col(std::pair<int, int> kernel, std::pair<int, int> dilation = {1, 1},
                     std::pair<int, int> padding = {0, 0}, std::pair<int, int> stride = {1, 1}) const;
  // F.fold (col2im), the inverse of im2col: (N, C*kh*kw, L) -> (N, C, H, W) with
  // (H, W) = output_size, overlapping blocks summed.
  GraphTensor col2im(std::pair<int64_t, int64_t> output_size, std::pair<int, int> kernel,
                     std::pair<int, int> dilation = {1, 1}, std::pair<int, int> padding = {0, 0},
                     std::pair<int, int> stride = {1, 1}) const;
  GraphTensor pixel_shuffle(int upscale) const;
  GraphTensor pixel_unshuffle(int downscale) const;
  GraphTensor max_pool2d(std::pair<int, int> kernel, std::pair<int, int> stride = {0, 0},
                         std::pair<int, int> padding = {0, 0}) const;  // stride 0: = kernel
  GraphTensor avg_pool2d(std::pair<int, int> kernel, std::pair<int, int> stride = {0, 0},
                         std::pair<int, int> padding = {0, 0}) const;  // count_include_pad = true

  // ---- movement (views where possible) ----
  GraphTensor reshape(const Shape& shape) const;  // one -1 allowed
  GraphTensor permute(std::vector<int> axes) const;
  GraphTensor transpose(int a, int b) const;
  GraphTensor t() const;  // swap the last two dims
  GraphTensor expand(const Shape& shape) const;  // broadcast size-1 dims / add leading dims
  GraphTensor expand_dim(int axis, const Expression& size) const;  // insert a broadcast dim
  GraphTensor unsqueeze(int axis) const;
  GraphTensor squeeze(int axis) const;
  GraphTensor squeeze() const;  // every size-1 dim
  GraphTensor flatten(int start = 0, int end = -1) const;
  // Python-style slice: negative indices count from the end; end clamps. Symbolic
  // bounds are taken as given.
  GraphTensor slice(int axis, const Expression& start, const Expression& end, int64_t step = 1) const;
  GraphTensor slice(int axis, int64_t start, std::optional<int64_t> end, int64_t step = 1) const;
  GraphTensor narrow(int axis, const Expression& start, const Expression& length) const;
  // pad(axis, before, after) with a constant value.
  GraphTensor pad(int axis, const Expression& before, const Expression& after, double value = 0) const;
  static GraphTensor concat(const std::vector<GraphTensor>& xs, int axis);
  static GraphTensor stack(const std::vector<GraphTensor>& xs, int axis);
  std::vector<GraphTensor> split(const std::vector<Expression>& sizes, int axis) const;
  std::vector<GraphTensor> chunk(int chunks, int axis) const;
  GraphTensor repeat(const std::vector<Expression>& times) const;  // torch.Tensor.repeat
  GraphTensor flip(std::vector<int> axes) const;
  GraphTensor tril(int64_t diagonal = 0) const;
  GraphTensor triu(int64_t diagonal = 0) const;
  GraphTensor roll(std::vector<int64_t> shifts, std::vector<int> axes = {}) const;  // no axes: flattened
  GraphTensor movedim(std::vector<int> source, std::vector<int> destination) const;
  std::vector<GraphTensor> unbind(int axis = 0) const;
  GraphTensor repeat_interleave(int64_t repeats, std::optional<int> axis = std::nullopt) const;
  // Tensor.unfold: windows of `size` every `step` along axis, appended as the last dim.
  GraphTensor unfold(int axis, int64_t size, int64_t step) const;

  // ---- indexing ----
  // torch.gather: out[i][j] = self[index[i][j]][j] for axis 0, etc.
  GraphTensor gather(int axis, const GraphTensor& index) const;
  GraphTensor take_along_axis(const GraphTensor& index, int axis) const { return gather(axis, index); }
  // torch.Tensor.scatter (no reduce): copy of self with self[index[i][j]][j] = src[i][j] for axis 0.
  GraphTensor scatter(int axis, const GraphTensor& index, const GraphTensor& src) const;
  GraphTensor index_select(int axis, const GraphTensor& index) const;  // index is 1-D
  // torch scatter_add: self[index[i][j]][j] += src[i][j] (axis 0); duplicates accumulate.
  GraphTensor scatter_add(int axis, const GraphTensor& index, const GraphTensor& src) const;
  // self[.., index[k], ..] += alpha * source[.., k, ..] along axis (index 1-D).
  GraphTensor index_add(int axis, const GraphTensor& index, const GraphTensor& source, double alpha = 1) const;
  // self[indices[0], indices[1], ...] = values (or += with accumulate); the index tensors
  // broadcast together and address the leading indices.size() dims.
  GraphTensor index_put(const std::vector<GraphTensor>& indices, const GraphTensor& values,
                        bool accumulate = false) const;
  GraphTensor embedding(const GraphTensor& ids) const;  // this is the (vocab, dim) table
  GraphTensor one_hot(int64_t num_classes) const;  // I64 result, as torch
  // Values and indices (I64) of the k largest (or smallest) along axis, sorted.
  std::pair<GraphTensor, GraphTensor> topk(int64_t k, int axis = -1, bool largest = true) const;
  GraphTensor argsort(int axis = -1, bool descending = false) const;  // stable
  std::pair<GraphTensor, GraphTensor> sort(int axis = -1, bool descending = false) const;

  GraphTensor cast(DType dtype) const;

 private:
  Graph* graph_ = nullptr;
  NodeId id_ = kNoNode;
  ShapeTracker view_;
  DType dtype_ = DType::F32;
};

// Seeded, counter-based random numbers (a hash of the element index and the seed, so the
// same seed gives the same tensor on every runtime): uniform in [0, 1) and standard normal.
GraphTensor rand(Graph& g, const Shape& shape, uint64_t seed, DType dtype = DType::F32);
GraphTensor randn(Graph& g, const Shape& shape, uint64_t seed, DType dtype = DType::F32);
// The same with every counter shifted by `offset`, an I64 scalar tensor (e.g. a graph input
// fed per execution): one compiled graph then draws fresh numbers on every run, like an
// RNG's (seed, offset) state; the same (seed, offset) gives the same tensor.
GraphTensor rand(Graph& g, const Shape& shape, uint64_t seed, const GraphTensor& offset, DType dtype = DType::F32);
GraphTensor randn(Graph& g, const Shape& shape, uint64_t seed, const GraphTensor& offset, DType dtype = DType::F32);
GraphTensor full(Graph& g, const Shape& shape, double value, DType dtype = DType::F32);
GraphTensor zeros(Graph& g, const Shape& shape, DType dtype = DType::F32);
GraphTensor ones(Graph& g, const Shape& shape, DType dtype = DType::F32);
GraphTensor eye(Graph& g, const Expression& n, std::optional<Expression> m = std::nullopt, DType dtype = DType::F32);
GraphTensor linspace(Graph& g, double start, double end, int64_t steps, DType dtype = DType::F32);

// Tensor with a scalar on either side, as a broadcast constant of the tensor's dtype.
GraphTensor scalar_like(const GraphTensor& like, double value);
// Broadcast shapes by numpy rules; throws luminal::Error naming both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace luminal
