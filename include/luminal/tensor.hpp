// GraphTensor: the lazy tensor API models are written with. Every op decomposes into
// the primitives of ops.def; movement ops only change the view. Binary ops broadcast
// like numpy/PyTorch and promote dtypes like PyTorch.
#pragma once

#include <optional>
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
  GraphTensor softmax(int axis) const;
  GraphTensor log_softmax(int axis) const;
  // Normalise over the trailing dims of `normalized_shape` rank; weight/bias optional.
  GraphTensor layer_norm(size_t normalized_rank, const std::optional<GraphTensor>& weight,
                         const std::optional<GraphTensor>& bias, double eps = 1e-5) const;
  GraphTensor rms_norm(size_t normalized_rank, const std::optional<GraphTensor>& weight, double eps = 1e-6) const;

  // ---- linear algebra and convolution ----
  GraphTensor matmul(const GraphTensor& b) const;  // torch.matmul semantics, batched + broadcast
  // x @ weight^T + bias; weight is (out, in) as in PyTorch.
  GraphTensor linear(const GraphTensor& weight, const std::optional<GraphTensor>& bias = std::nullopt) const;
  // Input (N, C, L) / (N, C, H, W); weight (O, C/groups, K...) as in PyTorch.
  GraphTensor conv1d(const GraphTensor& weight, const std::optional<GraphTensor>& bias, int stride = 1,
                     int padding = 0, int dilation = 1, int groups = 1) const;
  GraphTensor conv2d(const GraphTensor& weight, const std::optional<GraphTensor>& bias,
                     std::pair<int, int> stride = {1, 1}, std::pair<int, int> padding = {0, 0},
                     std::pair<int, int> dilation = {1, 1}, int groups = 1) const;
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

  // ---- indexing ----
  // torch.gather: out[i][j] = self[index[i][j]][j] for axis 0, etc.
  GraphTensor gather(int axis, const GraphTensor& index) const;
  GraphTensor take_along_axis(const GraphTensor& index, int axis) const { return gather(axis, index); }
  // torch.Tensor.scatter (no reduce): copy of self with self[index[i][j]][j] = src[i][j] for axis 0.
  GraphTensor scatter(int axis, const GraphTensor& index, const GraphTensor& src) const;
  GraphTensor index_select(int axis, const GraphTensor& index) const;  // index is 1-D
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

// Tensor with a scalar on either side, as a broadcast constant of the tensor's dtype.
GraphTensor scalar_like(const GraphTensor& like, double value);
// Broadcast shapes by numpy rules; throws luminal::Error naming both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace luminal
