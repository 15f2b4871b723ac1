// Shared helpers for the tensor API implementation (not installed).
#pragma once

#include "luminal/error.hpp"
#include "luminal/tensor.hpp"

namespace luminal::detail {

// The tensor-API op being built, so errors name what the user called ("softmax"), not
// the op or primitive it decomposes into ("max"). The outermost scope wins; every node
// made while one is active records it in Node::user_op (read by runtime errors).
class UserOpScope {
 public:
  explicit UserOpScope(const char* name);
  ~UserOpScope();
  UserOpScope(const UserOpScope&) = delete;
  UserOpScope& operator=(const UserOpScope&) = delete;
  static const char* current();  // nullptr outside every scope
  // The name errors use: the outermost user op, else `fallback`.
  static const char* name_or(const char* fallback) { return current() ? current() : fallback; }

 private:
  const char* previous_;
};

// `op` in messages is replaced by the outermost user op when one is active.
int normalize_axis(int axis, size_t rank, const char* op);
std::vector<int> normalize_axes(std::vector<int> axes, size_t rank, const char* op);

// Append a node whose output is a fresh contiguous buffer of `shape`.
GraphTensor make_node(Graph& g, Node node);
// Primitive wrappers. `unary` promotes ints to F32; `binary` broadcasts and promotes.
GraphTensor unary(OpKind op, const GraphTensor& x);
GraphTensor binary(OpKind op, const GraphTensor& a, const GraphTensor& b);
GraphTensor reduce(OpKind op, const GraphTensor& x, int axis);
// Ints and Bool become F32 (PyTorch's default float); floats are unchanged.
GraphTensor to_float(const GraphTensor& x);
// Both operands broadcast to a common shape and promoted to a common dtype.
std::pair<GraphTensor, GraphTensor> broadcast_pair(const GraphTensor& a, const GraphTensor& b);
// A scalar tensor holding an Expression's value (I32), e.g. a symbolic dim size.
GraphTensor expr_scalar(Graph& g, const Expression& value, DType dtype = DType::I32);
// Same-dtype cast: materialises a view into a contiguous buffer.
GraphTensor copy(const GraphTensor& x);

// ---- index arithmetic (tensor_index.cpp) ----
// Row-major strides of `shape` (in elements).
std::vector<Expression> row_major_strides(const Shape& shape);
// Coordinates of the flat element index z (Expression::index()) in a row-major `shape`.
std::vector<Expression> index_coords(const Shape& shape);
// I32 when `n` is a constant that fits comfortably, else I64.
DType index_dtype(const Expression& n);
// An integer scalar tensor of `value` (Constant when static, Iota when symbolic).
GraphTensor int_scalar(Graph& g, const Expression& value, DType dtype);
// Gather primitive: out[i] = data[flat_index[i]] over data's logical row-major order.
// `axis` >= 0: flat_index was built from a user's index along that axis of `data`
// (flat_along_axis), and the runtime checks that index against the axis' size.
GraphTensor gather_flat(const GraphTensor& data, const GraphTensor& flat_index, int axis = -1);
// Gather with a symbolic index: for each element of `out_shape` (coordinates from
// index_coords(out_shape)), out = valid ? data[flat] : fill. `flat`/`valid` are functions of z.
GraphTensor gather_expr(const GraphTensor& data, const Shape& out_shape, const Expression& flat,
                        const Expression& valid, double fill = 0);

}  // namespace luminal::detail
